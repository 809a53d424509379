"""TensorBoard's HParams tab: a row per run, a column per setting that changes its result, and
metric columns read from the run's own curves.

Columns: how the run ran, which changes its speed (strategy, accelerator, devices, nodes,
epochs, data pipeline and workers, channels_last, compile), and what it computes (the record's
``settings``, ``multigpu.config.computation``), each under its short name (``column_name``: ``lr``,
``momentum``, ``scheduler``, ``train_subset``). TensorBoard marks the columns whose values differ
between the runs it shows and ticks the first five of those.

Metrics: the tab makes a metric column of every scalar tag the runs log, with each one's last
value, so ``test/acc`` is the final test accuracy. What is not the last point of a curve is
logged once, when training ends, at its last epoch: ``test/best_acc``, and the speed as
``metrics.json`` defines it, ``throughput/mean_epoch_s`` and ``throughput/mean_samples_per_s``
(named to sort first in their sections, so that on a CPU without phases the tab ticks them
among its first five metric columns, beside ``test/acc`` and ``test/loss``). No curve is logged
twice, and no section of summaries sits above the curves in Time Series.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from pytorch_lightning import Callback, LightningModule, Trainer
from pytorch_lightning.loggers import TensorBoardLogger
from typing_extensions import override

from multigpu.callbacks.tensorboard_logger import (
    FAILURE,
    SUCCESS,
    EpochTensorBoardLogger,
    shown_value,
)
from multigpu.config.errors import Diverged
from multigpu.storage.record import RunRecord

log = logging.getLogger(__name__)

# Summary tag -> the record's key: the values that are not the last point of a curve.
SUMMARY_TAGS = {
    "test/best_acc": "best_test_acc",
    "throughput/mean_epoch_s": "epoch_s",
    "throughput/mean_samples_per_s": "samples_per_s",
}
# How the run ran (the record's ``run``): not what it computes, but what it costs.
RUN_COLUMNS = ("strategy", "accelerator", "devices", "num_nodes", "max_epochs")
TARGET = "._target_"  # a node's class: its column is the node's, valued by the class's name
# Hydra's plumbing, and the data module's class, which the data option (``data``) names.
LEFT_OUT = ("data._target_",)


def tensorboard_loggers(trainer: Trainer) -> list[TensorBoardLogger]:
    return [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]


@functools.cache
def known_keys() -> dict[str, frozenset[str]]:
    """Each last part (``lr``) of the keys the config's schema knows, with the keys that end
    in it (``seed``: ``seed`` and ``data.seed``)."""
    from multigpu.config.schema import defaults

    owners: dict[str, set[str]] = defaultdict(set)
    for key in defaults():
        owners[key.rsplit(".", 1)[-1]].add(key)
    return {last: frozenset(keys) for last, keys in owners.items()}


def column_name(key: str) -> str | None:
    """A setting's column, the same for a key in every run: its last part (``lr``,
    ``train_subset``, ``T_max``) unless another key the schema knows ends alike (``data.seed``
    beside ``seed``), then the whole key; the node for the class a node builds
    (``model.optimizer._target_``: ``optimizer``); ``data`` for the data option; None for
    Hydra's plumbing."""
    if key.endswith("._partial_") or key in LEFT_OUT:
        return None
    if key == "defaults.data":
        return "data"
    if key.endswith(TARGET):
        key = key[: -len(TARGET)]
    last = key.rsplit(".", 1)[-1]
    return last if known_keys().get(last, frozenset()) <= {key} else key


def setting_columns(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The record's ``settings`` as columns (``column_name``); ``data.seed`` only where it is
    not the run's ``seed`` (it follows it by default, and would double a seed sweep's
    differing columns)."""
    named: dict[str, list[tuple[str, Any]]] = defaultdict(list)
    for key, value in settings.items():
        if key == "data.seed" and value == settings.get("seed"):
            continue
        name = column_name(key)
        if name is None:
            continue
        if key.endswith(TARGET) and isinstance(value, str):
            value = value.rsplit(".", 1)[-1]  # torch.optim.SGD: SGD
        named[name].append((key, value))
    columns = {}
    for name, pairs in named.items():  # two keys the schema does not know, ending alike
        columns.update({name: pairs[0][1]} if len(pairs) == 1 else dict(pairs))
    return columns


def run_columns(
    run: Mapping[str, Any], settings: Mapping[str, Any] | None, trainer: Trainer, module: Any
) -> dict[str, Any]:
    """Every column of the run's HParams row: how it ran, then what it computes."""
    datamodule = getattr(trainer, "datamodule", None)
    options = getattr(module, "compile_options", None)
    columns = {name: run.get(name) for name in RUN_COLUMNS if name in run}
    columns.update(
        pipeline=getattr(datamodule, "pipeline", None),
        num_workers=getattr(datamodule, "num_workers", None),
        channels_last=getattr(module, "channels_last", None),
        compile=False if options is None else (options or True),
    )
    columns = {name: value for name, value in columns.items() if value is not None}
    if settings is None:  # a record without settings: what the run's summary resolved
        settings = {k: run[k] for k in ("batch_size", "lr", "precision", "seed") if k in run}
    return {**columns, **setting_columns(settings)}


class HParamsSummary(Callback):
    def __init__(self, record: RunRecord):
        self.record = record

    @override
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        columns = run_columns(self.record.run, self.record.settings, trainer, pl_module)
        for logger in tensorboard_loggers(trainer):
            if isinstance(logger, EpochTensorBoardLogger):
                logger.log_columns(columns)
            else:
                logger.log_hyperparams({k: shown_value(v) for k, v in columns.items()})

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.log_summary(trainer)
        self.end_session(trainer, SUCCESS)

    @override
    def on_exception(
        self, trainer: Trainer, pl_module: LightningModule, exception: BaseException
    ) -> None:
        """The summary of the epochs that ran; a diverged run has ended for good (a failure
        or an interruption may yet be continued in this folder, and the tab keeps the first
        end a run records)."""
        try:
            self.log_summary(trainer)
            if isinstance(exception, Diverged):
                self.end_session(trainer, FAILURE)
        except Exception:  # never in the way of the error being reported
            log.debug("could not write the TensorBoard summary", exc_info=True)

    def log_summary(self, trainer: Trainer) -> None:
        """The values that are not a curve's last point, once, at the last epoch."""
        summary = self.record.current
        if not summary["history"]:
            return
        values = {
            tag: float(summary[key])
            for tag, key in SUMMARY_TAGS.items()
            if summary.get(key) is not None
        }
        for logger in tensorboard_loggers(trainer):
            logger.log_metrics(values, step=summary["history"][-1]["epoch"])
            logger.experiment.flush()

    @staticmethod
    def end_session(trainer: Trainer, status: str) -> None:
        for logger in tensorboard_loggers(trainer):
            if isinstance(logger, EpochTensorBoardLogger):
                logger.end_session(status)
