"""Where a steady training step's time goes: the host or the device.

A step is as fast as the slower of two queues: the host issuing kernels one by one (Python,
Lightning, the dispatcher, launches) and the device running them. ``StepProfile`` times two
windows of steady steps back to back: the first plainly (the device drained at both ends, so
its time per step is the true one), the second under ``torch.profiler``, which names the
device's kernels and the host's ops with their time per step. A device busy for a small share
of the step's time waits on the host: fewer launches (one compiled graph, CUDA graphs) is what
speeds it up, not faster kernels. ``python -m multigpu.tools.bench.step_profile`` runs it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning import Callback, LightningModule, Trainer
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile
from typing_extensions import override

from multigpu.storage.atomic import write_json

NAME_CHARS = 90  # compiled kernels' names are long; enough to tell them apart


class StepProfile(Callback):
    """Times ``steps`` training steps from step ``first_step`` (counted from 0, as
    ``trainer.global_step``; at least 1), then profiles ``steps`` more; with ``stop``, training
    stops after them. Both windows run from one step's end to another's, so each holds whole
    steps (a batch's fetch included); they count batches (with gradient accumulation, several
    a step), and an evaluation or an epoch's end cuts them (``cut_by``).
    ``result()`` (also written to ``path`` when training ends, by rank 0): ``complete`` (both
    windows ran whole), ``ms_per_step`` (plain), ``profiled_ms_per_step``,
    ``device_busy_ms_per_step`` and ``device_busy_share`` (of the plain step; None on a CPU),
    ``kernels_per_step``, ``host_ops_per_step`` and the ``top`` device kernels and host ops by
    time per step; ``eager_ops_per_step`` and the ``top_eager`` by calls (``eager_ops``)."""

    def __init__(
        self,
        first_step: int = 30,
        steps: int = 20,
        path: str | None = None,
        stop: bool = False,
        top: int = 12,
    ):
        if min(first_step, steps, top) < 1:
            raise ValueError(f"StepProfile(first_step={first_step}, steps={steps}, top={top}): "
                             "each must be 1 or more")  # fmt: skip
        self.first_step, self.steps, self.stop, self.top = first_step, steps, stop, top
        self.path = Path(path) if path else None
        self.window = "before"  # before, timed, profiled, done; cut: training ended inside one
        self.cut_by: str | None = None  # what ended a window early
        self.counted = 0
        self.started = 0.0
        self.timed_s: float | None = None
        self.profiled_s: float | None = None
        self.profiler: profile | None = None
        self.summary: dict[str, Any] = {}

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:  # fmt: skip
        if self.window == "before":
            if trainer.global_step >= self.first_step:  # step first_step - 1 has just ended
                self.device = trainer.strategy.root_device
                self.window, self.counted, self.started = "timed", 0, self.drained()
            return
        if self.window not in ("timed", "profiled"):
            return
        self.counted += 1
        if self.counted < self.steps:
            return
        if self.window == "timed":
            self.timed_s = self.drained() - self.started
            self.profiler = profile(activities=activities(self.device), record_shapes=False)
            self.profiler.__enter__()
            self.window, self.counted, self.started = "profiled", 0, self.drained()
        else:
            self.profiled_s = self.drained() - self.started
            self.close("done")
            trainer.should_stop = trainer.should_stop or self.stop

    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """An evaluation (after an epoch, or inside one with ``val_check_interval``) is not a
        step's work: a window it falls in is cut before it runs."""
        self.cut(trainer, "an evaluation")

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.cut(trainer, "an epoch's end")

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.close("cut", "training's end")
        if self.path is not None and trainer.is_global_zero:
            write_json(self.path, self.result())

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception) -> None:
        self.close("cut", "an error")

    def cut(self, trainer: Trainer, by: str) -> None:
        """Ends an open window early; with ``stop``, training too (nothing more to measure)."""
        if self.window in ("timed", "profiled"):
            self.close("cut", by)
            trainer.should_stop = trainer.should_stop or self.stop

    def drained(self) -> float:
        """The clock once the device has run everything queued (the window's ends only)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def close(self, ending: str, by: str | None = None) -> None:
        """Ends the window open, if any: ``done`` when it ran whole, ``cut`` ``by`` what ended
        it early (what was profiled is still summarised, per step it held)."""
        if self.window not in ("timed", "profiled"):
            return
        self.cut_by = by
        if self.profiler is not None:
            profiler, self.profiler = self.profiler, None
            try:
                profiler.__exit__(None, None, None)
                steps = max(self.counted, 1)
                self.summary = summarise(profiler.key_averages(), steps, self.top)
                self.summary |= eager_ops(profiler.events(), steps, self.top)
            except Exception as err:  # noqa: BLE001 - the timed window's figures stand alone
                self.summary = {"summary_error": f"{type(err).__name__}: {err}"}
        self.window = ending

    def result(self) -> dict[str, Any]:
        def per_step(seconds: float | None) -> float | None:
            return None if seconds is None else 1000 * seconds / self.steps

        plain = per_step(self.timed_s)
        busy = self.summary.get("device_busy_ms_per_step")
        return {
            "first_step": self.first_step,
            "steps": self.steps,
            "complete": self.window == "done",
            "cut_by": self.cut_by,
            "device": str(getattr(self, "device", "?")),
            "ms_per_step": plain,
            "profiled_ms_per_step": per_step(self.profiled_s),
            "device_busy_ms_per_step": busy,
            "device_busy_share": busy / plain if busy is not None and plain else None,
            **{k: v for k, v in self.summary.items() if k != "device_busy_ms_per_step"},
        }


def activities(device: torch.device) -> list[ProfilerActivity]:
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])


def device_us(event: Any) -> float:
    """An event's own time on the device, in µs (torch renamed the field from ``cuda``)."""
    if hasattr(event, "self_device_time_total"):
        return event.self_device_time_total
    return event.self_cuda_time_total


