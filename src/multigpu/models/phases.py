"""Where a training step's time goes: its phases on one timeline, for every strategy.

Code marks a phase with ``with phase("scatter"):`` (or ``enter``/``exit`` across Lightning's
hooks). Phases nest; each instant of a step belongs to the innermost open phase (its *self*
time), and to ``other`` when none is open, so the phases of a step always add up to the step.
Time spent between steps (fetching the next batch, the loop's own work) is the ``data`` phase.

The clock reads markers: ``time.perf_counter()`` on the CPU; on CUDA, events recorded on the
current stream, so the device's time is measured, not the host's launches. Events are read
only in ``collect()``, once per logging interval: no synchronisation per step.

Nothing is recorded unless a clock is active (``PhaseTimer`` activates one with
``phases=true``); ``phase`` then costs a ``nullcontext``. Under ``torch.profiler`` (for
instance ``+trainer.profiler=pytorch``) every phase is also a ``record_function`` range, so
traces show the same names.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

OTHER = "other"  # inside a step, outside every named phase
DATA = "data"  # between steps: waiting for the next batch

# How reports list phases: a step's order, strategies' own phases where they happen.
ORDER = (DATA, "loss", "forward", "scatter", "replicate", "replicas", "gather", "backward",
         "reduce", "allreduce_wait", OTHER, "optimizer", "broadcast")  # fmt: skip

COMPUTE = ("forward", "replicas", "backward")  # the network's own work; the rest is overhead

_active: PhaseClock | None = None


def in_order(names: list[str]) -> list[str]:
    """``names`` as reports list them: ``ORDER`` first, any other after, as found."""
    known = [n for n in ORDER if n in names]
    return known + [n for n in names if n not in ORDER]


def device_now(device: torch.device) -> float:
    """``time.perf_counter()`` once ``device`` has done the work queued on it: the one clock
    every timing of whole steps and epochs reads (the epoch timer, the benchmark's step timer),
    so that a GPU's work is counted in the step that issued it, not in the one that waits."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)
    return time.perf_counter()


def phase(name: str) -> Any:
    """A named phase of the current step, if a clock (or a profiler) is listening."""
    if _active is not None:
        return _active.span(name)
    if profiling():
        from torch.autograd import profiler

        return profiler.record_function(name)
    return nullcontext()


def profiling() -> bool:
    """Whether a ``torch.profiler`` session is recording (read at call time: it changes).
    Reports import this module for ``ORDER`` without torch; a step imported torch long ago."""
    from torch.autograd import profiler

    return profiler._is_profiler_enabled


def active() -> PhaseClock | None:
    return _active


def activate(clock: PhaseClock | None) -> None:
    global _active
    _active = clock


@dataclass
class Step:
    """One step's markers: spans of the timeline, and intervals that overlap it (a
    communication that runs beside the computation, as DDP's bucket allreduce)."""

    spans: list[tuple[str, Any, Any]] = field(default_factory=list)
    beside: dict[str, list[tuple[Any, Any]]] = field(default_factory=dict)


class PhaseClock:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self._open: list[tuple[str, Any]] = []  # (name, profiler range or None)
        self._last: Any = None  # the marker of the timeline's latest boundary
        self._ended: Any = None  # where the previous step ended: the data phase starts
        self._step: Step | None = None
        self._finished: list[Step] = []

    def marker(self) -> Any:
        if self.cuda:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    # The timeline ----------------------------------------------------------------------------
    def resume(self) -> None:
        """Steps follow from here (an epoch starts): the next step's data phase starts now."""
        self._ended = self.marker()

    def start_step(self, first: str) -> None:
        """A step starts, in phase ``first``."""
        self._step, self._open = Step(), []
        self._last = self.marker()
        if self._ended is not None:
            self._step.spans.append((DATA, self._ended, self._last))
        self._open.append((first, self._profiled(first)))

    def end_step(self) -> None:
        if self._step is None:
            return
        if self._open:
            self.exit(self._open[0][0])  # every open phase ends with the step
        else:
            self._boundary()
        self._ended = self._last
        self._finished.append(self._step)
        self._step = None

    def enter(self, name: str) -> None:
        if self._step is None:
            return
        self._boundary()
        self._open.append((name, self._profiled(name)))

    def exit(self, name: str) -> None:
        """Close ``name`` and whatever was left open inside it."""
        if self._step is None or all(open_name != name for open_name, _ in self._open):
            return
        self._boundary()
        while self._open:
            open_name, profiled = self._open.pop()
            if profiled is not None:
                profiled.__exit__(None, None, None)
            if open_name == name:
                break

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        self.enter(name)
        try:
            yield
        finally:
            self.exit(name)

    @staticmethod
    def _profiled(name: str) -> Any:
        """The phase as a profiler range, entered, while a profiler records."""
        if not profiling():
            return None
        from torch.autograd import profiler

        profiled = profiler.record_function(name)
        profiled.__enter__()
        return profiled

    def beside(self, name: str, start: Any, end: Any) -> None:
        """An interval that overlaps the timeline (may be called from another thread)."""
        if self._step is not None:
            self._step.beside.setdefault(name, []).append((start, end))

    def _boundary(self) -> Any:
        now = self.marker()
        assert self._step is not None
        self._step.spans.append((self._open[-1][0] if self._open else OTHER, self._last, now))
        self._last = now
        return now

    # Reading ---------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Finished steps not yet read."""
        return len(self._finished)

    def collect(self) -> list[StepTimes]:
        """The finished steps' times, in seconds; on CUDA this waits for the device."""
        steps, self._finished = self._finished, []
        if not steps:
            return []
        if self.cuda:  # every stream, including the ones DDP's allreduce ran on
            import torch

            torch.cuda.synchronize()
        return [self._seconds(step) for step in steps]

    def _seconds(self, step: Step) -> StepTimes:
        origin = step.spans[0][1]

        def at(marker: Any) -> float:
            if self.cuda:
                return origin.elapsed_time(marker) / 1000
            return marker - origin

        spans = [(name, at(start), at(end)) for name, start, end in step.spans]
        beside = {
            name: [(at(start), at(end)) for start, end in intervals]
            for name, intervals in step.beside.items()
        }
        return StepTimes(spans, beside)


@dataclass
class StepTimes:
    """One step in seconds from its first marker."""

    spans: list[tuple[str, float, float]]
    beside: dict[str, list[tuple[float, float]]]

    def phases(self) -> dict[str, float]:
        """Self time per phase, in the order phases first appear."""
        totals: dict[str, float] = {}
        for name, start, end in self.spans:
            totals[name] = totals.get(name, 0.0) + max(end - start, 0.0)
        return totals

    def end_of(self, name: str) -> float | None:
        ends = [end for span_name, _, end in self.spans if span_name == name]
        return max(ends) if ends else None


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Time covered by at least one interval: buckets that overlap count once."""
    covered, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    return covered
