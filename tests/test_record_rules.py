"""The rules between ``metrics.json``'s keys (``record_model.Record``'s model validators): what
the writer derives from the history (``epochs``, ``test_acc``, ``best_test_acc``) agrees with
it, or the file is refused in one line by every reader; records the project writes (running,
failed, resumed, tested only every other epoch) always agree. Named cases, then generated."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from conftest import examples
from hypothesis import assume, given
from hypothesis import strategies as st
from test_record_file import assert_refused, rows_of, write_job

from multigpu.storage.outcome import Outcome
from multigpu.storage.record import RunRecord, summarize
from multigpu.storage.record_file import read_record
from multigpu.tools.report.summary import UNREADABLE

RUN = {"strategy": "single", "devices": 1, "batch_size": 32, "lr": 0.1}


def record(**keys: Any) -> dict[str, Any]:
    """A completed run's record (tested 0.5, 0.625, 0.75: best 0.75), with ``keys`` set."""
    history = [{"epoch": i + 1, "test_acc": acc} for i, acc in enumerate([0.5, 0.625, 0.75])]
    return {**summarize(history, RUN), "status": "completed", **keys}


def renumbered(*epochs: int) -> dict[str, Any]:
    """``record()`` with its history's epochs numbered ``epochs``."""
    written = record()
    written["history"] = [
        {**h, "epoch": e} for h, e in zip(written["history"], epochs, strict=True)
    ]
    return written


# One named case per rule -----------------------------------------------------------------------
CONTRADICTIONS = {
    "best below test_acc": (
        record(best_test_acc=0.5),
        "best_test_acc 0.5 is below test_acc 0.75",
    ),
    "epochs not the history's length": (record(epochs=5), "epochs is 5, but history holds 3"),
    "test_acc not the last epoch's": (
        record(test_acc=0.5),
        "test_acc is 0.5, but history[2].test_acc is 0.75",
    ),
    "test_acc null, the last epoch tested": (
        record(test_acc=None),
        "test_acc is null, but history[2].test_acc is 0.75",
    ),
    "an epoch repeated": (renumbered(1, 2, 2), "history[2].epoch is 2, but history[1].epoch is 2"),
    "a history not from epoch 1": (
        renumbered(2, 3, 4),
        "history[0].epoch is 2, but a history starts at epoch 1",
    ),
    "best_epoch not the best's": (
        record(best_epoch=1),
        "best_epoch is 1, but that epoch has test_acc 0.5, not best_test_acc 0.75",
    ),
    "epoch_s not the history's": (
        record(epoch_s=3.0),
        "epoch_s is 3.0, but the history's epochs give null",
    ),
    "run.batch_size not the settings'": (
        record(run={**RUN, "batch_size": 64}, settings={"data.batch_size": 32}),
        "run.batch_size is 64, but settings data.batch_size is 32",
    ),
    "run.devices not its ids on every node": (
        record(run={**RUN, "devices": 4, "device_ids": [0, 1], "num_nodes": 1}),
        "run.devices is 4, but run.device_ids [0, 1] on run.num_nodes 1 make 2",
    ),
    "completed with no epoch": (
        {**summarize([], RUN), "status": "completed"},
        "status is completed, but history holds no epoch",
    ),
    "completed with a reason": (
        record(reason="boom: out of memory"),
        'status is completed, but reason is "boom: out of memory"',
    ),
    "single on two devices": (
        record(run={**RUN, "devices": 2}),
        "run.strategy is single, but run.devices is 2",
    ),
    "run.batch_size not each process's batch": (
        record(run={**RUN, "batch_size": 64, "process_batch_size": 16, "processes": 2}),
        "run.batch_size is 64, but run.process_batch_size 16 on run.processes 2 make 32",
    ),
}


@pytest.mark.parametrize("case", list(CONTRADICTIONS))
def test_a_record_that_contradicts_itself_is_refused_and_listed_as_a_bad_row(tmp_path, case):
    content, problem = CONTRADICTIONS[case]
    write_job(tmp_path, "a_good", record())
    bad = write_job(tmp_path, "b_bad", content)
    assert assert_refused(bad).startswith(problem)
    rows = rows_of(tmp_path)
    assert rows["a_good"]["status"] == "completed" and rows["a_good"]["test_acc"] == 0.75
    assert rows["b_bad"]["status"] == UNREADABLE
    assert rows["b_bad"]["reason"] == f"b_bad/metrics.json: {assert_refused(bad)}"


