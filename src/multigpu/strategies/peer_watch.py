"""Rank 0 of a DDP run it started itself (``start_method: popen``) watching the processes it
started, in place of Lightning's observer.

Lightning's observer SIGKILLs every process, rank 0 included, within 5 s of a peer exiting
with an error. Rank 0 is usually failing by then on its own (its next collective finds the
peer gone) and the kill lands while it records how the run ended, leaving ``metrics.json``
saying ``running``. Here rank 0 is given the collective timeout to end the run itself; only if
it is stuck elsewhere does the watch record the failure and kill every process.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from typing_extensions import override

from multigpu.config.launch import Signal, stop_signals
from multigpu.storage.outcome import Outcome

STOPPED_GRACE_S = 10.0  # for rank 0 to stop itself once a process of the run was stopped

log = logging.getLogger(__name__)


class PeerWatch(threading.Thread):
    """Polls the started processes; says which one failed first, and ends a stuck run."""

    def __init__(
        self,
        children: list[subprocess.Popen],
        first_rank: int,
        grace_s: float,
        give_up: Callable[[Outcome], Any] | None = None,
        poll_s: float = 0.5,
    ):
        super().__init__(daemon=True, name="peer-watch")  # ends with the main process
        self.children, self.first_rank = children, first_rank
        self.grace_s, self.give_up, self.poll_s = grace_s, give_up, poll_s
        self.failure: str | None = None  # the first failed process, as one line
        self.failed_code: int | None = None  # its exit status (-N: ended by signal N)
        self.stopped = threading.Event()  # rank 0 is ending the run itself

    @override
    def run(self) -> None:
        """Wait for a failure; give rank 0 the grace to end the run; else end it. A process
        ended by a stop signal stops the run: rank 0, which may be waiting where no signal
        reaches it (the processes' rendezvous), gets ``STOPPED_GRACE_S``, then the run ends
        ``interrupted`` by that signal, with its exit status."""
        if not self.wait_for_failure():
            return
        log.error("%s: ending the run", self.failure)
        stop = self.stop_signal((signal.SIGINT, *stop_signals(os.environ)))
        grace_s = self.grace_s if stop is None else min(self.grace_s, STOPPED_GRACE_S)
        if self.stopped.wait(grace_s):
            return
        if stop is None:
            reason = f"{self.failure}, and rank 0 did not stop within {grace_s:g} s"
            outcome = Outcome("failed", reason, 1)
        else:
            outcome = Outcome(
                "interrupted", f"interrupted by {stop.name} ({self.failure})", 128 + stop
            )
        log.error("%s: killing every process", outcome.reason)
        if self.give_up is not None:
            self.give_up(outcome)
        self.kill()
        if stop is None:
            os.kill(os.getpid(), signal.SIGKILL)
        os.write(2, f"error: {outcome.reason}\n".encode())
        os._exit(outcome.exit_code)  # the main thread is blocked where nothing unwinds it

    def wait_for_failure(self) -> bool:
        """Whether a started process fails before they all succeed or rank 0 stands the watch
        down."""
        while not self.stopped.wait(self.poll_s):
            if self.check():
                return True
            if all(child.returncode == 0 for child in self.children):
                return False
        return False

    def check(self) -> bool:
        """Whether a started process has exited with an error; the first one is kept."""
        for offset, child in enumerate(self.children):
            if self.failure is None and child.poll():
                rank = self.first_rank + offset
                self.failure = f"rank {rank} (pid {child.pid}) exited with code {child.returncode}"
                self.failed_code = child.returncode
        return self.failure is not None

    def failed_peer(self, wait_s: float) -> str | None:
        """The failed process, waiting up to ``wait_s`` for one (a peer's sockets close as it
        exits, a moment before it is seen to have exited); the watch then stands down."""
        deadline = time.monotonic() + wait_s
        while not self.check() and time.monotonic() < deadline:
            if all(child.poll() is not None for child in self.children):
                break
            time.sleep(0.05)
        self.stopped.set()
        return self.failure

    def stop_signal(self, stops: tuple[Signal, ...]) -> Signal | None:
        """The stop signal (one of ``stops``) that ended the failed process, if one did: a
        process of the run signalled alone stops the run, as it would have stopped itself."""
        code = self.failed_code
        for signum in stops:
            if code in (-signum, 128 + signum):
                return signum
        return None

    def kill(self) -> None:
        """SIGKILL every started process still running (one in a collective ignores SIGTERM)."""
        self.stopped.set()
        for child in self.children:
            if child.poll() is None:
                child.kill()
