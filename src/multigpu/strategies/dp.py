"""``strategy=dp``: ``torch.nn.DataParallel`` over the network, under Lightning 2.x.

Each training step DataParallel scatters the batch over the CUDA devices, replicates the
network, runs the replicas in parallel threads and gathers the outputs on the first device,
where the module computes loss, metrics and logs once. Evaluation runs on the first device.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from multigpu.errors import UserError
from multigpu.strategies.devices import check_available, device_ids, resolve_accelerator
from multigpu.strategies.in_process import InProcessStrategy


class DataParallelStrategy(InProcessStrategy):
    def __init__(self, parallel_devices: list[torch.device]):
        super().__init__(parallel_devices)
        self._data_parallel: nn.DataParallel | None = None

    def _setup_model(self, model: nn.Module) -> nn.Module:
        """Wrap only the network; the strategy holds the wrapper, so no ``module.`` keys."""
        ids = [d.index for d in self.parallel_devices] if self.root_device.type == "cuda" else None
        self._data_parallel = nn.DataParallel(model.net, device_ids=ids)
        return model

    def run_network(self, images: Tensor) -> Tensor:
        return self._data_parallel(images)

    def teardown(self) -> None:
        self._data_parallel = None
        super().teardown()


def data_parallel(accelerator: str, devices: int | str | Sequence[int]) -> DataParallelStrategy:
    kind = resolve_accelerator(accelerator)
    ids = device_ids(devices)
    if kind != "cuda" and len(ids) > 1:
        raise UserError(
            f"strategy=dp with trainer.devices={devices}: DataParallel needs CUDA devices and "
            "this run is on the CPU; use strategy=scatter_allreduce or strategy=ddp "
            "(trainer.accelerator=cpu) for several CPU devices, or trainer.devices=1"
        )
    check_available(kind, ids)
    if kind == "cuda":
        return DataParallelStrategy([torch.device("cuda", i) for i in ids])
    return DataParallelStrategy([torch.device("cpu")])
