from multigpu.data.base import ImageDataModule
from multigpu.data.fashion_mnist import FashionMNISTDataModule
from multigpu.data.synthetic import SyntheticDataModule

__all__ = ["FashionMNISTDataModule", "ImageDataModule", "SyntheticDataModule"]