def test_a_run_does_not_take_over_a_folder_whose_record_contradicts_itself(tmp_path):
    """The resume's reader (``admission.read_previous``) refuses it in the same line."""
    from multigpu.config.errors import OccupiedFolder
    from multigpu.run.admission import read_previous

    path = write_job(tmp_path, "run", record(epochs=5))
    with pytest.raises(OccupiedFolder) as refused:
        read_previous(path)
    assert str(refused.value).startswith(f"{path}: epochs is 5, but history holds 3")


def test_best_below_an_earlier_epochs_test_acc_is_refused(tmp_path):
    content = record(best_test_acc=0.75)
    content["history"][0]["test_acc"] = 0.875  # the best epoch was the first
    path = write_job(tmp_path, "job", content)
    assert assert_refused(path) == "best_test_acc 0.75 is below history[0].test_acc 0.875"


def test_a_record_that_leaves_the_derived_keys_out_is_read(tmp_path):
    """A key may be left out (older versions): nothing to contradict."""
    content = {k: v for k, v in record().items() if k not in ("epochs", "test_acc")}
    assert read_record(write_job(tmp_path, "job", content))["best_test_acc"] == 0.75


def test_a_test_accuracy_only_every_other_epoch_agrees(tmp_path):
    """``trainer.check_val_every_n_epoch=2``: an epoch without a test leaves test_acc null."""
    history = [{"epoch": 1}, {"epoch": 2, "test_acc": 0.75}, {"epoch": 3, "test_acc": None}]
    path = tmp_path / "metrics.json"
    RunRecord(path, RUN).claim(history)
    read = read_record(path)
    assert (read["test_acc"], read["best_test_acc"], read["epochs"]) == (None, 0.75, 3)


def test_running_failed_and_resumed_records_agree(tmp_path):
    path = tmp_path / "metrics.json"
    first = RunRecord(path, RUN)
    first.claim([])
    assert read_record(path)["status"] == "running" and read_record(path)["epochs"] == 0
    first.add_epoch({"epoch": 1, "test_acc": 0.8})
    first.finish(Outcome("failed", "a peer died", 1))
    assert read_record(path)["status"] == "failed"
    resumed = RunRecord(path, RUN, resumed_from={"checkpoint": "last.ckpt", "epochs": 1})
    resumed.claim(read_record(path)["history"])  # the history the checkpoint carries
    resumed.add_epoch({"epoch": 2, "test_acc": 0.6})
    resumed.finish(Outcome("completed", None, 0))
    read = read_record(path)
    assert (read["status"], read["epochs"], read["test_acc"], read["best_test_acc"]) == (
        "completed", 2, 0.6, 0.8
    )  # fmt: skip


# Generated -------------------------------------------------------------------------------------
accuracies = st.floats(0, 1, width=32)  # a float32 metric, as a run logs it
entries = st.fixed_dictionaries(
    {"train_loss": st.floats(0, 10)},
    optional={"test_acc": st.none() | accuracies},  # left out or null: not tested that epoch
)
histories = st.lists(entries, max_size=6).map(
    lambda history: [{**entry, "epoch": i + 1} for i, entry in enumerate(history)]
)
endings = st.none() | st.sampled_from(["completed", "interrupted", "diverged", "failed"])


def written(folder: Path, history: list[dict], carried: int, ending: str | None) -> Path:
    """The record a run writes: resumed with the first ``carried`` epochs, then an epoch at a
    time, then (``ending`` not None) its end."""
    path = folder / "metrics.json"
    run = RunRecord(path, RUN, resumed_from={"epochs": carried} if carried else None)
    run.claim(history[:carried])
    for entry in history[carried:]:
        run.add_epoch(entry)
    if ending is not None:
        run.finish(Outcome(ending, None if ending == "completed" else "why", 0))
    return path


