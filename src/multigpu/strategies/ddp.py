"""``strategy=ddp`` / ``ddp_spawn``: Lightning's DistributedDataParallel, one process per device.

Gloo on CPU, NCCL on CUDA. Each process loads its share of the global batch from its own shard
of the data; gradients are averaged across processes during backward. Who starts the
processes is resolved with the run's settings (``multigpu.config.settings.launcher``).

A dying process must not leave the others waiting: a peer that exits closes its connections,
so the others fail at their next collective; one that hangs is given up on after
``timeout_s``; and when rank 0 fails for any reason it kills the processes it started. When it
started them itself, it names the one that failed first (``peer_watch``).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from datetime import timedelta
from typing import Any, NoReturn

import torch.distributed as dist
from lightning_fabric.plugins.environments import TorchElasticEnvironment
from pytorch_lightning.strategies import DDPStrategy
from typing_extensions import override

from multigpu.callbacks.interrupts import answered_while_blocked
from multigpu.callbacks.lightning_compat import (
    SubprocessScriptLauncher,
    get_sigkill_signal,
    launch_children,
)
from multigpu.config.launch import Signal, stop_signals
from multigpu.storage.outcome import Outcome
from multigpu.strategies.peer_watch import PeerWatch

# How long rank 0, failing in a collective, waits to see which peer has exited: its sockets
# close a moment before the process is seen to have ended.
PEER_EXIT_S = 3.0


class WatchedScriptLauncher(SubprocessScriptLauncher):
    """Lightning's launcher of one ``train.py`` per further device, with ``PeerWatch`` in place
    of its observer (which kills rank 0 while it records how the run ended)."""

    def __init__(self, *args: Any, grace_s: float, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.grace_s = grace_s
        self.give_up: Callable[[Outcome], Any] | None = None  # records how the run ended
        self.watch: PeerWatch | None = None  # rank 0's, once it has started the others

    @override
    def launch(self, function: Callable, *args: Any, trainer: Any = None, **kwargs: Any) -> Any:
        """Lightning's ``launch``, starting our watch instead of its observer."""
        return launch_children(self, lambda: function(*args, **kwargs), self.start_watch)

    def start_watch(self) -> None:
        """Watch the processes just started (they follow this node's first rank)."""
        first = self.cluster_environment.node_rank() * self.num_processes + 1
        self.watch = PeerWatch(self.procs, first, self.grace_s, self.give_up)
        self.watch.start()

    @override
    def kill(self, signum: Signal | int) -> None:
        """Signal the started processes; for the kill that ends the run, stand the watch down
        first (these exits are ours). A stop signal Lightning passes on leaves the watch up:
        rank 0 may then wait on the stopped processes in a collective, and the watch ends the
        run interrupted by that signal."""
        if self.watch is not None and signum == get_sigkill_signal():
            self.watch.stopped.set()
        super().kill(signum)


class BoundedDDPStrategy(DDPStrategy):
    """Lightning's DDP, with the collective timeout in seconds, a failure on rank 0 also ending
    the ranks it launched (Lightning does so for Ctrl-C only), and workers that torchrun
    restarts able to meet again."""

    def __init__(self, start_method: str = "popen", timeout_s: float = 300, **kwargs: Any):
        super().__init__(start_method=start_method, timeout=timedelta(seconds=timeout_s), **kwargs)
        self.timeout_s = timeout_s
        self.record_failure: Callable[[Outcome], Any] | None = None  # if rank 0 is stuck
        self.peer_failure: str | None = None  # the started process that failed first
        self.peer_signal: Signal | None = None  # the stop signal that ended it, if any
        self.resume_hint = ""  # how to go on, said by ``stopped_while_meeting``

    @override
    def _configure_launcher(self) -> None:
        """Lightning's, with our launcher for ``popen``: rank 0 gets the collective timeout to
        end the run itself once a peer has failed."""
        super()._configure_launcher()
        if isinstance(self._launcher, SubprocessScriptLauncher):
            launcher = WatchedScriptLauncher(
                self.cluster_environment, self.num_processes, self.num_nodes,
                grace_s=self.timeout_s,
            )  # fmt: skip
            launcher.give_up = self.record_failure
            self._launcher = launcher

    @override
    def setup_distributed(self) -> None:
        """The rendezvous (``meet``), where a stop signal is answered at once
        (``stopped_while_meeting``), not when the wait for the others times out."""
        with answered_while_blocked(self.stopped_while_meeting):
            self.meet()

    def meet(self) -> None:
        """After torchrun's elastic restart, the process group's keys go under a prefix of this
        attempt's own: torchrun's store still holds the addresses the failed attempt published
        (torch 2.14), and the restarted workers would dial those. Lightning then finds the group
        initialised and only records the ranks."""
        attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
        environment = self.cluster_environment
        if attempt and isinstance(environment, TorchElasticEnvironment):
            world_size = environment.world_size()
            store = dist.TCPStore(
                environment.main_address,
                environment.main_port,
                world_size,
                is_master=False,
                timeout=self._timeout,
            )
            dist.init_process_group(
                self._get_process_group_backend(),
                store=dist.PrefixStore(f"attempt-{attempt}/", store),
                rank=environment.global_rank(),
                world_size=world_size,
                timeout=self._timeout,
            )
        super().setup_distributed()

    def stopped_while_meeting(self, signum: Signal) -> NoReturn:
        """A stop signal while this process waits for the run's others at the rendezvous
        (where its handler cannot run until the wait times out): the processes it started are
        killed, the run is recorded interrupted, and this process ends, at once."""
        reason = f"interrupted by {signum.name} while waiting for the run's other processes"
        reason += f"; {self.resume_hint}" if self.resume_hint else ""
        try:
            if isinstance(self._launcher, SubprocessScriptLauncher):
                self._launcher.kill(get_sigkill_signal())
            if self.record_failure is not None:
                self.record_failure(Outcome("interrupted", reason, 128 + signum))
        finally:  # the process ends, also when its record cannot be written (a full disk)
            os.write(2, f"error: {reason}\n".encode())
            os._exit(128 + signum)

    @override
    def on_train_end(self) -> None:
        """The fit's last collective is behind rank 0: the watch stands down, so a process of
        the run stopped from now on (while rank 0 draws the test figures and writes the
        record) ends only itself, and the run that trained every epoch is completed."""
        super().on_train_end()
        watch = getattr(self.launcher, "watch", None)
        if watch is not None:
            watch.stopped.set()

    @override
    def on_exception(self, exception: BaseException) -> None:
        """On rank 0 that started the others: note which one failed first, when this error is
        what a collective raises after a peer has gone; then kill them all."""
        super().on_exception(exception)
        launcher = self.launcher
        if not isinstance(launcher, SubprocessScriptLauncher) or self.global_rank != 0:
            return
        watch = getattr(launcher, "watch", None)
        if watch is not None and isinstance(exception, RuntimeError):
            self.peer_failure = watch.failed_peer(wait_s=PEER_EXIT_S)
            self.peer_signal = watch.stop_signal((signal.SIGINT, *stop_signals(os.environ)))
        launcher.kill(get_sigkill_signal())
