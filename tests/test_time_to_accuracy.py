"""Time to accuracy: ``wall_s`` in every history entry, ``time_to`` in every record (computed
from the history), the sweep report's ``t<target>_s`` columns and ``acc_vs_time.png``, and the
study report's MLPerf-style time over seeds (docs/records.md, "Time to accuracy")."""

from __future__ import annotations

import csv
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import CONF, TINY, compose_config, examples
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from multigpu.config.schema import Top
from multigpu.storage.atomic import write_json
from multigpu.storage.record import TIME_TO_TARGETS, summarize, time_to
from multigpu.storage.record_file import BadRecord, read_record
from multigpu.tools.report import load_jobs, summarize_jobs, write_report
from multigpu.tools.report.study import mlperf_time, study_rows, to_markdown

SYNTHETIC = [*TINY, "data=synthetic", "data.num_train=64", "data.batch_size=32"]


# A second computation, written independently of multigpu.storage.record.time_to --------------
def expected_time(history: list[dict], target: float) -> dict | None:
    """The first epoch (by index) whose test accuracy is at least ``target``: its epoch, the
    sum of the training times up to it, its wall time."""
    accs = [h.get("test_acc") for h in history]
    hits = [i for i, acc in enumerate(accs) if acc is not None and acc >= np.float32(target)]
    if not hits:
        return None
    first = hits[0]
    trained = [h.get("epoch_s") for h in history[: first + 1]]
    train_s = None if None in trained else math.fsum(trained)
    return {
        "epoch": history[first]["epoch"],
        "train_s": train_s,
        "wall_s": history[first]["wall_s"],
    }


def assert_same_times(found: dict, history: list[dict], targets) -> None:
    """Each target as the record names it (6 significant digits: two alike are one)."""
    targets = sorted({float(f"{t:g}") for t in targets})
    assert list(found) == [f"{t:g}" for t in targets]
    for target in targets:
        expected, got = expected_time(history, target), found[f"{target:g}"]
        if expected is None:
            assert got is None, target
            continue
        assert got["epoch"] == expected["epoch"] and got["wall_s"] == expected["wall_s"]
        if expected["train_s"] is None:
            assert got["train_s"] is None
        else:
            assert got["train_s"] == pytest.approx(expected["train_s"], rel=1e-12)


def entry(epoch: int, acc: float | None, epoch_s: float | None, wall_s: float | None) -> dict:
    speed = {"samples_per_s": 100.0, "train_loss": 1.0, "train_acc": 0.5}
    return {"epoch": epoch, "test_acc": acc, "epoch_s": epoch_s, "wall_s": wall_s, **speed}


# Accuracy 0.81 at epoch 1, 0.905 at 3, a dip to 0.88 at 4, never 0.92.
DIPPING = [
    entry(1, 0.81, 3.0, 5.0),
    entry(2, 0.86, 2.0, 7.5),
    entry(3, 0.905, 2.5, 10.5),
    entry(4, 0.88, 2.0, 13.0),
    entry(5, 0.915, 2.0, 15.5),
]


def test_each_target_gets_the_first_epoch_that_reached_it():
    found = time_to(DIPPING)
    assert_same_times(found, DIPPING, TIME_TO_TARGETS)
    assert found["0.8"] == {"epoch": 1, "train_s": 3.0, "wall_s": 5.0}  # reached at epoch 1
    assert found["0.85"] == {"epoch": 2, "train_s": 5.0, "wall_s": 7.5}
    assert found["0.9"] == {"epoch": 3, "train_s": 7.5, "wall_s": 10.5}  # the dip changes nothing
    assert found["0.92"] is None  # never reached


