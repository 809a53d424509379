"""Checkpoint files that are either complete or absent: a reader never sees half of one.

Lightning's ``torch.save`` checkpoint gets the digest of its contents
(``multigpu.storage.checkpoint``), is serialised in memory, then written through
``multigpu.storage.atomic`` (a temporary file beside the target, flushed to disk, renamed over
it). A process killed during the write leaves the previous checkpoint untouched; bytes damaged
later are found when the file is read; a resume restores the checkpoint the run read and
checked (``hand_over``), not a second read of the file.
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
from multigpu.storage.paths import canonical


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

    def hand_over(self, path: Path, checkpoint: dict[str, Any]) -> None:
        """The checkpoint the run has read and checked (``start_from``), for Lightning's restore
        of ``path`` to take instead of reading the file again."""
        self._checked = (canonical(path), checkpoint)

    @override
    def load_checkpoint(
        self, path: str | Path, map_location: Any = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Lightning's restore: what the run checked, taken once, so that what is restored is
        what was checked (a file changed in between is not read). Anything else is Lightning's
        own read: the weights a spawned DDP process hands back through a temporary file, a
        restore in a spawned process (which checked the file itself, in ``start_from``)."""
        checked, self._checked = getattr(self, "_checked", None), None
        if checked is not None and checked[0] == canonical(path):
            return checked[1]
        return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)

    @override
    def __getstate__(self) -> dict[str, Any]:
        """Spawned DDP processes read the file themselves: no checkpoint in the pickle."""
        return {k: v for k, v in self.__dict__.items() if k != "_checked"}
