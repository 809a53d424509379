"""``strategy=ddp`` / ``ddp_spawn``: Lightning's DistributedDataParallel, one process per device.

Gloo on CPU, NCCL on CUDA. Each process loads ``data.batch_size / world_size`` samples per step
from its own shard of the data; gradients are averaged across processes during backward.
``popen`` relaunches ``train.py`` for ranks > 0 (torchrun and SLURM set the ranks themselves);
``spawn`` forks workers from the running process, which keeps Hydra multirun from re-running
the sweep in every child.

A dying process must not leave the others waiting: a peer that exits closes its connections,
so the others fail at their next collective; one that hangs is given up on after
``timeout_s``; and when rank 0 fails for any reason it kills the processes it started.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from datetime import timedelta

from pytorch_lightning.strategies import DDPStrategy
from pytorch_lightning.strategies.launchers import _SubprocessScriptLauncher
from pytorch_lightning.trainer.connectors.signal_connector import _get_sigkill_signal

from multigpu.cli import in_multirun
from multigpu.errors import UserError
from multigpu.strategies.devices import check_available, device_ids, resolve_accelerator

log = logging.getLogger(__name__)


class BoundedDDPStrategy(DDPStrategy):
    """Lightning's DDP, except that a failure on rank 0 also ends the ranks it launched
    (Lightning does so for Ctrl-C only)."""

    def on_exception(self, exception: BaseException) -> None:
        super().on_exception(exception)
        if isinstance(self.launcher, _SubprocessScriptLauncher) and self.global_rank == 0:
            self.launcher.kill(_get_sigkill_signal())


def check_cpu_processes(processes: int) -> None:
    cores = os.cpu_count() or 1
    if processes > cores:
        raise UserError(
            f"trainer.devices={processes} starts {processes} DDP processes but this machine has "
            f"{cores} CPU cores: use trainer.devices<={cores}, or a GPU machine"
        )


def ddp(
    accelerator: str,
    devices: int | str | Sequence[int],
    start_method: str = "popen",
    timeout_s: float = 300,
    find_unused_parameters: bool = False,
    process_group_backend: str | None = None,
) -> DDPStrategy:
    kind = resolve_accelerator(accelerator)
    ids = device_ids(devices)
    check_available(kind, ids)
    if kind == "cpu":
        check_cpu_processes(len(ids))
    if start_method == "popen" and in_multirun():
        # Relaunching train.py would re-run the whole sweep in every child.
        log.info("strategy=ddp in a multirun: starting the workers with spawn")
        start_method = "spawn"
    return BoundedDDPStrategy(
        start_method=start_method,
        timeout=timedelta(seconds=timeout_s),
        find_unused_parameters=find_unused_parameters,
        process_group_backend=process_group_backend,
    )
