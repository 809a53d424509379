"""The one reader of ``metrics.json`` and ``phases.json`` (``multigpu.storage.record_file``), the
sweep report that lists a bad file as a bad row and goes on, its speedup baseline, and strict JSON.

Named cases first, then generated ones: a real record mutated (a key deleted, a value of
another type, bytes cut or flipped, a huge string) is either read or refused in one line, and
the report over it and a good job never raises and leaves the good row as it was.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from conftest import examples
from hypothesis import given
from hypothesis import strategies as st

from multigpu.storage.atomic import write_json
from multigpu.storage.record import RunRecord, summarize
from multigpu.storage.record_file import MAX_BYTES, MAX_STRING, BadRecord, read_phases, read_record
from multigpu.tools.report import load_jobs, summarize_jobs, write_report
from multigpu.tools.report.summary import CELL_CHARS, UNREADABLE, to_csv, to_markdown, to_text


# A real record and phases report -----------------------------------------------------------------
def run_settings(devices: int = 1, batch_size: int = 32, lr: float = 0.1) -> dict[str, Any]:
    """``run`` as ``multigpu.config.settings.Run.record`` writes it."""
    return {
        "strategy": "ddp" if devices > 1 else "single",
        "accelerator": "cpu",
        "device_ids": list(range(devices)),
        "num_nodes": 1,
        "processes": devices,
        "launcher": "popen" if devices > 1 else "none",
        "batch_size": batch_size,
        "process_batch_size": batch_size // devices,
        "lr": lr,
        "warmup_epochs": 0.0,
        "warmup_from": 0.0,
        "precision": "32-true",
        "width": 4,
        "norm": "batch",
        "max_epochs": 3,
        "seed": 0,
        "data": "synthetic",
        "devices": devices,
    }


def history(samples_per_s: float = 400.0, epochs: int = 3) -> list[dict[str, Any]]:
    return [
        {
            "epoch": epoch,
            "train_loss": 2.0 / epoch,
            "train_acc": 0.3 + 0.1 * epoch,
            "lr": 0.1,
            "test_acc": 0.4 + 0.1 * epoch,
            "val_acc": None,
            "epoch_s": 2.5,
            "samples_per_s": samples_per_s * (1 + epoch / 100),
            "peak_gpu_mb": None,
        }
        for epoch in range(1, epochs + 1)
    ]


def record(status: str = "completed", samples_per_s: float = 400.0, **run: Any) -> dict:
    """A record as a run writes it, with the keys being added beside (settings, run_id...)."""
    written = summarize(history(samples_per_s), run_settings(**run))
    extra = {"settings": {"model.lr": 0.1}, "run_id": "0123abcd", "resumed_from": None}
    return {**extra, **written, "status": status, "init_from": None}


def phases_report() -> dict[str, Any]:
    """``phases.json`` as ``PhaseTimer.report`` writes it."""
    timing = {"mean_ms": 1.5, "sd_ms": 0.25}
    return {
        "schema": 1,
        "clock": "wall clock",
        "steps": 12,
        "skipped_steps": 5,
        "threads": 2,
        "step_ms": {"mean_ms": 6.0, "sd_ms": 0.5},
        "phases": {"data": timing, "loss": timing, "forward": timing, "backward": timing},
        "beside": {"allreduce_overlap": timing},
        "epochs": [{"epoch": 1, "steps": 12, "phases_ms": {"forward": 1.5}, "beside_ms": {}}],
    }


def write_job(sweep: Path, name: str, content: dict | str | bytes, phases: Any = None) -> Path:
    folder = sweep / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "metrics.json"
    write_raw(path, content)
    if phases is not None:
        write_raw(folder / "phases.json", phases)
    return path


def write_raw(path: Path, content: dict | str | bytes) -> None:
    if isinstance(content, dict):
        write_json(path, content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_bytes(content)


def rows_of(sweep: Path) -> dict[str, dict[str, Any]]:
    return {row["job"]: row for row in summarize_jobs(load_jobs(sweep))}


def assert_refused(path: Path, reader=read_record) -> str:
    """The one exception, in one line that names the file; returns its problem."""
    with pytest.raises(BadRecord) as refused:
        reader(path)
    text = str(refused.value)
    assert "\n" not in text and "\r" not in text and text.startswith(f"{path}: ")
    return refused.value.problem


# Named cases --------------------------------------------------------------------------------------
def mutated(change) -> dict:
    bad = record()
    change(bad)
    return bad


NAMED_BAD = {
    "truncated": json.dumps(record(), indent=2)[:300],
    "status 5": mutated(lambda r: r.update(status=5)),
    "history a dict": mutated(lambda r: r.update(history={"epoch": 1})),
    'epoch "x"': mutated(lambda r: r["history"][1].update(epoch="x")),
    'test_acc "abc"': mutated(lambda r: r.update(test_acc="abc")),
    "a list, not an object": "[1, 2]",
    "run missing": mutated(lambda r: r.pop("run")),
    "completed without lr": mutated(lambda r: r["run"].pop("lr")),
    "an empty file": "",
    "only spaces": "  \n",
    "nested 10^5 deep": "[" * 100_000 + "]" * 100_000,
    "objects nested 10^5 deep": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "nested 40 deep": mutated(lambda r: r.update(extra=json.loads("[" * 40 + "]" * 40))),
    "not UTF-8": json.dumps(record())
    .replace("single", "sin\udcffgle")
    .encode(errors="surrogateescape"),
    "an integer of 5000 digits": json.dumps(record()).replace(
        '"epochs": 3', f'"epochs": {"9" * 5000}'
    ),
    "a 70 000 character reason": mutated(lambda r: r.update(reason="x" * 70_000)),
}
EXPECTED_PROBLEM = {
    "truncated": "ends in the middle of its JSON",
    "status 5": "status is 5, not one of running, completed",
    "history a dict": "history is an object, not a list",
    'epoch "x"': 'history[1].epoch is "x", not a whole number from 0',
    'test_acc "abc"': 'test_acc is "abc", not a number from 0 to 1 or null',
    "a list, not an object": "holds a list of 2, not an object",
    "run missing": "run is missing",
    "completed without lr": "run.lr is missing",
    "an empty file": "is empty",
    "only spaces": "is empty",
    "nested 10^5 deep": "nests deeper than 32 levels",
    "objects nested 10^5 deep": "nests deeper than 32 levels",
    "nested 40 deep": "nests deeper than 32 levels",
    "not UTF-8": "is not UTF-8 text (byte 0xff",
    "an integer of 5000 digits": "is not valid JSON",
    "a 70 000 character reason": f"reason is a string of 70000 characters (at most {MAX_STRING})",
}


@pytest.mark.parametrize("case", list(NAMED_BAD))
def test_a_bad_record_is_refused_in_one_line_and_listed_as_a_bad_row(tmp_path, case):
    good = write_job(tmp_path, "a_good", record())
    bad = write_job(tmp_path, "b_bad", NAMED_BAD[case])
    assert EXPECTED_PROBLEM[case] in assert_refused(bad)
    rows = rows_of(tmp_path)
    assert rows["a_good"]["status"] == "completed"
    assert rows["a_good"]["test_acc"] == read_record(good)["test_acc"]
    assert rows["b_bad"]["status"] == UNREADABLE
    assert rows["b_bad"]["reason"].startswith("b_bad/metrics.json: ")
    assert EXPECTED_PROBLEM[case][:60] in rows["b_bad"]["reason"]


def test_a_folder_named_metrics_json_is_a_bad_row(tmp_path):
    write_job(tmp_path, "a_good", record())
    (tmp_path / "b" / "metrics.json").mkdir(parents=True)
    assert assert_refused(tmp_path / "b" / "metrics.json") == "is a folder, not a file"
    assert rows_of(tmp_path)["b"]["reason"] == "b/metrics.json: is a folder, not a file"


def test_a_fifo_named_metrics_json_is_refused_without_opening_it(tmp_path):
    os.mkfifo(tmp_path / "metrics.json")  # opening it would wait for a writer forever
    assert assert_refused(tmp_path / "metrics.json") == "is not a regular file"


def test_a_missing_record_is_refused_and_run_record_reads_none(tmp_path):
    assert assert_refused(tmp_path / "metrics.json") == "does not exist"
    assert RunRecord(tmp_path / "metrics.json", {}).read() is None
    write_job(tmp_path, ".", NAMED_BAD["truncated"])
    assert RunRecord(tmp_path / "metrics.json", {}).read() is None
    write_job(tmp_path, ".", record())
    assert RunRecord(tmp_path / "metrics.json", {}).read()["status"] == "completed"


def test_a_record_as_the_project_writes_it_is_read_back_unchanged(tmp_path):
    written = record()
    written["history"][0]["train_loss"] = float("nan")  # a diverging epoch
    path = write_job(tmp_path, "job", written)
    read = read_record(path)
    assert read["history"][0]["train_loss"] is None
    read["history"][0]["train_loss"] = written["history"][0]["train_loss"] = None
    assert read == written


def test_records_of_schema_2_are_upgraded_when_read(tmp_path):
    old = {**record(), "schema": 2, "best_epoch": 2}
    old["history"] = [{**h, "epoch": h["epoch"] - 1} for h in old["history"]]  # from 0
    read = read_record(write_job(tmp_path, "job", old))
    assert [h["epoch"] for h in read["history"]] == [1, 2, 3] and read["best_epoch"] == 3


def test_a_schema_2_record_ended_by_its_launcher_keeps_its_best_epoch(tmp_path):
    """``record_ending`` writes back what it read (upgraded, still schema 2): read again, the
    best epoch is the same epoch, not moved once more."""
    from multigpu.storage.outcome import Outcome
    from multigpu.storage.record import record_ending

    old = {**record("running"), "schema": 2, "best_epoch": 2}
    old["history"] = [{**h, "epoch": h["epoch"] - 1} for h in old["history"]]  # from 0
    path = write_job(tmp_path, "job", old)
    record_ending(path, Outcome("failed", "its job died", 1))
    read = read_record(path)
    assert (read["status"], read["best_epoch"]) == ("failed", 3)
    assert read["history"][read["best_epoch"] - 1]["test_acc"] == read["best_test_acc"]


def test_bare_nan_written_by_older_versions_is_read_as_null(tmp_path):
    """Decided: NaN, Infinity and a float beyond a double meant "no finite value", which is
    what null means now; the row keeps its status (here diverged)."""
    older = {**record("diverged"), "train_loss": 11.5, "test_acc": 12.5, "train_acc": 13.5}
    older["history"][-1]["test_acc"] = 12.5  # test_acc is the last epoch's, in every version
    older |= {"best_test_acc": older["history"][1]["test_acc"], "best_epoch": 2}  # a finite one
    text = json.dumps(older).replace('"train_loss": 11.5', '"train_loss": NaN')
    text = text.replace('"test_acc": 12.5', '"test_acc": -Infinity')
    text = text.replace('"train_acc": 13.5', '"train_acc": 1e999')
    assert (text.count("NaN"), text.count("Infinity"), text.count("1e999")) == (1, 2, 1)
    read = read_record(write_job(tmp_path, "job", text))
    assert (read["train_loss"], read["test_acc"], read["train_acc"]) == (None, None, None)
    assert read["history"][-1]["test_acc"] is None
    assert rows_of(tmp_path)["job"]["status"] == "diverged"


def huge_reason_file(path: Path, megabytes: int) -> None:
    """A record whose reason is ``megabytes`` MiB, written without holding it in memory."""
    path.parent.mkdir(parents=True)
    head = json.dumps({**record("failed"), "reason": "REASON"}).split('"REASON"')
    with open(path, "w") as file:
        file.write(head[0] + '"')
        for _ in range(megabytes):
            file.write("x" * 2**20)
        file.write('"' + head[1])


def test_a_100_mb_reason_is_not_read_and_the_report_stays_small(tmp_path):
    write_job(tmp_path, "a_good", record())
    huge = tmp_path / "b_huge" / "metrics.json"
    huge_reason_file(huge, 100)
    assert "is 100.0 MiB, more than such a file can be (10 MiB): not read" in assert_refused(huge)
    tracemalloc.start()
    try:
        rows = rows_of(tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 * 2**20  # the file was never read
    assert rows["b_huge"]["status"] == UNREADABLE and len(rows["b_huge"]["reason"]) < 200
    write_report(tmp_path)
    assert (tmp_path / "summary.md").stat().st_size < 4000
    assert (tmp_path / "summary.csv").stat().st_size < 4000


def test_a_long_reason_within_the_bounds_is_cut_in_the_report(tmp_path):
    write_job(tmp_path, "job", {**record("failed"), "reason": "why " * 10_000})
    (row,) = rows_of(tmp_path).values()
    assert row["status"] == "failed" and len(row["reason"]) == CELL_CHARS
    assert row["reason"].startswith("why why") and row["reason"].endswith("...")


def test_a_file_just_over_the_size_cap_is_refused(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(record()) + " " * MAX_BYTES)
    assert "more than such a file can be" in assert_refused(path)


# phases.json ------------------------------------------------------------------------------------
def test_good_phases_give_phase_columns(tmp_path):
    write_job(tmp_path, "job", record(), phases=phases_report())
    (row,) = rows_of(tmp_path).values()
    assert (row["step_ms"], row["forward_ms"], row["reason"]) == (6.0, 1.5, "")
    assert read_phases(tmp_path / "job" / "phases.json") == phases_report()


BAD_PHASES = {
    "truncated": (json.dumps(phases_report())[:50], "ends in the middle"),
    "phases a list": ({**phases_report(), "phases": []}, "phases is a list of 0, not an object"),
    "mean_ms a string": (
        {**phases_report(), "step_ms": {"mean_ms": "6", "sd_ms": 0}},
        'step_ms.mean_ms is "6", not a number',
    ),
    "a phase named with a newline": (
        {**phases_report(), "phases": {"a\nb": {"mean_ms": 1, "sd_ms": 0}}},
        'phases has a key "a\\nb", not a string matching ^[A-Za-z_][A-Za-z0-9_]{0,63}$',
    ),
    "10 000 phases": (
        {**phases_report(), "phases": {f"p{i}": {"mean_ms": 1, "sd_ms": 0} for i in range(10**4)}},
        "phases has 10000 keys (at most 64)",
    ),
    "steps missing": (
        {k: v for k, v in phases_report().items() if k != "steps"},
        "steps is missing",
    ),
}


@pytest.mark.parametrize("case", list(BAD_PHASES))
def test_a_bad_phases_file_keeps_the_job_row_without_phase_columns(tmp_path, case):
    content, problem = BAD_PHASES[case]
    write_job(tmp_path, "job", record(), phases=content)
    assert problem in assert_refused(tmp_path / "job" / "phases.json", read_phases)
    (row,) = rows_of(tmp_path).values()
    assert row["status"] == "completed" and row["step_ms"] is None
    assert not [key for key in row if key.endswith("_ms") and key != "step_ms"]
    assert row["reason"].startswith("job/phases.json: ")
    assert len(to_markdown(list(rows_of(tmp_path).values()))) < 2000


# The speedup's baseline ------------------------------------------------------------------------
def test_no_baseline_with_another_lr_and_the_matching_one_when_there(tmp_path):
    write_job(tmp_path, "one_lr0.1", record(samples_per_s=400.0, lr=0.1))
    two = write_job(tmp_path, "two_lr1e9", record(samples_per_s=700.0, devices=2, lr=1e9))
    rows = rows_of(tmp_path)
    assert rows["two_lr1e9"]["speedup"] is None and rows["two_lr1e9"]["efficiency"] is None

    one = write_job(tmp_path, "one_lr1e9", record(samples_per_s=380.0, lr=1e9))
    rows = rows_of(tmp_path)
    expected = read_record(two)["samples_per_s"] / read_record(one)["samples_per_s"]
    assert rows["two_lr1e9"]["speedup"] == pytest.approx(expected)
    assert rows["two_lr1e9"]["efficiency"] == pytest.approx(expected / 2)


def test_with_scaling_rules_the_baseline_has_the_same_per_device_batch_and_lr_per_sample(
    tmp_path,
):
    one = write_job(tmp_path, "one", record(samples_per_s=400.0, batch_size=32, lr=0.1))
    write_job(tmp_path, "one_other", record(samples_per_s=100.0, batch_size=32, lr=0.3))
    two = write_job(tmp_path, "two", record(samples_per_s=700.0, devices=2, batch_size=64, lr=0.2))
    expected = read_record(two)["samples_per_s"] / read_record(one)["samples_per_s"]
    assert rows_of(tmp_path)["two"]["speedup"] == pytest.approx(expected)


def test_the_baseline_computes_the_same_but_for_what_scaling_changes(tmp_path):
    """Jobs that record their settings: a one-device job with another momentum is no
    baseline, even with the same batch and lr; one that differs only in them is."""
    settings = {"model.optimizer.lr": 0.1, "data.batch_size": 32, "model.optimizer.momentum": 0.0}
    other = {**record(samples_per_s=400.0, batch_size=32, lr=0.1), "settings": {**settings}}
    other["settings"]["model.optimizer.momentum"] = 0.9
    write_job(tmp_path, "one_momentum", other)
    scaled = {**settings, "model.optimizer.lr": 0.2, "data.batch_size": 64}
    two = {**record(samples_per_s=700.0, devices=2, batch_size=64, lr=0.2), "settings": scaled}
    write_job(tmp_path, "two", two)
    assert rows_of(tmp_path)["two"]["speedup"] is None
    same = {**record(samples_per_s=350.0, batch_size=32, lr=0.1), "settings": settings}
    write_job(tmp_path, "one", same)
    assert rows_of(tmp_path)["two"]["speedup"] == pytest.approx(700.0 / 350.0, rel=0.05)


def test_a_one_device_job_is_its_own_baseline(tmp_path):
    """Two one-device runs of the same settings (a runs folder reported whole): the second had
    a "speedup" of 1.95 over the first."""
    write_job(tmp_path, "first", record(samples_per_s=200.0, lr=0.1))
    write_job(tmp_path, "again", record(samples_per_s=390.0, lr=0.1))
    write_job(tmp_path, "two", record(samples_per_s=700.0, devices=2, lr=0.1))
    rows = rows_of(tmp_path)
    assert rows["first"]["speedup"] == rows["again"]["speedup"] == 1.0
    assert rows["two"]["speedup"] in (pytest.approx(700 / 200), pytest.approx(700 / 390))


def test_only_completed_jobs_get_a_speedup(tmp_path):
    write_job(tmp_path, "one", record(lr=0.1))
    write_job(tmp_path, "two", record("diverged", samples_per_s=9000.0, devices=2, lr=0.1))
    assert rows_of(tmp_path)["two"]["speedup"] is None


# Strict JSON ------------------------------------------------------------------------------------
def refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def test_write_json_writes_non_finite_floats_as_null(tmp_path):
    nan, inf = float("nan"), float("inf")
    data = {"loss": nan, "nested": [{"a": inf}, (1.0, -inf)], "kept": [0.5, 1, "NaN", None]}
    write_json(tmp_path / "x.json", data)
    text = (tmp_path / "x.json").read_text()
    parsed = json.loads(text, parse_constant=refuse_constant)
    expected = {"loss": None, "nested": [{"a": None}, [1.0, None]], "kept": [0.5, 1, "NaN", None]}
    assert parsed == expected
    assert "NaN," not in text and "Infinity" not in text


# The command, as a user runs it ---------------------------------------------------------------
def test_the_report_command_lists_a_bad_job_and_fails_without_a_traceback(tmp_path):
    write_job(tmp_path, "good", record())
    write_job(tmp_path, "bad", NAMED_BAD["truncated"])
    result = subprocess.run(
        [sys.executable, "-m", "multigpu.tools.report", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1  # a job did not complete, as for a failed one
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("good ") and " completed " in line for line in lines)
    (bad,) = [line for line in lines if line.startswith("bad ")]
    assert f" {UNREADABLE} " in bad and "bad/metrics.json: ends in the middle of its JSON" in bad


# Generated cases --------------------------------------------------------------------------------
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
HUGE = (MAX_STRING + 1, MAX_BYTES + 1)


def locations(value: Any, where: tuple = ()) -> list[tuple]:
    """Every key path inside ``value`` (the containers' items, at any depth)."""
    found = []
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        found.append((*where, key))
        if isinstance(item, (dict, list)) and item:
            found += locations(item, (*where, key))
    return found


def parent_of(value: Any, where: tuple) -> Any:
    for key in where[:-1]:
        value = value[key]
    return value


@st.composite
def mutations(draw, original: dict) -> str | bytes:
    """``original`` with one structural mutation, as the bytes of a file."""
    kind = draw(st.sampled_from(["delete", "replace", "truncate", "huge", "flip"]))
    value = copy.deepcopy(original)
    where = draw(st.sampled_from(locations(value)))
    if kind == "delete":
        del parent_of(value, where)[where[-1]]
    elif kind == "replace":
        parent_of(value, where)[where[-1]] = draw(json_values)
    elif kind == "huge":
        parent_of(value, where)[where[-1]] = "x" * draw(st.sampled_from(HUGE))
    text = json.dumps(value).encode()
    if kind == "truncate":
        return text[: draw(st.integers(0, len(text) - 1))]
    if kind == "flip":
        at, mask = draw(st.integers(0, len(text) - 1)), draw(st.integers(1, 255))
        return text[:at] + bytes([text[at] ^ mask]) + text[at + 1 :]
    return text


def assert_read_or_refused(path: Path, reader) -> None:
    try:
        read = reader(path)
    except BadRecord as refused:
        text = str(refused)
        assert "\n" not in text and text.startswith(f"{path}: ") and len(text) < 400
    else:
        assert isinstance(read, dict)


def check_mutated_job(which: str, mutation: bytes) -> None:
    """``read_record``/``read_phases`` keep their contract, and the report over a good job and
    the mutated one lists both, the good one as it is alone."""
    with tempfile.TemporaryDirectory() as folder:
        sweep = Path(folder)
        write_job(sweep, "a_good", record())
        good_alone = rows_of(sweep)["a_good"]
        if which == "metrics.json":
            path = write_job(sweep, "b_mutated", mutation)
            assert_read_or_refused(path, read_record)
        else:
            path = write_job(sweep, "b_mutated", record(), phases=mutation).with_name(which)
            assert_read_or_refused(path, read_phases)
        rows = summarize_jobs(load_jobs(sweep))
        assert [row["job"] for row in rows] == ["a_good", "b_mutated"]
        assert rows[0] == good_alone
        for text in (to_csv(rows), to_markdown(rows), to_text(rows)):
            assert len(text) < 10_000
        if rows[1]["status"] == UNREADABLE:
            assert rows[1]["reason"].startswith("b_mutated/metrics.json: ")


ORIGINALS = {"metrics.json": record(), "phases.json": phases_report()}
FEW = examples(60)


@pytest.mark.parametrize("which", list(ORIGINALS))
@FEW
@given(data=st.data())
def test_a_mutated_file_is_read_or_refused_and_the_report_goes_on(which, data):
    check_mutated_job(which, data.draw(mutations(ORIGINALS[which])))


@FEW
@given(values=st.lists(st.floats() | st.integers() | st.none(), max_size=8))
def test_write_json_output_is_strict_and_keeps_every_finite_value(values):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "x.json"
        write_json(path, {"values": values})
        parsed = json.loads(path.read_text(), parse_constant=refuse_constant)
    expected = [v if not isinstance(v, float) or math.isfinite(v) else None for v in values]
    assert parsed == {"values": expected}


def test_a_record_that_is_a_link_leading_nowhere_is_a_bad_row(tmp_path):
    """``Path.rglob`` leaves such links out: the report would have lost the job silently."""
    (tmp_path / "dangling").mkdir()
    (tmp_path / "dangling" / "metrics.json").symlink_to(tmp_path / "nowhere.json")
    (tmp_path / "loop").mkdir()
    (tmp_path / "loop" / "metrics.json").symlink_to("metrics.json")
    rows = rows_of(tmp_path)
    assert sorted(rows) == ["dangling", "loop"]
    assert all(row["status"] == "unreadable" for row in rows.values())
    assert "dangling/metrics.json" in rows["dangling"]["reason"]


def test_the_report_names_a_killed_run_and_leaves_a_folder_in_use_alone(tmp_path, capsys):
    """A ``running`` record nobody holds ended unrecorded (SIGKILL): the row says so. A folder
    a live run holds is not written into by the report command."""
    import subprocess
    import sys

    from multigpu.tools.report.__main__ import main
    from multigpu.tools.report.summary import ENDED_UNRECORDED

    write_job(tmp_path, "killed", {**record("running"), "reason": None})
    assert rows_of(tmp_path)["killed"]["reason"] == ENDED_UNRECORDED
    hold = (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"
    )
    with subprocess.Popen(
        [sys.executable, "-c", hold, str(tmp_path)], stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdout.readline().strip() == "held"
        try:
            assert main([str(tmp_path)]) == 2
            assert "is in use by a run (pid " in capsys.readouterr().err
            assert sorted(p.name for p in tmp_path.iterdir()) == ["killed"]  # nothing written
        finally:
            holder.kill()


def test_the_report_of_a_run_folder_is_refused_and_writes_nothing(tmp_path, capsys):
    """``python -m multigpu.tools.report <a run's folder>`` had written the summary and plots
    among the run's own files: refused in one line naming the folder above."""
    from multigpu.tools.report.__main__ import main

    job = write_job(tmp_path, "seed_1", record()).parent
    before = sorted(p.name for p in job.iterdir())
    assert main([str(job)]) == 2
    said = capsys.readouterr().err.strip()
    assert said == (
        f"error: {job} is a run's folder (it holds its metrics.json), not a sweep's: pass the "
        f"folder of the sweep or runs it belongs to, e.g. {tmp_path.resolve()}"
    )
    assert sorted(p.name for p in job.iterdir()) == before
    assert main([str(tmp_path)]) == 0  # the folder above reports it


def test_the_report_of_an_empty_path_is_refused_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """``python -m multigpu.tools.report ''`` had reported the current folder, writing the
    summary and plots there (``Path('')`` is ``.``)."""
    from multigpu.tools.report.__main__ import main

    write_job(tmp_path, "seed_1", record())
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(SystemExit) as stopped:
        main([""])
    assert stopped.value.code == 2
    (said,) = capsys.readouterr().err.strip().splitlines()
    assert said.startswith("error: ") and "'' is not a path" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("name", ["summary.md", "summary.csv"])
def test_the_report_leaves_a_summary_it_did_not_write(name, tmp_path, capsys):
    """A user's own ``summary.md`` (or ``.csv``) in a folder of runs had been replaced by the
    report with no word; refused in one line, nothing written. Its own it replaces."""
    from multigpu.tools.report.__main__ import main

    write_job(tmp_path, "seed_1", record())
    (tmp_path / name).write_text("my notes\n")
    assert main([str(tmp_path)]) == 2
    said = capsys.readouterr().err.strip()
    assert said == (
        f"error: {tmp_path / name} is not a report's (it does not begin with the report's "
        "table), and the report would replace it: move it out of the folder, then report again"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "seed_1"])
    assert (tmp_path / name).read_text() == "my notes\n"
    (tmp_path / name).unlink()
    assert main([str(tmp_path)]) == 0 and main([str(tmp_path)]) == 0  # its own, replaced
