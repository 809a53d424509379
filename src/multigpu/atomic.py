"""Files that readers never see half-written: every file the project writes goes through here.

The data goes to a temporary file beside the target, named uniquely (so that processes
writing the same target never share one), is flushed to disk, and is renamed over the target
(atomic on POSIX; a file another process put there first is simply replaced). A failure or a
kill leaves the previous file intact; a failure also removes the temporary file. Torch-free:
the entry points import it before anything heavy.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

PARTIAL = ".partial"


def temporary_name(path: Path) -> Path:
    """``<name>.<pid>-<random>.partial`` in the target's folder (a rename never crosses disks)."""
    return path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}{PARTIAL}")


@contextmanager
def atomic_file(path: str | Path, mode: str = "wb") -> Iterator[IO[Any]]:
    """Yield a new temporary file; when the block ends without error it replaces ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = temporary_name(path)
    # O_EXCL: never write into a file someone else opened; 0o666 lets the umask decide, as
    # open() would (a data folder shared by a group stays readable by it).
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with open(descriptor, mode) as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    sync_folder(path.parent)


def sync_folder(folder: Path) -> None:
    """Make the rename itself durable (a crash right after it keeps the new file)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass  # some file systems cannot sync a folder; the rename has happened regardless
    finally:
        os.close(descriptor)


def write_atomically(path: str | Path, data: str | bytes) -> None:
    with atomic_file(path, "w" if isinstance(data, str) else "wb") as file:
        file.write(data)


def write_json(path: str | Path, data: Any) -> None:
    write_atomically(path, json.dumps(data, indent=2) + "\n")
