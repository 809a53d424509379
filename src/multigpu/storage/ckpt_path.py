"""Where ``ckpt_path`` points, checked before anything heavy is imported: a folder or a missing
file is refused with what to pass instead (``latest``: ``multigpu.run.resume``)."""

from __future__ import annotations

import re
import shlex
import stat
from pathlib import Path
from typing import Any

from multigpu.config.errors import UserError
from multigpu.config.job_names import SAFE

LATEST = "latest"
LAST = "last.ckpt"  # after every finished epoch (callbacks.LastCheckpoint)
SETTINGS = "settings"  # the checkpoint's key for its run's settings (multigpu.config.computation)
PREVIOUS = "previous.ckpt"  # the one before it, kept for when last.ckpt is damaged


def as_typed(checkpoint: Path, key: str = "ckpt_path") -> str:
    """``ckpt_path=<checkpoint>`` (or another ``key``'s path) as it is pasted back: the path in
    Hydra's quotes where it has characters Hydra's grammar does not take bare (a space, a letter
    beyond ASCII), the whole in the shell's where the shell would read one."""
    return shlex.quote(f"{key}={hydra_value(str(checkpoint))}")


def hydra_value(path: str) -> str:
    """``path`` as Hydra's grammar reads it back as that text (in its quotes where needed)."""
    if not set(path) <= {*SAFE, "/"}:
        path = re.sub(r"(\\*)\$\{", lambda m: m[1] * 2 + "\\${", path)  # OmegaConf's: not read
        path = re.sub(r'(\\*)"', lambda m: m[1] * 2 + '\\"', path)  # Hydra's: a quote in it
        path = '"' + re.sub(r"(\\+)$", lambda m: m[1] * 2, path) + '"'  # and before its end
    return path


class BadCheckpoint(UserError):
    """A checkpoint file refused, with the file, what is wrong with it and what to do kept
    apart, so that a caller can say it of its own key (``init_from``) or in its own words (the
    checkpoint a run folder continues, which the command did not name). ``previous``: the one
    before it, to use instead (said with the key)."""

    def __init__(
        self,
        path: Any,
        problem: str,
        advice: str = "",
        key: str = "ckpt_path",
        previous: Path | None = None,
    ):
        self.path, self.problem, self.key, self.previous = path, problem, key, previous
        if previous is not None:
            advice = f"use the one before it, {as_typed(previous, key)}"
        self.advice = advice
        super().__init__(f"{key}={path} {problem}" + (f"; {advice}" if advice else ""))

    def said_of(self, key: str) -> BadCheckpoint:
        return BadCheckpoint(self.path, self.problem, self.advice, key, self.previous)

    def __reduce__(self) -> tuple[Any, ...]:  # copied or pickled whole
        parts = (self.path, self.problem, self.advice, self.key, self.previous)
        return BadCheckpoint, parts, self.__dict__  # its notes too


def checkpoint_file(ckpt_path: str | Path, key: str = "ckpt_path") -> Path:
    """``ckpt_path`` (or ``key``'s path) as an existing regular file, judged from its metadata
    alone (``stat``): a named pipe or a device is refused before anything opens it (reading a
    pipe would block)."""
    if not str(ckpt_path).strip():
        raise UserError(f"{key} is empty: pass a .ckpt file, e.g. {key}=<run>/checkpoints/{LAST}")
    path = Path(ckpt_path).expanduser()
    example = f"e.g. outputs/<date>/<time>/checkpoints/{LAST}"
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        said = f"does not exist: pass a .ckpt file, {example}"
        raise BadCheckpoint(path, said, key=key) from None
    except (OSError, ValueError) as err:  # no access, a link loop, a NUL in the name
        reason = getattr(err, "strerror", None) or str(err)
        raise BadCheckpoint(
            path, f"cannot be read ({reason}): pass a .ckpt file, {example}", key=key
        ) from None
    if stat.S_ISDIR(mode):
        if (inside := checkpoint_in(path)) is None:
            said = "is a folder that holds no checkpoint (.ckpt) in it or its checkpoints/: pass "
            said += f"a .ckpt file, {example} (or {key}=latest, the newest below paths.runs_dir)"
            raise BadCheckpoint(path, said, key=key)
        raise BadCheckpoint(
            path,
            f"is a folder: pass the checkpoint file in it, e.g. {as_typed(inside, key)}",
            key=key,
        )
    if not stat.S_ISREG(mode):
        kinds = {
            stat.S_ISFIFO: "a named pipe",
            stat.S_ISCHR: "a character device",
            stat.S_ISBLK: "a block device",
            stat.S_ISSOCK: "a socket",
        }
        kind = next((name for test, name in kinds.items() if test(mode)), "not a file")
        raise BadCheckpoint(
            path, f"is not a regular file ({kind}): pass a .ckpt file, {example}", key=key
        )
    return path


def checkpoint_in(folder: Path) -> Path | None:
    """The checkpoint a folder given as ``ckpt_path`` most likely meant: a run's last one, or
    the newest ``.ckpt`` in it or in its ``checkpoints``; None where it holds none."""
    try:
        found = [*folder.glob("*.ckpt"), *folder.glob("checkpoints/*.ckpt")]
    except OSError:  # unreadable
        found = []
    dated = []
    for path in found:
        try:
            if path.is_file():  # a dangling link, or a file gone while looked at: passed over
                dated.append((path.stat().st_mtime, path))
        except OSError:
            continue
    candidates = [
        folder / "checkpoints" / LAST,
        folder / LAST,
        *(path for _, path in sorted(dated, reverse=True)),
    ]
    return next((p for p in candidates if p.is_file()), None)
