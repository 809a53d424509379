"""Files that readers never see half-written: every file the project writes goes through here.

The data goes to a temporary file beside the target, named uniquely (so that processes
writing the same target never share one), is flushed to disk, and is renamed over the target
(atomic on POSIX; a file another process put there first is simply replaced). A failure or a
kill leaves the previous file intact; a failure also removes the temporary file. Torch-free:
the entry points import it before anything heavy.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from multigpu.config.errors import WriteFailed

PARTIAL = ".partial"
# What a failed write says about the disk, and what to do.
ADVICE = {
    errno.ENOSPC: "the disk is full: free space, or write elsewhere",
    errno.EDQUOT: "the disk quota is used up: free space, or write elsewhere",
    errno.EROFS: "the file system is read-only: write elsewhere",
    errno.EACCES: "no permission to write there: write elsewhere",
    errno.EPERM: "no permission to write there: write elsewhere",
    errno.EFBIG: "the file is larger than this file system allows: write elsewhere",
}


def temporary_name(path: Path) -> Path:
    """``<name>.<pid>-<random>.partial`` in the target's folder (a rename never crosses disks)."""
    return path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}{PARTIAL}")


def write_failed(path: Path, error: OSError) -> WriteFailed:
    advice = ADVICE.get(error.errno, "write elsewhere")
    reason = error.strerror or type(error).__name__
    return WriteFailed(f"cannot write {path}: {reason} ({advice})", error.errno)


def is_write_error(error: OSError, partial: Path) -> bool:
    """An error of writing ``partial`` (or its folder), not of reading some other file inside
    the ``with`` block."""
    named = error.filename is None or Path(error.filename) in (partial, *partial.parents)
    return error.errno in ADVICE and named


@contextmanager
def atomic_file(path: str | Path, mode: str = "wb") -> Iterator[IO[Any]]:
    """Yield a new temporary file; when the block ends without error it replaces ``path``.
    A failed write raises ``WriteFailed`` naming the file, the cause and what to do."""
    path = Path(path)
    partial = temporary_name(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # O_EXCL: never write into a file someone else opened; 0o666 lets the umask decide, as
        # open() would (a data folder shared by a group stays readable by it).
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with open(descriptor, mode) as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, path)
    except OSError as error:
        discard(partial)
        if is_write_error(error, partial):
            raise write_failed(path, error) from None
        raise
    except BaseException:
        discard(partial)
        raise
    sync_folder(path.parent)


def discard(partial: Path) -> None:
    with contextlib.suppress(OSError):  # never there, or on a disk that refuses even this
        partial.unlink(missing_ok=True)


def check_creatable(folder: str | Path, probe: bool = True) -> None:
    """``folder``, or the nearest folder above it that exists, takes a new file (with
    ``probe``: tried, then removed; else only its path is read): a run folder that could not be
    created is refused before anything is written."""
    folder = Path(folder).absolute()
    check_names_fit(folder)
    for place in (folder, *folder.parents):
        if place.is_symlink() and not place.exists():  # a loop, or a missing target
            raise WriteFailed(
                f"cannot write {folder}: {place} is a link that leads nowhere (write elsewhere)",
                errno.ELOOP,
            )
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        raise WriteFailed(
            f"cannot write {folder}: {existing} is a file, not a folder (write elsewhere)",
            errno.ENOTDIR,
        )
    if not probe:
        return
    made = temporary_name(existing / ".writable")
    try:
        os.close(os.open(made, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        made.unlink()
    except OSError as error:
        raise write_failed(folder, error) from None


FILES_ROOM = 1 + 255  # bytes: a file the run writes in the folder (an event file's name: 255)


def check_names_fit(folder: Path) -> None:
    """Each name along ``folder`` is one its file system can hold, and the whole path, with
    room for the files a run writes in it (``FILES_ROOM``), one the OS takes: ``mkdir`` would
    make the folders above a name too long, then fail, and leave them behind; a record or a
    checkpoint would fail once the run had started."""
    try:
        longest_path = os.pathconf(folder.anchor, "PC_PATH_MAX")
    except (OSError, ValueError):
        longest_path = 4096  # Linux's
    if len(os.fsencode(folder)) + FILES_ROOM > longest_path:
        raise WriteFailed(
            f"cannot write {str(folder)[:48]}...: its path is {len(os.fsencode(folder))} bytes "
            f"long, and with the files a run writes in it, more than the {longest_path} bytes a "
            "path can have (use a shorter one)",
            errno.ENAMETOOLONG,
        )
    place = Path(folder.anchor)
    for name in folder.parts[1:]:
        try:
            longest = os.pathconf(place, "PC_NAME_MAX")
        except (OSError, ValueError):
            longest = 255  # a file system that does not say: Linux's and macOS's limit
        if len(os.fsencode(name)) > longest:
            raise WriteFailed(
                f"cannot write {folder}: the name {name[:24]}... is longer than the {longest} "
                "bytes a name can have here (use a shorter one)",
                errno.ENAMETOOLONG,
            )
        if os.path.isdir(place / name):  # the nearest folder that exists says the limit
            place = place / name


def check_writable(folder: str | Path) -> None:
    """Create ``folder`` if need be and a file in it (then remove it): an unwritable folder is
    refused before any work is done, not after the first epoch."""
    folder = Path(folder)
    probe = temporary_name(folder / ".writable")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        probe.unlink()
    except OSError as error:
        raise write_failed(folder, error) from None


def sync_folder(folder: Path) -> None:
    """Make the rename itself durable (a crash right after it keeps the new file); some file
    systems cannot sync a folder, and the rename has happened regardless."""
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def link_atomically(source: str | Path, target: str | Path) -> bool:
    """Make ``target`` another name of ``source``'s file (no copy), replacing what ``target``
    named; False where the file system has no hard links."""
    target = Path(target)
    temporary = temporary_name(target)
    try:
        os.link(source, temporary)
        os.replace(temporary, target)
    except OSError:
        temporary.unlink(missing_ok=True)
        return False
    return True


def write_atomically(path: str | Path, data: str | bytes) -> None:
    with atomic_file(path, "w" if isinstance(data, str) else "wb") as file:
        file.write(data)


def write_json(path: str | Path, data: Any) -> None:
    """Strict JSON, readable by any parser: a non-finite float (a diverged run's loss) is
    written as null, never as the bare ``NaN`` token Python's default would write."""
    text = json.dumps(finite_only(data), indent=2, allow_nan=False)
    write_atomically(path, text + "\n")


def finite_only(value: Any) -> Any:
    """``value`` with every NaN and infinity, at any depth, replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_only(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_only(item) for item in value]
    return value
