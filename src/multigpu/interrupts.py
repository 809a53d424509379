"""Ctrl-C and SIGTERM once training is over: the run has completed and its last checkpoint is
written, so a signal during what follows (drawing the test figures) skips that work, says so,
and leaves the run completed, instead of killing it without a word (Lightning has put the
default SIGTERM handler back by then) or marking it interrupted."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Skip(Exception):
    pass


def after_training_notice(signal_name: str, skipped: str) -> str:
    return (
        f"warning: {signal_name} after the last epoch: skipped {skipped}; the run completed "
        "and its checkpoint is written"
    )


@contextmanager
def skipped_on_signal(what: str) -> Iterator[None]:
    """Run the block; Ctrl-C or SIGTERM during it skips the rest of it, with one line."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def skip(signum: int, frame: object) -> None:
        raise _Skip(signal.Signals(signum).name)

    previous = {s: signal.signal(s, skip) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except _Skip as stopped:
        print(after_training_notice(str(stopped), what), file=sys.stderr, flush=True)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
