"""What every process of a run sets for itself before it trains: torch's float32 matmul
precision (the config's ``float32_matmul_precision``), and, for the in-memory pipeline,
Lightning's hint to raise ``num_workers`` left out (the rest of what Lightning says on every
run and is left out is ``multigpu.run.quiet``'s); and in a process DDP spawned, which starts
with no logging configured, the run's log handlers (its ``train.log`` and the console), so
that the epochs' lines are written there as under every other strategy.

A callback, because its ``setup`` runs in each process that trains, before the first batch and
before Lightning checks the loaders' workers: in a process started by ``train.py`` (one device,
DDP's re-launched ranks) as in one that DDP spawns, which starts with torch's defaults and
none of the run's code but what was pickled for it. The warnings filter is the run's alone:
put back at teardown.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Callable
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


Handler = tuple[str, str, str | None]  # (file or stream, its path or stdout/stderr, format)


def log_handlers() -> list[Handler]:
    """This process's root log handlers, as a spawned process can make them again."""
    found = []
    for handler in logging.getLogger().handlers:
        fmt = handler.formatter._fmt if handler.formatter else None  # noqa: SLF001
        if isinstance(handler, logging.FileHandler):
            found.append(("file", handler.baseFilename, fmt))
        elif isinstance(handler, logging.StreamHandler) and handler.stream in (
            sys.stdout,
            sys.stderr,
        ):
            found.append(("stream", "stdout" if handler.stream is sys.stdout else "stderr", fmt))
    return found


def make_log_handlers(handlers: list[Handler], level: int) -> bool:
    """``handlers`` on the root logger of a process that has none (one DDP spawned); whether
    it made them."""
    root = logging.getLogger()
    if root.handlers or not handlers:
        return False
    for kind, where, fmt in handlers:
        made = (
            logging.FileHandler(where)
            if kind == "file"
            else logging.StreamHandler(getattr(sys, where))
        )
        made.setFormatter(logging.Formatter(fmt))
        root.addHandler(made)
    root.setLevel(level)
    return True


class EveryProcess(Callback):
    """``quiet``: the run's filters of what Lightning and torch say on every run
    (``multigpu.run.quiet.quiet``), installed where the handlers are made."""

    def __init__(
        self,
        float32_matmul_precision: str,
        pipeline: str,
        quiet: Callable[[], None] | None = None,
    ):
        self.float32_matmul_precision = float32_matmul_precision
        self.pipeline = pipeline
        self._filters: Any = None  # the warnings filters while the run trains; picklable
        self.handlers, self.level = log_handlers(), logging.getLogger().level  # the parent's
        self.quiet = quiet

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        torch.set_float32_matmul_precision(self.float32_matmul_precision)
        if make_log_handlers(self.handlers, self.level) and self.quiet is not None:
            self.quiet()
        if self._filters is None:
            self._filters = warnings.catch_warnings()
            self._filters.__enter__()
            quiet_loader_workers(self.pipeline)

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._filters is not None:
            self._filters.__exit__(None, None, None)
            self._filters = None
