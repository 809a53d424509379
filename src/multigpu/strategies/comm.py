"""Device-agnostic collectives for one process driving several devices (CPU or CUDA).

``torch.nn.parallel``'s scatter/gather/reduce accept only CUDA devices; these plain-tensor
versions run on CPU "devices" as well, so the same code is tested here and used on GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


def split_sizes(total: int, parts: int, weights: Sequence[float] | None = None) -> list[int]:
    """One shard size per device, summing to ``total``: even (the first shards one larger), or
    proportional to ``weights`` by largest remainder. A batch smaller than the number of
    devices leaves some sizes 0: those devices sit the step out."""
    if weights is None:
        weights = [1.0] * parts
    scale = sum(weights)
    exact = [total * w / scale for w in weights]
    sizes = [int(x) for x in exact]
    by_remainder = sorted(range(parts), key=lambda i: (sizes[i] - exact[i], i))
    for i in by_remainder[: total - sum(sizes)]:
        sizes[i] += 1
    return sizes


def scatter(tensor: Tensor, sizes: Sequence[int], devices: Sequence[torch.device]) -> list[Tensor]:
    """Split along the batch dimension and send shard i to device i (differentiable)."""
    return [
        shard.to(device, non_blocking=True)
        for shard, device in zip(tensor.split(list(sizes)), devices, strict=True)
    ]


def gather(tensors: Sequence[Tensor], device: torch.device) -> Tensor:
    """Concatenate shards on ``device``; gradients flow back to each shard's device."""
    return torch.cat([t.to(device, non_blocking=True) for t in tensors])


def flatten(tensors: Sequence[Tensor]) -> Tensor:
    """One contiguous buffer: one transfer instead of one per tensor."""
    return _flatten_dense_tensors(list(tensors))


def unflatten_into(flat: Tensor, tensors: Sequence[Tensor]) -> None:
    """Copy a flat buffer back into ``tensors`` (in place)."""
    for tensor, value in zip(tensors, _unflatten_dense_tensors(flat, list(tensors)), strict=True):
        tensor.copy_(value)


def reduce_add_coalesced(groups: Sequence[Sequence[Tensor]], device: torch.device) -> Tensor:
    """Sum matching tensor lists from several devices into one flat buffer on ``device``."""
    total = flatten(groups[0]).to(device)
    for group in groups[1:]:
        total += flatten(group).to(device, non_blocking=True)
    return total


def broadcast_coalesced(tensors: Sequence[Tensor], targets: Sequence[Sequence[Tensor]]) -> None:
    """Copy ``tensors`` into every list of ``targets`` (each on its own device), one flat
    transfer per device."""
    flat = flatten([t.detach() for t in tensors])
    for target in targets:
        unflatten_into(flat.to(target[0].device, non_blocking=True), target)
