"""The training loss's epoch mean as a torchmetrics metric: accumulated on the device every step,
logged once per epoch.

``self.log("train/loss", loss, on_epoch=True, batch_size=n)`` on every step computes the same
mean, but each call costs about 0.35 ms of Python on the development machine's CPU (most of it
moving Lightning's stored result to the device again), a third of a small step's whole
framework overhead. torchmetrics' ``MeanMetric`` checks every update for NaN, a read on the
host (a sync on a GPU), and with that check off (``nan_strategy="disable"``) it ignores the
weights (torchmetrics 1.9).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric


class SampleMean(Metric):
    """The mean over samples of per-batch mean values, each batch weighted by its size: what
    Lightning's epoch mean of a value logged with ``batch_size`` is. Summed across processes
    when computed; a NaN or infinity is kept (it is the divergence check's to stop)."""

    full_state_update = False
    total: Tensor
    samples: Tensor

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("total", torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("samples", torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, batch_mean: Tensor, batch_size: int) -> None:
        self.total += batch_mean.detach() * batch_size
        self.samples += batch_size

    def compute(self) -> Tensor:
        return self.total / self.samples
