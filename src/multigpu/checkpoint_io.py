"""Checkpoint files that are either complete or absent: a reader never sees half of one.

Lightning's ``torch.save`` checkpoint is serialised in memory, then written through
``multigpu.atomic`` (a temporary file beside the target, flushed to disk, renamed over it). A
process killed during the write leaves the previous checkpoint untouched.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import IO, Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from typing_extensions import override

from multigpu.atomic import atomic_file


def write_bytes(file: IO[bytes], data: memoryview) -> None:
    """The one place a checkpoint's bytes reach the disk (tests stop a write half-way here)."""
    file.write(data)


class AtomicCheckpointIO(TorchCheckpointIO):
    @override
    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None
    ) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        with atomic_file(path) as file:
            write_bytes(file, buffer.getbuffer())
