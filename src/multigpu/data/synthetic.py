"""Random images of Fashion-MNIST's shape, for smoke runs that need no files."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset
from typing_extensions import override

from multigpu.data.base import ImageDataModule


def random_images(count: int, num_classes: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(count, 1, 28, 28, generator=generator)
    labels = torch.randint(0, num_classes, (count,), generator=generator)
    return TensorDataset(images, labels)


class SyntheticDataModule(ImageDataModule):
    """Seeded Gaussian noise with random labels: exercises the pipeline, learns nothing."""

    def __init__(self, num_train: int = 1024, num_test: int = 256, num_classes: int = 10, **kwargs):
        super().__init__(**kwargs)
        self.num_train = num_train
        self.num_test = num_test
        self.num_classes = num_classes

    @property
    def class_names(self) -> list[str]:
        return [f"class {i}" for i in range(self.num_classes)]

    @override
    def load_datasets(self):
        train = random_images(self.num_train, self.num_classes, self.seed)
        test = random_images(self.num_test, self.num_classes, self.seed + 1)
        return train, test
