"""Ctrl-C and SIGTERM outside Lightning's own handling.

Before training (data preparation, building the network) SIGTERM would kill the run without a
word, leaving its record ``running`` and a half-written file: ``sigterm_interrupts`` makes it
raise ``Interrupted`` there, so the run records how it ended and removes the file it was
writing; while Lightning trains, its own handler (which calls this one too) stops after the
current step. Once training is over, the run has completed and its last checkpoint is
written, so a signal during what follows (drawing the test figures) skips that work, says so,
and leaves the run completed."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from multigpu.config.errors import Interrupted


class _Skip(Exception):
    pass


def after_training_notice(signal_name: str, skipped: str) -> str:
    return (
        f"warning: {signal_name} after the last epoch: skipped {skipped}; the run completed "
        "and its checkpoint is written"
    )


def _interrupt(signum: int, frame: object) -> None:
    if signal.getsignal(signum) is not _interrupt:
        return  # called by Lightning's handler, which stops training after the current step
    name = signal.Signals(signum).name
    raise Interrupted(f"interrupted by {name}", 128 + signum)


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises ``Interrupted`` in the block (the main thread's), as Ctrl-C raises."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
