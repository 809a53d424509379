"""A sweep's report files: ``summary.csv``, ``summary.md``, ``test_acc.png``,
``acc_vs_time.png``, ``scaling.png``, and ``phases.png`` when its jobs timed their phases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from multigpu.storage.atomic import write_atomically
from multigpu.tools.report.plots import (
    plot_acc_vs_time,
    plot_phases,
    plot_scaling,
    plot_test_accuracy,
)
from multigpu.tools.report.summary import (
    load_jobs,
    row_labels,
    summarize_jobs,
    target_of_column,
    time_columns,
    to_csv,
    to_markdown,
)

# How the report's own tables begin: a file of that name that does not is someone else's.
REPORT_TABLES = {"summary.csv": "job,", "summary.md": "| job |"}


def others_file(sweep_dir: Path) -> Path | None:
    """A ``summary.csv`` or ``summary.md`` in ``sweep_dir`` that no report wrote (a user's
    notes): the report would replace it."""
    for name, start in REPORT_TABLES.items():
        try:
            with open(sweep_dir / name, encoding="utf-8", errors="replace") as file:
                if not file.read(len(start)).startswith(start):
                    return sweep_dir / name
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            continue
    return None


def write_report(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """Read every job's ``metrics.json`` below ``sweep_dir``, write the report, return its rows."""
    sweep_dir = Path(sweep_dir)
    jobs = load_jobs(sweep_dir)
    rows = summarize_jobs(jobs)
    write_atomically(sweep_dir / "summary.csv", to_csv(rows))
    write_atomically(sweep_dir / "summary.md", to_markdown(rows))
    labels = row_labels(rows)
    curves = [(label, job.get("history", [])) for label, job in zip(labels, jobs, strict=True)]
    plot_test_accuracy(curves, sweep_dir / "test_acc.png")
    targets = [target_of_column(name) for name in time_columns(rows)]
    plot_acc_vs_time(curves, sweep_dir / "acc_vs_time.png", targets)
    plot_scaling(rows, sweep_dir / "scaling.png")
    bars = [
        (label, {n: p["mean_ms"] for n, p in job["phases"]["phases"].items()})
        for label, job in zip(labels, jobs, strict=True)
        if job.get("phases")
    ]
    if bars:
        plot_phases(bars, sweep_dir / "phases.png")
    return rows
