"""``python -m multigpu.bench``: every strategy and pipeline timed side by side (its arguments
are checked before torch is imported; ``multigpu.bench.step_timer`` times the steps)."""
