"""What ``dp`` and ``scatter_allreduce`` share: one process driving several devices.

Lightning 2.x has no single-process multi-device strategy any more. To Lightning this is its
own single-device strategy on the first device (the root): a world of one process, so no
DistributedSampler is injected and reductions are identities, and the LightningModule stays
unwrapped on the root, so checkpoints keep their plain ``net.*`` keys. The other devices
appear only in the training step, where a subclass runs the network across all of them and
hands the module full-batch outputs; loss, metrics and logging run once, on the root.
"""

from __future__ import annotations

from typing import Any

import torch
from pytorch_lightning.strategies import SingleDeviceStrategy
from torch import Tensor
from typing_extensions import override


class InProcessStrategy(SingleDeviceStrategy):
    def __init__(self, parallel_devices: list[torch.device]):
        super().__init__(device=parallel_devices[0])
        self.parallel_devices = list(parallel_devices)

    def run_network(self, images: Tensor) -> Tensor:
        """Run the network over the devices; return full-batch outputs on the root device."""
        raise NotImplementedError

    @override
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """The module's own step, handed this strategy's way of running the network."""
        with self.precision_plugin.train_step_context():
            return self.lightning_module.training_step(*args, **kwargs, network=self.run_network)
