"""Per-phase timing (``phases=true``): the timeline's attribution, DDP's allreduce split, and
real runs of every strategy whose phases add up to the epoch time measured beside them."""

from __future__ import annotations

import itertools
import json

import pytest
import torch
from conftest import TINY, run_script, tensorboard_scalars

from multigpu.callbacks.phase_timer import OVERLAP, WAIT, PhaseStats, split_allreduce
from multigpu.models.phases import DATA, OTHER, PhaseClock, StepTimes, union_length
from multigpu.tools.report import write_report


def ticking_clock() -> PhaseClock:
    """A CPU clock whose markers are 0, 1, 2, ...: each boundary is one second later."""
    clock = PhaseClock(torch.device("cpu"))
    ticks = itertools.count()
    clock.marker = lambda: float(next(ticks))
    return clock


def test_each_instant_belongs_to_the_innermost_open_phase():
    clock = ticking_clock()
    clock.resume()  # 0
    clock.start_step("loss")  # 1: data 0-1, loss opens
    clock.enter("forward")  # 2: loss 1-2
    with clock.span("scatter"):  # 3: forward 2-3; scatter 3-4
        pass
    clock.exit("forward")  # 5: forward 4-5
    clock.exit("loss")  # 6: loss 5-6
    clock.enter("backward")  # 7: other 6-7
    clock.end_step()  # 8: backward 7-8, closed by the step's end
    clock.start_step("loss")  # 9: data 8-9
    clock.end_step()  # 10: loss 9-10
    first, second = clock.collect()
    assert first.phases() == {DATA: 1, "loss": 2, "forward": 2, "scatter": 1, OTHER: 1,
                              "backward": 1}  # fmt: skip
    assert sum(first.phases().values()) == 8  # the step and the wait before it, all of it
    assert second.phases() == {DATA: 1, "loss": 1}
    assert clock.pending == 0


def test_exiting_a_phase_closes_what_was_left_open_inside_it():
    clock = ticking_clock()
    clock.start_step("loss")  # 0
    clock.enter("forward")  # 1
    clock.enter("replicas")  # 2
    clock.exit("loss")  # 3: replicas 2-3; forward and replicas closed with loss
    clock.exit("forward")  # not open any more: ignored
    clock.end_step()  # 4: other 3-4
    (step,) = clock.collect()
    assert step.phases() == {"loss": 1, "forward": 1, "replicas": 1, OTHER: 1}


def test_nothing_is_recorded_outside_a_step():
    clock = ticking_clock()
    clock.enter("forward")
    clock.exit("forward")
    clock.end_step()
    assert clock.collect() == []


