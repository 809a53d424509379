"""A DDP process that rank 0 started itself (``start_method: popen``), stopped by a signal sent
to it alone, ends at once with 128 + the signal, writing nothing: rank 0 finds it gone at its
next collective, and the run is recorded interrupted by that signal (``PeerWatch``).

Lightning's SIGTERM handler broadcasts from inside the handler. In a process signalled alone
that broadcast waits for rank 0, while rank 0 waits for it in another collective (the
divergence check's), each until the collective timeout (``strategy.timeout_s``, 300 s), and
the run was then recorded failed.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from pytorch_lightning import Callback, LightningModule, Trainer
from typing_extensions import override

from multigpu.config.launch import started_by_rank_zero, stop_signals


class WorkerStopsAtOnce(Callback):
    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Once Lightning has set its handlers: this process's own, in a process rank 0
        started as a script of its own (``popen``; not ``spawn``'s, whose rank 0 has no
        watch to record how the run ended)."""
        if trainer.global_rank == 0 or not started_by_rank_zero():
            return
        if threading.current_thread() is threading.main_thread():
            for signum in stop_signals(os.environ):
                signal.signal(signum, ended_at_once)


def ended_at_once(signum: int, frame: Any) -> None:
    os._exit(128 + signum)  # rank 0 records how the run ended
