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

from typing_extensions import override

log = logging.getLogger(__name__)


class PeerWatch(threading.Thread):
    """Polls the started processes; says which one failed first, and ends a stuck run."""

    def __init__(
        self,
        children: list[subprocess.Popen],
        first_rank: int,
        grace_s: float,
        give_up: Callable[[str], None] | None = None,
        poll_s: float = 0.5,
    ):
        super().__init__(daemon=True, name="peer-watch")  # ends with the main process
        self.children, self.first_rank = children, first_rank
        self.grace_s, self.give_up, self.poll_s = grace_s, give_up, poll_s
        self.failure: str | None = None  # the first failed process, as one line
        self.stopped = threading.Event()  # rank 0 is ending the run itself

    @override
    def run(self) -> None:
        """Wait for a failure; give rank 0 the grace to end the run; else end it."""
        if not self.wait_for_failure():
            return
        log.error("%s: ending the run", self.failure)
        if self.stopped.wait(self.grace_s):
            return
        reason = f"{self.failure}, and rank 0 did not stop within {self.grace_s:g} s"
        log.error("%s: killing every process", reason)
        if self.give_up is not None:
            self.give_up(reason)
        self.kill()
        os.kill(os.getpid(), signal.SIGKILL)

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

    def kill(self) -> None:
        """SIGKILL every started process still running (one in a collective ignores SIGTERM)."""
        self.stopped.set()
        for child in self.children:
            if child.poll() is None:
                child.kill()
