"""One row per job of a sweep, with speedup against the matching one-device job, and its time
to accuracy: ``t90_s``, the wall time to the first evaluation at 0.90 test accuracy, for each
target the jobs' records name (docs/records.md, "Time to accuracy").

Every file goes through its one reader (``multigpu.storage.record_file``): a file it cannot trust is
a row of status ``unreadable`` whose reason says why, and the report goes on. What a row copies from
a file is cut to ``CELL_CHARS``, so a planted huge string stays in its file.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from multigpu.config.computation import differences
from multigpu.storage.ownership import is_free
from multigpu.storage.record import TIME_TO_TARGETS, target_key, time_to
from multigpu.storage.record_file import BadRecord, read_phases, read_record, records_below
from multigpu.tools.markdown import cell, table

COLUMNS = [
    "job",
    "status",
    "strategy",
    "devices",
    "batch_size",
    "lr",
    "precision",
    "epochs",
    "test_acc",
    "best_test_acc",
    "epoch_s",
    "samples_per_s",
    "speedup",
    "efficiency",
    "reason",
]
# What makes two jobs comparable, apart from the device count (and the batch and lr that
# scaling rules derive from it).
SETTINGS = ("accelerator", "num_nodes", "precision", "width", "norm", "max_epochs", "seed", "data")
UNREADABLE = "unreadable"  # the status of a job whose metrics.json no reader can trust
CELL_CHARS = 300  # of any string a row copies from a job's files
MAX_TARGETS = 8  # time-to-accuracy columns one job's record can ask for


def device_count(job: dict[str, Any]) -> int:
    """Every device of the job, over all its nodes (``metrics.json`` schema 1 stored
    ``trainer.devices`` per node, as given: a count or a list of ids)."""
    run = job.get("run", {})
    devices = run.get("devices")
    if job.get("schema") == 1:
        per_node = len(devices) if isinstance(devices, list) else devices
        return per_node * (run.get("num_nodes") or 1) if isinstance(per_node, int) else 0
    return devices if isinstance(devices, int) else 0


def incomplete(rows: list[dict[str, Any]]) -> int:
    """Jobs that did not complete: the sweep fails if there is one."""
    return sum(row["status"] != "completed" for row in rows)


def row_label(row: dict[str, Any]) -> str:
    """How plots name a job: strategy, devices, global batch and lr."""
    label = f"{row['strategy']} x{row['devices']}"
    if isinstance(row.get("lr"), (int, float)):
        label += f", batch {row['batch_size']}, lr {row['lr']:g}"
    return label


def row_labels(rows: list[dict[str, Any]]) -> list[str]:
    """Each row's ``row_label``, or its job's name where that label would name two jobs (runs
    that differ in what the label does not show, e.g. the schedule or the width)."""
    labels = [row_label(row) for row in rows]
    return [
        str(row["job"]) if labels.count(label) > 1 else label
        for row, label in zip(rows, labels, strict=True)
    ]


def load_jobs(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """Every ``metrics.json`` below ``sweep_dir``, in job order, with the ``phases.json``
    beside it as ``phases`` (runs with ``phases=true``, else None). A file that cannot be
    trusted gives a job of status ``unreadable``, or, for ``phases.json``, a ``note``."""
    sweep_dir = Path(sweep_dir)
    jobs = [load_job(path, sweep_dir) for path in records_below(sweep_dir)]
    return sorted(jobs, key=lambda m: (len(m["job"]), m["job"]))


def load_job(path: Path, sweep_dir: Path) -> dict[str, Any]:
    """One job's record and phases; keys of the report's own (``job``, ``phases``, ``note``)
    are set here whatever the record holds."""
    job = str(path.parent.relative_to(sweep_dir))
    try:
        record = read_record(path)
    except BadRecord as bad:
        return unreadable_job(job, problem_line(bad, sweep_dir))
    phases, note = None, None
    phases_path = path.with_name("phases.json")
    if phases_path.exists() or phases_path.is_symlink():
        try:
            phases = read_phases(phases_path)
        except BadRecord as bad:
            note = problem_line(bad, sweep_dir)
    if record.get("status") == "running" and is_free(path.parent):
        record = {**record, "reason": ENDED_UNRECORDED}
    return {**record, "job": job, "phases": phases, "note": note}


# A record still ``running`` whose folder no process holds: its run ended without writing how
# (SIGKILL, a machine that went down); running the same command again continues it.
ENDED_UNRECORDED = (
    "no process holds its folder: the run ended without recording how (killed?); the same "
    "command continues it from its last checkpoint"
)


def unreadable_job(job: str, reason: str) -> dict[str, Any]:
    """A job as the report lists a record it cannot trust: no settings, no history."""
    empty = {"run": {}, "history": [], "phases": None, "note": None}
    return {"job": job, "status": UNREADABLE, "reason": reason, **empty}


def problem_line(bad: BadRecord, sweep_dir: Path) -> str:
    """The bad file, named from the sweep folder, and its problem."""
    try:
        name = bad.path.relative_to(sweep_dir)
    except ValueError:
        name = bad.path
    return f"{name}: {bad.problem}"


def clip(value: Any) -> Any:
    """A string a row copies from a file, on one line and at most ``CELL_CHARS`` long."""
    if not isinstance(value, str):
        return value
    value = " ".join(value.split())
    return value if len(value) <= CELL_CHARS else value[: CELL_CHARS - 3] + "..."


def job_targets(job: dict[str, Any]) -> list[float]:
    """The test accuracies the job's record gives the time to (its ``time_to``'s keys, each
    between 0 and 1, at most ``MAX_TARGETS``), or ``TIME_TO_TARGETS`` for a record without
    them (of an older version)."""
    reported = job.get("time_to")
    if not isinstance(reported, dict):
        return list(TIME_TO_TARGETS)
    targets = set()
    for key in reported:
        try:
            target = float(key)
        except (TypeError, ValueError, OverflowError):
            continue
        if 0 < target <= 1:  # not NaN
            targets.add(target)
    return sorted(targets)[:MAX_TARGETS]


def job_time_to(job: dict[str, Any]) -> dict[float, dict[str, Any] | None]:
    """Target -> the job's time to it (``multigpu.storage.record.time_to``), recomputed from its
    checked history rather than taken from the record as written."""
    targets = job_targets(job)
    found = time_to(job.get("history") or [], targets)
    return {target: found[target_key(target)] for target in targets}


def time_column(target: float) -> str:
    """``0.9`` -> ``t90_s``: the wall seconds to that test accuracy."""
    return f"t{target * 100:.6g}_s"


def target_of_column(name: str) -> float | None:
    """``t90_s`` -> 0.9; None for any other column."""
    if not (name.startswith("t") and name.endswith("_s")):
        return None
    try:
        return float(name[1:-2]) / 100
    except ValueError:
        return None


def _traits(job: dict) -> dict[str, Any]:
    """The run settings plus what scaling rules keep fixed: per-device batch, lr per sample."""
    run = job["run"]
    traits = dict(run)
    devices = device_count(job)
    if run.get("batch_size") and run.get("lr") is not None and devices:
        traits["per_device"] = run["batch_size"] / devices
        traits["lr_per_sample"] = round(run["lr"] / run["batch_size"], 15)
    return traits


# Closest first: the same batch and lr; else the same per-device batch and lr per sample (a
# sweep with scaling rules). Nothing else: a job with other batch or lr has no baseline.
MATCH_ORDER = (
    ("strategy", "batch_size", "lr"),
    ("batch_size", "lr"),
    ("strategy", "per_device", "lr_per_sample"),
    ("per_device", "lr_per_sample"),
)


# What scaling to more devices may change in what a run computes (``multigpu.config.computation``).
SCALED = {"data.batch_size", "model.optimizer.lr", "model.lr_scaling.warmup_from"}


def same_computation(a: dict, b: dict) -> bool:
    """Whether two jobs compute the same but for ``SCALED`` (records that carry no settings,
    of older versions, are compared by ``SETTINGS`` alone)."""
    if not isinstance(a.get("settings"), dict) or not isinstance(b.get("settings"), dict):
        return True
    return set(differences(a["settings"], b["settings"])) <= SCALED


def _baseline(job: dict, candidates: list[dict]) -> dict | None:
    """The one-device job with the same settings (``SETTINGS``) that differs from ``job``
    only in what scaling to more devices changes, or None; a one-device job is its own (another
    such job, of the same run repeated, had given it a "speedup" of one run over the other)."""
    traits = _traits(job)
    same = [c for c in candidates if all(c["run"].get(k) == traits.get(k) for k in SETTINGS)]
    same = [c for c in same if same_computation(c, job)]
    for keys in MATCH_ORDER:
        if any(traits.get(k) is None for k in keys):
            continue
        matches = [c for c in same if all(_traits(c).get(k) == traits.get(k) for k in keys)]
        if matches:
            return job if job in matches else matches[0]
    return None


def summarize_jobs(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    single = [
        j
        for j in jobs
        if j.get("status") == "completed"
        and device_count(j) == 1
        and j["run"].get("num_nodes", 1) == 1
        and j.get("samples_per_s")
    ]
    return [job_row(job, single) for job in jobs]


def job_row(job: dict[str, Any], single: list[dict[str, Any]]) -> dict[str, Any]:
    """The job's row; speedup and efficiency only for a completed job with a baseline."""
    run = job.get("run", {})
    devices = device_count(job)
    row = {
        "job": clip(job["job"]),
        "status": job.get("status"),
        "strategy": clip(run.get("strategy")),
        "devices": devices or None,  # unknown: a record without settings
        "batch_size": run.get("batch_size"),
        "lr": run.get("lr"),
        "precision": clip(run.get("precision")),
        "epochs": job.get("epochs"),
        "test_acc": job.get("test_acc"),
        "best_test_acc": job.get("best_test_acc"),
        "epoch_s": job.get("epoch_s"),
        "samples_per_s": job.get("samples_per_s"),
        "speedup": None,
        "efficiency": None,
        "reason": clip("; ".join(filter(None, (job.get("reason"), job.get("note"))))),
    }
    if job.get("status") != UNREADABLE:
        for target, reached in job_time_to(job).items():
            row[time_column(target)] = reached["wall_s"] if reached else None
    phases = job.get("phases") or {}
    row["step_ms"] = (phases.get("step_ms") or {}).get("mean_ms")
    for name, stats in (phases.get("phases") or {}).items():
        row[f"{name}_ms"] = stats["mean_ms"]
    completed = job.get("status") == "completed" and job.get("samples_per_s")
    base = _baseline(job, single) if completed else None
    if base is not None:
        row["speedup"] = job["samples_per_s"] / base["samples_per_s"]
        row["efficiency"] = row["speedup"] / devices if devices else None
    return row


