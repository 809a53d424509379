"""The terminal's progress bar, named for this project's loops: ``Epoch 3/10`` with the loss
and the last test accuracy, ``Test set`` for the pass over the test set after each epoch."""

from __future__ import annotations

from typing import Any

from pytorch_lightning import LightningModule, Trainer
from pytorch_lightning.callbacks import TQDMProgressBar
from pytorch_lightning.callbacks.progress.tqdm_progress import convert_inf
from typing_extensions import override

# The module's evaluation loaders, in order (ImageClassifier.validation_step).
EVALUATION_NAMES = ("Test set", "Validation set")


def epoch_description(trainer: Trainer) -> str:
    """The epoch counted from 1, as ``metrics.json`` counts, out of the run's last."""
    total = f"/{trainer.max_epochs}" if trainer.max_epochs and trainer.max_epochs > 0 else ""
    return f"Epoch {trainer.current_epoch + 1}{total}"


class ProgressBar(TQDMProgressBar):
    @override
    def on_train_epoch_start(self, trainer: Trainer, *args: Any) -> None:
        """Lightning's, with the epoch described as above."""
        if self._leave:
            self.train_progress_bar = self.init_train_tqdm()
        bar = self.train_progress_bar
        bar.reset()
        bar.total = convert_inf(self.total_train_batches)
        bar.initial = 0
        bar.set_description(epoch_description(trainer))

    @property
    @override
    def validation_description(self) -> str:
        return EVALUATION_NAMES[0]

    @override
    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        """Lightning's, with each loader named rather than numbered."""
        if not self.has_dataloader_changed(dataloader_idx):
            return
        bar = self.val_progress_bar
        bar.reset()
        bar.total = convert_inf(self.total_val_batches_current_dataloader)
        bar.initial = 0
        name = EVALUATION_NAMES[min(dataloader_idx, len(EVALUATION_NAMES) - 1)]
        bar.set_description(self.sanity_check_description if trainer.sanity_checking else name)

    @override
    def get_metrics(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, Any]:
        """The logged progress-bar values, without the logger's version number."""
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics
