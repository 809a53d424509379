"""``strategy=ddp`` / ``ddp_spawn``: Lightning's DistributedDataParallel, one process per device.

Gloo on CPU, NCCL on CUDA. Each process loads its share of the global batch from its own shard
of the data; gradients are averaged across processes during backward. Who starts the
processes is resolved with the run's settings (``multigpu.settings.launcher``).

A dying process must not leave the others waiting: a peer that exits closes its connections,
so the others fail at their next collective; one that hangs is given up on after
``timeout_s``; and when rank 0 fails for any reason it kills the processes it started.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import torch.distributed as dist
from lightning_fabric.plugins.environments import TorchElasticEnvironment
from pytorch_lightning.strategies import DDPStrategy
from pytorch_lightning.strategies.launchers import _SubprocessScriptLauncher
from pytorch_lightning.trainer.connectors.signal_connector import _get_sigkill_signal
from typing_extensions import override


class BoundedDDPStrategy(DDPStrategy):
    """Lightning's DDP, with the collective timeout in seconds, a failure on rank 0 also ending
    the ranks it launched (Lightning does so for Ctrl-C only), and workers that torchrun
    restarts able to meet again."""

    def __init__(self, start_method: str = "popen", timeout_s: float = 300, **kwargs: Any):
        super().__init__(start_method=start_method, timeout=timedelta(seconds=timeout_s), **kwargs)

    @override
    def setup_distributed(self) -> None:
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

    @override
    def on_exception(self, exception: BaseException) -> None:
        super().on_exception(exception)
        if isinstance(self.launcher, _SubprocessScriptLauncher) and self.global_rank == 0:
            self.launcher.kill(_get_sigkill_signal())
