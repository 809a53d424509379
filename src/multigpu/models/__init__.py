"""The network (the d2l ResNet-18) and the LightningModule that trains it (``ImageClassifier``,
the config's ``model._target_``).

``ImageClassifier`` is imported on first use: ``resnet18`` alone (the cost model, the
benchmark's FLOP count) does not load Lightning."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from multigpu.models.resnet import Residual, resnet18

if TYPE_CHECKING:
    from multigpu.models.classifier import ImageClassifier

__all__ = ["ImageClassifier", "Residual", "resnet18"]


def __getattr__(name: str) -> Any:
    if name == "ImageClassifier":
        from multigpu.models.classifier import ImageClassifier

        return ImageClassifier
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
