"""The files a run leaves, as their models declare them: the JSON Schemas docs/records.md
publishes are the models' own; a record drawn from its model is read back as it is, and one
mutated is read or refused in one line, never with another exception; what the writer writes
is always read back; ``bench.json`` is read through its model by the acceptance."""

from __future__ import annotations

import copy
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, examples
from hypothesis import assume, given
from hypothesis import strategies as st
from test_record_file import assert_read_or_refused, mutations

from multigpu.storage import schemas
from multigpu.storage.atomic import write_json
from multigpu.storage.file_model import json_schema
from multigpu.storage.outcome import Outcome
from multigpu.storage.phases_model import Phases
from multigpu.storage.record import RunRecord, summarize
from multigpu.storage.record_file import BadRecord, read_phases, read_record, upgrade
from multigpu.storage.record_model import (
    MAX_DEVICES,
    REPEATED,
    SCHEMA,
    STATUSES,
    CompletedRecord,
    CompletedRecordV1,
    CompletedRun,
    Epoch,
    Record,
    RecordV1,
    Run,
    declaration,
    speed,
)
from multigpu.tools.acceptance import read_bench
from multigpu.tools.bench.bench_file import built, read_bench_file

DOCS = REPO / "docs" / "records.md"
FEW = examples(40)


# The published schemas -------------------------------------------------------------------------
def test_the_docs_publish_the_models_schemas():
    """If this fails: ``python -m multigpu.storage.schemas --write docs/records.md``."""
    assert schemas.published(DOCS.read_text()) == schemas.section()


def test_writing_puts_the_models_schemas_between_the_markers(tmp_path, capsys):
    stale = tmp_path / "records.md"
    stale.write_text(DOCS.read_text().replace('"minimum": 0', '"minimum": 1', 1))
    schemas.main(["--write", str(stale)])
    assert stale.read_text() == DOCS.read_text()
    stale.write_text("no markers")
    with pytest.raises(SystemExit) as refused:
        schemas.main(["--write", str(stale)])
    assert refused.value.code == 2 and f"error: {stale} has no markers" in capsys.readouterr().err


def test_every_key_has_its_meaning():
    for model in (Record, Run, Epoch, Phases):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} says nothing of what it is"


# Values drawn from a JSON Schema -----------------------------------------------------------------
TEXT = st.text(st.characters(codec="utf-8"), max_size=8)
SCALARS = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(-1e6, 1e6) | TEXT