@examples(40)
@given(history=histories, data=st.data(), ending=endings)
def test_a_record_as_the_writer_writes_it_always_agrees(history, data, ending):
    assume(history or ending != "completed")  # a run completes once an epoch is trained
    carried = data.draw(st.integers(0, len(history)))
    with tempfile.TemporaryDirectory() as folder:
        read = read_record(written(Path(folder), history, carried, ending))
    assert read["epochs"] == len(read["history"]) == len(history)


@st.composite
def contradictions(draw, history: list[dict]) -> tuple[str, Any]:
    """A key and a value for it that contradict ``history``."""
    accs = [h["test_acc"] for h in history if h.get("test_acc") is not None]
    rules = ["epochs", *(["test_acc"] if history else []), *(["best_test_acc"] if accs else [])]
    rule = draw(st.sampled_from([*rules, "best_epoch", "epoch_s"]))
    if rule == "epochs":
        return rule, draw(st.integers(0, 10**6).filter(lambda n: n != len(history)))
    if rule == "best_epoch":  # an epoch that is not the best one, or none of the history's
        best = max(accs, default=None)
        others = [h["epoch"] for h in history if h.get("test_acc") != best]
        beyond = st.integers(len(history) + 1, 10**6)
        return rule, draw(st.sampled_from(others) | beyond if others else beyond)
    if rule == "epoch_s":  # the history's epochs are not timed: it gives null
        return rule, draw(st.floats(0, 1e6))
    if rule == "test_acc":
        last = history[-1].get("test_acc")
        return rule, draw((st.none() | accuracies).filter(lambda acc: acc != last))
    assume(max(accs) > 0)  # nothing in 0..1 is below 0
    return rule, draw(st.floats(0, max(accs), exclude_max=True))


@examples(40)
@given(history=histories, data=st.data())
def test_a_record_with_a_contradiction_is_always_refused(history, data):
    key, value = data.draw(contradictions(history))
    with tempfile.TemporaryDirectory() as folder:
        path = written(Path(folder), history, 0, data.draw(endings))
        good = read_record(path)
        write_job(Path(folder), ".", {**good, key: value})
        assert assert_refused(path).startswith(key)


def test_the_settings_a_record_checks_its_run_by_include_every_resolved_one():
    """``record_model.REPEATED`` (storage, read by the report) names at least the settings the
    run writes as ``Run`` resolved them (``computation.RESOLVED``, config), with their field."""
    from multigpu.config.computation import RESOLVED
    from multigpu.storage.record_model import REPEATED

    assert RESOLVED.items() <= REPEATED.items()


def test_a_key_given_twice_is_refused(tmp_path):
    """``"status": "failed", "status": "completed"``: JSON keeps the last, and the file says two
    things; every reader refuses it, naming the key."""
    text = json.dumps(record(), indent=1).replace(
        '"status": "completed"', '"status": "failed", "status": "completed"'
    )
    path = write_job(tmp_path, "job", text)
    assert assert_refused(path) == 'holds the key "status" twice in one object'


def test_an_epoch_continued_from_inside_it_takes_the_place_of_its_partial_entry(tmp_path):
    """A run resumed from a checkpoint that ``max_steps`` saved inside epoch 2 goes on from
    that batch: its epoch 2 had been added after the partial one, and the record, numbering
    epoch 2 twice, was refused (a traceback, the run failed). An epoch whole before it stays."""
    path = tmp_path / "metrics.json"
    record = RunRecord(path, RUN)
    record.claim(
        [{"epoch": 1, "test_acc": 0.5}, {"epoch": 2, "test_acc": 0.6, "partial_batches": 2}]
    )
    record.add_epoch({"epoch": 2, "test_acc": 0.7, "partial_batches": 2})
    assert [(h["epoch"], h["test_acc"]) for h in read_record(path)["history"]] == [
        (1, 0.5),
        (2, 0.7),
    ]
    record.add_epoch({"epoch": 2, "test_acc": 0.8})  # its whole epoch 2 (the continued one)
    with pytest.raises(ValueError, match="epoch is 2"):  # a whole epoch is never replaced
        record.add_epoch({"epoch": 2, "test_acc": 0.9})
