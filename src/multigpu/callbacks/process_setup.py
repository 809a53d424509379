"""What every process of a run sets for itself before it trains: torch's float32 matmul
precision (the config's ``float32_matmul_precision``), and, for the in-memory pipeline,
Lightning's hint to raise ``num_workers`` left out (the rest of what Lightning says on every
run and is left out is ``multigpu.run.quiet``'s).

A callback, because its ``setup`` runs in each process that trains, before the first batch and
before Lightning checks the loaders' workers: in a process started by ``train.py`` (one device,
DDP's re-launched ranks) as in one that DDP spawns, which starts with torch's defaults and
none of the run's code but what was pickled for it. The warnings filter is the run's alone:
put back at teardown.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from pytorch_lightning import Callback, LightningModule, Trainer
from typing_extensions import override

# Lightning's hint to raise num_workers, and the pipelines that have no workers to raise.
WORKERS_HINT = r"The '\w+' does not have many workers which may be a bottleneck"
WORKERLESS_PIPELINES = ("memory",)


def quiet_loader_workers(pipeline: str) -> None:
    """Leave out the hint to raise ``num_workers`` where ``pipeline`` has no workers: the memory
    pipeline cuts batches from a tensor in the training process. A filter added to the current
    ones, which the caller scopes to the run (``warnings.catch_warnings``)."""
    if pipeline in WORKERLESS_PIPELINES:
        warnings.filterwarnings("ignore", message=WORKERS_HINT, category=UserWarning)


class EveryProcess(Callback):
    def __init__(self, float32_matmul_precision: str, pipeline: str):
        self.float32_matmul_precision = float32_matmul_precision
        self.pipeline = pipeline
        self._filters: Any = None  # the warnings filters while the run trains; picklable

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        torch.set_float32_matmul_precision(self.float32_matmul_precision)
        if self._filters is None:
            self._filters = warnings.catch_warnings()
            self._filters.__enter__()
            quiet_loader_workers(self.pipeline)

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._filters is not None:
            self._filters.__exit__(None, None, None)
            self._filters = None