def drawn(fragment: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy:
    """Values ``fragment`` accepts, any of them (finite floats: a file holds no other)."""
    if "$ref" in fragment:
        return drawn(root["$defs"][fragment["$ref"].rsplit("/", 1)[-1]], root)
    if "anyOf" in fragment:
        return st.one_of([drawn(option, root) for option in fragment["anyOf"]])
    if "enum" in fragment:
        return st.sampled_from(fragment["enum"])
    low, high = fragment.get("minimum"), fragment.get("maximum")
    kind = fragment.get("type")
    if kind == "integer":
        return st.integers(low, 10**12 if high is None else high)
    if kind == "number":  # within 10^12: sums and products stay finite, so equal to themselves
        low, high = -1e12 if low is None else low, 1e12 if high is None else high
        return st.floats(low, high) | st.integers(math.ceil(low), math.floor(high))
    if kind == "string":
        pattern = fragment.get("pattern")
        return TEXT if pattern is None else st.from_regex(pattern, fullmatch=True)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return st.lists(drawn(fragment.get("items", {}), root), max_size=3)
    if kind == "object":
        return drawn_object(fragment, root)
    return SCALARS


def drawn_object(fragment: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy:
    properties = fragment.get("properties", {})
    if properties:
        required = set(fragment.get("required", ()))
        named = {k: drawn(v, root) for k, v in properties.items() if k in required}
        optional = {k: drawn(v, root) for k, v in properties.items() if k not in required}
        fixed = st.fixed_dictionaries(named, optional=optional)
        extra = st.dictionaries(TEXT.filter(lambda k: k not in properties), SCALARS, max_size=2)
        return st.tuples(fixed, extra).map(lambda parts: {**parts[1], **parts[0]})
    patterned = fragment.get("patternProperties", {})
    for pattern, values in patterned.items():
        keys = st.from_regex(pattern, fullmatch=True)
        return st.dictionaries(keys, drawn(values, root), max_size=3)
    values = fragment.get("additionalProperties")
    inner = drawn(values, root) if isinstance(values, dict) else SCALARS
    return st.dictionaries(TEXT, inner, max_size=3)


@st.composite
def records(draw) -> dict[str, Any]:
    """A record any declaration accepts, with the status and schema that pick it."""
    model = draw(st.sampled_from([Record, CompletedRecord, RecordV1, CompletedRecordV1]))
    record = draw(drawn(json_schema(model), json_schema(model)))
    completed = model in (CompletedRecord, CompletedRecordV1)
    others = [status for status in STATUSES if status != "completed"]
    record["status"] = "completed" if completed else draw(st.sampled_from(others))
    record["schema"] = 1 if model in (RecordV1, CompletedRecordV1) else draw(st.integers(2, 9))
    assert declaration(record) is model
    if completed:  # with its last epoch trained, and nothing gone wrong
        record |= {"history": record["history"] or [{"epoch": 1}], "reason": None}
    return agreeing(record)


def agreeing(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with what is derived from its history made to agree with it, as the writer
    writes it (keys left out stay out): a drawn record is otherwise a contradiction."""
    first = 1 if record["schema"] >= SCHEMA else 0
    history = [{**entry, "epoch": first + i} for i, entry in enumerate(record["history"])]
    record |= {"history": history, "run": agreeing_run(record["run"])}
    if record.get("epochs") is not None:
        record["epochs"] = len(history)
    if "test_acc" in record and history:
        record["test_acc"] = history[-1].get("test_acc")
    accs = [record.get("test_acc"), record.get("best_test_acc")]
    accs += [entry.get("test_acc") for entry in history]
    if record.get("best_test_acc") is not None:
        record["best_test_acc"] = max(acc for acc in accs if acc is not None)
    if record.get("best_epoch") is not None:
        best = [h["epoch"] for h in history if h.get("test_acc") == record.get("best_test_acc")]
        record["best_epoch"] = best[0] if best else None
    if record["schema"] >= SCHEMA:
        derived = dict(zip(("epoch_s", "samples_per_s"), speed(history), strict=True))
        record |= {key: derived[key] for key in derived if key in record}
    settings = record.get("settings") or {}
    for key, field in REPEATED.items():
        if key in settings and record["run"].get(field) is not None:
            settings[key] = record["run"][field]
    return record


def agreeing_run(run: dict[str, Any]) -> dict[str, Any]:
    """A drawn run's settings made to agree with each other: its devices are its ids on every
    node, its global batch each process's batch times its processes."""
    if run.get("strategy") == "single":
        run |= {"devices": 1, "device_ids": [0], "num_nodes": 1}
    ids, nodes = run.get("device_ids"), run.get("num_nodes")
    if isinstance(run.get("devices"), int) and None not in (ids, nodes):
        run["num_nodes"] = nodes = min(nodes, MAX_DEVICES // max(len(ids), 1))  # the bound
        run["devices"] = len(ids) * nodes
        if not run["devices"]:
            run |= {"devices": 1, "device_ids": [0], "num_nodes": 1}
    batch, processes = run.get("process_batch_size"), run.get("processes")
    if None not in (run.get("batch_size"), batch, processes):
        run |= {"batch_size": batch * processes} if batch * processes else {"processes": None}
    return run


def phases_files() -> st.SearchStrategy:
    return drawn(json_schema(Phases), json_schema(Phases))


def read_back(content: Any, reader=read_record, name: str = "metrics.json") -> Any:
    """What ``reader`` reads of ``content`` written as the project writes a file."""
    with tempfile.TemporaryDirectory() as folder:
        write_json(Path(folder) / name, content)
        return reader(Path(folder) / name)


# Drawn records ---------------------------------------------------------------------------------
@FEW
@given(record=records())
def test_a_record_drawn_from_its_model_is_read_as_it_is(record):
    assert read_back(record) == upgrade(copy.deepcopy(record))


@FEW
@given(phases=phases_files())
def test_a_phases_file_drawn_from_its_model_is_read_as_it_is(phases):
    assert read_back(phases, read_phases, "phases.json") == phases


@FEW
@given(data=st.data(), which=st.sampled_from(["metrics.json", "phases.json"]))
def test_a_drawn_file_mutated_is_read_or_refused_in_one_line(data, which):
    original = data.draw(records() if which == "metrics.json" else phases_files())
    mutated = data.draw(mutations(original))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / which
        path.write_bytes(mutated)
        assert_read_or_refused(path, read_record if which == "metrics.json" else read_phases)


# The writer ------------------------------------------------------------------------------------
def finite(value: Any) -> Any:
    """``value`` as a file holds it: a non-finite float is null."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


epochs = st.lists(drawn(json_schema(Epoch), json_schema(Epoch)), max_size=4).map(
    lambda history: [{**entry, "epoch": i + 1} for i, entry in enumerate(history)]
)
runs = drawn(json_schema(CompletedRun), json_schema(CompletedRun)).map(agreeing_run)


@FEW
@given(history=epochs, run=runs, settings=st.dictionaries(TEXT, SCALARS, max_size=3))
def test_what_summarize_writes_is_read_back(history, run, settings):
    settings = {key: value for key, value in settings.items() if key not in REPEATED}
    summary = summarize(history, run, run_id="abc", settings=settings)
    assert read_back(summary) == finite(summary)


@FEW
@given(history=epochs, run=runs, status=st.sampled_from(STATUSES[1:]))
def test_a_run_record_is_read_back_whichever_way_it_ends(history, run, status):
    assume(history or status != "completed")  # a run completes once an epoch is trained
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "metrics.json"
        record = RunRecord(path, run)
        record.claim(history[:1])
        for entry in history[1:]:
            record.add_epoch(entry)
        ended = record.finish(Outcome(status, None if status == "completed" else "why", 0))
        assert read_record(path) == finite(ended) and ended["status"] == status


# bench.json ------------------------------------------------------------------------------------
def bench(rows: list[dict[str, Any]]) -> dict[str, Any]:
    settings = {"batch": 32, "steps": 3, "warmup": 1, "jobs": 1, "tiny": True, "width": 2}
    return {"machine": {"cpu_cores": 2, "gpu": None, "torch": "2"}, "settings": settings,
            "configurations": rows, "ratios": []}  # fmt: skip


EPOCH_ROW = {"name": "epoch_d2l", "width": 2, "images_per_s": 50.0, "epoch_s": 3.0,
             "test_acc": 0.5, "epochs": 1, "rounds": [0], "images_per_s_runs": [50.0]}  # fmt: skip


def test_bench_json_as_the_bench_builds_it_is_what_the_acceptance_reads(tmp_path):
    report = built(**bench([EPOCH_ROW, {"name": "loader_memory", "width": 0, "error": "boom"}]))
    write_json(tmp_path / "epoch_d2l" / "bench.json", report)
    assert read_bench_file(tmp_path / "epoch_d2l" / "bench.json") == report
    assert read_bench("epoch_d2l")(tmp_path) == EPOCH_ROW
    assert read_bench("loader_memory", "nowhere")(tmp_path) == {}  # no file: not run


@pytest.mark.parametrize(
    "rows,problem",
    [
        (
            [{**EPOCH_ROW, "epoch_s": "3"}],
            'configurations[0].epoch_s is "3", not a number from 0 or null',
        ),
        ([{"name": "x", "width": 1}], "configurations[0] has neither images_per_s nor error"),
        ([{**EPOCH_ROW, "width": -1}], "configurations[0].width is -1, not a whole number from 0"),
    ],
)
def test_a_bad_bench_json_is_one_line_in_the_acceptance_verdict(tmp_path, rows, problem):
    path = tmp_path / "epoch_d2l" / "bench.json"
    write_json(path, bench(rows))
    with pytest.raises(BadRecord) as refused:
        read_bench_file(path)
    assert str(refused.value) == f"{path}: {problem}"
    assert read_bench("epoch_d2l")(tmp_path) == {"name": "epoch_d2l", "error": str(refused.value)}
    with pytest.raises(ValueError):  # nor does the bench build one
        built(**bench(rows))
