"""The one reader of each file a run leaves for others to read: ``metrics.json`` (the run's
record) and ``phases.json`` (where its steps' time went).

Each reader checks the whole file before any field is used, so that a caller (the sweep
report, a resumed run) either gets a dict of the documented shape or one ``BadRecord`` whose
message names the file and the first problem in one line. What is checked, in order: the file
(a regular file, at most ``MAX_BYTES``, UTF-8, JSON), its bounds (nesting at most ``MAX_DEPTH``,
strings at most ``MAX_STRING`` characters), then the schema top-down (required keys, types,
ranges). Unknown extra keys are accepted (newer versions add some), within the same bounds.

Older versions wrote a non-finite float as a bare ``NaN``/``Infinity`` token, which strict JSON
parsers reject; it meant "no finite value", so it is read as null, as this version writes it.

Torch-free: the report imports it.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_BYTES = 10 * 1024 * 1024  # a record of 10 000 epochs is under 5 MB
MAX_DEPTH = 32  # a record nests 4 levels deep (history -> entry -> value)
MAX_STRING = 64 * 1024  # characters in any one string (an error line is at most 500)
MAX_INTEGER = 10**300  # an integer beyond this cannot become a float: arithmetic would raise
MAX_DEVICES = 10**6
MAX_PHASES = 64
PROBLEM_CHARS = 200  # of the problem's description (the file's name is given whole)
STATUSES = ("running", "completed", "interrupted", "diverged", "failed")
PHASE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
NUMBER_TAIL = re.compile(r"[-+.eE0-9]{1,32}")


SCHEMA = 3  # of metrics.json: 3: epochs counted from 1; epoch_s and samples_per_s by ``speed``


def timed_epochs(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The epochs speed is measured over: all but the first, which also pays for warm-up
    (data loading starts, allocator, cuDNN autotuning), unless it is the only one."""
    timed = [h for h in history if h.get("epoch_s") and h.get("samples_per_s")]
    return timed[1:] if len(timed) > 1 else timed


