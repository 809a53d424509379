"""``metrics.json``: the final and per-epoch results of a run, the interface reports read.

Keys (``schema`` 1): ``status`` (running, completed, interrupted, diverged or failed),
``reason`` (why it did not complete), ``test_acc``,
``best_test_acc``, ``best_epoch``, ``train_loss``, ``train_acc``, ``val_acc`` (null without a
validation split), ``epoch_s`` (median),
``samples_per_s`` (median), ``epochs``, ``history`` (one entry per epoch), and the run's
settings under ``run`` (strategy, devices, global batch size, lr, ...).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from pytorch_lightning import Callback, LightningModule, Trainer
from pytorch_lightning.utilities.exceptions import SIGTERMException

from multigpu.errors import RunStopped
from multigpu.jsonfile import write_json_atomically

SCHEMA = 1
EPOCH_KEYS = {
    "train_loss": "train/loss",
    "train_acc": "train/acc",
    "test_acc": "test/acc",
    "val_acc": "val/acc",
    "epoch_s": "time/epoch_s",
    "samples_per_s": "throughput/samples_per_s",
}


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def exception_status(exception: BaseException) -> str:
    """``interrupted`` (Ctrl-C, SIGTERM), ``diverged`` (non-finite loss), else ``failed``."""
    if isinstance(exception, (KeyboardInterrupt, SIGTERMException)):
        return "interrupted"
    return exception.status if isinstance(exception, RunStopped) else "failed"


def summarize(history: list[dict[str, Any]], run: dict[str, Any], status: str) -> dict[str, Any]:
    """Final metrics from the per-epoch history."""
    tested = [h for h in history if h.get("test_acc") is not None]
    best = max(tested, key=lambda h: h["test_acc"], default=None)
    last = history[-1] if history else {}
    return {
        "schema": SCHEMA,
        "status": status,
        "test_acc": last.get("test_acc"),
        "best_test_acc": best["test_acc"] if best else None,
        "best_epoch": best["epoch"] if best else None,
        "train_loss": last.get("train_loss"),
        "train_acc": last.get("train_acc"),
        "val_acc": last.get("val_acc"),
        "epoch_s": _median([h["epoch_s"] for h in history if h.get("epoch_s")]),
        "samples_per_s": _median([h["samples_per_s"] for h in history if h.get("samples_per_s")]),
        "epochs": len(history),
        "reason": None,
        "run": run,
        "history": history,
    }


class MetricsFile(Callback):
    """Collects each epoch's logged metrics and writes ``metrics.json`` on rank zero."""

    def __init__(self, path: str | Path, run: dict[str, Any]):
        self.path = Path(path)
        self.run = run
        self.history: list[dict[str, Any]] = []

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        logged = trainer.callback_metrics
        entry: dict[str, Any] = {"epoch": trainer.current_epoch}
        for key, name in EPOCH_KEYS.items():
            value = logged.get(name)
            entry[key] = None if value is None else float(value)
        self.history.append(entry)
        self.write(trainer, "running")

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.write(trainer, "completed")

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception) -> None:
        status = exception_status(exception)
        text = str(exception)
        reason = text.splitlines()[0][:500] if text else type(exception).__name__
        self.write(trainer, status, reason=None if status == "interrupted" else reason)

    def state_dict(self) -> dict[str, Any]:
        """Checkpoints carry the history, so a resumed run's ``metrics.json`` starts from it."""
        return {"history": self.history}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = list(state_dict.get("history", []))

    @property
    def current(self) -> dict[str, Any]:
        """The summary as it stands now (what ``metrics.json`` holds after this epoch)."""
        return summarize(self.history, self.run, "running")

    def write(self, trainer: Trainer, status: str, reason: str | None = None) -> None:
        if trainer.is_global_zero:
            summary = summarize(self.history, self.run, status)
            summary["reason"] = reason
            write_json_atomically(self.path, summary)

    @property
    def summary(self) -> dict[str, Any]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}
