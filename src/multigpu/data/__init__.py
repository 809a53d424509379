"""The data modules: Fashion-MNIST (IDX files, checked) and synthetic images, through
torchvision's loader or the in-memory pipeline, with batch augmentation."""

from multigpu.data.base import ImageDataModule
from multigpu.data.fashion_mnist import FashionMNISTDataModule
from multigpu.data.synthetic import SyntheticDataModule

__all__ = ["FashionMNISTDataModule", "ImageDataModule", "SyntheticDataModule"]
