"""The ratios the performance targets are stated in, the GPU epoch targets, and the table.

A ``--tiny`` run (``settings["tiny"]``) is a smoke test: a few steps of a narrow network,
several configurations at once. Its numbers show that every configuration runs, nothing more, so
its report says so first and judges no target (``met`` is null, the table says "smoke test:
not measured").
"""

from __future__ import annotations

import statistics
from typing import Any

from multigpu.tools.markdown import cell, table

# (name, numerator, denominator, what it measures, target as (comparison, value) or None)
RATIOS = [
    (
        "1 framework overhead",
        "plain_loop",
        "lightning_memory",
        "plain PyTorch images/s / our Lightning step's (width {width})",
        ("<=", 1.05),
    ),
    (
        "1b channels_last",
        "lightning_memory_nhwc",
        "lightning_memory",
        "our step's images/s with model.channels_last=true / without (width {width})",
        None,
    ),
    (
        "1c bf16 autocast",
        "lightning_memory_bf16",
        "lightning_memory",
        "our step's images/s with trainer.precision=bf16-mixed / fp32's (width {width}; on a "
        "CPU, autocast to bf16 pays off only where the convolutions are wide enough)",
        None,
    ),
    (
        "1d torch.compile",
        "lightning_memory_compile",
        "lightning_memory",
        "our step's images/s with model.compile=true / eager's, compiled before the timing "
        "(width {width}; the compile itself is the warm-up's)",
        None,
    ),
    (
        "2 scatter_allreduce cost",
        "single",
        "scatter_allreduce_x{replicas}",
        "one device images/s / {replicas} replicas' on the same hardware",
        ("<=", 1.10),
    ),
    (
        "3 DDP scaling (CPU)",
        "ddp_x{processes}_1thread",
        "ddp_x1_1thread",
        "{processes} processes images/s / 1 process's, one thread each",
        (">=", 1.7),
    ),
    (
        "3b hardware ceiling (CPU)",
        "independent_x{processes}_1thread",
        "ddp_x1_1thread",
        "{processes} independent 1-thread runs side by side, images/s in all / 1 DDP "
        "process's: the most any scaling reaches on this machine",
        None,
    ),
    (
        "3c DDP against that ceiling",
        "ddp_x{processes}_1thread",
        "independent_x{processes}_1thread",
        "DDP's images/s / the independent runs' together: what gradient exchange costs",
        None,
    ),
    (
        "2b phase timing cost",
        "scatter_allreduce_x{replicas}",
        "scatter_allreduce_x{replicas}_phases",
        "{replicas} replicas' images/s / the same with phases=true (the most phases timed)",
        ("<=", 1.05),
    ),
    (
        "4 in-memory pipeline",
        "lightning_memory",
        "lightning_torchvision",
        "in-memory images/s / torchvision DataLoader's, end to end (width {width})",
        (">=", 1.5),
    ),
    (
        "4b pipelines alone",
        "loader_memory",
        "loader_torchvision",
        "in-memory batches/s / torchvision DataLoader's, no network",
        None,
    ),
]
# Ratio 5, on a GPU: (configuration, seconds per epoch at most, test accuracy at least).
EPOCH_TARGETS = {"epoch_fast": (0.5, 0.91), "epoch_d2l": (2.0, 0.91)}
H100_BF16_DENSE_FLOPS = 989e12
NOT_MEASURED = "smoke test: not measured"  # in place of a verdict, for --tiny
SMOKE_TEST_LINE = (
    "**Smoke test (`--tiny`): not a measurement.** A few steps of a narrow network per "
    "configuration, several at once: the numbers below only show that each one runs; no ratio "
    "means anything and no target is judged. Run without `--tiny` to measure."
)


def _check(value: float, op: str, target: float) -> bool:
    return value <= target if op == "<=" else value >= target


def paired_ratio(top: dict[str, Any], bottom: dict[str, Any]) -> tuple[float, list[float]]:
    """The median over rounds of the ratio within each round, where both sides ran minutes
    apart, so a machine that drifts over the run moves both sides alike; the ratio of the
    rows' images/s when fewer than two rounds pair up."""
    tops = dict(zip(top.get("rounds", []), top.get("images_per_s_runs", []), strict=True))
    bottoms = dict(zip(bottom.get("rounds", []), bottom.get("images_per_s_runs", []), strict=True))
    rounds = [tops[r] / bottoms[r] for r in sorted(tops.keys() & bottoms.keys())]
    if len(rounds) > 1:
        return statistics.median(rounds), rounds
    return top["images_per_s"] / bottom["images_per_s"], []


