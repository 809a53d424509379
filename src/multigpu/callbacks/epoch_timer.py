"""Training time and throughput per epoch, evaluation excluded (as d2l's timer measures), and
compilation too: a compiled network's compile time is its own figure (``time/compile_s``)."""

from __future__ import annotations

import logging

import torch
from pytorch_lightning import Callback, LightningModule, Trainer
from pytorch_lightning.trainer.states import TrainerFn
from typing_extensions import override

from multigpu.models.compiled import compile_counts, compile_seconds
from multigpu.models.phases import device_now

logger = logging.getLogger(__name__)


class EpochTimer(Callback):
    """Logs ``time/epoch_s`` and ``throughput/samples_per_s`` (global samples, all processes),
    and on CUDA ``memory/peak_gpu_mb``.

    The clock pauses while the test set is evaluated inside the epoch. The seconds a compiled
    network spent compiling in the epoch (dynamo's own account) are taken out of ``epoch_s``
    and logged as ``time/compile_s``: the epochs time the training, the record the compiling.
    The ``compile_s`` of the first epoch the run trains also holds the compiled step's warm-up
    before it (``ImageClassifier.warmup_s``), which no epoch's clock saw.
    """

    def __init__(self) -> None:
        self.epoch_s: list[float] = []
        self.samples_per_s: list[float] = []
        self._elapsed = 0.0
        self._started: float | None = None
        self._samples = 0
        self._compiled_before = 0.0

    def _resume(self, trainer: Trainer) -> None:
        self._started = device_now(trainer.strategy.root_device)

    def _pause(self, trainer: Trainer) -> None:
        if self._started is not None:
            self._elapsed += device_now(trainer.strategy.root_device) - self._started
            self._started = None

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._elapsed, self._samples = 0.0, 0
        if compiles(pl_module):
            self._compiled_before = compile_seconds()
        self._resume(trainer)

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._samples += len(batch[-1]) * trainer.world_size

    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
            self._pause(trainer)

    @override
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
            self._resume(trainer)

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._pause(trainer)
        if self._samples == 0:
            return
        if compiles(pl_module):
            compiling = compile_seconds() - self._compiled_before
            self._elapsed = max(self._elapsed - compiling, 1e-9)
            warmup_s, pl_module.warmup_s = getattr(pl_module, "warmup_s", 0.0), 0.0
            pl_module.log("time/compile_s", compiling + warmup_s, on_epoch=True, sync_dist=True)
            if not self.epoch_s and trainer.is_global_zero:  # the first epoch this run trains
                counts = compile_counts()
                logger.info("compiled%s in %.1f s: %d graph(s), %d graph break(s), recompile "
                            "limit hit %d time(s)", " and warmed up" if warmup_s else "",
                            compiling + warmup_s, counts["graphs"], counts["graph_breaks"],
                            counts["recompile_limit_hits"])  # fmt: skip
        rate = self._samples / self._elapsed
        self.epoch_s.append(self._elapsed)
        self.samples_per_s.append(rate)
        # Under DDP: the mean over the processes (each counts the global samples).
        pl_module.log("time/epoch_s", self._elapsed, on_epoch=True, sync_dist=True)
        pl_module.log("throughput/samples_per_s", rate, on_epoch=True, sync_dist=True)
        device = trainer.strategy.root_device
        if device.type == "cuda":  # the most any process's tensors have held so far
            peak = torch.cuda.max_memory_allocated(device) / 2**20
            log = dict(on_epoch=True, sync_dist=True, reduce_fx="max")
            pl_module.log("memory/peak_gpu_mb", peak, **log)


def compiles(module: LightningModule) -> bool:
    return getattr(module, "compile_options", None) is not None
