"""``metrics.json``, the run's record: its settings, one entry per finished epoch, and how it
ended. ``train()`` owns it; its keys are documented once, in the README (Outputs).

The file is the record: it is rewritten whenever the history changes (at the start, when a
checkpoint restores earlier epochs, after every epoch) and when the run ends, which then only
sets the status on what the file holds. That works whichever process trained: this one, or
spawned DDP workers whose history never comes back to this process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lightning_utilities.core.rank_zero import rank_zero_only

from multigpu.atomic import write_json
from multigpu.outcome import Outcome

SCHEMA = 3  # 3: epochs counted from 1; epoch_s and samples_per_s by ``speed``
# Where launchers put a process's rank, in the order Lightning reads them.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def is_rank_zero() -> bool:
    """This process's rank as Lightning knows it once it has set it (its strategies do), else
    as the launcher's environment says: torch-free, for the record written before training."""
    rank = getattr(rank_zero_only, "rank", None)
    if rank is None:
        rank = next((int(os.environ[k]) for k in RANK_VARIABLES if k in os.environ), 0)
    return rank == 0


def timed_epochs(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The epochs speed is measured over: all but the first, which also pays for warm-up
    (data loading starts, allocator, cuDNN autotuning), unless it is the only one."""
    timed = [h for h in history if h.get("epoch_s") and h.get("samples_per_s")]
    return timed[1:] if len(timed) > 1 else timed


def speed(history: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    """(seconds per epoch, samples per second) over ``timed_epochs``: total time over epochs,
    total samples over total time. One definition, so two runs compare the same way by either."""
    timed = timed_epochs(history)
    if not timed:
        return None, None
    seconds = sum(h["epoch_s"] for h in timed)
    samples = sum(h["samples_per_s"] * h["epoch_s"] for h in timed)
    return seconds / len(timed), samples / seconds


def upgrade(record: dict[str, Any]) -> dict[str, Any]:
    """A record of an earlier schema as this one reads it: epochs counted from 1 (schema 3)
    and speed by ``speed`` (before: medians of per-epoch values)."""
    if record.get("schema", SCHEMA) >= SCHEMA:
        return record
    history = upgrade_history(record.get("history") or [])
    epoch_s, samples_per_s = speed(history)
    best = record.get("best_epoch")
    return {
        **record,
        "history": history,
        "best_epoch": None if best is None else best + 1,
        "epoch_s": epoch_s,
        "samples_per_s": samples_per_s,
    }


def upgrade_history(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Histories start at the first epoch: one starting at 0 counts from 0 (schema < 3, and
    checkpoints written by those versions)."""
    if not history or history[0].get("epoch") != 0:
        return list(history)
    return [{**h, "epoch": h["epoch"] + 1} for h in history]


def summarize(
    history: list[dict[str, Any]], run: dict[str, Any], config: str | None = None
) -> dict[str, Any]:
    """Final metrics from the per-epoch history (status ``running`` until the run ends)."""
    tested = [h for h in history if h.get("test_acc") is not None]
    best = max(tested, key=lambda h: h["test_acc"], default=None)
    last = history[-1] if history else {}
    epoch_s, samples_per_s = speed(history)
    return {
        "schema": SCHEMA,
        "status": "running",
        "reason": None,
        "test_acc": last.get("test_acc"),
        "best_test_acc": best["test_acc"] if best else None,
        "best_epoch": best["epoch"] if best else None,
        "train_loss": last.get("train_loss"),
        "train_acc": last.get("train_acc"),
        "val_acc": last.get("val_acc"),
        "epoch_s": epoch_s,
        "samples_per_s": samples_per_s,
        "epochs": len(history),
        "run": run,
        "config": config,
        "history": history,
    }


class RunRecord:
    """Writes ``metrics.json``; every process keeps the history, only rank zero writes."""

    def __init__(self, path: str | Path, run: dict[str, Any]):
        self.path = Path(path)
        self.run = run
        self.config: str | None = None  # the config's digest: what makes a rerun the same job
        self.history: list[dict[str, Any]] = []

    @property
    def current(self) -> dict[str, Any]:
        """The summary as it stands now."""
        return summarize(self.history, self.run, self.config)

    def set_history(self, history: list[dict[str, Any]]) -> None:
        self.history = upgrade_history(history)
        self._write(self.current)

    def add_epoch(self, entry: dict[str, Any]) -> None:
        self.set_history([*self.history, entry])

    def finish(self, outcome: Outcome) -> dict[str, Any]:
        """Set how the run ended on what the file holds (written by whichever process
        trained); return the final record."""
        summary = self.read() or self.current
        summary.update(status=outcome.status, reason=outcome.reason)
        self._write(summary)
        return summary

    def fail(self, reason: str) -> dict[str, Any]:
        """Record a failure this process did not raise (a peer's, seen by rank 0's watch)."""
        return self.finish(Outcome("failed", reason, 1))

    def read(self) -> dict[str, Any] | None:
        try:
            return upgrade(json.loads(self.path.read_text()))
        except (OSError, ValueError):
            return None

    def _write(self, summary: dict[str, Any]) -> None:
        if is_rank_zero():
            write_json(self.path, summary)
