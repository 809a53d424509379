"""The training step's loss on the progress bar, read from the device only when the bar redraws.

Logged with ``self.log(..., prog_bar=True)``, the loss would be turned into a Python number by
Lightning after every step (``.item()``: the host waits for the device to finish the step),
whether or not the bar redraws. Here rank 0 reads it after the steps the bar redraws after (every
``refresh_rate``-th step of an epoch and its last, as Lightning's bars count), and puts the
number where the bar takes its values from; in between, the bar shows the last one read.
Without a progress bar nothing is read.
"""

from __future__ import annotations

from typing import Any

from pytorch_lightning import Callback, LightningModule, Trainer
from pytorch_lightning.callbacks import ProgressBar
from typing_extensions import override

NAME = "loss"  # as the bar shows it


def redraws_after(bar: ProgressBar | None, trainer: Trainer, batch_idx: int) -> bool:
    """Whether ``bar`` shows new values after batch ``batch_idx`` of the epoch (rank 0)."""
    rate = getattr(bar, "refresh_rate", 0)
    if bar is None or not rate or not trainer.is_global_zero:
        return False
    done = batch_idx + 1
    return done % rate == 0 or done == bar.total_train_batches


class BarLoss(Callback):
    """Runs before the bar's own ``on_train_batch_end`` (earlier in the callback list), so that
    the bar redraws with this step's loss."""

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch, batch_idx: int
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is None or not redraws_after(trainer.progress_bar_callback, trainer, batch_idx):
            return
        # Lightning hands over the loss divided by the batches a step accumulates (what backward
        # sums); the bar shows the batch's own, as metrics.json's train/loss averages it.
        scaled = loss.detach() * trainer.accumulate_grad_batches
        trainer.progress_bar_metrics[NAME] = scaled.item()  # waits for the device
