"""Images per second over a fixed number of steps after warm-up, and the memory peaks."""

from __future__ import annotations

import argparse
import resource
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning import Callback, LightningModule, Trainer
from typing_extensions import override

from multigpu.models.phases import device_now
from multigpu.storage.atomic import write_json


def peak_memory_mb(device: torch.device | None = None) -> dict[str, float | None]:
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    gpu_mb = None
    if device is not None and device.type == "cuda":
        gpu_mb = torch.cuda.max_memory_allocated(device) / 2**20
    return {"peak_rss_mb": round(rss_mb, 1), "peak_gpu_mb": gpu_mb and round(gpu_mb, 1)}


def timed_run_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every stand-alone timed configuration takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--data-source", default=None)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", required=True)
    return parser


def write_result(path: str | Path, steps: int, batch: int, seconds: float, device) -> None:
    """What every timed configuration reports, as ``StepTimer`` writes it."""
    result = {"timed_steps": steps, "batch": batch, "seconds": seconds}
    result["images_per_s"] = steps * batch / seconds
    result.update(peak_memory_mb(device))
    write_json(path, result)


def time_steps(step: Callable[[int], None], args: argparse.Namespace, device) -> None:
    """Run ``step(i)`` for ``args.warmup`` untimed then ``args.steps`` timed steps, and write
    the result to ``args.out``: the loop every stand-alone configuration shares."""
    start = 0.0
    for i in range(args.warmup + args.steps):
        step(i)
        if i + 1 == args.warmup:
            start = device_now(device)
    write_result(args.out, args.steps, args.batch, device_now(device) - start, device)


class StepTimer(Callback):
    """Clock starts when step ``warmup`` ends and stops when the run's last step ends; rank 0
    writes ``{images_per_s, timed_steps, batch, seconds, peak_rss_mb, peak_gpu_mb}`` to
    ``path``.

    The clock is read (on CUDA, once the device has done its queued work) only at those two
    steps, as the plain loop's is: a read at every step would make the host wait for the
    device at every step, and time a slower loop than the one users run."""

    def __init__(self, path: str, warmup: int, global_batch: int):
        self.path = Path(path)
        self.warmup = warmup
        self.global_batch = global_batch
        self._start: float | None = None
        self._steps = 0
        self._end = 0.0

    @override
    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args) -> None:
        step = trainer.global_step
        if step == self.warmup:
            self._start = device_now(pl_module.device)
        elif step > self.warmup and step == trainer.max_steps:
            self._stop(trainer, pl_module)

    def _stop(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._steps, self._end = trainer.global_step - self.warmup, device_now(pl_module.device)

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._start is not None and not self._steps and trainer.global_step > self.warmup:
            self._stop(trainer, pl_module)  # ended before max_steps: the epoch's end counts
        if not trainer.is_global_zero:
            return
        result: dict[str, Any] = {"timed_steps": self._steps, "batch": self.global_batch}
        if self._start is not None and self._steps:
            seconds = self._end - self._start
            result.update(seconds=seconds, images_per_s=self._steps * self.global_batch / seconds)
        result.update(peak_memory_mb(trainer.strategy.root_device))
        write_json(self.path, result)
