"""TensorBoard as a sweep is compared in it: epoch-level scalars against the epoch, and the
HParams tab showing first the settings that differ between runs.

Lightning's ``TensorBoardLogger`` plots every scalar against the global step, so a batch-512
run ends at half the x of a batch-256 run; here a scalar logged once per epoch is written at
its epoch, counted from 1 as ``metrics.json`` counts. Lightning also writes an experiment
summary listing every hyperparameter with each run; without one, TensorBoard builds it from
all runs' session starts and marks which hyperparameters differ, and shows those first.
"""

from __future__ import annotations

from typing import Any

from lightning_fabric.utilities.logger import _convert_params, _flatten_dict
from lightning_utilities.core.rank_zero import rank_zero_only
from pytorch_lightning.loggers import TensorBoardLogger
from typing_extensions import override


def tensorboard_value(value: Any) -> Any:
    """A value the HParams tab shows as written: numbers other than integers (which it would
    show as ``256.00``) stay numbers; ``None`` becomes ``none`` so it does not retype a column."""
    if isinstance(value, float):
        return value
    if value is None:
        return "none"
    return value if isinstance(value, (bool, str)) else str(value)


class EpochTensorBoardLogger(TensorBoardLogger):
    """Lightning's TensorBoard logger with the epoch as the x-axis of epoch-level scalars."""

    @override
    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Lightning adds the (0-based) ``epoch`` to what it logs at an epoch's end."""
        metrics = dict(metrics)
        epoch = metrics.pop("epoch", None)
        if epoch is not None:
            step = int(epoch) + 1
        super().log_metrics(metrics, step)

    @override
    @rank_zero_only
    def log_hyperparams(self, params: Any, metrics: Any = None, step: int | None = None) -> None:
        """``hparams.yaml`` as Lightning writes it, and this run's session start only."""
        from torch.utils.tensorboard.summary import hparams

        params = _convert_params(params)
        self.hparams.update(params)  # saved to hparams.yaml with the logger
        flat = {k: tensorboard_value(v) for k, v in _flatten_dict(params).items()}
        _, session_start, _ = hparams(flat, {})
        self.experiment._get_file_writer().add_summary(session_start)
