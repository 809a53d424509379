"""Checkpoint files that are either complete or absent: a reader never sees half of one.

The checkpoint is serialised in memory, written to ``<name>.partial`` beside the target,
flushed to disk, then renamed over the target (``os.replace`` is atomic on POSIX). A process
killed during the write leaves the previous checkpoint untouched and a stray ``.partial``
that the next save overwrites.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO


def write_bytes(file: io.BufferedWriter, data: bytes) -> None:
    """The one place bytes reach the partial file (tests stop a write half-way here)."""
    file.write(data)


def save_atomically(checkpoint: dict[str, Any], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as file:
        write_bytes(file, buffer.getbuffer())
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``torch.save`` checkpoints, written through :func:`save_atomically`."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None
    ) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        save_atomically(checkpoint, path)
