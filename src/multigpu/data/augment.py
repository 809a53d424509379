"""Augmentation of whole batches on their device: random crop after padding, horizontal flip.

One gather per batch instead of a PIL call per image; the random numbers come from a
generator seeded by (seed, epoch, rank), so runs and resumed runs augment alike.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def random_crop(images: Tensor, padding: int, fill: float, generator: torch.Generator) -> Tensor:
    """Pad by ``padding`` on every side with ``fill``, then cut each image's own window."""
    if padding <= 0:
        return images
    n, _, h, w = images.shape
    padded = F.pad(images, (padding,) * 4, value=fill)
    device = images.device
    top = torch.randint(0, 2 * padding + 1, (n,), generator=generator, device=device)
    left = torch.randint(0, 2 * padding + 1, (n,), generator=generator, device=device)
    rows = (top[:, None] + torch.arange(h, device=device))[:, None, :, None]
    cols = (left[:, None] + torch.arange(w, device=device))[:, None, None, :]
    batch = torch.arange(n, device=device)[:, None, None, None]
    channels = torch.arange(images.shape[1], device=device)[None, :, None, None]
    return padded[batch, channels, rows, cols]


def random_flip(images: Tensor, generator: torch.Generator) -> Tensor:
    flip = torch.rand(images.shape[0], generator=generator, device=images.device) < 0.5
    return torch.where(flip[:, None, None, None], images.flip(-1), images)


def augment(
    images: Tensor, padding: int, flip: bool, fill: float, generator: torch.Generator
) -> Tensor:
    images = random_crop(images, padding, fill, generator)
    return random_flip(images, generator) if flip else images
