"""Callbacks that hold a run at the points where a signal used to change its ending
(``+callbacks.x._target_=stop_probes.LingerAtExit``, with tests/ on ``PYTHONPATH``), or hold a
sweep between its jobs (``HoldJob``)."""

from __future__ import annotations

import atexit
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback as HydraCallback
from omegaconf import DictConfig
from pytorch_lightning import Callback


class LingerAtExit(Callback):
    """The process waits ``seconds`` at exit, after its record is written and its error line
    printed: as long as torch's and Python's own teardown can take."""

    def __init__(self, seconds: float):
        atexit.register(time.sleep, seconds)


class HoldJob(HydraCallback):
    """Holds a sweep at a point of its jobs' set-up (a Hydra callback:
    ``+hydra.callbacks.hold._target_=stop_probes.HoldJob``): ``at`` ``job_start``, job ``job``'s
    folder and config written and its ``train`` not started; ``at`` ``job_end``, job ``job``
    ended and the next one's folder not made. Writes ``marker``, then waits ``seconds``."""

    def __init__(self, at: str, job: int, marker: str, seconds: float):
        self.at, self.job, self.marker, self.seconds = at, job, Path(marker), seconds

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._hold("job_start", config)

    def on_job_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._hold("job_end", config)

    def _hold(self, at: str, config: DictConfig) -> None:
        if at == self.at and config.hydra.job.num == self.job:
            self.marker.write_text(at)
            time.sleep(self.seconds)
