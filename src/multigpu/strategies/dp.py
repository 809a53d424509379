"""``strategy=dp``: ``torch.nn.DataParallel`` over the network, under Lightning 2.x.

Each training step DataParallel scatters the batch over the CUDA devices, replicates the
network, runs the replicas in parallel threads and gathers the outputs on the first device,
where the module computes loss, metrics and logs once. Evaluation runs on the first device.
On a machine without CUDA, DataParallel just calls the network (one device).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from typing_extensions import override

from multigpu import phases
from multigpu.phases import phase
from multigpu.strategies.in_process import InProcessStrategy


class DataParallelStrategy(InProcessStrategy):
    def __init__(self, parallel_devices: list[torch.device]):
        super().__init__(parallel_devices)
        self.data_parallel: nn.DataParallel | None = None

    @override
    def _setup_model(self, model: nn.Module) -> nn.Module:
        """Wrap only the network; the strategy holds the wrapper, so no ``module.`` keys."""
        ids = [d.index for d in self.parallel_devices] if self.root_device.type == "cuda" else None
        self.data_parallel = nn.DataParallel(model.net, device_ids=ids)
        return model

    @override
    def run_network(self, images: Tensor) -> Tensor:
        dp = self.data_parallel
        if phases.active() is None or dp is None or len(dp.device_ids) < 2:
            return dp(images)
        return self.timed_forward(dp, images)

    @staticmethod
    def timed_forward(dp: nn.DataParallel, images: Tensor) -> Tensor:
        """``DataParallel.forward``'s four calls, each a phase (``phases=true``, several
        GPUs), in its order; its per-call check that the network is on the first device is
        left out: the strategy put it there."""
        with phase("scatter"):
            inputs, kwargs = dp.scatter((images,), {}, dp.device_ids)
        with phase("replicate"):
            replicas = dp.replicate(dp.module, dp.device_ids[: len(inputs)])
        with phase("replicas"):
            outputs = dp.parallel_apply(replicas, inputs, kwargs)
        with phase("gather"):
            return dp.gather(outputs, dp.output_device)

    @override
    def teardown(self) -> None:
        self.data_parallel = None
        super().teardown()
