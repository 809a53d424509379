"""Ctrl-C and every other signal that stops a run, outside Lightning's own handling.

Before training (data preparation, building the network) SIGTERM would kill the run without a
word, leaving its record ``running`` and a half-written file: the run's ``Ending`` makes it
raise ``Interrupted`` there, so the run records how it ended and removes the file it was
writing; while Lightning trains, its own handler (which calls this one too) stops after the
current step. ``eval.py`` stops the same way (``sigterm_interrupts``). Once training is over,
the run has completed and its last checkpoint is written, so a signal during what follows
(drawing the test figures) skips that work, says so, and leaves the run completed.

SIGHUP, which a closed terminal sends the jobs it started, SIGQUIT, a CPU-time limit's SIGXCPU,
SIGALRM, SIGUSR1/2 outside SLURM and every other signal whose default ends a process
(``multigpu.config.launch.stop_signals``) are stops like
SIGTERM (their default would end the process unrecorded): before and after training the same
way; while Lightning trains, handed to Lightning's SIGTERM handling, so that the run stops after its
current step, and named by ``stop_signal``.

A run ends for the *first* signal that stops it (``Ending``): Ctrl-C then ``kill`` (SIGINT then
SIGTERM) is recorded ``interrupted by SIGINT`` and exits 130, however close the two come;
every later one is ignored until the process has exited, so that the record and the exit status
always name the same signal (a SIGTERM after the record was written had ended the process
with -15, its record saying SIGINT). SIGKILL still ends a run that must end at once.

Where the main thread waits inside C (DDP's rendezvous, up to ``strategy.timeout_s``), no Python
handler runs until the wait ends: ``answered_while_blocked`` answers a stop signal there."""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from multigpu.config.errors import Interrupted
from multigpu.config.launch import Signal, stop_signals
from multigpu.storage.outcome import outcome_of


class _Skip(Exception):
    pass


def after_training_notice(signal_name: str, skipped: str | None) -> str:
    """The one line for a stop signal after the last epoch (``skipped``: the work it cut)."""
    cut = f"skipped {skipped}; " if skipped else ""
    return (
        f"warning: {signal_name} after the last epoch: {cut}the run completed and its "
        "checkpoint is written"
    )


def stop_signal(default: Signal) -> Signal:
    """The signal that Lightning's SIGTERM handling stopped for: the run's first stop signal
    (a SIGHUP or SIGUSR1/2 handed to it by ``Ending``), or ``default`` (SIGTERM)."""
    return run_stop_signal() or default


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """``Ending``'s handling for a block that is not a training run (``eval.py``): Ctrl-C and
    every signal that would end the process (``multigpu.config.launch.stop_signals``: SIGTERM,
    SIGHUP, and SIGUSR1/2 outside SLURM) stop it, ``Interrupted`` with 128 + the signal's
    number (Ctrl-C: ``KeyboardInterrupt``), or handed to Lightning's SIGTERM handling while
    Lightning runs; the first is the ending. The handlers before it are back once the block
    has ended, however it ended: its caller says how, in one line."""
    with one_ending(until_exit=False) as ending:
        if ending is not None:
            ending.armed = True
        yield


@contextmanager
def skipped_on_signal(what: str) -> Iterator[None]:
    """Run the block; Ctrl-C or SIGTERM during it skips the rest of it, with one line."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    came: list[str] = []

    def skip(signum: int, frame: object) -> None:
        note_stop_signal(signum)  # the run's ending: a sweep stops after this job
        came.append(Signal(signum).name)
        raise _Skip(came[0])

    def unraisable(unraisable: Any) -> None:
        """A ``_Skip`` raised inside a finalizer (``__del__``), where Python only prints it:
        the block goes on to its end, and the signal is said once it has."""
        if not isinstance(unraisable.exc_value, _Skip):
            hook(unraisable)

    previous = {s: signal.signal(s, skip) for s in (signal.SIGINT, *stop_signals(os.environ))}
    hook, sys.unraisablehook = sys.unraisablehook, unraisable
    try:
        yield
    except _Skip as stopped:
        print(after_training_notice(str(stopped), what), file=sys.stderr, flush=True)
    else:
        if came:  # raised where it was swallowed: the block finished all the same
            print(after_training_notice(came[0], None), file=sys.stderr, flush=True)
    finally:
        sys.unraisablehook = hook
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def ended_until_exit() -> None:
    """The run has ended and its record says how: what is left of the process (its closing
    lines, the interpreter's exit) ignores stop signals, which would otherwise end it with
    128 + the signal while its record says ``completed``."""
    if threading.current_thread() is threading.main_thread():
        ignore_stop_signals()


def ignore_stop_signals(signums: tuple[Signal, ...] | None = None) -> None:
    """The OS ignores Ctrl-C and the stop signals (``signums``) from now on: the process's
    ending is decided, and a later signal would only change its exit status."""
    for signum in signums or (signal.SIGINT, *stop_signals(os.environ)):
        signal.signal(signum, signal.SIG_IGN)


@contextmanager
def signals_held() -> Iterator[None]:
    """A short block that must finish (Optuna told a trial's result: else the trial stays
    RUNNING in its database; a run taking its folders; ``sbatch`` submitting a sweep's jobs): a
    stop signal waits for its end, then acts as it would have, or as the handler the block set
    for it says. The programs the block runs have the signals blocked (a terminal's Ctrl-C
    reaches its whole process group: ``sbatch`` killed by it had taken jobs no one knew of)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        came.append(signum)

    signums = (signal.SIGINT, *stop_signals(os.environ))
    previous = {s: signal.signal(s, hold) for s in signums}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signums)  # inherited by what it starts
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one pending now comes to ``hold``
        for signum, handler in previous.items():
            if signal.getsignal(signum) is hold:  # not one the block set
                signal.signal(signum, handler)
        if came:
            signal.raise_signal(came[0])


class Ending:
    """The signal a run stops for: the first of Ctrl-C's SIGINT and the ``stop_signals``
    (SIGTERM, SIGHUP, SIGUSR1/2 outside SLURM) to come, noted by ``handle``, the handler of each
    while the run's process runs ``train``. A later one is ignored from then on, until the
    process has exited: the run already stops, its record names the first, and the process
    exits with 128 + the first's number. Before that, ``handle`` stops the run as each signal
    would: SIGINT raises ``KeyboardInterrupt`` (which Lightning answers by stopping after the
    current step); a stop signal raises ``Interrupted`` outside Lightning's training and is
    handed to Lightning's SIGTERM handling while it trains (``multigpu.callbacks.interrupts``);
    outside ``train``'s run (``armed`` false) it does what the handler before it did. While
    the run's ending is being recorded (``noted_only``) the first is noted, not raised."""

    def __init__(self, signums: tuple[Signal, ...]):
        self.first: Signal | None = None
        self.armed = False  # between the run's start and its end: stop it
        self.raising = True  # false while the run's ending is recorded (``noted_only``)
        self.signums = signums
        self.previous = {s: signal.getsignal(s) for s in signums}
        self.handler = self.handle  # one object: Lightning's handlers are told apart from it

    def install(self) -> None:
        for signum in self.signums:
            signal.signal(signum, self.handler)

    def note(self, signum: int) -> Signal:
        """The run's stop signal: ``signum`` if it is the first."""
        if self.first is None:
            self.first = Signal(signum)
        return self.first

    def handle(self, signum: int, frame: Any) -> None:
        if self.first is not None:
            return  # the run already stops for the first signal
        self.note(signum)
        if self.armed and not self.raising:
            return  # the run's ending is being recorded: the signal is its reason, read after
        if not self.armed:
            previous = self.previous[signum]
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:  # the signal's default: the process ends by it
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
            return
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        lightning = signal.getsignal(signal.SIGTERM)
        if lightning is self.handler or not callable(lightning):  # Lightning is not training
            raise Interrupted(f"interrupted by {Signal(signum).name}", 128 + signum)
        if signum != signal.SIGTERM:  # SIGTERM came through Lightning's handler, which stops
            lightning(signal.SIGTERM, frame)  # Lightning stops after the current step


@contextmanager
def noted_only(ending: Ending | None) -> Iterator[None]:
    """A block in which the run's first stop signal is noted, not raised: where the run's
    ending is being worked out and recorded, an exception raised from a handler would cut the
    record's write short (the record left ``running``). Read it after (``run_stop_signal``).
    Torch's loader raises from SIGCHLD too, when a worker has died (a signal to the process
    group ends them with the run): that handler is held off for the block."""
    if ending is None:
        yield
        return
    before, ending.raising = ending.raising, False
    loader = signal.getsignal(signal.SIGCHLD)
    held = callable(loader) and threading.current_thread() is threading.main_thread()
    if held:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the default: nothing is raised
    try:
        yield
    finally:
        ending.raising = before
        if held:
            signal.signal(signal.SIGCHLD, loader)


def stop_signal_within(seconds: float) -> Signal | None:
    """The run's stop signal, waiting up to ``seconds`` for one to come (noted, not raised): a
    signal to the process group may end a loader worker, and the pipe it leaves, a moment
    before this process's own handler runs."""
    if _ending is None or not _ending.armed:  # no handler of the run's notes one
        return run_stop_signal()
    deadline = time.monotonic() + seconds
    with noted_only(_ending):
        while run_stop_signal() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # a handler runs between two of Python's instructions
    return run_stop_signal()


_ending: Ending | None = None  # the run's, while train runs (and after it, once stopped)
_deferred: list[Signal] = []  # a stop signal kept for the run being set up


# How long a stop signal may wait for its Python handler before the blocked wait is answered
# for it: the handler runs at once wherever the main thread runs Python.
BLOCKED_GRACE_S = 1.0


@contextmanager
def answered_while_blocked(answer: Callable[[Signal], Any]) -> Iterator[None]:
    """Run the block, whose main thread may wait inside C (a rendezvous) where no Python
    handler runs; a stop signal whose handler has not run within ``BLOCKED_GRACE_S`` is
    ``answer``ed from a thread (which must end the process). Python's own C handler writes each
    signal's number to the wakeup file this thread reads."""
    if threading.current_thread() is not threading.main_thread():
        yield  # the wakeup file can only be set from the main thread
        return
    stops = {int(s) for s in (signal.SIGINT, *stop_signals(os.environ))}
    read, write = os.pipe()
    os.set_blocking(write, False)
    done, previous = threading.Event(), -1
    poll = select.poll()  # select.select refuses a file number above 1023
    poll.register(read, select.POLLIN)

    def watch() -> None:
        while not done.is_set():
            if not poll.poll(100):
                continue
            numbers = os.read(read, 64)
            if previous != -1:  # whoever read the wakeup file before (asyncio) still gets them
                with contextlib.suppress(OSError):
                    os.write(previous, numbers)
            came = [n for n in numbers if n in stops]
            if came and not done.wait(BLOCKED_GRACE_S):  # still inside the block: blocked
                answer(Signal(run_stop_signal() or came[0]))

    watcher = threading.Thread(target=watch, name="stop-while-blocked", daemon=True)
    try:
        previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        watcher.start()
        yield
    finally:
        done.set()
        signal.set_wakeup_fd(previous)
        if watcher.is_alive():
            watcher.join()
        os.close(read)
        os.close(write)


def defer_stop(signum: int) -> None:
    """Keep a stop signal that came while the next run was being set up (a sweep's job whose
    folder Hydra has made, before ``train`` runs): that run's ``Ending`` takes it as its first
    signal, so that the run records itself ``interrupted``, with its settings, as it starts.
    Only the first is kept."""
    if not _deferred:
        _deferred.append(Signal(signum))


def deferred_stop() -> Signal | None:
    """The stop signal kept for the run being set up, if one came."""
    return _deferred[0] if _deferred else None


def run_stop_signal() -> Signal | None:
    """The signal the run stops for (the first), if one came."""
    return _ending.first if _ending is not None else None


def note_stop_signal(signum: int) -> Signal:
    """Note a stop signal found another way (the data loader's workers ended by one); returns
    the run's (the first)."""
    return _ending.note(signum) if _ending is not None else Signal(signum)


def by_first_signal(error: BaseException, first: Signal | None) -> BaseException:
    """The exception a block stopped by a signal ends with: ``first``'s (the first stop signal
    to come). The signal's ``Interrupted`` can change on its way out: OmegaConf re-raises an
    exception raised inside it (a signal while Hydra instantiates a part) as a new one of its
    type, with the node's key in its message and the default exit status, 130 for SIGTERM's
    143, or as an error of its own (``InterpolationResolutionError``) caused by it, and a
    check may take it for a refusal. Any other error is ``error`` itself."""
    if first is None:
        return error
    chain, seen = [], error
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    stopped = [e for e in chain if outcome_of(e).status == "interrupted"]
    if not stopped or (stopped[0] is error and outcome_of(error).exit_code == 128 + first):
        return error
    return Interrupted(f"interrupted by {first.name}", 128 + first)


def ignored_until_exit(signums: tuple[Signal, ...], ending: Ending | None = None) -> None:
    """At exit, after the run (or ``ending``'s block) stopped for a signal: Python puts the
    default action back for a signal it handles while it finalizes, so a later one would still
    end the process by it (SIGTERM: status -15, the record saying SIGINT); the OS ignores them
    instead."""
    stopped = ending or _ending
    if stopped is not None and stopped.first is not None:
        ignore_stop_signals(signums)


@contextmanager
def one_ending(until_exit: bool = True) -> Iterator[Ending | None]:
    """The run's ``Ending`` for the block, whose first signal is one kept for the run while it
    was set up (``defer_stop``), if any. Once a signal has stopped the run (the block ends by
    its exception), its handler stays (every later signal ignored) until the process exits,
    finalization included. Otherwise the handlers before it return, also after a signal that
    only skipped the work after the last epoch: the run completed, and a sweep's next jobs and
    its report answer the next signal as usual. ``until_exit`` false (``sigterm_interrupts``):
    the handlers before it return however the block ends, and after a stop, later signals are
    ignored from the interpreter's exit on."""
    global _ending
    if threading.current_thread() is not threading.main_thread():
        yield None  # signal handlers can only be set from the main thread
        return
    ending = Ending((signal.SIGINT, *stop_signals(os.environ)))
    ending.install()
    if _deferred:  # came while the run was being set up (until its handler was set): its first
        ending.note(_deferred[0])
    _ending = ending
    stopped = False
    try:
        yield ending
    except BaseException:
        stopped = ending.first is not None
        raise
    finally:
        ending.armed = False
        _deferred.clear()  # taken by this run (also one deferred while its handler was set)
        if stopped:
            atexit.register(ignored_until_exit, ending.signums, ending)
        if not (stopped and until_exit):
            _ending = None
            for signum, handler in ending.previous.items():
                signal.signal(signum, handler)