def on_device(event: Any) -> bool:
    """Work the device did: not the host's ranges that torch draws on the device's timeline
    too (``record_function``'s ``Optimizer.step#SGD.step``, ``forward``), whose times hold the
    kernels already counted inside them."""
    return event.device_type != DeviceType.CPU and not getattr(event, "is_user_annotation", False)


def summarise(events: list, steps: int, top: int) -> dict[str, Any]:
    """Per step: the device's busy time and kernels (every device event: kernels, copies,
    fills, ``on_device``), the host's ops (top-level and nested alike), and the ``top`` costliest of
    each, from the profile's ``key_averages()``."""
    kernels = [e for e in events if on_device(e)]
    host_ops = [e for e in events if e.device_type == DeviceType.CPU]

    def row(event: Any, us: float) -> dict[str, Any]:
        per_step = {"ms_per_step": round(us / 1000 / steps, 4)}
        return {"name": event.key[:NAME_CHARS], **per_step, "calls_per_step": event.count / steps}

    def host_us(event: Any) -> float:
        return event.self_cpu_time_total

    busy_us = sum(device_us(e) for e in kernels)
    return {
        "device_busy_ms_per_step": busy_us / 1000 / steps if kernels else None,
        "kernels_per_step": sum(e.count for e in kernels) / steps,
        "host_ops_per_step": sum(e.count for e in host_ops) / steps,
        "top_device": [row(e, device_us(e)) for e in sorted(kernels, key=device_us)[::-1][:top]],
        "top_host": [row(e, host_us(e)) for e in sorted(host_ops, key=host_us)[::-1][:top]],
    }


# The range inductor's compiled graph (or its CUDA graph) runs in.
COMPILED_GRAPH = "CompiledFxGraph"
# The DataLoader's pinning thread, beside the step: page-locking host memory launches nothing.
PINNING = ("aten::pin_memory", "aten::_pin_memory", "aten::is_pinned")


def eager_ops(events: list, steps: int, top: int) -> dict[str, Any]:
    """The ops the host issues one by one outside compiled graphs, per step: every ``aten::``
    op not called by another one nor inside a compiled graph's call (nor the loader's pinning,
    ``PINNING``). On a GPU most are a kernel launch each, which a CUDA graph does not cover:
    what is left to move into the graph (the loss, the metrics, the optimizer) or to fuse.
    From the profile's ``events()``."""
    counts: dict[str, int] = {}
    for event in events:
        if event.device_type != DeviceType.CPU or not event.name.startswith("aten::"):
            continue
        if event.name in PINNING:
            continue
        parent, eager = event.cpu_parent, True
        while parent is not None and eager:
            eager = not parent.name.startswith("aten::") and COMPILED_GRAPH not in parent.name
            parent = parent.cpu_parent
        if eager:
            counts[event.name] = counts.get(event.name, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: -item[1])[:top]
    return {
        "eager_ops_per_step": sum(counts.values()) / steps,
        "top_eager": [{"name": name, "calls_per_step": n / steps} for name, n in ranked],
    }
