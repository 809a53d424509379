"""Counting the points where the host waits for the device, over a window of training steps.

A GPU runs ahead of the Python that feeds it only while nothing reads a result back: one
``.item()``, ``bool(tensor)``, ``.cpu()`` or data-dependent op (``nonzero``, ``unique``, a
boolean index) per step makes the host wait for every kernel queued so far, every step.

On CUDA the count is CUDA's own: under ``torch.cuda.set_sync_debug_mode("warn")`` every
synchronising call warns, and the warnings are counted (and kept from the console). On a CPU
nothing waits, so what is counted are the calls that *would* wait on a GPU, seen from two
sides: the Python-level reads (a ``TorchFunctionMode``: ``.item()``, ``.tolist()``, ``.cpu()``,
``.numpy()``, a tensor's truth value, its conversion to a number or to text,
the data-dependent functions), and, for reads that start in C++, the ops every such read
lowers to (a ``TorchDispatchMode``: ``aten._local_scalar_dense`` behind every scalar read,
``nonzero``, ``unique``, ``masked_select``, a boolean index). A read already counted on the
Python side is not counted again. On a CPU every tensor is on the host, so a read of a
tensor that would stay on the host on a GPU counts too, and a copy to the host that is not
asked for with ``.cpu()`` (``.to("cpu")``, ``copy_``) cannot be told from a move to the
training device, and is not counted. A compiled network runs differently under these modes:
count compiled runs on CUDA.

Each sync is named by where it was asked for (the first frame outside torch) and by the
Lightning hook it ran in. ``HostSyncCounter`` counts over a window of training steps;
``count_host_syncs`` is the context manager under it; ``python -m
multigpu.tools.bench.host_syncs`` counts a run's.
"""

from __future__ import annotations

import sys
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from pytorch_lightning import Callback, LightningModule, Trainer
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from typing_extensions import override

from multigpu.storage.atomic import write_json

# Python-level calls that read a tensor's values on the host, and the name a count gives them.
PYTHON_READS = {
    torch.Tensor.item: "item",
    torch.Tensor.tolist: "tolist",
    torch.Tensor.cpu: "cpu",
    torch.Tensor.numpy: "numpy",
    torch.Tensor.__array__: "numpy",
    torch.Tensor.__bool__: "bool",
    torch.Tensor.__int__: "int",
    torch.Tensor.__float__: "float",
    torch.Tensor.__index__: "index",
    torch.Tensor.__format__: "format",
    torch.Tensor.__repr__: "repr",
    torch.Tensor.nonzero: "nonzero",
    torch.Tensor.unique: "unique",
    torch.Tensor.masked_select: "masked_select",
    torch.nonzero: "nonzero",
    torch.unique: "unique",
    torch.unique_consecutive: "unique_consecutive",
    torch.masked_select: "masked_select",
    torch.bincount: "bincount",
}
# aten ops that read a scalar, or whose result's size depends on the data (the host waits to
# learn it), by overload packet name.
DEVICE_READS = {
    "_local_scalar_dense", "nonzero", "_unique2", "unique_dim", "unique_consecutive",
    "masked_select", "bincount",
}  # fmt: skip
# A count names the first frame outside these: the code that asked for the read.
LIBRARY_PARTS = ("/torch/", "/torchmetrics/", "/lightning_utilities/", "/warnings.py", __file__)
# Lightning's functions that call every hook (in pytorch_lightning/trainer/call.py).
HOOK_CALLERS = {
    "_call_callback_hooks", "_call_lightning_module_hook", "_call_strategy_hook",
    "_call_lightning_datamodule_hook",
}  # fmt: skip
CUDA_SYNC_WARNING = "called a synchronizing CUDA operation"


@dataclass
class SyncCount:
    """What a count found: how many, how it was counted, and where each was asked for."""

    method: str
    syncs: int = 0
    where: Counter = field(default_factory=Counter)

    def add(self, what: str) -> None:
        self.syncs += 1
        self.where[f"{what} at {origin(sys._getframe(1))}"] += 1


def origin(frame: FrameType | None) -> str:
    """``file:line (Hook)``: the first frame outside the libraries (``LIBRARY_PARTS``) and the
    innermost Lightning hook (callback, module or strategy) around it."""
    at = hook = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if at is None and not any(part in filename for part in LIBRARY_PARTS):
            at = f"{shorten(filename)}:{frame.f_lineno}"
        caller = frame.f_back
        if hook is None and caller is not None and caller.f_code.co_name in HOOK_CALLERS:
            owner = frame.f_locals.get("self")
            hook = f"{type(owner).__name__}." if owner is not None else ""
            hook += frame.f_code.co_name
        frame = caller
    return f"{at or '?'} ({hook or 'in no hook: the loop itself'})"


