"""The terminal's progress bar, named for this project's loops: ``Epoch 3/10`` with the loss
and the last test accuracy, ``Test set`` for the pass over the test set after each epoch.

The bar's line never has another line glued to its end: while it is shown, log lines are
written above it (tqdm clears and redraws the bar), and it is closed, ending its line, when
training ends or fails, before whatever is printed next.
"""

from __future__ import annotations

import logging
import sys
from contextlib import ExitStack
from typing import Any

from pytorch_lightning import LightningModule, Trainer
from pytorch_lightning.callbacks import TQDMProgressBar
from pytorch_lightning.callbacks.progress.tqdm_progress import Tqdm, convert_inf
from tqdm.contrib.logging import logging_redirect_tqdm
from typing_extensions import override

# The module's evaluation loaders, in order (ImageClassifier.validation_step).
EVALUATION_NAMES = ("Test set", "Validation set")


def epoch_description(trainer: Trainer) -> str:
    """The epoch counted from 1, as ``metrics.json`` counts, out of the run's last."""
    total = f"/{trainer.max_epochs}" if trainer.max_epochs and trainer.max_epochs > 0 else ""
    return f"Epoch {trainer.current_epoch + 1}{total}"


def logs_to_console() -> bool:
    """Whether the root logger writes to the terminal (else tqdm's redirect would add a
    console handler where there was none)."""
    streams = (sys.stdout, sys.stderr)
    return any(getattr(h, "stream", None) in streams for h in logging.getLogger().handlers)


class ProgressBar(TQDMProgressBar):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._logs_above_bar: ExitStack | None = None  # made in on_train_start: picklable

    @override
    def on_train_start(self, *args: Any) -> None:
        """Lightning's, and the console's log lines written through tqdm from now on."""
        super().on_train_start(*args)
        if self.is_enabled and self._logs_above_bar is None and logs_to_console():
            self._logs_above_bar = ExitStack()
            self._logs_above_bar.enter_context(logging_redirect_tqdm(tqdm_class=Tqdm))

    @override
    def on_train_end(self, *args: Any) -> None:
        """Lightning's (the bar's line ended), then the log lines back to the console."""
        super().on_train_end(*args)
        self._restore_logging()

    @override
    def on_exception(self, *args: Any) -> None:
        """A failed run's error line starts on a line of its own."""
        for bar in (self._val_progress_bar, self._train_progress_bar):
            if bar is not None:
                bar.close()
        self._restore_logging()

    @override
    def teardown(self, *args: Any, **kwargs: Any) -> None:
        self._restore_logging()
        super().teardown(*args, **kwargs)

    def _restore_logging(self) -> None:
        if self._logs_above_bar is not None:
            self._logs_above_bar.close()
            self._logs_above_bar = None

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
