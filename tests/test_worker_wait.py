"""The workers Lightning starts for a DDP run end before the run's command does: waited for at
exit (``subprocess.Popen`` under popen, ``multiprocessing`` processes under spawn, which have
no ``wait``), killed when stuck past the wait or when a stop signal comes meanwhile."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import threading
import time

from multigpu.run.fit import wait_for_workers


def workers(seconds: float) -> list:
    spawned = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(seconds,))
    spawned.start()
    return [subprocess.Popen(["sleep", str(seconds)]), spawned]


def ended(started: list) -> bool:
    popen, spawned = started
    spawned.join(5)
    return popen.wait(5) is not None and not spawned.is_alive()


def test_workers_that_end_are_waited_for():
    started = workers(0.5)
    began = time.monotonic()
    wait_for_workers(started, wait_s=30)
    assert time.monotonic() - began < 20 and ended(started)
    assert [started[0].returncode, started[1].exitcode] == [0, 0]  # not killed


def test_workers_stuck_past_the_wait_are_killed():
    started = workers(60)
    began = time.monotonic()
    wait_for_workers(started, wait_s=1)
    assert time.monotonic() - began < 10 and ended(started)
    assert [started[0].returncode, started[1].exitcode] == [-signal.SIGKILL] * 2


def test_a_stop_signal_while_waiting_kills_the_workers_and_raises_nothing():
    """Ctrl-C on a command that seems to hang at its end: no traceback from the exit hook, no
    worker left behind, and this process's handlers as they were."""
    before = signal.getsignal(signal.SIGINT)
    started = workers(60)
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    began = time.monotonic()
    wait_for_workers(started, wait_s=60)
    assert time.monotonic() - began < 10 and ended(started)
    assert signal.getsignal(signal.SIGINT) is before
