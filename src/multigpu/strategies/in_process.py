"""What ``dp`` and ``scatter_allreduce`` share: one process, several devices, a root device.

Lightning 2.x has no single-process multi-device strategy any more. This one reports a world
of one process (so no DistributedSampler is injected and reductions are identities), keeps the
LightningModule unwrapped on the root device (so checkpoints keep their plain ``net.*`` keys),
and lets a subclass run the network across devices for the training step only: loss, metrics
and logging run once, on the root, on the gathered full-batch outputs.
"""

from __future__ import annotations

from typing import Any

import torch
from pytorch_lightning.strategies import ParallelStrategy
from torch import Tensor


class InProcessStrategy(ParallelStrategy):
    """Base for strategies that drive ``parallel_devices`` from a single process."""

    def __init__(self, parallel_devices: list[torch.device], **kwargs: Any):
        super().__init__(parallel_devices=parallel_devices, **kwargs)

    # One process: rank 0 of a world of 1, whatever the number of devices.
    @property
    def root_device(self) -> torch.device:
        return self.parallel_devices[0]

    @property
    def global_rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def node_rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    @property
    def is_distributed(self) -> bool:
        return False

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        return {"num_replicas": 1, "rank": 0}

    def model_to_device(self) -> None:
        self.model.to(self.root_device)

    def reduce(self, tensor: Any, *args: Any, **kwargs: Any) -> Any:
        return tensor

    def barrier(self, *args: Any, **kwargs: Any) -> None:
        pass

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return obj

    def all_gather(self, tensor: Tensor, group: Any = None, sync_grads: bool = False) -> Tensor:
        return tensor.unsqueeze(0)

    def run_network(self, images: Tensor) -> Tensor:
        """Run the network over the devices; return full-batch outputs on the root device."""
        raise NotImplementedError

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """The module's own step, with its network run across the devices."""
        module = self.lightning_module
        with self.precision_plugin.train_step_context(), module.network_runner(self.run_network):
            return module.training_step(*args, **kwargs)
