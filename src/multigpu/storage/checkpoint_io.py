"""Checkpoint files that are either complete or absent: a reader never sees half of one.

Lightning's ``torch.save`` checkpoint gets the digest of its contents
(``multigpu.storage.checkpoint``), is serialised in memory, then written through
``multigpu.storage.atomic`` (a temporary file beside the target, flushed to disk, renamed over
it). A process killed during the write leaves the
previous checkpoint untouched; bytes damaged later are found when the file is read.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import IO, Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from typing_extensions import override

from multigpu.storage.atomic import atomic_file
from multigpu.storage.checkpoint import DIGEST, digest


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
        checkpoint[DIGEST] = digest(checkpoint)  # checked whenever the file is read
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        with atomic_file(path) as file:
            write_bytes(file, buffer.getbuffer())
