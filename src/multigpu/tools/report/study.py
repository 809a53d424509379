"""A study: several sweeps, one per row (``outputs/study/<experiment>/``), each over seeds.
``python -m multigpu.tools.report.study outputs/study`` prints the Markdown table of docs/results.md
(mean, spread and each seed's final test accuracy, and the time to each target accuracy over
the seeds as MLPerf Training scores it) and writes its accuracy curves.

Reads JSON only, as the sweep report does.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from typing import Any

from multigpu.tools.arguments import OneLineParser, output_file
from multigpu.tools.markdown import table
from multigpu.tools.report.plots import plt, save
from multigpu.tools.report.summary import job_time_to, load_jobs

MLPERF_LEAST_SEEDS = 3  # below this, no fastest and slowest are dropped


def mlperf_time(times: list[float | None]) -> float | None:
    """The time over seeds as MLPerf Training scores it: drop the fastest and the slowest run
    and average the rest, a run that never reached the target counting as the slowest (so one
    such run is dropped; with two or more there is no score, None). With fewer than
    ``MLPERF_LEAST_SEEDS`` runs nothing is dropped: the plain mean, None if any missed."""
    if not times:
        return None
    ordered = sorted(times, key=lambda t: math.inf if t is None else t)
    if len(ordered) >= MLPERF_LEAST_SEEDS:
        ordered = ordered[1:-1]
    if any(t is None for t in ordered):
        return None
    return statistics.mean(ordered)


def time_to_targets(jobs: list[dict[str, Any]]) -> dict[float, dict[str, Any]]:
    """Target -> each seed's wall time to it (``times``, None for a seed that never reached it),
    how many never did (``missed``) and their ``mlperf_time`` (None also when a seed reached it
    without a wall time: a record of an older version), for every target the jobs report."""
    reached = [job_time_to(j) for j in jobs]
    summary = {}
    for target in sorted({t for found in reached for t in found}):
        found = [each.get(target) for each in reached]
        times = [None if f is None else f["wall_s"] for f in found]
        untimed = any(f is not None and f["wall_s"] is None for f in found)
        summary[target] = {
            "times": times,
            "missed": sum(f is None for f in found),
            "mlperf": None if untimed else mlperf_time(times),
        }
    return summary


# What a row's jobs share but their seed: the settings they trained with, and the layout.
LAYOUT = ("strategy", "devices", "num_nodes")
SEEDS = ("seed", "data.seed")  # the data's seed follows the run's (${seed})


class NotSeeds(ValueError):
    """A sweep folder whose jobs differ in more than their seed: no row of seeds."""


def beyond_the_seed(folder: Path, jobs: list[dict[str, Any]]) -> None:
    """A row averages seeds: its jobs must differ in ``seed`` alone (a sweep over lr or
    strategies had been averaged as seeds, and named by its first job's values)."""

    def kept(job: dict[str, Any]) -> dict[str, Any]:
        settings = {k: v for k, v in (job.get("settings") or {}).items() if k not in SEEDS}
        return settings | {f"run.{k}": (job.get("run") or {}).get(k) for k in LAYOUT}

    first = kept(jobs[0])
    for job in jobs[1:]:
        other = kept(job)
        for key in sorted(first.keys() | other.keys()):
            if first.get(key) != other.get(key):
                raise NotSeeds(
                    f"{folder}: its jobs differ in {key} ({first.get(key)}, {other.get(key)}), "
                    "not in their seed alone, and a row averages seeds: pass a folder whose "
                    "sweeps each vary seed alone (python train.py -m ... seed=1,2,3)"
                )


def study_rows(study_dir: Path) -> list[dict[str, Any]]:
    """One row per sweep folder below ``study_dir``, over its completed jobs that were tested
    after their last epoch, in folder order (an untested one, stopped by ``max_steps`` inside an
    epoch, has no final accuracy to average: it is named on stderr); ``NotSeeds`` where a
    folder's jobs differ in more than their seed."""
    rows = []
    for folder in sorted(p for p in study_dir.iterdir() if p.is_dir()):
        completed = [j for j in load_jobs(folder) if j.get("status") == "completed"]
        jobs = [j for j in completed if j.get("test_acc") is not None]
        if len(jobs) < len(completed):
            print(f"warning: {folder}: {len(completed) - len(jobs)} completed job(s) with no "
                  "test accuracy after their last epoch left out", file=sys.stderr)  # fmt: skip
        if jobs:
            beyond_the_seed(folder, jobs)
            rows.append(row_of(folder.name, sorted(jobs, key=lambda j: j["run"].get("seed") or 0)))
    return rows


def mean_or_none(values: list[float | None]) -> float | None:
    """The mean, or None when a value is missing (a seed with no whole epoch): a mean over
    some of a row's seeds would read as one over all of them."""
    return None if not values or None in values else statistics.mean(values)


def row_of(name: str, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    run = jobs[0]["run"]
    finals = [j["test_acc"] for j in jobs]
    return {
        "name": name,
        "strategy": run["strategy"],
        "devices": run["devices"],
        "batch_size": run["batch_size"],
        "lr": run["lr"],
        "warmup_epochs": run.get("warmup_epochs") or 0,
        "seeds": [j["run"].get("seed") for j in jobs],
        "finals": finals,
        "mean": statistics.mean(finals),
        "sd": statistics.stdev(finals) if len(finals) > 1 else 0.0,
        "best_mean": statistics.mean(j["best_test_acc"] for j in jobs),
        "epoch_s": mean_or_none([j["epoch_s"] for j in jobs]),  # null: a seed had no whole epoch
        "hours": sum(sum(h["epoch_s"] or 0 for h in j["history"]) for j in jobs) / 3600,
        "curves": [[(h["epoch"], h["test_acc"]) for h in j["history"]] for j in jobs],
        "time_to": time_to_targets(jobs),
    }


TIME_NOTE = (
    "Time to a test accuracy: wall seconds from the run's start to the end of its first "
    "evaluation at or above it; over the seeds as MLPerf Training scores it, the fastest and "
    "the slowest seed dropped and the rest averaged (a seed that never reached it counts as the "
    "slowest; with two such, no time), the plain mean for fewer than "
    f"{MLPERF_LEAST_SEEDS} seeds."
)


def time_cell(summary: dict[str, Any] | None) -> str:
    """A row's time to a target: the MLPerf-style time in seconds, and how many seeds never
    reached it when some did not (``-``: no time)."""
    if summary is None:
        return "-"
    shown = "-" if summary["mlperf"] is None else f"{summary['mlperf']:.1f}"
    if not summary["missed"]:
        return shown
    return f"{shown} ({summary['missed']} of {len(summary['times'])} missed)"


def to_markdown(rows: list[dict[str, Any]]) -> str:
    targets = sorted({t for r in rows for t in r.get("time_to", {})})
    header = ["experiment", "strategy", "devices", "batch", "lr", "warm-up", "seeds"]
    header += ["final test acc, mean ± sd", "each seed", "best, mean", "s/epoch"]
    lines = table(
        [*header, *(f"time to {t:g}, s" for t in targets)],
        (
            [
                f"`{r['name']}`",
                r["strategy"],
                r["devices"],
                r["batch_size"],
                f"{r['lr']:g}",
                f"{r['warmup_epochs']:g} epochs" if r["warmup_epochs"] else "none",
                len(r["finals"]),
                f"{r['mean']:.4f} ± {r['sd']:.4f}",
                ", ".join(f"{v:.4f}" for v in r["finals"]),
                f"{r['best_mean']:.4f}",
                "-" if r["epoch_s"] is None else f"{r['epoch_s']:.1f}",
                *(time_cell(r.get("time_to", {}).get(t)) for t in targets),
            ]
            for r in rows
        ),
    )
    if targets:
        lines += ["", TIME_NOTE]
    return "\n".join(lines) + "\n"


def plot_curves(rows: list[dict[str, Any]], path: Path) -> None:
    """Test accuracy per epoch: each row's mean over seeds, the band from its lowest to its
    highest seed."""
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for r in rows:
        # The epochs every seed was tested after (check_val_every_n_epoch may skip some).
        tested = [dict(c) for c in r["curves"]]
        epochs = [e for e, _ in r["curves"][0] if all(t.get(e) is not None for t in tested)]
        by_epoch = [[t[e] for t in tested] for e in epochs]
        mean = [statistics.mean(v) for v in by_epoch]
        (line,) = ax.plot(epochs, mean, marker="o", label=f"{r['name']} ({len(r['curves'])} seeds)")
        low, high = [min(v) for v in by_epoch], [max(v) for v in by_epoch]
        ax.fill_between(epochs, low, high, color=line.get_color(), alpha=0.15)
    ax.set(xlabel="epoch", ylabel="test accuracy", title="Test accuracy per epoch (band: seeds)")
    ax.set_xticks(range(1, max(len(r["curves"][0]) for r in rows) + 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("study_dir", type=Path)
    parser.add_argument("--plot", type=output_file(".png"), help="where to write the curves")
    args = parser.parse_args(argv)
    if not args.study_dir.is_dir():
        print(f"error: no study folder {args.study_dir}: pass the folder that holds the "
              "sweeps", file=sys.stderr)  # fmt: skip
        return 2
    try:
        rows = study_rows(args.study_dir)
    except NotSeeds as mixed:
        print(f"error: {mixed}", file=sys.stderr)
        return 2
    if not rows:
        print(f"error: no completed job in a sweep folder below {args.study_dir}: pass the "
              "folder that holds the study's sweeps, one per row (e.g. outputs/study)",
              file=sys.stderr)  # fmt: skip
        return 2
    print(to_markdown(rows), end="")
    if args.plot:
        plot_curves(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
