"""Lightning callbacks: checkpoints, the epoch history, timers and the step phases' timer (its
clock is ``multigpu.models.phases``), the divergence stop, the progress bar and the loss it
shows, TensorBoard's logger, HParams and figures, and the count of host-device
synchronisations, and a steady step's profile.

The callbacks are imported on first use (``multigpu.callbacks.LastCheckpoint``), not with the
package, so that what imports one of them loads only that one."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multigpu.callbacks.bar_loss import BarLoss
    from multigpu.callbacks.divergence import DivergenceGuard
    from multigpu.callbacks.epoch_history import EpochHistory
    from multigpu.callbacks.epoch_timer import EpochTimer
    from multigpu.callbacks.host_syncs import HostSyncCounter
    from multigpu.callbacks.hparams import HParamsSummary
    from multigpu.callbacks.last_checkpoint import LastCheckpoint
    from multigpu.callbacks.phase_timer import PhaseTimer
    from multigpu.callbacks.progress import ProgressBar
    from multigpu.callbacks.step_profile import StepProfile
    from multigpu.callbacks.test_figures import TestSetFigures

# Each callback, and the module that defines it.
MODULES = {
    "BarLoss": "bar_loss",
    "DivergenceGuard": "divergence",
    "EpochHistory": "epoch_history",
    "EpochTimer": "epoch_timer",
    "HParamsSummary": "hparams",
    "HostSyncCounter": "host_syncs",
    "LastCheckpoint": "last_checkpoint",
    "PhaseTimer": "phase_timer",
    "ProgressBar": "progress",
    "StepProfile": "step_profile",
    "TestSetFigures": "test_figures",
}

__all__ = [
    "BarLoss",
    "DivergenceGuard",
    "EpochHistory",
    "EpochTimer",
    "HParamsSummary",
    "HostSyncCounter",
    "LastCheckpoint",
    "PhaseTimer",
    "ProgressBar",
    "StepProfile",
    "TestSetFigures",
]


def __getattr__(name: str) -> Any:
    if name in MODULES:
        return getattr(import_module(f"{__name__}.{MODULES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
