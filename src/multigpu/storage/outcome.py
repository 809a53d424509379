"""How a run ended: one mapping from an exception to (status, reason, exit code).

Torch-free, so that the entry points and the sweep use it without importing Lightning.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from multigpu.config.errors import REASON_CHARS, RunStopped, UserError, message, summary_line


@dataclass(frozen=True)
class Outcome:
    status: str  # completed, interrupted, diverged or failed
    reason: str | None  # the one line saying why it did not complete
    exit_code: int


COMPLETED = Outcome("completed", None, 0)


def outcome_of(error: BaseException) -> Outcome:
    """Our own errors carry their status and exit code; Ctrl-C and SIGTERM that reach here
    unconverted are interruptions; anything else is a failure (a bug or a broken environment)."""
    if isinstance(error, (UserError, RunStopped)):
        return Outcome(error.status, summary_line(message(error)), error.exit_code)
    if isinstance(error, KeyboardInterrupt):
        return Outcome("interrupted", "interrupted by SIGINT", 128 + signal.SIGINT)
    if type(error).__name__ == "SIGTERMException":  # Lightning's, without importing Lightning
        return Outcome("interrupted", "interrupted by SIGTERM", 128 + signal.SIGTERM)
    detail = summary_line(str(error))
    reason = f"{type(error).__name__}: {detail}" if detail else type(error).__name__
    return Outcome("failed", reason[:REASON_CHARS], 1)
