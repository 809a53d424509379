from multigpu.callbacks.divergence import DivergenceGuard
from multigpu.callbacks.epoch_timer import EpochTimer
from multigpu.callbacks.hparams import HParamsSummary
from multigpu.callbacks.last_checkpoint import LastCheckpoint
from multigpu.callbacks.metrics_file import MetricsFile
from multigpu.callbacks.test_figures import TestSetFigures

__all__ = [
    "DivergenceGuard",
    "EpochTimer",
    "HParamsSummary",
    "LastCheckpoint",
    "MetricsFile",
    "TestSetFigures",
]
