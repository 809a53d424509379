"""TensorBoard's HParams tab: each run's settings beside real metric columns.

The tab shows metric columns only for keys announced with the hyperparameters, so the run
announces ``hp/*`` keys at the start and logs their values after every epoch.
"""

from __future__ import annotations

from typing import Any

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


def tensorboard_value(value: Any) -> Any:
    """HParams accepts numbers, strings and booleans; ``None`` would retype a whole column."""
    if value is None:
        return "none"
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def tensorboard_loggers(trainer: Trainer) -> list[TensorBoardLogger]:
    return [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]


class HParamsSummary(Callback):
    def __init__(self, record: RunRecord):
        self.record = record

    @override
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        params = {k: tensorboard_value(v) for k, v in self.record.run.items()}
        for logger in tensorboard_loggers(trainer):
            logger.log_hyperparams(params, metrics={key: 0.0 for key in HP_METRICS})

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        summary = self.record.current
        values = {k: float(summary[src]) for k, src in HP_METRICS.items() if summary.get(src)}
        for logger in tensorboard_loggers(trainer):
            logger.log_metrics(values, step=trainer.current_epoch)