def test_float32_accuracy_at_the_target_reaches_it_and_gaps_are_kept():
    exactly = float(np.float32(0.9))  # 0.8999999762: 90% as the metric reports it
    assert exactly < 0.9
    history = [
        entry(1, None, 2.0, 3.0),  # no evaluation this epoch
        entry(2, 0.8999, 2.0, 6.0),  # a sample short of 90% of 10 000
        entry(3, exactly, None, 9.0),  # not timed: no training time from here on
        entry(4, 0.95, 2.0, None),  # no wall time (a carried history of an older version)
    ]
    found = time_to(history, [0.9, 0.95, 0.5])
    assert_same_times(found, history, [0.9, 0.95, 0.5])
    assert found["0.9"] == {"epoch": 3, "train_s": None, "wall_s": 9.0}
    assert found["0.5"]["epoch"] == 2 and found["0.5"]["train_s"] == 4.0
    assert found["0.95"] == {"epoch": 4, "train_s": None, "wall_s": None}
    assert time_to([], [0.9]) == {"0.9": None} and time_to(history, []) == {}
    # Two targets that read alike are one: the second's miss had replaced the first's hit.
    assert time_to(history, [0.95, 0.9500001]) == {"0.95": found["0.95"]}


accuracies = st.one_of(st.none(), st.floats(0, 1), st.sampled_from([0.8, 0.85, 0.9, 0.92]))
seconds = st.one_of(st.none(), st.floats(0.01, 1e4))


@examples(200)
@given(
    st.lists(st.tuples(accuracies, seconds, st.floats(0.01, 100)), max_size=12),
    st.lists(
        st.one_of(
            st.sampled_from([0.1, 0.5, 0.8, 0.85, 0.9, 0.92, 0.99, 1.0, 0.90000001, 0.8999999]),
            st.floats(0, 1),
        ),
        max_size=5,
    ),
)
def test_times_match_a_second_computation_on_generated_histories(epochs, targets):
    history, wall = [], 0.0
    for number, (acc, epoch_s, gap) in enumerate(epochs, start=1):
        wall += gap
        stored = None if acc is None else float(np.float32(acc))  # as the metric stores it
        history.append(entry(number, stored, epoch_s, wall))
    assert_same_times(time_to(history, targets), history, set(targets))


def test_the_record_gives_the_configured_targets_and_the_defaults_agree():
    record = summarize(DIPPING, {}, time_to_targets=[0.9, 0.5])
    assert list(record["time_to"]) == ["0.5", "0.9"]
    assert record["time_to"]["0.9"] == {"epoch": 3, "train_s": 7.5, "wall_s": 10.5}
    assert list(summarize(DIPPING, {})["time_to"]) == ["0.8", "0.85", "0.9", "0.92"]
    config = OmegaConf.load(CONF / "config.yaml")
    assert list(config.time_to_targets) == Top().time_to_targets == list(TIME_TO_TARGETS)


# The MLPerf-style time over seeds ---------------------------------------------------------------
def test_mlperf_time_drops_the_fastest_and_the_slowest():
    assert mlperf_time([5.0, 1.0, 3.0, 10.0]) == 4.0  # 3 and 5
    assert mlperf_time([1.0, 2.0, 9.0]) == 2.0
    assert mlperf_time([9.0, 1.0, 2.0, 3.0, 100.0]) == pytest.approx(statistics.mean([2, 3, 9]))
    assert mlperf_time([1.0, None, 3.0, 5.0]) == 4.0  # one miss: the slowest, dropped
    assert mlperf_time([1.0, None, 3.0, None]) is None  # two misses: no time
    assert mlperf_time([2.0, 4.0]) == 3.0  # fewer than 3 seeds: the plain mean
    assert mlperf_time([7.0]) == 7.0
    assert mlperf_time([2.0, None]) is None and mlperf_time([]) is None


def run_settings(devices: int = 1, seed: int = 0) -> dict[str, Any]:
    return {
        "strategy": "ddp" if devices > 1 else "single",
        "accelerator": "cpu",
        "devices": devices,
        "num_nodes": 1,
        "batch_size": 256 * devices,
        "lr": 0.1 * devices,
        "precision": "32-true",
        "width": 4,
        "max_epochs": 4,
        "seed": seed,
        "data": "synthetic",
    }


def scaled(history: list[dict], factor: float, accs: list[float] | None = None) -> list[dict]:
    """``history`` with every time times ``factor`` (and other accuracies)."""
    accs = accs or [h["test_acc"] for h in history]
    return [
        {**h, "test_acc": acc, "epoch_s": h["epoch_s"] * factor, "wall_s": h["wall_s"] * factor}
        for h, acc in zip(history, accs, strict=True)
    ]


