"""Lightning's CSV logger, continuing the ``metrics.csv`` of the run it logs.

Lightning's writer deletes the ``metrics.csv`` it finds in its folder when it starts. A new run
finds none there (admission refuses a logger folder holding another run's,
``multigpu.run.admission.check_logger_folder_new``); the same run continuing its folder after a
stop finds its own, whose earlier rows were lost. They are kept, and the new rows appended, as
Lightning's writer does within one run (rewriting the header when a new column comes). Its
``epoch`` column counts from 1. (A
``ckpt_path`` resume is not checked there, as it may go on in its run's logger folder: given
another run's, it now adds rows to that run's file where it had deleted them.)
"""

from __future__ import annotations

import csv

from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter
from pytorch_lightning.loggers.logger import rank_zero_experiment
from pytorch_lightning.utilities import rank_zero_only
from typing_extensions import override


class ContinuingExperimentWriter(ExperimentWriter):
    @override
    def _check_log_dir_exists(self) -> None:
        """In place of the deletion: the file's columns are this writer's first, so that a
        header rewritten for a new column keeps them."""
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as file:
                self.metrics_keys = sorted(csv.DictReader(file).fieldnames or [])


class ContinuingCSVLogger(CSVLogger):
    @override
    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Lightning adds the (0-based) ``epoch`` to what it logs: counted from 1 here, as
        ``metrics.json``, the console and TensorBoard count epochs."""
        if "epoch" in metrics:
            metrics = {**metrics, "epoch": int(metrics["epoch"]) + 1}
        super().log_metrics(metrics, step)

    @property
    @override
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        """``CSVLogger.experiment`` as Lightning 2.6 has it, with the writer above."""
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = ContinuingExperimentWriter(log_dir=self.log_dir)
        return self._experiment
