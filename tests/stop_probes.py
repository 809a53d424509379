"""Callbacks that hold a run at the points where a second signal used to change its ending
(``+callbacks.x._target_=stop_probes.LingerAtExit``, with tests/ on ``PYTHONPATH``)."""

from __future__ import annotations

import atexit
import time

from pytorch_lightning import Callback


class LingerAtExit(Callback):
    """The process waits ``seconds`` at exit, after its record is written and its error line
    printed: as long as torch's and Python's own teardown can take."""

    def __init__(self, seconds: float):
        atexit.register(time.sleep, seconds)
