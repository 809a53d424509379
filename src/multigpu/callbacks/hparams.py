"""TensorBoard's HParams tab: each run's settings beside whole-run metric columns.

The tab makes a metric column of every scalar its runs log; the ``hp/*`` scalars are the run's
summary so far (final and best test accuracy, speed as ``metrics.json`` defines it), written
after every epoch at that epoch.
"""

from __future__ import annotations

from pytorch_lightning import Callback, LightningModule, Trainer
from pytorch_lightning.loggers import TensorBoardLogger
from typing_extensions import override

from multigpu.record import RunRecord

HP_METRICS = {
    "hp/test_acc": "test_acc",
    "hp/best_test_acc": "best_test_acc",
    "hp/epoch_s": "epoch_s",
    "hp/samples_per_s": "samples_per_s",
}


def tensorboard_loggers(trainer: Trainer) -> list[TensorBoardLogger]:
    return [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]


class HParamsSummary(Callback):
    def __init__(self, record: RunRecord):
        self.record = record

    @override
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        for logger in tensorboard_loggers(trainer):
            logger.log_hyperparams(self.record.run)

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        summary = self.record.current
        values = {k: float(summary[src]) for k, src in HP_METRICS.items() if summary.get(src)}
        for logger in tensorboard_loggers(trainer):
            logger.log_metrics(values, step=trainer.current_epoch + 1)
