"""``python -m multigpu.bench``: every strategy and pipeline timed side by side."""

from multigpu.bench.step_timer import StepTimer

__all__ = ["StepTimer"]