def speed(history: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    """(seconds per epoch, samples per second) over ``timed_epochs``: total time over epochs,
    total samples over total time. One definition, so two runs compare the same way by either."""
    timed = timed_epochs(history)
    if not timed:
        return None, None
    seconds = sum(h["epoch_s"] for h in timed)
    samples = sum(h["samples_per_s"] * h["epoch_s"] for h in timed)
    return seconds / len(timed), samples / seconds


def upgrade(record: dict[str, Any]) -> dict[str, Any]:
    """A record of an earlier schema as this one reads it: epochs counted from 1 (schema 3)
    and speed by ``speed`` (before: medians of per-epoch values)."""
    if record.get("schema", SCHEMA) >= SCHEMA:
        return record
    history = upgrade_history(record.get("history") or [])
    epoch_s, samples_per_s = speed(history)
    best = record.get("best_epoch")
    return {
        **record,
        "history": history,
        "best_epoch": None if best is None else best + 1,
        "epoch_s": epoch_s,
        "samples_per_s": samples_per_s,
    }


def upgrade_history(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Histories start at the first epoch: one starting at 0 counts from 0 (schema < 3, and
    checkpoints written by those versions)."""
    if not history or history[0].get("epoch") != 0:
        return list(history)
    return [{**h, "epoch": h["epoch"] + 1} for h in history]


# Time to accuracy (docs/records.md, "Time to accuracy"): the targets when the config names none.


class BadRecord(ValueError):
    """A file no reader can trust; ``str()`` is one line: the file, then its first problem."""

    def __init__(self, path: str | Path, problem: str):
        self.path = Path(path)
        self.problem = one_line(problem)[:PROBLEM_CHARS]
        super().__init__(f"{one_line(str(path))}: {self.problem}")


class Problem(Exception):
    """What is wrong inside a parsed file; ``BadRecord`` adds which file."""


def one_line(text: str) -> str:
    """Control characters (newlines included) as spaces: a message stays on its line."""
    return "".join(" " if ch.isspace() or not ch.isprintable() else ch for ch in text)


# The readers ---------------------------------------------------------------------------------
def records_below(folder: str | Path) -> list[Path]:
    """Every ``metrics.json`` below ``folder``, whatever it is: a link that leads nowhere is
    one too (``Path.rglob`` leaves those out), for the reader to refuse by name."""
    found = []
    for parent, folders, files in os.walk(folder):  # a folder so named is a bad record too
        found.extend(Path(parent) / name for name in (*files, *folders) if name == "metrics.json")
        folders[:] = [name for name in folders if name != "metrics.json"]
    return sorted(found)


def read_record(path: str | Path) -> dict[str, Any]:
    """``metrics.json`` checked whole, then upgraded to the current schema
    (``multigpu.storage.record.upgrade``)."""
    path = Path(path)
    return upgrade(checked(path, read_json(path), check_record))


def read_phases(path: str | Path) -> dict[str, Any]:
    """``phases.json`` (``multigpu.callbacks.phase_timer``) checked whole."""
    path = Path(path)
    return checked(path, read_json(path), check_phases)


def read_json(path: Path) -> Any:
    """The file's JSON, within the bounds: a hostile or broken file costs at most
    ``MAX_BYTES`` of reading and never a RecursionError."""
    text = decode(path, read_bounded(path))
    if not text.strip():
        raise BadRecord(path, "is empty")
    try:
        data = json.loads(text, parse_constant=lambda _: None, parse_float=finite_or_none)
    except RecursionError:
        raise BadRecord(path, f"nests deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as error:
        raise BadRecord(path, describe_syntax_error(text, error)) from None
    except ValueError as error:  # an integer of more digits than Python converts
        raise BadRecord(path, f"is not valid JSON ({error})") from None
    return checked(path, data, check_bounds)


def checked(path: Path, data: Any, check: Any) -> Any:
    """``data`` once ``check`` finds no problem in it; else the problem, naming ``path``."""
    try:
        check(data)
    except Problem as problem:
        raise BadRecord(path, str(problem)) from None
    return data


def read_bounded(path: Path) -> bytes:
    """The file's bytes, refused without reading them when it is no regular file or too big."""
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise BadRecord(path, "is a folder, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise BadRecord(path, "is not a regular file")
        if info.st_size > MAX_BYTES:
            raise BadRecord(path, too_big(info.st_size))
        with open(path, "rb") as file:
            data = file.read(info.st_size + 1)  # one more: to see a file that grew
    except FileNotFoundError:
        raise BadRecord(path, "does not exist") from None
    except OSError as error:
        raise BadRecord(
            path, f"cannot be read ({error.strerror or type(error).__name__})"
        ) from None
    if len(data) > info.st_size:
        raise BadRecord(path, "grew while it was read (still being written in place?)")
    return data


def too_big(size: int) -> str:
    limit = MAX_BYTES // 2**20
    return f"is {size / 2**20:.1f} MiB, more than such a file can be ({limit} MiB): not read"


def decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        byte = data[error.start]
        raise BadRecord(
            path, f"is not UTF-8 text (byte 0x{byte:02x} at offset {error.start})"
        ) from None


def finite_or_none(literal: str) -> float | None:
    """A float too large for a double (``1e999``) is no finite number: null, as NaN."""
    value = float(literal)
    return value if math.isfinite(value) else None


def describe_syntax_error(text: str, error: json.JSONDecodeError) -> str:
    if looks_cut_short(text, error):
        return "ends in the middle of its JSON (cut short: truncated, or still being written?)"
    return f"is not valid JSON: {error.msg} at line {error.lineno}, column {error.colno}"


def looks_cut_short(text: str, error: json.JSONDecodeError) -> bool:
    """The parser failed at the end of the text, or in its last token (a string never
    closed, ``nu`` of ``null``, ``0.`` of a number): what a truncated file gives."""
    rest = text[error.pos :].strip()
    return (
        not rest
        or error.msg.startswith("Unterminated string")
        or any(word.startswith(rest) for word in ("null", "true", "false"))
        or NUMBER_TAIL.fullmatch(rest) is not None
    )


# Bounds, whatever the schema -----------------------------------------------------------------
def check_bounds(data: Any) -> None:
    """Every value nests at most ``MAX_DEPTH`` deep and every string (keys too) is at most
    ``MAX_STRING`` long. Iterative: a deep file cannot exhaust the stack here."""
    stack: list[tuple[Any, int, tuple]] = [(data, 1, ())]
    while stack:
        value, depth, where = stack.pop()
        if isinstance(value, str) and len(value) > MAX_STRING:
            raise Problem(too_long(name_of(where), len(value)))
        if not isinstance(value, (dict, list)):
            continue
        if depth > MAX_DEPTH:
            raise Problem(f"{name_of(where)} nests deeper than {MAX_DEPTH} levels")
        for key, item in value.items() if isinstance(value, dict) else enumerate(value):
            if isinstance(key, str) and len(key) > MAX_STRING:
                raise Problem(too_long(f"a key in {name_of(where)}", len(key)))
            stack.append((item, depth + 1, (where, key)))


def too_long(what: str, length: int) -> str:
    return f"{what} is a string of {length} characters (at most {MAX_STRING})"


def name_of(where: tuple) -> str:
    """``(((), "history"), 3), "epoch")`` as ``history[3].epoch``."""
    parts: list[str] = []
    while where:
        where, key = where
        parts.append(f"[{key}]" if isinstance(key, int) else f".{short_key(key)}")
    return "".join(reversed(parts)).lstrip(".") or "the file's value"


def short_key(key: str) -> str:
    return key if len(key) <= 40 else key[:37] + "..."


# Kinds of value: a description and a test ----------------------------------------------------
Kind = tuple[str, Callable[[Any], bool]]


def is_whole(value: Any, lowest: int = -MAX_INTEGER, highest: int = MAX_INTEGER) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lowest <= value <= highest


def is_number(value: Any) -> bool:
    """A float (finite: non-finite ones were read as null) or an integer that converts to one;
    not a bool."""
    return isinstance(value, float) or is_whole(value)


def is_count(value: Any) -> bool:
    return is_whole(value, 0)


NUMBER: Kind = ("a number", is_number)
WHOLE: Kind = ("a whole number", is_whole)
COUNT: Kind = ("a whole number from 0", is_count)
POSITIVE: Kind = ("a whole number from 1", lambda v: is_whole(v, 1))
DEVICES: Kind = (f"a whole number from 1 to {MAX_DEVICES}", lambda v: is_whole(v, 1, MAX_DEVICES))
TEXT: Kind = ("a string", lambda v: isinstance(v, str))
OBJECT: Kind = ("an object", lambda v: isinstance(v, dict))
LIST: Kind = ("a list", lambda v: isinstance(v, list))
STATUS: Kind = (f"one of {', '.join(STATUSES)}", lambda v: isinstance(v, str) and v in STATUSES)
PRECISION: Kind = ("a string or a number", lambda v: isinstance(v, str) or is_number(v))
DEVICE_IDS: Kind = (
    "a list of whole numbers",
    lambda v: isinstance(v, list) and all(map(is_count, v)),
)
# Schema 1 stored ``trainer.devices`` as given: a count, a list of ids or a word ("auto").
DEVICES_AS_GIVEN: Kind = (
    "a count, a list of ids or a string",
    lambda v: isinstance(v, str) or is_count(v) or DEVICE_IDS[1](v),
)


def nullable(kind: Kind) -> Kind:
    description, accepts = kind
    return (f"{description} or null", lambda v: v is None or accepts(v))


def shown(value: Any) -> str:
    """A value as a message shows it: containers by kind, anything else as JSON, short."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_fields(obj: dict, fields: dict[str, Kind], required: tuple[str, ...], where: str) -> None:
    """``required`` keys present; every key of ``fields`` that is present of its kind."""
    for key in required:
        if key not in obj:
            raise Problem(f"{where}{key} is missing")
    for key, (description, accepts) in fields.items():
        if key in obj and not accepts(obj[key]):
            raise Problem(f"{where}{key} is {shown(obj[key])}, not {description}")


# metrics.json --------------------------------------------------------------------------------
RECORD_FIELDS: dict[str, Kind] = {
    "schema": POSITIVE,
    "status": STATUS,
    "reason": nullable(TEXT),
    **dict.fromkeys(
        ("test_acc", "best_test_acc", "train_loss", "train_acc", "val_acc", "epoch_s"),
        nullable(NUMBER),
    ),
    "samples_per_s": nullable(NUMBER),
    "compile_s": nullable(NUMBER),
    "best_epoch": nullable(COUNT),
    "epochs": nullable(COUNT),
    "run": OBJECT,
    "config": nullable(TEXT),
    "history": LIST,
    "settings": nullable(OBJECT),
    "run_id": nullable(TEXT),
    "resumed_from": nullable(OBJECT),
    "init_from": nullable(TEXT),
}
RECORD_REQUIRED = ("schema", "status", "run", "history")
RUN_FIELDS: dict[str, Kind] = {
    **dict.fromkeys(("strategy", "accelerator", "launcher", "norm", "data"), nullable(TEXT)),
    **dict.fromkeys(
        ("num_nodes", "processes", "batch_size", "process_batch_size", "num_workers"),
        nullable(COUNT),
    ),
    "pin_memory": nullable(("true or false", lambda v: isinstance(v, bool))),
    **dict.fromkeys(("width", "max_epochs", "seed"), nullable(WHOLE)),
    **dict.fromkeys(("lr", "warmup_epochs", "warmup_from"), nullable(NUMBER)),
    "precision": nullable(PRECISION),
    "device_ids": nullable(DEVICE_IDS),
    "devices": nullable(("a whole number from 0", lambda v: is_whole(v, 0, MAX_DEVICES))),
}
# A completed run had all its settings: what the report compares and plots must be there.
COMPLETED_RUN_FIELDS: dict[str, Kind] = {
    "strategy": TEXT,
    "devices": DEVICES,
    "batch_size": POSITIVE,
    "lr": NUMBER,
}
HISTORY_FIELDS: dict[str, Kind] = {
    "epoch": COUNT,
    **dict.fromkeys(
        ("train_loss", "train_acc", "lr", "test_acc", "test_loss", "val_acc", "epoch_s"),
        nullable(NUMBER),
    ),
    **dict.fromkeys(("samples_per_s", "peak_gpu_mb", "wall_s", "compile_s"), nullable(NUMBER)),
}


def check_record(record: Any) -> None:
    """``metrics.json``'s schema (docs/records.md), schemas 1 to the current one."""
    if not isinstance(record, dict):
        raise Problem(f"holds {shown(record)}, not an object")
    check_fields(record, RECORD_FIELDS, RECORD_REQUIRED, "")
    check_run(record["run"], record["schema"], record["status"])
    for index, entry in enumerate(record["history"]):
        check_object(entry, f"history[{index}]")
        check_fields(entry, HISTORY_FIELDS, ("epoch",), f"history[{index}].")


def check_run(run: dict, schema: int, status: str) -> None:
    fields = dict(RUN_FIELDS)
    if schema == 1:
        fields["devices"] = nullable(DEVICES_AS_GIVEN)
    check_fields(run, fields, (), "run.")
    if status == "completed":
        if schema == 1:
            completed = {**COMPLETED_RUN_FIELDS, "devices": DEVICES_AS_GIVEN}
        else:
            completed = COMPLETED_RUN_FIELDS
        check_fields(run, completed, tuple(completed), "run.")


# phases.json ---------------------------------------------------------------------------------
PHASES_FIELDS: dict[str, Kind] = {
    "schema": POSITIVE,
    "clock": nullable(TEXT),
    "steps": COUNT,
    "skipped_steps": nullable(COUNT),
    "threads": nullable(COUNT),
    "step_ms": OBJECT,
    "phases": OBJECT,
    "beside": OBJECT,
    "epochs": LIST,
}
PHASES_REQUIRED = ("schema", "steps", "step_ms", "phases")
TIMING_FIELDS: dict[str, Kind] = {"mean_ms": NUMBER, "sd_ms": NUMBER}
EPOCH_FIELDS: dict[str, Kind] = {
    "epoch": COUNT,
    "steps": COUNT,
    "phases_ms": OBJECT,
    "beside_ms": OBJECT,
}


def check_phases(phases: Any) -> None:
    """``phases.json``'s schema (``PhaseTimer.report``): phase names become report columns,
    so they are short identifiers, and few."""
    if not isinstance(phases, dict):
        raise Problem(f"holds {shown(phases)}, not an object")
    check_fields(phases, PHASES_FIELDS, PHASES_REQUIRED, "")
    check_fields(phases["step_ms"], TIMING_FIELDS, tuple(TIMING_FIELDS), "step_ms.")
    for group in ("phases", "beside"):
        for name, timing in named(phases.get(group, {}), group):
            check_object(timing, f"{group}.{name}")
            check_fields(timing, TIMING_FIELDS, tuple(TIMING_FIELDS), f"{group}.{name}.")
    for index, epoch in enumerate(phases.get("epochs", [])):
        where = f"epochs[{index}]"
        check_object(epoch, where)
        check_fields(epoch, EPOCH_FIELDS, ("epoch",), f"{where}.")
        for group in ("phases_ms", "beside_ms"):
            for name, value in named(epoch.get(group, {}), f"{where}.{group}"):
                if not is_number(value):
                    raise Problem(f"{where}.{group}.{name} is {shown(value)}, not a number")


def check_object(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise Problem(f"{where} is {shown(value)}, not an object")


def named(values: dict, where: str) -> list[tuple[str, Any]]:
    """The items of a mapping of phase names: at most ``MAX_PHASES``, each named as code
    names one."""
    if len(values) > MAX_PHASES:
        raise Problem(f"{where} names {len(values)} phases (at most {MAX_PHASES})")
    for name in values:
        if not PHASE_NAME.fullmatch(name):
            raise Problem(f"{where} has a phase named {shown(name)}, not an identifier")
    return list(values.items())
