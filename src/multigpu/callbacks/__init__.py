from multigpu.callbacks.epoch_timer import EpochTimer
from multigpu.callbacks.hparams import HParamsSummary
from multigpu.callbacks.metrics_file import MetricsFile
from multigpu.callbacks.test_figures import TestSetFigures

__all__ = ["EpochTimer", "HParamsSummary", "MetricsFile", "TestSetFigures"]
