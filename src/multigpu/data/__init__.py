"""The data modules: Fashion-MNIST (IDX files, checked) and synthetic images, through
torchvision's loader or the in-memory pipeline, with batch augmentation; and where the files
are (``locate``).

The modules are imported on first use, so that checking where the files are (before a run
starts) does not load torch."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multigpu.data.base import ImageDataModule
    from multigpu.data.fashion_mnist import FashionMNISTDataModule
    from multigpu.data.synthetic import SyntheticDataModule

__all__ = ["FashionMNISTDataModule", "ImageDataModule", "SyntheticDataModule"]
_HOMES = {
    "FashionMNISTDataModule": "fashion_mnist",
    "ImageDataModule": "base",
    "SyntheticDataModule": "synthetic",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(f"multigpu.data.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
