"""Every folder a run writes in has one owner at a time: the process that holds an exclusive
``flock`` on the folder itself. The operating system releases it when that process ends however
it ends (a SIGKILL included), so a dead run never leaves its folder held, and no lock file is
left behind. A run owns its run folder and its checkpoint folder, a sweep its sweep folder
(``multigpu.run.admission.written_folders`` names them); a folder is known by its canonical
path (``multigpu.storage.paths``), so that no spelling of it escapes its lock. A lock holds one
folder, not the folders inside it: that no run's folder lies inside or around another run's is
admission's to check (``multigpu.run.admission.check_apart_from_other_runs``, which takes a
held lock below or above a run's folders as another run's folder).

Only the run's rank zero owns its folders: the other processes of a DDP run (Lightning's
relaunched ranks, torchrun's and srun's tasks) write nothing there. Torch-free.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from multigpu.config.errors import OccupiedFolder
from multigpu.storage.paths import canonical

_held: dict[Path, int] = {}  # folder -> the open descriptor that holds its lock
_made: dict[Path, Path] = {}  # folder -> the outermost folder acquiring it made


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


def occupied(folder: Path, key: str = "hydra.run.dir") -> OccupiedFolder:
    """The refusal of a folder another process owns; ``key``: the setting that named it."""
    named = "" if key == "hydra.run.dir" else f" ({key})"
    return OccupiedFolder(
        f"{folder}{named} is in use by another run ({holder(folder)}): wait for it to end, "
        f"or pass another {key}"
    )


def check_free(folders: Mapping[str, Path]) -> None:
    """Each folder (by the setting that names it) is free or already this process's: a
    second run never writes where a live one does."""
    for key, folder in folders.items():
        if not is_free(folder):
            raise occupied(canonical(folder), key)


def is_held(folder: str | Path) -> bool:
    """Whether this process owns ``folder``."""
    return canonical(folder) in _held


def is_free(folder: str | Path) -> bool:
    """Whether no other process owns ``folder`` now (a folder that does not exist is free)."""
    folder = canonical(folder)
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
    folder = canonical(folder)
    if folder in _held:
        return False
    made = next((f for f in reversed([folder, *folder.parents]) if not f.exists()), None)
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise occupied(folder) from None
    os.set_inheritable(descriptor, False)  # a child process must not keep it after we end
    _held[folder] = descriptor
    if made is not None:
        _made[folder] = made
    return True


def release(folder: str | Path, unmake: bool = False) -> None:
    """Give ``folder`` up; ``unmake``: also remove the folders ``acquire`` made for it, where
    they are still empty (a run refused once it held them leaves nothing behind)."""
    folder = canonical(folder)
    descriptor, made = _held.pop(folder, None), _made.pop(folder, None)
    if descriptor is not None:
        os.close(descriptor)
    if unmake and made is not None:
        for empty in [folder, *folder.parents][: len(folder.parts) - len(made.parts) + 1]:
            with contextlib.suppress(OSError):  # not empty (another run's), or gone
                empty.rmdir()


def discard(folder: str | Path) -> None:
    """Give ``folder`` up, and remove it with all it holds if ``acquire`` made it (then all it
    holds is this process's: a sweep refused once it began writing leaves nothing behind); a
    folder that was there before keeps what it holds."""
    folder = canonical(folder)
    if folder in _made:
        shutil.rmtree(folder, ignore_errors=True)
    release(folder, unmake=True)


def acquire_all(folders: Mapping[str, Path], check: Callable[[], None] | None = None) -> list[Path]:
    """Own every folder (by the setting that names it), then ``check`` what they hold; or own
    none, and leave no folder made for them: the folders this call took. Raises
    ``OccupiedFolder`` naming the setting of the one another process holds."""
    took: list[Path] = []
    try:
        for key, folder in folders.items():
            try:
                if acquire(folder):
                    took.append(canonical(folder))
            except OccupiedFolder:
                raise occupied(canonical(folder), key) from None
        if check is not None:
            check()
    except BaseException:
        for folder in reversed(took):
            release(folder, unmake=True)
        raise
    return took


@contextlib.contextmanager
def owning(folders: Mapping[str, Path], check: Callable[[], None] | None = None) -> Iterator[None]:
    """Own every folder for the block (``acquire_all``, ``check`` included); a folder this
    process already owned stays owned."""
    took = acquire_all(folders, check)
    try:
        yield
    finally:
        for folder in took:
            release(folder)
