"""The network (the d2l ResNet-18), the LightningModule that trains it (``ImageClassifier``,
the config's ``model._target_``), and the phases its training step is timed in (``phases``).

Everything is imported on first use: the phase clock is torch-free, so the sweep report reads
phase names without loading torch, and ``resnet18`` alone (the cost model, the benchmark's FLOP
count) does not load Lightning."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multigpu.models.classifier import ImageClassifier
    from multigpu.models.resnet import Residual, resnet18

__all__ = ["ImageClassifier", "Residual", "resnet18"]
_HOMES = {"ImageClassifier": "classifier", "Residual": "resnet", "resnet18": "resnet"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(f"multigpu.models.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
