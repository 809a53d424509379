"""TensorBoard as runs are compared in it: epoch-level scalars against the epoch, and the HParams
tab with a row per run, named so that the narrow Trial ID column tells the runs apart, and a
column per setting, values as written.

Lightning's ``TensorBoardLogger`` plots every scalar against the global step, so a batch-512
run ends at half the x of a batch-256 run; here a scalar logged once per epoch is written at
its epoch, counted from 1 as ``metrics.json`` counts. Lightning also writes an experiment
summary listing every hyperparameter with each run; without one, TensorBoard builds it from
all runs' session starts, marks which hyperparameters differ, and ticks those first; its metric
columns are then every scalar tag the runs log (``multigpu.callbacks.hparams``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_utilities.core.rank_zero import rank_zero_only
from pytorch_lightning.loggers import TensorBoardLogger
from typing_extensions import override

from multigpu.callbacks.lightning_compat import convert_params, flatten_dict

# How a run ended, as the HParams tab filters runs (its Status checkboxes).
SUCCESS, FAILURE = "STATUS_SUCCESS", "STATUS_FAILURE"


def tensorboard_value(value: Any) -> Any:
    """A value of Lightning's ``log_hyperparams`` (a module's own hyperparameters, should it log
    them): integers as text (the tab would show ``256.00``), other numbers stay numbers;
    ``None`` becomes ``none`` so it does not retype a column. The run's columns go through
    ``shown_value``."""
    if isinstance(value, float):
        return value
    if value is None:
        return "none"
    return value if isinstance(value, (bool, str)) else str(value)


def shown_value(value: Any) -> str | bool:
    """A value as the HParams tab shows it as written: the tab prints every number to 5
    significant digits (``0.1`` as ``0.10000``, ``256`` as ``256.00``), so numbers go as text,
    as the command line writes them (``0.1``, ``256``, ``1e-05``); ``null`` as the config
    writes it; lists and maps as JSON."""
    if isinstance(value, bool):
        return value
    if value is None:
        return "null"
    if isinstance(value, float):
        return format(value, ".12g")
    if isinstance(value, (int, str)):
        return str(value)
    return json.dumps(value, default=str)


def trial_name(folder: str | Path, runs_dir: str | Path | None) -> str:
    """The HParams tab's Trial ID for the run in ``folder``: its folder's name, then where that
    is under ``runs_dir`` (``lr=0.1 (2026-11-25/12-40-02.123456)``), so that the start, which
    the narrow column shows, is what tells a sweep's jobs apart. One to one with the folder:
    the tab makes one row of the runs that share a name."""
    folder = Path(folder).resolve()
    where = folder.parent
    if runs_dir is not None:
        try:
            where = folder.parent.relative_to(Path(runs_dir).resolve())
        except ValueError:
            pass
    return folder.name if where == Path(".") else f"{folder.name} ({where.as_posix()})"


def hparams_summary(tag: str, data: Any) -> Any:
    """One HParams plugin record (a session's start or end), as TensorBoard's own
    ``summary_v2`` writes it."""
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.plugins.hparams import metadata, plugin_data_pb2

    field = {
        metadata.SESSION_START_INFO_TAG: "session_start_info",
        metadata.SESSION_END_INFO_TAG: "session_end_info",
    }[tag]
    content = plugin_data_pb2.HParamsPluginData(**{field: data})
    summary = summary_pb2.Summary()
    summary.value.add(
        tag=tag, metadata=metadata.create_summary_metadata(content), tensor=metadata.NULL_TENSOR
    )
    return summary


def session_start(columns: Mapping[str, str | bool], group_name: str = "") -> Any:
    """A run's row in the HParams tab: its columns, and the name the Trial ID shows."""
    from tensorboard.plugins.hparams import metadata, plugin_data_pb2

    start = plugin_data_pb2.SessionStartInfo(group_name=group_name, start_time_secs=time.time())
    for name, value in columns.items():
        if isinstance(value, bool):
            start.hparams[name].bool_value = value
        else:
            start.hparams[name].string_value = value
    return hparams_summary(metadata.SESSION_START_INFO_TAG, start)


def session_end(status: str) -> Any:
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    end = plugin_data_pb2.SessionEndInfo(
        status=api_pb2.Status.Value(status), end_time_secs=time.time()
    )
    return hparams_summary(metadata.SESSION_END_INFO_TAG, end)


class EpochTensorBoardLogger(TensorBoardLogger):
    """Lightning's TensorBoard logger with the epoch as the x-axis of epoch-level scalars, and
    the run's HParams row (``log_columns``) named by ``trial_name`` under ``runs_dir``."""

    def __init__(self, *args: Any, runs_dir: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.runs_dir = runs_dir

    @property
    @override
    def log_dir(self) -> str:
        """Lightning's, as it is spelt: Lightning expands ``$NAME`` in it, which put the events
        of a run whose folder is named with a ``$`` in another folder than its record."""
        version = self.version if isinstance(self.version, str) else f"version_{self.version}"
        sub_dir = [self.sub_dir] if isinstance(self.sub_dir, str) else []
        return os.path.expanduser(os.path.join(self.root_dir, version, *sub_dir))

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
        """``hparams.yaml`` as Lightning writes it, and this run's session start only (the
        run's own columns go through ``log_columns``)."""
        from torch.utils.tensorboard.summary import hparams

        params = convert_params(params)
        self.hparams.update(params)  # saved to hparams.yaml with the logger
        flat = {k: tensorboard_value(v) for k, v in flatten_dict(params).items()}
        _, start, _ = hparams(flat, {})
        self.experiment._get_file_writer().add_summary(start)

    @rank_zero_only
    def log_columns(self, columns: Mapping[str, Any]) -> None:
        """The run's HParams row: ``columns`` (name: value) in ``hparams.yaml`` as they are,
        and as the tab shows them (``shown_value``) in this run's session start, under its
        ``trial_name``."""
        self.hparams.update(columns)  # saved to hparams.yaml with the logger
        shown = {name: shown_value(value) for name, value in columns.items()}
        self._add(session_start(shown, trial_name(self.log_dir, self.runs_dir)))

    @rank_zero_only
    def end_session(self, status: str) -> None:
        """How the run ended (``SUCCESS``, ``FAILURE``), for the HParams tab's status filter;
        only for an end that no restart of the run in this folder can change."""
        self._add(session_end(status))

    def _add(self, summary: Any) -> None:
        writer = self.experiment._get_file_writer()
        writer.add_summary(summary)
        writer.flush()