def write_job(folder: Path, history: list[dict], run: dict | None = None, **start: Any) -> None:
    """A completed job's record as a run writes it."""
    written = summarize(history, run or run_settings(), run_id="0123abcd", **start)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "metrics.json", {**written, "status": "completed"})


def test_the_study_gives_each_row_the_mlperf_time_over_its_seeds(tmp_path):
    factors = {1: 1.0, 2: 1.5, 3: 0.8, 4: 3.0}
    for seed, factor in factors.items():
        accs = [0.5, 0.6, 0.7, 0.86, 0.86] if seed == 3 else None  # 0.8 at epoch 4, never 0.9
        history = scaled(DIPPING, factor, accs)
        write_job(tmp_path / "row" / f"seed={seed}", history, run_settings(seed=seed))
    (row,) = study_rows(tmp_path)
    expected = {  # each seed's wall time (``DIPPING``'s, scaled), the mean of the middle two
        0.8: ([5.0, 7.5, 13.0 * 0.8, 15.0], statistics.mean([7.5, 13.0 * 0.8])),
        0.85: ([7.5, 11.25, 13.0 * 0.8, 22.5], statistics.mean([11.25, 13.0 * 0.8])),
        0.9: ([10.5, 15.75, None, 31.5], statistics.mean([15.75, 31.5])),  # the miss dropped
        0.92: ([None] * 4, None),
    }
    assert list(row["time_to"]) == list(expected)
    for target, (times, mlperf) in expected.items():
        found = row["time_to"][target]
        assert found["times"] == pytest.approx(times) and found["missed"] == times.count(None)
        assert found["mlperf"] == (None if mlperf is None else pytest.approx(mlperf))
    header, _, line = to_markdown([row]).splitlines()[:3]
    assert header.endswith(
        "| time to 0.8, s | time to 0.85, s | time to 0.9, s | time to 0.92, s |"
    )
    cells = [f"{expected[0.8][1]:.1f}", f"{expected[0.85][1]:.1f}"]
    cells += [f"{expected[0.9][1]:.1f} (1 of 4 missed)", "- (4 of 4 missed)"]
    assert line.endswith("| " + " | ".join(cells) + " |")
    assert "the fastest and the slowest seed dropped" in to_markdown([row])


def test_a_study_of_fewer_than_three_seeds_takes_the_plain_mean(tmp_path):
    for seed, factor in {1: 1.0, 2: 3.0}.items():
        write_job(tmp_path / "row" / f"{seed}", scaled(DIPPING, factor), run_settings(seed=seed))
    (row,) = study_rows(tmp_path)
    assert row["time_to"][0.9]["mlperf"] == pytest.approx(statistics.mean([10.5, 31.5]))


# The sweep report -------------------------------------------------------------------------------
def test_the_report_gives_wall_time_columns_and_the_accuracy_against_time_plot(tmp_path):
    fast, slow = scaled(DIPPING, 1.0), scaled(DIPPING, 2.0)
    write_job(tmp_path / "one", fast)
    write_job(tmp_path / "two", slow, run_settings(devices=2))
    write_job(tmp_path / "half", fast, time_to_targets=[0.5, 0.9])
    unclocked = [{k: v for k, v in h.items() if k != "wall_s"} for h in fast]
    old = {**summarize(unclocked, run_settings()), "status": "completed"}
    del old["time_to"]  # a record of an older version
    (tmp_path / "old").mkdir()
    write_json(tmp_path / "old" / "metrics.json", old)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "metrics.json").write_text('{"schema": 3, "status": "comp')

    rows = write_report(tmp_path)
    by_job = {row["job"]: row for row in rows}
    assert (by_job["one"]["t80_s"], by_job["one"]["t90_s"], by_job["one"]["t92_s"]) == (
        5.0, 10.5, None,
    )  # fmt: skip
    assert by_job["two"]["t85_s"] == 15.0 and by_job["two"]["t90_s"] == 21.0
    assert by_job["half"]["t50_s"] == 5.0 and by_job["half"]["t90_s"] == 10.5
    assert "t80_s" not in by_job["half"]
    assert by_job["old"]["t80_s"] is None  # reached, but no wall time recorded then
    assert not [k for k in by_job["bad"] if k.startswith("t") and k.endswith("_s")]
    with open(tmp_path / "summary.csv") as f:
        header = next(csv.reader(f))
    at = header.index("best_test_acc")
    assert header[at + 1 : at + 6] == ["t50_s", "t80_s", "t85_s", "t90_s", "t92_s"]
    assert "| t50_s | t80_s | t85_s | t90_s | t92_s |" in (tmp_path / "summary.md").read_text()

    plot = tmp_path / "acc_vs_time.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert 15_000 < plot.stat().st_size < 500_000


