"""Each finished epoch's logged metrics, appended to the run's record (``metrics.json``)."""

from __future__ import annotations

from typing import Any

from pytorch_lightning import Callback, LightningModule, Trainer
from typing_extensions import override

from multigpu.record import RunRecord

EPOCH_KEYS = {
    "train_loss": "train/loss",
    "train_acc": "train/acc",
    "test_acc": "test/acc",
    "val_acc": "val/acc",
    "lr": "train/lr",
    "epoch_s": "time/epoch_s",
    "samples_per_s": "throughput/samples_per_s",
    "peak_gpu_mb": "memory/peak_gpu_mb",
}


class EpochHistory(Callback):
    def __init__(self, record: RunRecord):
        self.record = record

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        logged = trainer.callback_metrics
        entry: dict[str, Any] = {"epoch": trainer.current_epoch + 1}  # counted from 1
        for key, name in EPOCH_KEYS.items():
            value = logged.get(name)
            entry[key] = None if value is None else float(value)
        self.record.add_epoch(entry)

    @override
    def state_dict(self) -> dict[str, Any]:
        """Checkpoints carry the history, so a resumed run's record starts from it."""
        return {"history": self.record.history}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.record.set_history(state_dict.get("history", []))
