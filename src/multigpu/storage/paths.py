"""The one spelling of a path: what every comparison, lock and write of a run folder, a
checkpoint folder, a sweep folder and ``paths.runs_dir`` goes through.

A folder has many spellings (``outputs``, ``../here/outputs``, ``~/x``, a link to it, a
trailing ``/``); two spellings of one folder compared as text are two folders, and a run that
locked one spelling then found "another run" (itself) holding the other. ``canonical`` gives
each place one form. Torch-free.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


def canonical(path: str | os.PathLike[str]) -> Path:
    """``path`` with ``~`` expanded, made absolute, and ``..`` and links resolved as far as it
    exists (the part that does not exist yet is taken as written, ``..`` in it resolved). A name
    the OS cannot hold (a NUL) is only made absolute: the checks that refuse it say why."""
    expanded = os.path.expanduser(os.fspath(path))
    try:
        return Path(os.path.realpath(expanded))
    except (OSError, ValueError):
        return Path(os.path.abspath(expanded))


def is_within(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is ``folder`` or inside it, however either is spelt."""
    path, folder = canonical(path), canonical(folder)
    return path == folder or folder in path.parents


def folders_below(folder: str | os.PathLike[str], depth: int, limit: int) -> Iterator[Path]:
    """The folders inside ``folder``, nearest first, down to ``depth`` levels and at most
    ``limit`` of them, so that looking inside a large tree costs a bounded number of reads. Links
    are not followed (what they lead to is not inside), and hidden folders (``.git``, ``.venv``,
    ``.hydra``, ``.submitit``) are not entered."""
    level, seen = [Path(folder)], 0
    for _ in range(depth):
        below = []
        for parent in level:
            for entry in subfolders(parent):
                if seen == limit:
                    return
                seen += 1
                yield entry
                below.append(entry)
        level = below


def subfolders(folder: Path) -> list[Path]:
    """The folders directly inside ``folder`` that are neither links nor hidden, by name; none
    for one that cannot be read."""
    try:
        with os.scandir(folder) as entries:
            return sorted(
                Path(entry.path)
                for entry in entries
                if not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False)
            )
    except (OSError, ValueError):  # ValueError: a name the OS cannot hold (a NUL)
        return []
