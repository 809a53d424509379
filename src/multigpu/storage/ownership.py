"""A run folder has one owner at a time: the process that holds an exclusive ``flock`` on the
folder itself. The operating system releases it when that process ends however it ends (a
SIGKILL included), so a dead run never leaves its folder held, and no lock file is left behind.

Only the run's rank zero owns its folder: the other processes of a DDP run (Lightning's
relaunched ranks, torchrun's and srun's tasks) write nothing there. Torch-free.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from multigpu.config.errors import OccupiedFolder

_held: dict[Path, int] = {}  # folder -> the open descriptor that holds its lock


def holder(folder: Path) -> str:
    """Who holds ``folder``'s lock, from /proc/locks (Linux): ``pid N``, or ``another process``."""
    try:
        inode = folder.stat().st_ino
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if "FLOCK" in fields and fields[-3].rsplit(":", 1)[-1] == str(inode):
                return f"pid {fields[-4]}"
    except (OSError, IndexError):
        pass
    return "another process"


def occupied(folder: Path) -> OccupiedFolder:
    return OccupiedFolder(
        f"{folder} is in use by another run ({holder(folder)}): wait for it to end, "
        "or pass another hydra.run.dir"
    )


def is_held(folder: str | Path) -> bool:
    """Whether this process owns ``folder``."""
    return Path(folder).absolute() in _held


def is_free(folder: str | Path) -> bool:
    """Whether no other process owns ``folder`` now (a folder that does not exist is free)."""
    folder = Path(folder).absolute()
    if folder in _held or not folder.is_dir():
        return True
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return True  # nobody can have locked what cannot be opened; the write check says more
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(descriptor)  # drops the shared lock taken to look


def acquire(folder: str | Path) -> bool:
    """Create ``folder`` if need be and own it until ``release`` or the process ends; True if
    this call took it, False if this process already owned it. Raises ``OccupiedFolder``."""
    folder = Path(folder).absolute()
    if folder in _held:
        return False
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise occupied(folder) from None
    os.set_inheritable(descriptor, False)  # a child process must not keep it after we end
    _held[folder] = descriptor
    return True


def release(folder: str | Path) -> None:
    descriptor = _held.pop(Path(folder).absolute(), None)
    if descriptor is not None:
        os.close(descriptor)


@contextlib.contextmanager
def owning(folder: str | Path) -> Iterator[None]:
    """Own ``folder`` for the block; a folder this process already owned stays owned."""
    took = acquire(folder)
    try:
        yield
    finally:
        if took:
            release(folder)
