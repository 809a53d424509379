"""``phases=true``: every training step broken into its phases, per run in ``phases.json`` and
per epoch in TensorBoard as ``phase/<name>_ms``.

Lightning's hooks cut each step into ``loss`` (the training step outside the network: loss,
metrics, logging), ``backward``, ``other`` (between backward and the optimizer: clipping) and
``optimizer`` (its step); the module marks ``forward`` and the strategies their own phases
inside these (``multigpu.models.phases``). Under DDP a communication hook times each bucket's
allreduce: the part of it that backward waits for after its last gradient is ready is the
phase ``allreduce_wait``; the rest ran beside the backward computation
(``allreduce_overlap``, outside the step's sum).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning import Callback, LightningModule, Trainer
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel
from typing_extensions import override

from multigpu.models import phases
from multigpu.models.phases import DATA, PhaseClock, StepTimes, in_order, union_length
from multigpu.storage.atomic import write_json

SCHEMA = 1
WAIT, OVERLAP = "allreduce_wait", "allreduce_overlap"


class PhaseTimer(Callback):
    """``skip_steps``: the run's first steps (allocation, autotuning, compilation) are left
    out of the statistics, unless the run has no more; ``read_every``: steps between reads of
    the clock (on CUDA, the one point where the host waits for the device)."""

    def __init__(self, path: str | Path, skip_steps: int = 5, read_every: int = 50):
        self.path = Path(path)
        self.skip_steps = skip_steps
        self.read_every = read_every
        self.clock: PhaseClock | None = None
        self.run = PhaseStats()  # after the skipped steps
        self.every = PhaseStats()  # every step: what a run shorter than the skip reports
        self.epoch = PhaseStats()
        self.epochs: list[dict[str, Any]] = []  # each epoch's means, every step counted
        self._seen = 0
        self.threads = 0

    # The clock's life ------------------------------------------------------------------------
    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.clock = PhaseClock(trainer.strategy.root_device)
        self.threads = torch.get_num_threads()  # what the cost model's CPU check needs
        phases.activate(self.clock)
        time_allreduce(trainer.strategy.model, self.clock)

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        phases.activate(None)

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception) -> None:
        phases.activate(None)

    # The phases Lightning's hooks delimit ----------------------------------------------------
    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.epoch = PhaseStats()
        self.clock.resume()

    @override
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.clock is not None:  # evaluation inside an epoch is no step's data wait
            self.clock.resume()

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.clock.start_step("loss")

    @override
    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self.clock.exit("loss")
        self.clock.enter("backward")

    @override
    def on_after_backward(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.clock.exit("backward")

    @override
    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.clock.enter("optimizer")

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.clock.end_step()
        if self.clock.pending >= self.read_every:
            self._read()

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._read()
        means = {name: mean for name, (mean, _) in self.epoch.summary().items()}
        if trainer.is_global_zero:  # rank 0's own times: straight to the loggers, no collective
            scalars = {f"phase/{name}_ms": mean * 1000 for name, mean in means.items()}
            for logger in trainer.loggers:
                logger.log_metrics({**scalars, "epoch": trainer.current_epoch}, trainer.global_step)
        self.epochs.append(
            {
                "epoch": trainer.current_epoch + 1,
                "steps": self.epoch.steps,
                "phases_ms": {n: round(m * 1000, 4) for n, m in means.items() if n != OVERLAP},
                "beside_ms": {n: round(m * 1000, 4) for n, m in means.items() if n == OVERLAP},
            }
        )
        if trainer.is_global_zero:
            write_json(self.path, self.report())

    # Reading and writing ---------------------------------------------------------------------
    def _read(self) -> None:
        for step in self.clock.collect():
            self._seen += 1
            times, beside = split_allreduce(step)
            self.epoch.add(times, beside)
            self.every.add(times, beside)
            if self._seen > self.skip_steps:
                self.run.add(times, beside)

    def report(self) -> dict[str, Any]:
        def ms(stats: tuple[float, float]) -> dict[str, float]:
            return {"mean_ms": round(stats[0] * 1000, 4), "sd_ms": round(stats[1] * 1000, 4)}

        stats, skipped = (self.run, self.skip_steps) if self.run.steps else (self.every, 0)
        summary = stats.summary()
        step = stats.step_summary()
        return {
            "schema": SCHEMA,
            "clock": "CUDA events" if self.clock.cuda else "wall clock",
            "steps": stats.steps,
            "skipped_steps": skipped,
            "threads": self.threads,
            "step_ms": ms(step),
            "phases": {name: ms(stats) for name, stats in summary.items() if name != OVERLAP},
            "beside": {name: ms(stats) for name, stats in summary.items() if name == OVERLAP},
            "epochs": self.epochs,
        }


def split_allreduce(step: StepTimes) -> tuple[dict[str, float], dict[str, float]]:
    """The step's phases, with DDP's allreduce split out of backward: what backward waited
    for after the last bucket was ready (in the step) and what overlapped it (beside)."""
    times = step.phases()
    buckets = step.beside.get("allreduce")
    backward_end = step.end_of("backward")
    if not buckets or backward_end is None:
        return times, {}
    last_ready = max(start for start, _ in buckets)
    wait = min(max(backward_end - last_ready, 0.0), times.get("backward", 0.0))
    times["backward"] -= wait
    times[WAIT] = wait
    return times, {OVERLAP: max(union_length(buckets) - wait, 0.0)}


def time_allreduce(model: Any, clock: PhaseClock) -> None:
    """Under DDP, allreduce each bucket as DDP's default hook does, timing it."""
    if not isinstance(model, DistributedDataParallel):
        return

    def hook(process_group, bucket):  # unannotated: DDP checks annotations, here strings
        start = clock.marker()

        def done(future: Any) -> Any:
            clock.beside("allreduce", start, clock.marker())
            return future.value()

        return default_hooks.allreduce_hook(process_group, bucket).then(done)

    model.register_comm_hook(None, hook)


class PhaseStats:
    """Mean and standard deviation of each phase over steps (a phase a step lacks counts 0)."""

    def __init__(self) -> None:
        self.steps = 0
        self.sums: dict[str, list[float]] = {}  # name -> [sum, sum of squares]
        self.step_sums = [0.0, 0.0]

    def add(self, times: dict[str, float], beside: dict[str, float]) -> None:
        self.steps += 1
        for name, seconds in {**times, **beside}.items():
            sums = self.sums.setdefault(name, [0.0, 0.0])
            sums[0] += seconds
            sums[1] += seconds * seconds
        total = sum(seconds for name, seconds in times.items() if name != DATA)
        self.step_sums[0] += total
        self.step_sums[1] += total * total

    def summary(self) -> dict[str, tuple[float, float]]:
        """Phases in a step's order (``multigpu.models.phases.ORDER``)."""
        names = in_order(list(self.sums))
        return {name: _mean_sd(self.sums[name], self.steps) for name in names}

    def step_summary(self) -> tuple[float, float]:
        return _mean_sd(self.step_sums, self.steps)


def _mean_sd(sums: list[float], n: int) -> tuple[float, float]:
    if n == 0:
        return 0.0, 0.0
    mean = sums[0] / n
    variance = max(sums[1] / n - mean * mean, 0.0) * n / max(n - 1, 1)
    return mean, math.sqrt(variance)
