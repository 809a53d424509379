"""The errors a run ends with on purpose, each with the status it records and the exit status
the entry points return (see ``multigpu.storage.outcome`` for every other exception), and the
names a misspelt one may mean, which every such line offers the same way, and values as those
lines write them."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

REASON_CHARS = 500  # an error's line, at most
MAX_SUGGESTIONS = 3
CUTOFF = 0.6  # difflib's default: below it a name is not offered
WITHIN = 0.1  # only names about as close as the closest one are offered


class UserError(Exception):
    """A mistake in a config value, a path or a file that the user can fix.

    The message names the offending value and the fix; entry points print it as one line
    and exit non-zero instead of showing a traceback.
    """

    status = "failed"
    exit_code = 2


class OccupiedFolder(UserError):
    """The run's folder holds the record of another job, which is left as it is."""


class Unresolved(UserError):
    """A value whose interpolation cannot be resolved here (``${oc.env:NAME}`` unset, a key the
    config lacks): where the job alone can resolve it (``${hydra:...}``), the job says it."""


class NothingToDo(UserError):
    """The run asked for is already done (a finished run in its folder, a checkpoint that holds
    every epoch): a notice, exit 0, and nothing written."""

    status = "completed"
    exit_code = 0


class RunStopped(Exception):
    """Training stopped early for a reason the run records (``metrics.json`` ``status``)."""

    status = "failed"
    exit_code = 1


class Diverged(RunStopped):
    """The loss became NaN or infinite; the last good checkpoint is kept."""

    status = "diverged"
    exit_code = 3


class WriteFailed(RunStopped):
    """A file could not be written (disk full, read-only, no permission); nothing half-written
    is left, and the file it would have replaced is intact."""

    def __init__(self, message: str, errno: int | None = None):
        super().__init__(message)
        self.errno = errno


class PeerFailed(RunStopped):
    """Another process of a DDP run failed first; this one stopped because it had gone (its
    own error is printed in its output)."""


class Interrupted(RunStopped):
    """Ctrl-C or SIGTERM: the run stopped after its current step and can be resumed."""

    status = "interrupted"

    def __init__(self, message: str, exit_code: int = 130):
        super().__init__(message)
        self.exit_code = exit_code  # 128 + the signal's number, as shells report it


def add_note(error: BaseException, note: str) -> None:
    """What else went wrong while handling ``error``, said on the same line (``__notes__``, as
    Python 3.11's ``add_note`` keeps them)."""
    error.__notes__ = [*getattr(error, "__notes__", []), note]


def message(error: BaseException) -> str:
    """The error's one line, with its notes: a line break inside a value it quotes (a path
    from an environment variable, say) is shown as ``\\n``, so the line stays one."""
    text = "; ".join([str(error), *getattr(error, "__notes__", [])])
    return text.replace("\r", "\\r").replace("\n", "\\n")


def closest(word: str, candidates: Iterable[str]) -> list[str]:
    """The names a misspelt ``word`` may mean, for every message that offers some: difflib's
    close matches, at most three, and only those about as close as the best."""
    import difflib

    def ratio(candidate: str) -> float:
        return difflib.SequenceMatcher(None, word, candidate).ratio()

    found = difflib.get_close_matches(word, list(candidates), MAX_SUGGESTIONS, CUTOFF)
    close = [c for c in found if ratio(c) >= ratio(found[0]) - WITHIN]
    return sorted(close, key=lambda c: (-ratio(c), c))


def as_override(value: Any) -> str:
    """A value as it is written on the command line (``true``, ``null``; not ``True``, ``None``)."""
    if isinstance(value, bool) or value is None:
        return {None: "null", True: "true", False: "false"}[value]
    return str(value)


TOKEN = re.compile(r"[\w.+-]+", re.ASCII)


def plain_or_quoted(value: str) -> str:
    """A text value as it was typed where it is a plain word, else quoted, on one line."""
    return value if TOKEN.fullmatch(value) else repr(value)


def either(alternatives: list[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return " or ".join(filter(None, [", ".join(alternatives[:-1]), alternatives[-1]]))


def did_you_mean(names: list[str]) -> str:
    if not names:
        return ""
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    return f": did you mean {listed}?"


def summary_line(said: str | BaseException) -> str:
    """The line that says what went wrong: the first non-empty one, or, when the text carries a
    traceback (a worker process's error, re-raised), the error at its end. An exception's line
    goes inside a sentence of ours (``...: <line>; pass ...``): it ends without its full stop,
    and is its type's name where its text is empty."""
    lines = [line.strip() for line in str(said).splitlines() if line.strip()]
    if not lines:
        return type(said).__name__ if isinstance(said, BaseException) else ""
    traceback = any(line.startswith("Traceback (most recent call last)") for line in lines)
    line = (lines[-1] if traceback else lines[0])[:REASON_CHARS]
    return line.rstrip(".") if isinstance(said, BaseException) else line
