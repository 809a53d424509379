"""``strategy=scatter_allreduce``: data parallelism by hand, as d2l's "from scratch" chapter.

Per step: split the batch over the devices, run each device's persistent replica on its shard,
gather the outputs on the root where the loss (the full-batch mean, so each shard's gradient is
weighted by its share) is computed once; backward reaches every replica; their gradients are
summed into the root's in one flat buffer per device, inside ``Strategy.backward`` so that
``on_after_backward``, clipping and mixed precision see the sum; the optimizer steps on the
root; the updated parameters and BatchNorm buffers go back to every replica, again one flat
buffer per device. Reduce-then-broadcast is an allreduce whose second half carries the updated
weights instead of the summed gradients: the same two transfers, one optimizer state, and
replicas that cannot drift.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from multigpu.errors import UserError
from multigpu.strategies.comm import (
    broadcast_coalesced,
    gather,
    reduce_add_coalesced,
    scatter,
    split_sizes,
    unflatten_into,
)
from multigpu.strategies.devices import check_available, device_ids, resolve_accelerator
from multigpu.strategies.in_process import InProcessStrategy

log = logging.getLogger(__name__)


def check_split_weights(weights: Sequence[float] | None, devices: int) -> list[float] | None:
    if weights is None:
        return None
    weights = list(weights)
    if len(weights) != devices:
        raise UserError(
            f"strategy.split_weights={weights} has {len(weights)} entries for {devices} devices: "
            f"give one weight per device, e.g. {[round(1 / devices, 2)] * devices}, or null"
        )
    if any(isinstance(w, bool) or not isinstance(w, (int, float)) or w < 0 for w in weights):
        raise UserError(f"strategy.split_weights={weights} must be numbers >= 0")
    if sum(weights) <= 0:
        raise UserError(f"strategy.split_weights={weights} sum to 0: give some device a share")
    return [float(w) for w in weights]


class ScatterAllreduceStrategy(InProcessStrategy):
    def __init__(
        self,
        parallel_devices: list[torch.device],
        split_weights: Sequence[float] | None = None,
        trace_shapes: bool = False,
        trace_steps: int = 2,
    ):
        super().__init__(parallel_devices)
        self.split_weights = check_split_weights(split_weights, len(parallel_devices))
        self.trace_shapes = trace_shapes
        self.trace_steps = trace_steps
        self.replicas: list[nn.Module] = []
        self._steps_traced = 0

    # Replicas ---------------------------------------------------------------------------------
    def _setup_model(self, model: nn.Module) -> nn.Module:
        """Replica 0 is the root network itself; the others are copies on their devices."""
        root = model.net
        self.replicas = [root] + [copy.deepcopy(root).to(d) for d in self.parallel_devices[1:]]
        for replica in self.replicas[1:]:
            replica.requires_grad_(True)
        return model

    def _replica_tensors(self, replica: nn.Module) -> list[Tensor]:
        return [p.data for p in replica.parameters()] + list(replica.buffers())

    def sync_replicas(self) -> None:
        """Root parameters and BatchNorm buffers to every other replica, one buffer each."""
        if len(self.replicas) > 1:
            broadcast_coalesced(
                self._replica_tensors(self.replicas[0]),
                [self._replica_tensors(r) for r in self.replicas[1:]],
            )

    def on_train_start(self) -> None:
        self.sync_replicas()  # weights restored from a checkpoint, or changed since setup

    # Forward: scatter, replicas, gather -------------------------------------------------------
    def run_network(self, images: Tensor) -> Tensor:
        sizes = split_sizes(len(images), len(self.replicas), self.split_weights)
        active = [i for i, size in enumerate(sizes) if size]
        shards = scatter(
            images, [sizes[i] for i in active], [self.parallel_devices[i] for i in active]
        )
        training = self.replicas[0].training
        outputs = []
        for i, shard in zip(active, shards, strict=True):
            outputs.append(self.replicas[i].train(training)(shard))
        gathered = gather(outputs, self.root_device)
        self._trace(active, shards, outputs, gathered)
        return gathered

    def _trace(self, active, shards, outputs, gathered) -> None:
        if not self.trace_shapes or self._steps_traced >= self.trace_steps:
            return
        self._steps_traced += 1
        for i, shard, out in zip(active, shards, outputs, strict=True):
            log.info(
                "replica %d on %s: input %s, output %s",
                i,
                shard.device,
                tuple(shard.shape),
                tuple(out.shape),
            )
        log.info("gathered on %s: %s", gathered.device, tuple(gathered.shape))

    # Backward: sum replica gradients into the root --------------------------------------------
    def backward(self, closure_loss: Tensor, optimizer: Optimizer | None, *args, **kwargs):
        """Lightning's backward with the gradient sum between the precision plugin's backward
        and its post-backward (which calls ``on_after_backward``)."""
        module = self.lightning_module
        self.pre_backward(closure_loss)
        closure_loss = self.precision_plugin.pre_backward(closure_loss, module)
        self.precision_plugin.backward(closure_loss, module, optimizer, *args, **kwargs)
        self.reduce_gradients()
        closure_loss = self.precision_plugin.post_backward(closure_loss, module)
        self.post_backward(closure_loss)
        return closure_loss

    def reduce_gradients(self) -> None:
        """Sum every replica's gradients into the root's, one flat buffer per device, and
        clear the replicas' gradients for the next step."""
        root_params = list(self.replicas[0].parameters())
        contributing = [
            r for r in self.replicas[1:] if any(p.grad is not None for p in r.parameters())
        ]
        if not contributing:
            return
        groups = [
            [p.grad if p.grad is not None else torch.zeros_like(p) for p in replica.parameters()]
            for replica in (self.replicas[0], *contributing)
        ]
        total = reduce_add_coalesced(groups, self.root_device)
        for p in root_params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        unflatten_into(total, [p.grad for p in root_params])
        for replica in contributing:
            replica.zero_grad(set_to_none=True)

    def optimizer_step(self, optimizer: Optimizer, closure: Any, model: Any = None, **kwargs: Any):
        result = super().optimizer_step(optimizer, closure, model, **kwargs)
        self.sync_replicas()
        return result

    def teardown(self) -> None:
        self.replicas = []
        super().teardown()


def scatter_allreduce(
    accelerator: str,
    devices: int | str | Sequence[int],
    split_weights: Sequence[float] | None = None,
    trace_shapes: bool = False,
) -> ScatterAllreduceStrategy:
    """``trainer.devices`` CUDA devices, or that many replicas on the CPU."""
    kind = resolve_accelerator(accelerator)
    ids = device_ids(devices)
    check_available(kind, ids)
    if kind == "cuda":
        parallel = [torch.device("cuda", i) for i in ids]
    else:
        parallel = [torch.device("cpu")] * len(ids)
    return ScatterAllreduceStrategy(parallel, split_weights, trace_shapes)
