"""Each finished epoch's logged metrics, appended to the run's record (``metrics.json``); the
record's history and settings travel in every checkpoint, so that a resume starts from the
history and is checked against the settings (``multigpu.run.resume``).

Each entry also gets ``wall_s``: the wall time from the run's start (``RunRecord.started``) to
the end of that epoch's evaluation, on the monotonic clock (docs/records.md, "Time to
accuracy"). A run that continues a history continues its clock: the last carried epoch's
``wall_s`` plus the time since this run started (what the earlier run spent after its last
checkpoint is not counted);
a carried history without ``wall_s`` (an older version's) leaves this run's null.
"""

from __future__ import annotations

import math
import time
from typing import Any

from pytorch_lightning import Callback, LightningModule, Trainer
from typing_extensions import override

from multigpu.storage.ckpt_path import SETTINGS
from multigpu.storage.record import RunRecord

EPOCH_KEYS = {
    "train_loss": "train/loss",
    "train_acc": "train/acc",
    "test_acc": "test/acc",
    "val_acc": "val/acc",
    "lr": "train/lr",
    "epoch_s": "time/epoch_s",
    "compile_s": "time/compile_s",
    "samples_per_s": "throughput/samples_per_s",
    "peak_gpu_mb": "memory/peak_gpu_mb",
}


def stopped_at_batch(trainer: Trainer) -> int | None:
    """The batches the epoch trained if it ended before its last (``max_steps`` or
    ``max_time`` reached, ``should_stop`` set), else None: a partial epoch is recorded as one,
    never as a whole epoch."""
    trained = trainer.fit_loop.epoch_loop.batch_progress.current.completed
    whole = trainer.num_training_batches
    return trained if math.isfinite(whole) and trained < whole else None


class EpochHistory(Callback):
    def __init__(self, record: RunRecord):
        self.record = record
        self._carried: tuple[float | None] | None = None  # the wall_s this run continues

    def wall_s(self) -> float | None:
        """Seconds since the run's start, now, counting the wall time of the history it
        continues; None when the carried history has none."""
        if self._carried is None:  # this run's first epoch: the history is the carried one
            carried = self.record.history
            self._carried = (carried[-1].get("wall_s") if carried else 0.0,)
        (before,) = self._carried
        return None if before is None else before + time.monotonic() - self.record.started

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """After the epoch's evaluation (Lightning runs it before this hook)."""
        logged = trainer.callback_metrics
        entry: dict[str, Any] = {"epoch": trainer.current_epoch + 1}  # counted from 1
        for key, name in EPOCH_KEYS.items():
            value = logged.get(name)
            entry[key] = None if value is None else float(value)  # waits for the device
        entry["wall_s"] = self.wall_s()
        entry["stopped_at_batch"] = stopped_at_batch(trainer)
        self.record.add_epoch(entry)

    @override
    def on_save_checkpoint(
        self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        checkpoint[SETTINGS] = self.record.settings

    @override
    def state_dict(self) -> dict[str, Any]:
        """Checkpoints carry the history, so a resumed run's record starts from it."""
        return {"history": self.record.history}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.record.set_history(state_dict.get("history", []))
