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

The flat buffers are allocated once: each replica's parameters, buffers and gradients are views
of its own flat buffers, and so are the root's gradients, so a step allocates nothing for the
transfers and unpacks nothing on the replicas. On CUDA every copy is ``non_blocking`` and the
step reads nothing back to the host, so one GPU's kernels are queued while another's run.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from typing_extensions import override

from multigpu.callbacks.lightning_compat import strategy_backward
from multigpu.models.phases import phase
from multigpu.strategies.comm import (
    FlatBuffer,
    FlatBuffers,
    gather,
    reduce_add,
    scatter,
    split_sizes,
)
from multigpu.strategies.in_process import InProcessStrategy

log = logging.getLogger(__name__)


class ScatterAllreduceStrategy(InProcessStrategy):
    """``split_weights``: one share per device (devices of unequal speed), or None for an even
    split; ``trace_shapes``: log each replica's input and output sizes for the first steps."""

    def __init__(
        self,
        parallel_devices: list[torch.device],
        split_weights: Sequence[float] | None = None,
        trace_shapes: bool = False,
        trace_steps: int = 2,
    ):
        super().__init__(parallel_devices)
        self.split_weights = None if split_weights is None else [float(w) for w in split_weights]
        self.trace_shapes = trace_shapes
        self.trace_steps = trace_steps
        self.replicas: list[nn.Module] = []
        self._steps_traced = 0
        self._active: list[int] = []
        self._replica_states: list[FlatBuffers] = []
        self._grads: list[FlatBuffer] = []
        self._staging: list[Tensor | None] = []

    # Replicas ---------------------------------------------------------------------------------
    @override
    def _setup_model(self, model: nn.Module) -> nn.Module:
        """Replica 0 is the root network itself; the others are copies on their devices,
        prepared (memory format, compilation) as the module prepares its own, whose state and
        gradients live in flat buffers, as do the root's gradients."""
        root = model.net
        self.replicas = [root]
        for device in self.parallel_devices[1:]:
            replica = copy.deepcopy(root).to(device)  # a copy is never compiled: prepare it
            model.prepare_network(replica)
            self.replicas.append(replica)
        if len(self.replicas) == 1:
            return model
        self._root_state = FlatBuffers(_state(root))
        self._replica_states = []
        for replica in self.replicas[1:]:
            replica.requires_grad_(True)
            state = FlatBuffers(_state(replica))
            state.adopt(_state(replica))
            self._replica_states.append(state)
        self._grads = [FlatBuffer(list(r.parameters())) for r in self.replicas]
        for replica, grads in zip(self.replicas[1:], self._grads[1:], strict=True):
            grads.flat.zero_()
            for p, view in zip(replica.parameters(), grads.views, strict=True):
                p.grad = view
        self._staging = [
            None
            if g.flat.device == self.root_device
            else torch.empty_like(g.flat, device=self.root_device)
            for g in self._grads[1:]
        ]
        return model

    def sync_replicas(self) -> None:
        """Root parameters and BatchNorm buffers to every other replica: one copy per device
        (and dtype) straight into the tensors the replica computes with."""
        if self._replica_states:
            self._root_state.pack(_state(self.replicas[0]))
            for state in self._replica_states:
                state.copy_(self._root_state)

    @override
    def on_train_start(self) -> None:
        self.sync_replicas()  # weights restored from a checkpoint, or changed since setup

    # Forward: split, scatter, replicas, gather ------------------------------------------------
    @override
    def run_network(self, images: Tensor) -> Tensor:
        sizes = split_sizes(len(images), len(self.replicas), self.split_weights)
        self._active = [i for i, size in enumerate(sizes) if size]  # a short batch uses fewer
        with phase("scatter"):
            shards = scatter(
                images,
                [sizes[i] for i in self._active],
                [self.parallel_devices[i] for i in self._active],
            )
        with phase("replicas"):
            outputs = self.run_replicas(shards)
        with phase("gather"):
            gathered = gather(outputs, self.root_device)
        self._trace(shards, outputs, gathered)
        return gathered

    def run_replicas(self, shards: list[Tensor]) -> list[Tensor]:
        """Each active replica on its shard, one after the other: on CUDA the calls only queue
        kernels, so the devices compute at the same time."""
        training = self.replicas[0].training
        return [
            self.replicas[i].train(training)(shard)
            for i, shard in zip(self._active, shards, strict=True)
        ]

    def _trace(self, shards: list[Tensor], outputs: list[Tensor], gathered: Tensor) -> None:
        if not self.trace_shapes or self._steps_traced >= self.trace_steps:
            return
        self._steps_traced += 1
        for i, shard, out in zip(self._active, shards, outputs, strict=True):
            log.info(
                "replica %d on %s: input %s, output %s",
                i,
                shard.device,
                tuple(shard.shape),
                tuple(out.shape),
            )
        log.info("gathered on %s: %s", gathered.device, tuple(gathered.shape))

    # Backward: sum replica gradients into the root --------------------------------------------
    @override
    def backward(self, closure_loss: Tensor, optimizer: Optimizer | None, *args, **kwargs):
        """Lightning's backward with the replicas' gradients summed into the root before
        ``on_after_backward`` sees them (``lightning_compat.strategy_backward``)."""
        self._bind_root_grads()
        return strategy_backward(self, closure_loss, optimizer, self.timed_reduce, *args, **kwargs)

    def timed_reduce(self) -> None:
        with phase("reduce"):
            self.reduce_gradients()

    def _bind_root_grads(self) -> None:
        """Point the root's gradients at its flat buffer, so backward accumulates into it.
        ``zero_grad`` sets them to None each step; between accumulated batches they stay."""
        if not self._grads:
            return
        params, buffer = list(self.replicas[0].parameters()), self._grads[0]
        if all(p.grad is view for p, view in zip(params, buffer.views, strict=True)):
            return
        if all(p.grad is None for p in params):
            buffer.flat.zero_()
        else:
            buffer.pack([torch.zeros_like(p) if p.grad is None else p.grad for p in params])
        for p, view in zip(params, buffer.views, strict=True):
            p.grad = view

    def reduce_gradients(self) -> None:
        """Sum the active replicas' gradients into the root's, one flat transfer per device,
        and zero theirs for the next step."""
        others = [i for i in self._active if i > 0]
        if not others:
            return
        reduce_add(
            self._grads[0].flat,
            [self._grads[i].flat for i in others],
            [self._staging[i - 1] for i in others],
        )
        for i in others:
            self._grads[i].flat.zero_()

    # Step: update the root, broadcast to the replicas -----------------------------------------
    @override
    def optimizer_step(self, optimizer: Optimizer, closure: Any, model: Any = None, **kwargs: Any):
        result = super().optimizer_step(optimizer, closure, model, **kwargs)
        with phase("broadcast"):
            self.sync_replicas()
        return result

    @override
    def teardown(self) -> None:
        self.replicas, self._replica_states, self._grads, self._staging = [], [], [], []
        super().teardown()


def _state(net: nn.Module) -> list[Tensor]:
    """What a replica must share with the root: parameters and buffers, as the objects the
    network holds (so that adopting them into a flat buffer reaches the network)."""
    return list(net.parameters()) + list(net.buffers())
