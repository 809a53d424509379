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

from multigpu.callbacks.last_checkpoint import LastCheckpoint
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
EVALUATED = ("test_acc", "val_acc")  # logged by the epoch's evaluation, when it has one


class EpochHistory(Callback):
    def __init__(self, record: RunRecord):
        self.record = record
        self._batches = 0  # trained in this epoch by this run
        self._evaluated = False  # after the epoch's last batch (else earlier weights' figures)
        self._written_after_checkpoint = False  # by LastCheckpoint, once the epoch's is saved
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
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """With ``LastCheckpoint``, an epoch's entry is written to the record once its
        checkpoint is: a stop between the two had left a record of an epoch that no
        checkpoint holds (its reason saying no epoch had finished; run again, the epoch
        recorded was trained anew and its entry replaced)."""
        for callback in trainer.checkpoint_callbacks:
            if (
                isinstance(callback, LastCheckpoint)
                and self.record.save not in callback.after_epoch
            ):
                callback.after_epoch.append(self.record.save)
                self._written_after_checkpoint = True

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._batches, self._evaluated = 0, False

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        """At ``max_steps`` the run stops as for ``max_time``: through ``should_stop``, which
        has Lightning evaluate the epoch it stops (and ``LastCheckpoint`` save it); reaching
        ``max_steps`` alone ended the epoch untested, with the last epoch's figures. Lightning
        ends the fit at ``max_steps`` even before ``min_epochs``, but evaluates a stopped epoch
        only once that is met, and only in the epochs ``check_val_every_n_epoch`` names: at
        ``max_steps`` both are set aside, as the fit ends anyway (a ``min_steps`` past
        ``max_steps`` is refused with the settings)."""
        self._batches += 1
        self._evaluated = False  # an evaluation before this batch tested earlier weights
        if 0 <= trainer.max_steps <= trainer.global_step:
            trainer.fit_loop.min_epochs = None
            if trainer.check_val_every_n_epoch is not None:
                trainer.check_val_every_n_epoch = 1
            trainer.should_stop = True

    @override
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.sanity_checking:
            self._evaluated = True

    def partial_batches(self, trainer: Trainer) -> int | None:
        """The batches this run trained in the epoch when fewer than the epoch holds: stopped
        before its last (``max_steps``, ``max_time``, ``should_stop``; a resume goes on with
        the next epoch, ``lightning_compat.FitLoopFromEpochEnds``). Its seconds are then no
        epoch's (``record_model.speed``). None for a whole epoch, or one of unknown length (an
        iterable data set). A smoke run (``+trainer.fast_dev_run``) trains a few batches of an
        epoch, which Lightning then counts as the epoch's whole."""
        if trainer.fast_dev_run:
            return self._batches
        whole = trainer.num_training_batches
        return self._batches if math.isfinite(whole) and self._batches < whole else None

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """After the epoch's evaluation (Lightning runs it before this hook)."""
        logged = trainer.callback_metrics
        entry: dict[str, Any] = {"epoch": trainer.current_epoch + 1}  # counted from 1
        for key, name in EPOCH_KEYS.items():
            value = logged.get(name)
            entry[key] = None if value is None else float(value)  # waits for the device
        # Not evaluated after its last batch: what callback_metrics hold is of earlier weights
        # (an earlier epoch's, or of a val_check_interval's batch, or time, before the end). A
        # smoke run evaluates a few batches of the test set: no test accuracy.
        if not self._evaluated or trainer.fast_dev_run:
            entry |= dict.fromkeys(EVALUATED)
        entry["wall_s"] = self.wall_s()
        entry["partial_batches"] = self.partial_batches(trainer)
        self.record.add_epoch(entry, write=not self._written_after_checkpoint)

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
