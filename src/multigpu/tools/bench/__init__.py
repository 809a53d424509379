"""``python -m multigpu.tools.bench``: every strategy and pipeline timed side by side (its arguments
are checked before torch is imported; ``multigpu.tools.bench.step_timer`` times the steps)."""
