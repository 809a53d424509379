"""The in-memory pipeline: a whole split as one uint8 tensor, batches cut by index.

No per-sample Python, PIL or collation: a batch is one fancy-index into the tensor and one
normalisation, on whatever device the tensor lives on (the training GPU when there is one).
Batches come out in the same order, with the same values, as the torchvision pipeline's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor
from torch.utils.data import Dataset, Sampler, Subset, TensorDataset


class TensorImages(Dataset):
    """Images (uint8 ``[N, C, H, W]`` scaled by 1/255, or float as they are) and labels;
    ``dataset[indices]`` returns a whole normalised batch."""

    def __init__(self, images: Tensor, labels: Tensor, mean: float = 0.0, std: float = 1.0):
        self.images, self.labels = images, labels
        self.mean, self.std = mean, std

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, indices: Sequence[int] | Tensor) -> tuple[Tensor, Tensor]:
        index = torch.as_tensor(indices, device=self.images.device)
        images = self.images[index]
        if images.dtype == torch.uint8:
            images = images.float().div(255)  # what ToTensor does, in the same order
        if self.mean != 0.0 or self.std != 1.0:
            images = images.sub(self.mean).div(self.std)  # and what Normalize does
        return images, self.labels[index]

    def take(self, indices: Sequence[int]) -> TensorImages:
        index = torch.as_tensor(indices, dtype=torch.long)
        return TensorImages(self.images[index], self.labels[index], self.mean, self.std)

    def to(self, device: torch.device) -> TensorImages:
        if self.images.device == device:
            return self
        return TensorImages(self.images.to(device), self.labels.to(device), self.mean, self.std)


class IndexBatches:
    """Batches of indices in ``sampler``'s order, cut on ``device``: the epoch's order crosses
    to the GPU in one copy when the epoch starts, not one small copy per step. ``drop_last``
    leaves out the last batch when it is short, as ``DataLoader(drop_last=True)`` does."""

    def __init__(
        self, sampler: Sampler[int], batch_size: int, device: torch.device, drop_last: bool = False
    ):
        self.sampler, self.batch_size, self.device = sampler, batch_size, device
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[Tensor]:
        """A generator: the sampler is read at the first batch, not when the iterator is made
        (which may be before a resume's loops are restored: ``callbacks.resumed_order``)."""
        order = list(self.sampler)[: len(self) * self.batch_size]
        order = torch.tensor(order, dtype=torch.long).to(self.device)
        yield from order.split(self.batch_size)

    def __len__(self) -> int:
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return -(-len(self.sampler) // self.batch_size)


def to_tensor_images(dataset: Dataset, mean: float = 0.0, std: float = 1.0) -> TensorImages:
    """The same samples as ``dataset`` (a torchvision MNIST-style set, a ``TensorDataset``, or a
    ``Subset`` of either), gathered into one tensor."""
    if isinstance(dataset, TensorImages):
        return dataset
    if isinstance(dataset, Subset):
        return to_tensor_images(dataset.dataset, mean, std).take(list(dataset.indices))
    if isinstance(dataset, TensorDataset):
        images, labels = dataset.tensors
        return TensorImages(images, labels.long(), mean, std)
    if hasattr(dataset, "data") and hasattr(dataset, "targets"):  # torchvision's MNIST family
        images = torch.as_tensor(dataset.data)
        if images.dim() == 3:
            images = images.unsqueeze(1)
        return TensorImages(images, torch.as_tensor(dataset.targets).long(), mean, std)
    raise TypeError(f"cannot hold {type(dataset).__name__} in memory")
