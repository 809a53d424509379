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

from multigpu.models.phases import phase
from multigpu.strategies.in_process import InProcessStrategy


class PhasedDataParallel(nn.DataParallel):
    """``nn.DataParallel`` whose ``forward`` is torch's own; its four steps, the methods the
    class is extended through, are each a phase of the step (``phases=true``)."""

    @override
    def scatter(self, inputs, kwargs, device_ids):
        with phase("scatter"):
            return super().scatter(inputs, kwargs, device_ids)

    @override
    def replicate(self, module, device_ids):
        with phase("replicate"):
            return super().replicate(module, device_ids)

    @override
    def parallel_apply(self, replicas, inputs, kwargs):
        with phase("replicas"):
            return super().parallel_apply(replicas, inputs, kwargs)

    @override
    def gather(self, outputs, output_device):
        with phase("gather"):
            return super().gather(outputs, output_device)


class DataParallelStrategy(InProcessStrategy):
    def __init__(self, parallel_devices: list[torch.device]):
        super().__init__(parallel_devices)
        self.data_parallel: nn.DataParallel | None = None

    @override
    def _setup_model(self, model: nn.Module) -> nn.Module:
        """Wrap only the network; the strategy holds the wrapper, so no ``module.`` keys."""
        ids = [d.index for d in self.parallel_devices] if self.root_device.type == "cuda" else None
        self.data_parallel = PhasedDataParallel(model.net, device_ids=ids)
        return model

    @override
    def run_network(self, images: Tensor) -> Tensor:
        return self.data_parallel(images)

    @override
    def teardown(self) -> None:
        self.data_parallel = None
        super().teardown()
