"""The console may vanish: a closed stdout or stderr never fails a run.

A pipe's reader that goes away (``python train.py | head -1``), a terminal that is closed or a
parent process that dies turn every later write to that stream into an error
(``BrokenPipeError``, ``EIO``), raised wherever the write happens: in the progress bar, in a
log handler, in the closing lines, or at the interpreter's exit. Training does not depend on
being watched, so the entry points wrap both streams (``guard_console``): the first write that
fails points the stream's file descriptor at ``/dev/null`` (so that no later write, buffered
byte or child process fails on it either), says so in the log (Hydra's ``train.log`` in the
run's folder keeps every log line) and the run goes on. A signal that comes with the loss (the
SIGTERM a dying parent's process group gets, the SIGHUP of a closed terminal) still stops the
run, as interrupted (``multigpu.callbacks.interrupts``).

Torch-free: the entry points install it before anything else can write; a Ctrl-C there ends
in one line too (``one_line_on_ctrl_c``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any, TextIO

# Write errors that mean the stream's other end is gone, not that this write was wrong: no
# reader on the pipe or socket, a terminal hung up, a descriptor closed under the stream.
GONE = (errno.EPIPE, errno.ECONNRESET, errno.EIO, errno.ENXIO, errno.EBADF)
NAMES = ("stdout", "stderr")

log = logging.getLogger(__name__)


def is_gone(error: BaseException) -> bool:
    """Whether a write failed because the stream has gone away (else the error is a real one,
    e.g. text the stream cannot encode, and is raised as it was)."""
    if isinstance(error, BlockingIOError):  # a full non-blocking pipe: its reader is slow
        return False
    if isinstance(error, OSError):
        return error.errno in GONE
    return type(error) is ValueError and "closed file" in str(error)


class Console:
    """A text stream (``sys.stdout``, ``sys.stderr``) whose writes cannot fail because its
    reader went away; everything else is the stream's own."""

    def __init__(self, stream: TextIO, name: str):
        self._stream = stream
        self._name = name
        self.gone = False
        self.said_an_error = False  # an ``error:`` line: the process's ending is said

    def write(self, text: str) -> int:
        self.said_an_error = self.said_an_error or text.startswith("error: ")
        if not self.gone:
            try:
                return self._stream.write(text)
            except (OSError, ValueError) as error:
                self._lost(error)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except (OSError, ValueError) as error:
                self._lost(error)

    def isatty(self) -> bool:
        return not self.gone and self._stream.isatty()

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, buffer, ...
        if name == "_stream":  # not set yet (a copy being made): no stream to ask
            raise AttributeError(name)
        return getattr(self._stream, name)

    def _lost(self, error: BaseException) -> None:
        if not is_gone(error):
            raise error
        self.gone = True
        to_null(self._stream)
        note_lost(self._name, error)


def to_null(stream: TextIO) -> None:
    """Point the stream's descriptor at ``/dev/null`` and drop what its buffer still holds,
    so that nothing written there fails again: not a write from C, not the interpreter's
    flush at exit, not a child process started from now on."""
    try:
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)
        stream.flush()  # what was buffered goes to /dev/null
    except (OSError, ValueError, AttributeError):
        pass  # no descriptor of its own (a StringIO): dropping the writes is enough


def note_lost(name: str, error: BaseException) -> None:
    """One line in the log (``train.log`` keeps it), where the lines that follow still go."""
    reason = f"{type(error).__name__}: {error}"
    log.warning(
        "%s is gone (%s): the run goes on; its log lines are still written to the log file "
        "in the run's folder",
        name,
        reason,
    )


def guard_console() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` in this process (each entry point calls it, so
    DDP's workers do too); idempotent. Log handlers made later (Hydra's) write through them."""
    for name in NAMES:
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, Console):
            setattr(sys, name, Console(stream, name))


def stops_in_one_line() -> None:
    """A stop signal besides Ctrl-C (``stop_signals``: SIGTERM, a closed terminal's SIGHUP, ...)
    that comes before the run's own handling holds it (the entry point's imports and checks,
    Hydra's start, a sweep between its jobs) had ended the process without a word. It still
    ends it, by the signal itself, after one line: said by a run's first process only (torchrun
    stops the others when one is refused), and not after an ``error:`` line said the ending."""
    from multigpu.config.launch import Signal, launched_rank, stop_signals

    def said_and_ended(signum: int, frame: object) -> None:
        signal.signal(signum, signal.SIG_DFL)
        first = launched_rank(os.environ) == "0"  # as the record's writer decides
        if first and not getattr(sys.stderr, "said_an_error", False):
            with contextlib.suppress(OSError):  # stderr gone (closed, | head): the status says it
                os.write(2, f"error: interrupted by {Signal(signum).name}\n".encode())
        os.kill(os.getpid(), signum)

    for signum in stop_signals(os.environ):
        if signal.getsignal(signum) == signal.SIG_DFL:
            signal.signal(signum, said_and_ended)


@contextlib.contextmanager
def one_line_on_ctrl_c() -> Iterator[None]:
    """Ctrl-C anywhere in the entry point (its checks and Hydra's own work included) ends in
    one line (here, torch-free, for the checks that run before the entry point's imports)."""
    try:
        yield
    except KeyboardInterrupt:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print("error: interrupted by SIGINT", file=sys.stderr, flush=True)
        sys.exit(128 + signal.SIGINT)