def significant(value: float, digits: int = 4) -> float:
    """Round to significant digits: a ratio of 0.04 keeps as many as one of 4.0."""
    return float(f"{value:.{digits}g}")


def compute_ratios(results: list[dict[str, Any]], settings: dict[str, Any]) -> list[dict]:
    """Every ratio both of whose sides ran, and the epoch targets; none judged for --tiny."""
    ratios = speed_ratios(results, settings) + epoch_targets(results)
    if settings.get("tiny"):
        for ratio in ratios:
            ratio["met"] = None
    return ratios


def speed_ratios(results: list[dict[str, Any]], settings: dict[str, Any]) -> list[dict]:
    rows = {r["name"]: r for r in results if r.get("images_per_s") is not None}
    ratios = []
    for name, top, bottom, meaning, target in RATIOS:
        top, bottom = top.format(**settings), bottom.format(**settings)
        if top not in rows or bottom not in rows:
            continue
        value, rounds = paired_ratio(rows[top], rows[bottom])
        ratios.append(
            {
                "ratio": name,
                "value": significant(value),
                "rounds": [significant(r) for r in rounds],
                "target": f"{target[0]} {target[1]}" if target else None,
                "met": _check(value, *target) if target else None,
                "meaning": meaning.format(**settings),
            }
        )
    return ratios


def epoch_targets(results: list[dict[str, Any]]) -> list[dict]:
    """Ratio 5: seconds per epoch and test accuracy of the whole-epoch recipes (GPU)."""
    ratios = []
    for r in results:
        if r["name"] in EPOCH_TARGETS and r.get("epoch_s"):
            seconds, accuracy = EPOCH_TARGETS[r["name"]]
            met = r["epoch_s"] <= seconds and (r.get("test_acc") or 0) >= accuracy
            ratios.append(
                {
                    "ratio": f"5 {r['name']} s/epoch",
                    "value": round(r["epoch_s"], 3),
                    "target": f"<= {seconds} s, test acc >= {accuracy} (GPU)",
                    "met": met,
                    "meaning": f"seconds per epoch; test accuracy {r.get('test_acc'):.3f} after "
                    f"{r.get('epochs')} epochs",
                }
            )
    return ratios


def mfu(flops_per_image: float | None, images_per_s: float | None, gpu: str | None):
    """(achieved TFLOP/s, fraction of the H100's dense bf16 peak) for a training step."""
    if not flops_per_image or not images_per_s:
        return None, None
    achieved = flops_per_image * images_per_s
    peak = H100_BF16_DENSE_FLOPS if gpu and "H100" in gpu else None
    return round(achieved / 1e12, 3), (round(achieved / peak, 4) if peak else None)


def how_many_at_once(settings: dict[str, Any]) -> str:
    jobs = settings.get("jobs") or 1
    return "one after the other" if jobs == 1 else f"{jobs} at a time"


def verdict(ratio: dict[str, Any], smoke_test: bool) -> str:
    if smoke_test and ratio["target"] is not None:
        return NOT_MEASURED
    return {True: "yes", False: "no", None: "-"}[ratio["met"]]


def to_markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    s = report["settings"]
    smoke_test = bool(s.get("tiny"))
    lines = [SMOKE_TEST_LINE, ""] if smoke_test else []
    lines += [
        f"Machine: {m['cpu_cores']} CPU cores, GPU: {m['gpu'] or 'none'}, torch {m['torch']}. "
        f"Global batch {s['batch']}, {s['steps']} timed steps after {s['warmup']} warm-up "
        f"steps per configuration, each in a fresh process, {how_many_at_once(s)}.",
        "",
    ]
    header = ["configuration", "width", "images/s", "s/epoch", "test acc", "TFLOP/s"]
    lines += table(
        [*header, "peak RSS (MB)", "peak GPU (MB)"],
        (
            [
                r["name"],
                cell(r["width"] or None, "{}"),
                cell(r.get("images_per_s"), "{:.1f}") if "error" not in r else r["error"],
                cell(r.get("epoch_s"), "{:.2f}"),
                cell(r.get("test_acc"), "{:.3f}"),
                *(cell(r.get(key), "{}") for key in ("tflops", "peak_rss_mb", "peak_gpu_mb")),
            ]
            for r in report["configurations"]
        ),
    )
    lines.append("")
    lines += table(
        ["ratio", "value", "rounds", "target", "met", "measures"],
        (
            [
                r["ratio"],
                f"{r['value']:.2f}",
                ", ".join(f"{x:.2f}" for x in r.get("rounds") or []) or "-",
                cell(r["target"], "{}"),
                verdict(r, smoke_test),
                r["meaning"],
            ]
            for r in report["ratios"]
        ),
    )
    return "\n".join(lines) + "\n"
