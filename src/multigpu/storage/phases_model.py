"""``phases.json``, where a run's steps' time went (``multigpu.callbacks.phase_timer``),
declared once (docs/phases.md). Phase names become report columns: short identifiers, and few."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from multigpu.storage.file_model import FileModel
from multigpu.storage.record_model import Count, about

MAX_PHASES = 64
PhaseName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]


class Timing(FileModel):
    """Milliseconds per step."""

    mean_ms: float = Field(description="the mean")
    sd_ms: float = Field(description="the standard deviation")


# Few phases, and (as pydantic checks, so the JSON Schema says) no key but a phase name.
ByPhase = Field(max_length=MAX_PHASES, json_schema_extra={"additionalProperties": False})
Timings = Annotated[dict[PhaseName, Timing], ByPhase]
Means = Annotated[dict[PhaseName, float], ByPhase]


class PhaseEpoch(FileModel):
    """One epoch's means, over all of its steps."""

    epoch: Count = Field(description="the epoch, counted from 1")
    steps: Count = Field(None, description="its steps")
    phases_ms: Means = Field({}, description="each phase's mean, in ms per step")
    beside_ms: Means = Field({}, description="the same of what overlapped the step")


class Phases(FileModel):
    """Where a run's steps' time went, rewritten at every epoch's end."""

    version: int = Field(alias="schema", ge=1, description="1")
    clock: str | None = about("wall clock (the CPU's perf_counter) or CUDA events")
    steps: Count = Field(description="steps the statistics are over")
    skipped_steps: Count | None = about(
        "the run's first steps, left out (allocation, autotuning, compilation)"
    )
    threads: Count | None = about("torch's intra-op threads")
    step_ms: Timing = Field(description="the step: the sum of the phases without data")
    phases: Timings = Field(description="each phase of the step")
    beside: Timings = Field({}, description="what overlapped the step (DDP's allreduce)")
    epochs: list[PhaseEpoch] = Field([], description="one entry per epoch")
