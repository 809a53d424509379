"""Device-agnostic collectives for one process driving several devices (CPU or CUDA).

``torch.nn.parallel``'s scatter/gather/reduce accept only CUDA devices; these plain-tensor
versions run on CPU "devices" as well, so the same code is tested here and used on GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


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


def laid_out_like(chunk: Tensor, like: Tensor) -> Tensor:
    """``chunk`` viewed with ``like``'s shape and memory layout: a channels-last weight gets a
    channels-last view, so gradients accumulate into it without a layout mismatch."""
    order = sorted(range(like.dim()), key=lambda d: (-like.stride(d), d))  # outermost first
    view = chunk.view([like.shape[d] for d in order]).permute(
        [order.index(d) for d in range(like.dim())]
    )
    return view if view.stride() == like.stride() else chunk.view(like.shape)


# Where each tensor of a FlatBuffer starts, in bytes: the CUDA allocator's own alignment, which
# kernels may assume of a tensor's start. Packed end to end instead, a view could start 4 bytes
# into a 16-byte word, and cuDNN's fp32 NHWC convolutions over such parameters failed with
# "misaligned address" on an H200 (bf16 autocast convolved aligned copies and ran).
ALIGN_BYTES = 256


class FlatBuffer:
    """Same-dtype tensors laid one after the other in one buffer allocated once, each starting
    on an ``ALIGN_BYTES`` boundary, with a view shaped like each: a transfer is one copy, and
    every step reuses the same memory. The gaps between them stay zero."""

    def __init__(self, like: Sequence[Tensor], device: torch.device | None = None):
        like = list(like)
        dtypes = {t.dtype for t in like}
        if len(dtypes) != 1:
            raise ValueError(f"a FlatBuffer holds one dtype, got {sorted(map(str, dtypes))}")
        step = max(ALIGN_BYTES // like[0].element_size(), 1)
        sizes = [t.numel() for t in like]
        starts = [0]
        for size in sizes:
            starts.append(starts[-1] + -(-size // step) * step)  # rounded up to a boundary
        device = like[0].device if device is None else device
        self.flat = torch.zeros(starts[-1], dtype=like[0].dtype, device=device)
        self.views = [
            laid_out_like(self.flat[start : start + size], t)
            for start, size, t in zip(starts, sizes, like, strict=False)
        ]

    @torch.no_grad()
    def pack(self, tensors: Sequence[Tensor]) -> Tensor:
        torch._foreach_copy_(self.views, list(tensors))
        return self.flat

    @torch.no_grad()
    def adopt(self, tensors: Sequence[Tensor]) -> None:
        """Make each tensor (a parameter, a buffer) a view of this buffer, value and identity
        kept: writing the buffer then writes them all, with no unpacking."""
        self.pack(tensors)
        for tensor, view in zip(tensors, self.views, strict=True):
            tensor.data = view


class FlatBuffers:
    """Tensors of mixed dtypes (BatchNorm's int64 counter beside float weights) as one
    FlatBuffer per dtype."""

    def __init__(self, like: Sequence[Tensor], device: torch.device | None = None):
        like = list(like)
        groups: dict[torch.dtype, list[int]] = {}
        for i, tensor in enumerate(like):
            groups.setdefault(tensor.dtype, []).append(i)
        self.groups = list(groups.values())
        self.buffers = [FlatBuffer([like[i] for i in g], device) for g in self.groups]

    def _split(self, tensors: Sequence[Tensor]) -> list[list[Tensor]]:
        return [[tensors[i] for i in group] for group in self.groups]

    def pack(self, tensors: Sequence[Tensor]) -> None:
        for buffer, part in zip(self.buffers, self._split(tensors), strict=True):
            buffer.pack(part)

    def adopt(self, tensors: Sequence[Tensor]) -> None:
        for buffer, part in zip(self.buffers, self._split(tensors), strict=True):
            buffer.adopt(part)

    @torch.no_grad()
    def copy_(self, source: FlatBuffers) -> None:
        """One transfer per dtype from ``source`` (possibly on another device)."""
        for mine, theirs in zip(self.buffers, source.buffers, strict=True):
            mine.flat.copy_(theirs.flat, non_blocking=True)


@torch.no_grad()
def reduce_add(total: Tensor, flats: Sequence[Tensor], staging: Sequence[Tensor | None]) -> Tensor:
    """Add flat buffers from other devices into ``total`` in place; a buffer on another device
    first lands in its preallocated ``staging`` buffer on ``total``'s device."""
    for flat, stage in zip(flats, staging, strict=True):
        total += flat if stage is None else stage.copy_(flat, non_blocking=True)
    return total
