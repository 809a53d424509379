"""``strategy=ddp`` / ``ddp_spawn``: Lightning's DistributedDataParallel, one process per device.

Gloo on CPU, NCCL on CUDA. Each process loads ``data.batch_size / world_size`` samples per step
from its own shard of the data; gradients are averaged across processes during backward.
``popen`` relaunches ``train.py`` for ranks > 0 (torchrun and SLURM set the ranks themselves);
``spawn`` forks workers from the running process, which keeps Hydra multirun from re-running
the sweep in every child.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta

from pytorch_lightning.strategies import DDPStrategy

from multigpu.cli import in_multirun
from multigpu.strategies.devices import check_available, device_ids, resolve_accelerator

log = logging.getLogger(__name__)


def ddp(
    accelerator: str,
    devices: int | str | Sequence[int],
    start_method: str = "popen",
    timeout_s: float = 1800,
    find_unused_parameters: bool = False,
    process_group_backend: str | None = None,
) -> DDPStrategy:
    kind = resolve_accelerator(accelerator)
    check_available(kind, device_ids(devices))
    if start_method == "popen" and in_multirun():
        # Relaunching train.py would re-run the whole sweep in every child.
        log.info("strategy=ddp in a multirun: starting the workers with spawn")
        start_method = "spawn"
    return DDPStrategy(
        start_method=start_method,
        timeout=timedelta(seconds=timeout_s),
        find_unused_parameters=find_unused_parameters,
        process_group_backend=process_group_backend,
    )