def phase_columns(rows: list[dict[str, Any]]) -> list[str]:
    """``step_ms`` and each phase's ``<name>_ms`` that any job timed, in timeline order."""
    names: list[str] = []
    for row in rows:
        names += [k for k in row if k.endswith("_ms") and k not in names and k != "step_ms"]
    return ["step_ms", *names] if names else []


def time_columns(rows: list[dict[str, Any]]) -> list[str]:
    """``t<target>_s`` of every target any job reports, in increasing order."""
    names = {k for row in rows for k in row if target_of_column(k) is not None}
    return sorted(names, key=lambda name: target_of_column(name) or 0.0)


def main_columns(rows: list[dict[str, Any]]) -> list[str]:
    """``COLUMNS`` with the time-to-accuracy columns after the accuracies."""
    at = COLUMNS.index("best_test_acc") + 1
    return [*COLUMNS[:at], *time_columns(rows), *COLUMNS[at:]]


def columns(rows: list[dict[str, Any]]) -> list[str]:
    return main_columns(rows) + phase_columns(rows)


def to_csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    names = columns(rows)
    writer = csv.DictWriter(out, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row.get(k) is None else row[k] for k in names})
    return out.getvalue()


def _tables(rows: list[dict[str, Any]]) -> list[list[str]]:
    """The columns of each table shown to people: the jobs, then (when timed) the phases in
    ms per step, which would not fit beside them."""
    main = [c for c in main_columns(rows) if c != "reason" or any(r["reason"] for r in rows)]
    phases = phase_columns(rows)
    return [main, ["job", "strategy", "devices", *phases]] if phases else [main]


def to_markdown(rows: list[dict[str, Any]]) -> str:
    tables = []
    for names in _tables(rows):
        lines = table(names, ([cell(row.get(c), empty="") for c in names] for row in rows))
        tables.append("\n".join(lines) + "\n")
    return "\n".join(tables)


def to_text(rows: list[dict[str, Any]]) -> str:
    """Fixed-width tables for the terminal."""
    tables = []
    for names in _tables(rows):
        cells = [[cell(r.get(c), empty="") for c in names] for r in rows]
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(names)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(names, widths, strict=True))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
        tables.append("\n".join(line.rstrip() for line in lines) + "\n")
    return "\n".join(tables)
