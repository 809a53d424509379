"""What a job returns to the sweeper that launched it, declared once for every way a run ends:
the run's status, and the objective, a completed run's final test accuracy (maximized).

Hydra's basic sweeper ignores it; this project's Optuna sweeper
(``multigpu.run.optuna_trials``) tells the study each trial's state from it, so a diverged or
failed trial is recorded as such and the study goes on. Torch- and Optuna-free: the entry point
returns it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

OBJECTIVE = "test_acc"  # the record's key whose value the study optimizes
DIRECTION = "maximize"

# The Optuna trial state for each status a run records. A diverged run is pruned: TPE ranks a
# pruned trial below every completed one, so the study learns to avoid what made it diverge; a
# failed one (a bug, a value the run refused) is ignored by the samplers. An interrupted run
# ends the whole sweep (Ctrl-C, SIGTERM), so its state is told only for the record's sake.
TRIAL_STATES = {
    "completed": "COMPLETE",
    "diverged": "PRUNED",
    "interrupted": "FAIL",
    "failed": "FAIL",
}


@dataclass(frozen=True)
class JobEnding:
    """How a sweep's job ended: ``value`` is set exactly when the trial completed."""

    status: str
    value: float | None = None

    def __post_init__(self) -> None:
        if self.status not in TRIAL_STATES:
            raise ValueError(f"no trial state is declared for a run's status {self.status!r}")
        if (self.value is not None) != (self.status == "completed"):
            raise ValueError(f"a {self.status} run's objective cannot be {self.value!r}")

    @property
    def trial_state(self) -> str:
        """Optuna's ``TrialState`` name for this ending."""
        return TRIAL_STATES[self.status]


def job_ending(record: dict[str, Any] | None, status: str | None = None) -> JobEnding:
    """The ending of a run from its record (or, for a run that raised, from its status). A
    completed run without a finite objective (nothing tested) is a failed trial."""
    status = status or (record or {}).get("status") or "failed"
    value = (record or {}).get(OBJECTIVE) if status == "completed" else None
    if is_number(value) and math.isfinite(value):
        return JobEnding(status, float(value))
    return JobEnding("failed" if status == "completed" else status)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def returned_ending(returned: Any) -> JobEnding:
    """What a sweeper makes of a job's return: a ``JobEnding``, or a finite number (a task
    function of another kind) as a completed trial's value; anything else failed."""
    if isinstance(returned, JobEnding):
        return returned
    if is_number(returned):
        return job_ending({"status": "completed", OBJECTIVE: returned})
    return JobEnding("failed")
