"""Ctrl-C, SIGTERM, SIGHUP and SIGUSR1/2 outside Lightning's own handling.

Before training (data preparation, building the network) SIGTERM would kill the run without a
word, leaving its record ``running`` and a half-written file: ``sigterm_interrupts`` makes it
raise ``Interrupted`` there, so the run records how it ended and removes the file it was
writing; while Lightning trains, its own handler (which calls this one too) stops after the
current step. Once training is over, the run has completed and its last checkpoint is
written, so a signal during what follows (drawing the test figures) skips that work, says so,
and leaves the run completed.

SIGHUP, which a closed terminal sends the jobs it started, and SIGUSR1/2 outside SLURM
(``multigpu.config.launch.stop_signals``) are stops like SIGTERM (their default would end the
process unrecorded): before and after training the same way; while
Lightning trains, handed to Lightning's SIGTERM handling, so that the run stops after its
current step, and named by ``stop_signal``."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from multigpu.config.errors import Interrupted
from multigpu.config.launch import stop_signals


class _Skip(Exception):
    pass


def after_training_notice(signal_name: str, skipped: str) -> str:
    return (
        f"warning: {signal_name} after the last epoch: skipped {skipped}; the run completed "
        "and its checkpoint is written"
    )


_handed_over: list[signal.Signals] = []  # what Lightning's SIGTERM handling stops for


def _interrupt(signum: int, frame: object) -> None:
    sigterm = signal.getsignal(signal.SIGTERM)
    if sigterm is _interrupt or not callable(sigterm):  # Lightning is not training
        name = signal.Signals(signum).name
        raise Interrupted(f"interrupted by {name}", 128 + signum)
    if signum == signal.SIGTERM:
        return  # called by Lightning's handler, which stops training after the current step
    _handed_over.append(signal.Signals(signum))
    sigterm(signal.SIGTERM, frame)  # Lightning's, or skipped_on_signal's once training is over


def stop_signal(default: signal.Signals) -> signal.Signals:
    """The signal that Lightning's SIGTERM handling stopped for: a SIGHUP (or SIGUSR1/2) handed
    to it, or ``default`` (SIGTERM)."""
    return _handed_over[-1] if _handed_over else default


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Every signal that would end the run (``multigpu.config.launch.stop_signals``: SIGTERM,
    SIGHUP, and SIGUSR1/2 outside SLURM) raises ``Interrupted`` in the block (the main
    thread's), as Ctrl-C raises: the run ends recorded, with its checkpoint."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _handed_over.clear()
    previous = {s: signal.signal(s, _interrupt) for s in stop_signals(os.environ)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def skipped_on_signal(what: str) -> Iterator[None]:
    """Run the block; Ctrl-C or SIGTERM during it skips the rest of it, with one line."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def skip(signum: int, frame: object) -> None:
        raise _Skip(signal.Signals(signum).name)

    previous = {s: signal.signal(s, skip) for s in (signal.SIGINT, *stop_signals(os.environ))}
    try:
        yield
    except _Skip as stopped:
        print(after_training_notice(str(stopped), what), file=sys.stderr, flush=True)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