def shorten(filename: str) -> str:
    """From the package on: ``pytorch_lightning/loops/...``, ``multigpu/models/...``."""
    parts = Path(filename).parts
    for anchor in ("site-packages", "src"):
        if anchor in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(anchor) :])
    return filename


class PythonReads(TorchFunctionMode):
    """Counts the Python-level reads; ``depth`` is non-zero while one runs, so that the aten
    ops it lowers to are not counted again."""

    def __init__(self, count: SyncCount):
        super().__init__()
        self.count = count
        self.depth = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = PYTHON_READS.get(func)
        if name is None:
            return func(*args, **kwargs)
        self.count.add(name)
        self.depth += 1
        try:
            return func(*args, **kwargs)
        finally:
            self.depth -= 1


class DeviceReads(TorchDispatchMode):
    """Counts the aten ops behind a read (``DEVICE_READS``, a boolean index) that no counted
    Python call made."""

    def __init__(self, count: SyncCount, python: PythonReads):
        super().__init__()
        self.count, self.python = count, python

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.python.depth:
            name = func._overloadpacket.__name__
            if name in DEVICE_READS:
                self.count.add(name)
            elif name == "index" and boolean_index(args):
                self.count.add("boolean index")
        return func(*args, **(kwargs or {}))


def boolean_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 else None
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())


@contextmanager
def count_host_syncs(device: torch.device) -> Iterator[SyncCount]:
    """Counts, inside the ``with``, the host's waits for ``device``: CUDA's own count, or on a
    CPU the calls that would wait on a GPU."""
    if device.type == "cuda":
        with cuda_syncs() as count:
            yield count
        return
    count = SyncCount("python reads and aten reads (CPU)")
    python = PythonReads(count)
    with python, DeviceReads(count, python):
        yield count


@contextmanager
def cuda_syncs() -> Iterator[SyncCount]:
    """CUDA's sync debug mode; its warnings are counted, the others shown as before."""
    count = SyncCount("torch.cuda.set_sync_debug_mode('warn')")
    before = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings():  # puts back the filters and showwarning
        show = warnings.showwarning

        def counted(message, category, filename, lineno, file=None, line=None) -> None:
            if CUDA_SYNC_WARNING in str(message):
                count.add("sync")
            else:
                show(message, category, filename, lineno, file, line)

        warnings.filterwarnings("always", message=f".*{CUDA_SYNC_WARNING}")
        warnings.showwarning = counted
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield count
        finally:
            torch.cuda.set_sync_debug_mode(before)


class HostSyncCounter(Callback):
    """Counts host-device synchronisations from the start of training step ``first_step``
    (counted from 0, as ``trainer.global_step``) to the end of ``steps`` steps later, or of the
    epoch's last step when ``steps`` is None; with ``stop``, training stops there (a count
    needs no more). ``result()`` (also written to ``path`` when training ends, by rank 0) is
    ``{"steps", "syncs", "per_step", "method", "where"}``."""

    def __init__(
        self,
        first_step: int = 5,
        steps: int | None = 20,
        path: str | None = None,
        stop: bool = False,
    ):
        self.first_step, self.steps, self.stop = first_step, steps, stop
        self.path = Path(path) if path else None
        self.count: SyncCount | None = None
        self.counted_steps = 0
        self._window: AbstractContextManager[SyncCount] | None = None

    @override
    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.count is None and trainer.global_step == self.first_step:
            self._window = count_host_syncs(trainer.strategy.root_device)
            self.count = self._window.__enter__()

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:  # fmt: skip
        if self._window is None:
            return
        self.counted_steps += 1
        epoch_ends = batch_idx + 1 == trainer.num_training_batches
        if self.counted_steps == self.steps or (self.steps is None and epoch_ends):
            self.close()
            trainer.should_stop = trainer.should_stop or self.stop

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.close()
        if self.path is not None and trainer.is_global_zero:
            write_json(self.path, self.result())

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception) -> None:
        self.close()

    def close(self) -> None:
        if self._window is not None:
            window, self._window = self._window, None
            window.__exit__(None, None, None)

    def result(self) -> dict[str, Any]:
        count = self.count or SyncCount("none: training ended before the window opened")
        steps = self.counted_steps
        return {
            "steps": steps,
            "syncs": count.syncs,
            "per_step": round(count.syncs / steps, 4) if steps else None,
            "method": count.method,
            "where": dict(count.where.most_common()),
        }
