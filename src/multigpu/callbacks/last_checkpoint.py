"""``checkpoints/last.ckpt`` after every finished epoch, the file runs resume from, and
``previous.ckpt``, the one it replaced (a second name of the same file, no copy), to fall back
on if ``last.ckpt`` is ever damaged.

Lightning's ``ModelCheckpoint`` writes ``last.ckpt`` only alongside a top-k checkpoint; this
writes it alone, once per epoch, after validation and after every other callback (Lightning
runs ``Checkpoint`` callbacks last), so a divergence check can still stop a bad epoch from
being saved. The file is written atomically (see ``multigpu.storage.checkpoint_io``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pytorch_lightning import LightningModule, Trainer
from pytorch_lightning.callbacks import Checkpoint
from typing_extensions import override

from multigpu.storage.atomic import link_atomically
from multigpu.storage.ckpt_path import LAST, PREVIOUS


class LastCheckpoint(Checkpoint):
    def __init__(self, dirpath: str | Path, every_n_epochs: int = 1):
        if not isinstance(every_n_epochs, int) or every_n_epochs < 1:
            raise ValueError(f"every_n_epochs={every_n_epochs!r} must be >= 1")
        self.dirpath = Path(dirpath)
        self.every_n_epochs = every_n_epochs
        # Called once the epoch's checkpoint is written (or the epoch has none): the record's
        # epoch goes after its checkpoint, so no stop between leaves a record ahead of it.
        self.after_epoch: list[Callable[[], None]] = []

    @property
    def path(self) -> Path:
        return self.dirpath / LAST

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        finished = trainer.current_epoch + 1
        is_last = trainer.max_epochs is not None and finished >= trainer.max_epochs
        saving = finished % self.every_n_epochs == 0 or is_last or trainer.should_stop
        if saving and not (trainer.fast_dev_run or trainer.sanity_checking):
            if trainer.is_global_zero and self.path.is_file():
                link_atomically(self.path, self.dirpath / PREVIOUS)
            trainer.save_checkpoint(self.path, weights_only=False)  # with optimizer state
        for then in self.after_epoch:
            then()
