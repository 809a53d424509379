"""One row per job of a sweep, with speedup against the matching one-device job."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from multigpu.record import upgrade

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


def load_jobs(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """Every ``metrics.json`` below ``sweep_dir``, in job order, with the ``phases.json``
    beside it as ``phases`` (runs with ``phases=true``)."""
    sweep_dir = Path(sweep_dir)
    jobs = []
    for path in sweep_dir.rglob("metrics.json"):
        metrics = upgrade(json.loads(path.read_text()))
        metrics["job"] = str(path.parent.relative_to(sweep_dir))
        phases = path.with_name("phases.json")
        if phases.is_file():
            metrics["phases"] = json.loads(phases.read_text())
        jobs.append(metrics)
    return sorted(jobs, key=lambda m: (len(m["job"]), m["job"]))


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
# sweep with scaling rules); else any one-device job with the same strategy and settings.
MATCH_ORDER = (
    ("strategy", "batch_size", "lr"),
    ("batch_size", "lr"),
    ("strategy", "per_device", "lr_per_sample"),
    ("per_device", "lr_per_sample"),
    ("strategy",),
    (),
)


def _baseline(job: dict, candidates: list[dict]) -> dict | None:
    """The one-device job that differs from ``job`` in as little as possible."""
    traits = _traits(job)
    same = [c for c in candidates if all(c["run"].get(k) == traits.get(k) for k in SETTINGS)]
    for keys in MATCH_ORDER:
        matches = [c for c in same if all(_traits(c).get(k) == traits.get(k) for k in keys)]
        if matches:
            return matches[0]
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
    rows = []
    for job in jobs:
        run = job.get("run", {})
        devices = device_count(job)
        row = {
            "job": job["job"],
            "status": job.get("status"),
            "strategy": run.get("strategy"),
            "devices": devices,
            "batch_size": run.get("batch_size"),
            "lr": run.get("lr"),
            "precision": run.get("precision"),
            "epochs": job.get("epochs"),
            "test_acc": job.get("test_acc"),
            "best_test_acc": job.get("best_test_acc"),
            "epoch_s": job.get("epoch_s"),
            "samples_per_s": job.get("samples_per_s"),
            "speedup": None,
            "efficiency": None,
            "reason": job.get("reason") or "",
        }
        phases = job.get("phases") or {}
        row["step_ms"] = (phases.get("step_ms") or {}).get("mean_ms")
        for name, stats in (phases.get("phases") or {}).items():
            row[f"{name}_ms"] = stats["mean_ms"]
        base = _baseline(job, single) if job.get("samples_per_s") else None
        if base is not None:
            row["speedup"] = job["samples_per_s"] / base["samples_per_s"]
            row["efficiency"] = row["speedup"] / devices if devices else None
        rows.append(row)
    return rows


def phase_columns(rows: list[dict[str, Any]]) -> list[str]:
    """``step_ms`` and each phase's ``<name>_ms`` that any job timed, in timeline order."""
    names: list[str] = []
    for row in rows:
        names += [k for k in row if k.endswith("_ms") and k not in names and k != "step_ms"]
    return ["step_ms", *names] if names else []


def columns(rows: list[dict[str, Any]]) -> list[str]:
    return COLUMNS + phase_columns(rows)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


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
    main = [c for c in COLUMNS if c != "reason" or any(r["reason"] for r in rows)]
    phases = phase_columns(rows)
    return [main, ["job", "strategy", "devices", *phases]] if phases else [main]


def to_markdown(rows: list[dict[str, Any]]) -> str:
    tables = []
    for names in _tables(rows):
        lines = ["| " + " | ".join(names) + " |", "|" + " --- |" * len(names)]
        lines += ["| " + " | ".join(_cell(row.get(c)) for c in names) + " |" for row in rows]
        tables.append("\n".join(lines) + "\n")
    return "\n".join(tables)


def to_text(rows: list[dict[str, Any]]) -> str:
    """Fixed-width tables for the terminal."""
    tables = []
    for names in _tables(rows):
        cells = [[_cell(r.get(c)) for c in names] for r in rows]
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(names)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(names, widths, strict=True))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
        tables.append("\n".join(line.rstrip() for line in lines) + "\n")
    return "\n".join(tables)