def test_union_length_counts_overlapping_buckets_once():
    intervals = [(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (5.5, 5.7), (2.9, 3.1)]
    grid = [i / 1000 for i in range(7000)]  # a second computation: 1 ms cells
    covered = sum(any(a <= t < b for a, b in intervals) for t in grid) / 1000
    assert union_length(intervals) == pytest.approx(covered, abs=2e-3)
    assert union_length([]) == 0.0


def test_allreduce_is_split_into_the_wait_after_backward_and_the_overlap():
    # backward 1-10 s; buckets ready at 4 and 7, done at 8 and 12 (the backward waits to 12)
    step = StepTimes(
        spans=[("loss", 0.0, 1.0), ("backward", 1.0, 12.0), ("optimizer", 12.0, 13.0)],
        beside={"allreduce": [(4.0, 8.0), (7.0, 12.0)]},
    )
    times, beside = split_allreduce(step)
    assert times[WAIT] == pytest.approx(12.0 - 7.0)  # from the last bucket ready to the end
    assert times["backward"] == pytest.approx(11.0 - 5.0)
    assert beside[OVERLAP] == pytest.approx((12.0 - 4.0) - 5.0)  # busy time not waited for
    assert sum(times.values()) == pytest.approx(13.0)  # still the whole step
    plain = StepTimes(spans=[("backward", 0.0, 2.0)], beside={})
    assert split_allreduce(plain) == ({"backward": 2.0}, {})


def test_phase_statistics_against_numpy():
    import numpy as np

    steps = [{DATA: 0.5, "loss": 1.0}, {DATA: 0.1, "loss": 3.0, "reduce": 2.0}, {"loss": 2.0}]
    stats = PhaseStats()
    for times in steps:
        stats.add(times, {})
    summary = stats.summary()
    assert list(summary) == [DATA, "loss", "reduce"]
    for name, (mean, sd) in summary.items():
        values = np.array([s.get(name, 0.0) for s in steps])
        assert mean == pytest.approx(values.mean())
        assert sd == pytest.approx(values.std(ddof=1))
    totals = np.array([sum(v for k, v in s.items() if k != DATA) for s in steps])
    assert stats.step_summary() == pytest.approx((totals.mean(), totals.std(ddof=1)))


STRATEGIES = {
    "single": (["strategy=single"], {"forward", "backward", "optimizer"}),
    "dp": (["strategy=dp"], {"forward", "backward", "optimizer"}),  # on the CPU: one device
    "scatter_allreduce": (
        ["strategy=scatter_allreduce", "trainer.devices=2"],
        {"scatter", "replicas", "gather", "reduce", "broadcast"},
    ),
    "ddp": (["strategy=ddp", "trainer.devices=2"], {"forward", "backward", WAIT}),
}
SMALL = [*TINY, "data=synthetic", "data.num_train=512", "data.batch_size=64", "seed=3"]


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "name",
    [
        pytest.param("single"),
        pytest.param("dp", marks=pytest.mark.slow),  # in-process, as scatter_allreduce below
        pytest.param("scatter_allreduce", marks=pytest.mark.slow),
        pytest.param("ddp", marks=[pytest.mark.distributed, pytest.mark.slow]),
    ],
)
def test_phases_add_up_to_the_measured_epoch(tmp_path, name):
    overrides, expected = STRATEGIES[name]
    args = [*SMALL, *overrides, "trainer.max_epochs=2", "phases=true", f"hydra.run.dir={tmp_path}"]
    result = run_script("train.py", *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    phases = json.loads((tmp_path / "phases.json").read_text())
    history = json.loads((tmp_path / "metrics.json").read_text())["history"]
    assert expected <= set(phases["phases"]) and {DATA, "loss"} <= set(phases["phases"])
    assert phases["steps"] == 2 * 8 - phases["skipped_steps"]
    assert [e["steps"] for e in phases["epochs"]] == [8, 8]
    for epoch, record in zip(phases["epochs"], history, strict=True):
        summed = sum(epoch["phases_ms"].values()) * epoch["steps"] / 1000
        assert summed == pytest.approx(record["epoch_s"], rel=0.10), (epoch, record)
    step = sum(p["mean_ms"] for n, p in phases["phases"].items() if n != DATA)
    assert step == pytest.approx(phases["step_ms"]["mean_ms"], rel=1e-3)
    (row,) = write_report(tmp_path)  # the report of a folder holding this one job
    assert row["step_ms"] == phases["step_ms"]["mean_ms"]
    assert all(row[f"{n}_ms"] == p["mean_ms"] for n, p in phases["phases"].items())
    assert "backward_ms" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "phases.png").stat().st_size > 10_000
    scalars = tensorboard_scalars(tmp_path)
    assert [step for step, _ in scalars["phase/backward_ms"]] == [1, 2]  # by epoch, from 1
    for (_, value), epoch in zip(scalars["phase/backward_ms"], phases["epochs"], strict=True):
        assert value == pytest.approx(epoch["phases_ms"]["backward"], rel=1e-3)


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "name",
    [
        pytest.param("scatter_allreduce", marks=pytest.mark.slow),
        pytest.param("ddp", marks=[pytest.mark.distributed, pytest.mark.slow]),
    ],
)
def test_timing_phases_changes_no_weight(tmp_path, name):
    overrides, _ = STRATEGIES[name]
    weights = {}
    for phases in ("true", "false"):
        folder = tmp_path / phases
        args = [*SMALL, *overrides, f"phases={phases}", f"hydra.run.dir={folder}"]
        result = run_script("train.py", *args, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        checkpoint = torch.load(folder / "checkpoints" / "last.ckpt", weights_only=True)
        weights[phases] = checkpoint["state_dict"]
    short = json.loads((tmp_path / "true" / "phases.json").read_text())  # 8 steps, 1 epoch
    assert short["steps"] == 8 - short["skipped_steps"] and short["step_ms"]["mean_ms"] > 0
    assert not (tmp_path / "false" / "phases.json").exists()
    for key, value in weights["false"].items():
        assert torch.equal(weights["true"][key], value), key
