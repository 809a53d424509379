"""Running: the entry points' work, from admitting a run (or each job of a sweep) to fitting,
evaluating, stopping cleanly and reporting how it ended."""
