from multigpu.callbacks.divergence import DivergenceGuard
from multigpu.callbacks.epoch_history import EpochHistory
from multigpu.callbacks.epoch_timer import EpochTimer
from multigpu.callbacks.hparams import HParamsSummary
from multigpu.callbacks.last_checkpoint import LastCheckpoint
from multigpu.callbacks.phase_timer import PhaseTimer
from multigpu.callbacks.progress import ProgressBar
from multigpu.callbacks.test_figures import TestSetFigures

__all__ = [
    "DivergenceGuard",
    "EpochHistory",
    "EpochTimer",
    "HParamsSummary",
    "LastCheckpoint",
    "PhaseTimer",
    "ProgressBar",
    "TestSetFigures",
]
