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
import statistics
from pathlib import Path
from typing import Any

from lightning_utilities.core.rank_zero import rank_zero_only

from multigpu.atomic import write_json
from multigpu.outcome import Outcome

SCHEMA = 2
# Where launchers put a process's rank, in the order Lightning reads them.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def is_rank_zero() -> bool:
    """This process's rank as Lightning knows it once it has set it (its strategies do), else
    as the launcher's environment says: torch-free, for the record written before training."""
    rank = getattr(rank_zero_only, "rank", None)
    if rank is None:
        rank = next((int(os.environ[k]) for k in RANK_VARIABLES if k in os.environ), 0)
    return rank == 0


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(
    history: list[dict[str, Any]], run: dict[str, Any], config: str | None = None
) -> dict[str, Any]:
    """Final metrics from the per-epoch history (status ``running`` until the run ends)."""
    tested = [h for h in history if h.get("test_acc") is not None]
    best = max(tested, key=lambda h: h["test_acc"], default=None)
    last = history[-1] if history else {}
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
        "epoch_s": _median([h["epoch_s"] for h in history if h.get("epoch_s")]),
        "samples_per_s": _median([h["samples_per_s"] for h in history if h.get("samples_per_s")]),
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
        self.history = list(history)
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

    def read(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None

    def _write(self, summary: dict[str, Any]) -> None:
        if is_rank_zero():
            write_json(self.path, summary)