def test_a_wall_time_that_is_not_a_number_is_refused_by_the_reader(tmp_path):
    with pytest.raises(ValueError, match="wall_s"):  # the writer builds no such record
        summarize([{**DIPPING[0], "wall_s": "5"}], run_settings())
    write_job(tmp_path / "job", DIPPING[:1])  # then made one by hand
    path = tmp_path / "job" / "metrics.json"
    written = json.loads(path.read_text())
    written["history"][0]["wall_s"] = "5"
    path.write_text(json.dumps(written))
    with pytest.raises(
        BadRecord, match=r'history\[0\]\.wall_s is "5", not a number from 0 or null'
    ):
        read_record(tmp_path / "job" / "metrics.json")
    (row,) = summarize_jobs(load_jobs(tmp_path))
    assert row["status"] == "unreadable"


# Real runs --------------------------------------------------------------------------------------
def test_a_run_records_wall_time_and_its_time_to_accuracy(tmp_path):
    """Three epochs in-process, then a resumed fourth: the history's wall times increase by at
    least each epoch's training time, ``time_to`` is the history's, the resume continues the
    clock, and TensorBoard's test/acc points are as far apart in time as the history's."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from multigpu.run.training import train

    targets = ["time_to_targets=[0.001,0.99]"]
    first = tmp_path / "first"
    began = time.monotonic()
    record = train(compose_config([*SYNTHETIC, "trainer.max_epochs=3", *targets], first))
    elapsed = time.monotonic() - began
    history = record["history"]
    assert record["status"] == "completed" and len(history) == 3
    walls = [h["wall_s"] for h in history]
    assert 0 < history[0]["epoch_s"] < walls[0] < elapsed
    for before, after in zip(history, history[1:], strict=False):
        assert after["wall_s"] - before["wall_s"] >= after["epoch_s"]
    assert walls[-1] < elapsed
    assert_same_times(record["time_to"], history, [0.001, 0.99])
    assert record["time_to"]["0.001"]["epoch"] == 1  # chance accuracy on 256 random images
    assert json.loads((first / "metrics.json").read_text())["time_to"] == record["time_to"]

    events = EventAccumulator(str(first))
    events.Reload()
    logged = [e.wall_time for e in events.Scalars("test/acc")]
    assert len(logged) == 3
    for i in (1, 2):  # TensorBoard's Relative axis: time since the first evaluation
        assert logged[i] - logged[0] == pytest.approx(walls[i] - walls[0], abs=0.25)

    # A resume, with other targets (what the record reports, not what the run computes).
    ckpt = first / "checkpoints" / "last.ckpt"
    began = time.monotonic()
    overrides = [*SYNTHETIC, "trainer.max_epochs=4", f"ckpt_path={ckpt}", "time_to_targets=[0.5]"]
    resumed = train(compose_config(overrides, tmp_path / "second"))
    elapsed = time.monotonic() - began
    carried, last = resumed["history"][:3], resumed["history"][3]
    assert carried == history  # the earlier epochs' wall times as they were
    assert walls[-1] + last["epoch_s"] <= last["wall_s"] <= walls[-1] + elapsed
    assert list(resumed["time_to"]) == ["0.5"]
    assert_same_times(resumed["time_to"], resumed["history"], [0.5])


@pytest.mark.parametrize("targets", ["[85]", "[0]", "[0.9,1.5]"])
def test_targets_are_accuracies_between_0_and_1(targets):
    from conftest import compose_config, resolve_on

    from multigpu.config.errors import UserError

    with pytest.raises(UserError, match=r"time_to_targets=.* must hold accuracies above 0"):
        resolve_on(compose_config([f"time_to_targets={targets}"], Path("/tmp/x")))
