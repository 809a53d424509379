"""The sweep's pictures: test accuracy per epoch and against wall time, throughput/speedup per
device count, and (for jobs run with ``phases=true``) where each job's step time goes."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from multigpu.models.phases import COMPUTE, in_order  # noqa: E402
from multigpu.storage.atomic import atomic_file  # noqa: E402


def save(fig, path: Path) -> None:
    with atomic_file(path) as file:
        fig.savefig(file, format="png", dpi=100)
    plt.close(fig)


def accuracy_figure(curves: list[tuple[str, list[dict[str, Any]]]]) -> Figure:
    """One line per (label, per-epoch history), against whole epochs counted from 1."""
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, history in curves:
        history = [h for h in history if h.get("test_acc") is not None]
        if history:
            epochs = [h["epoch"] for h in history]
            ax.plot(epochs, [h["test_acc"] for h in history], marker="o", label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy")
    ax.set_title("Test accuracy per epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no finished epoch", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig


def plot_test_accuracy(curves: list[tuple[str, list[dict[str, Any]]]], path: Path) -> None:
    save(accuracy_figure(curves), path)


def acc_vs_time_figure(
    curves: list[tuple[str, list[dict[str, Any]]]], targets: list[float] = ()
) -> Figure:
    """One line per (label, per-epoch history): test accuracy against ``wall_s``, the wall time
    since the run's start at the end of each evaluation (docs/records.md, "Time to accuracy"),
    from 0; the ``targets`` as dotted lines. Epochs without a wall time (older records) are left
    out."""
    fig, ax = plt.subplots(figsize=(8, 5))
    longest = max(
        [0.0, *(h["wall_s"] for _, history in curves for h in history if h.get("wall_s"))]
    )
    minutes = longest > 600
    scale = 60.0 if minutes else 1.0
    for label, history in curves:
        points = [
            (h["wall_s"] / scale, h["test_acc"])
            for h in history
            if h.get("wall_s") is not None and h.get("test_acc") is not None
        ]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=label)
    if ax.lines:
        for target in targets:
            ax.axhline(target, color="grey", linestyle=":", linewidth=1)
            ax.annotate(
                f"{target:g}", (1, target), xycoords=("axes fraction", "data"), fontsize=7,
                color="grey", xytext=(2, 0), textcoords="offset points", va="center",
            )  # fmt: skip
        ax.legend(fontsize=8)
        ax.set_xlim(left=0)
    else:
        ax.text(0.5, 0.5, "no evaluation with a wall time", ha="center", transform=ax.transAxes)
    unit = "min" if minutes else "s"
    ax.set_xlabel(f"wall time since the run's start ({unit}), at the end of each evaluation")
    ax.set_ylabel("test accuracy")
    ax.set_title("Test accuracy against wall time")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_acc_vs_time(
    curves: list[tuple[str, list[dict[str, Any]]]], path: Path, targets: list[float] = ()
) -> None:
    save(acc_vs_time_figure(curves, targets), path)


def scaling_lines(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """One line per strategy and setting: the same global batch and lr across device counts,
    or, when a sweep scaled them with the devices, the same per-device batch and lr per sample."""
    fixed: dict[str, list[dict]] = defaultdict(list)
    scaled: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        fixed[f"{r['strategy']}, batch {r['batch_size']}, lr {r['lr']:g}"].append(r)
        per_device = r["batch_size"] // max(r["devices"], 1)
        lr_per_256 = r["lr"] / r["batch_size"] * 256
        scaled[f"{r['strategy']}, {per_device}/device, lr {lr_per_256:g} per 256"].append(r)
    if any(len(v) > 1 for v in fixed.values()) or not any(len(v) > 1 for v in scaled.values()):
        return fixed
    return scaled


def scaling_figure(rows: list[dict[str, Any]]) -> Figure:
    """Throughput (left) and speedup (right) against device count, both axes from zero, each
    with its ideal: a line's one-device throughput times the devices (dotted), speedup = devices.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    lines = scaling_lines([r for r in rows if r["status"] == "completed" and r["samples_per_s"]])
    top = max([1, *(r["devices"] for items in lines.values() for r in items)])
    for label, items in sorted(lines.items()):
        items.sort(key=lambda r: r["devices"])
        devices = [r["devices"] for r in items]
        (line,) = left.plot(devices, [r["samples_per_s"] for r in items], "o-", label=label)
        if devices[0] == 1:
            left.plot([0, top], [0, top * items[0]["samples_per_s"]], ":", color=line.get_color())
        sped = [r for r in items if r["speedup"] is not None]
        if sped:
            speedups = [r["speedup"] for r in sped]
            right.plot([r["devices"] for r in sped], speedups, "o-", label=label)
    left.plot([], [], "k:", label="ideal: one device's x devices")
    right.plot([0, top], [0, top], "k--", label="ideal")
    left.set(xlabel="devices", ylabel="samples / s", title="Throughput")
    right.set(xlabel="devices", ylabel="speedup vs 1 device", title="Speedup")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_xlim(0, top + 0.25)
        ax.set_ylim(bottom=0)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=12, integer=True))  # whole devices
    fig.tight_layout()
    return fig


def plot_scaling(rows: list[dict[str, Any]], path: Path) -> None:
    save(scaling_figure(rows), path)


def phases_figure(bars: list[tuple[str, dict[str, float]]]) -> Figure:
    """One horizontal bar per job, ms per step stacked by phase in a step's order (the wait
    for data between steps first, hatched); on the right the same without the network's
    compute, zoomed, where the strategies differ."""
    names: list[str] = []
    for _, phases in bars:
        names += [n for n in phases if n not in names]
    names = in_order(names)
    colors = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    color = {name: colors(i % colors.N) for i, name in enumerate(names)}
    fig, (whole, rest) = plt.subplots(
        1, 2, figsize=(13, 1.8 + 0.45 * max(len(bars), 1)), width_ratios=(3, 2), sharey=True
    )
    _stack(whole, bars, names, color)
    _stack(rest, bars, [n for n in names if n not in COMPUTE], color)
    whole.set_yticks(range(len(bars)), [label for label, _ in bars], fontsize=8)
    whole.invert_yaxis()  # jobs top-down in sweep order
    whole.set_title("Where a step's time goes")
    rest.set_title("Zoomed: all but " + ", ".join(COMPUTE), fontsize=10)
    handles, labels = whole.get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, ncol=min(len(names), 7), loc="lower center")
    fig.tight_layout(rect=(0, 0.1 + 0.03 * (len(names) > 7), 1, 1))
    return fig


def _stack(ax, bars, names: list[str], color: dict) -> None:
    lefts = [0.0] * len(bars)
    for name in names:
        widths = [phases.get(name, 0.0) for _, phases in bars]
        ax.barh(
            range(len(bars)),
            widths,
            left=lefts,
            label=name,
            color=color[name],
            hatch="//" if name == "data" else None,
            edgecolor="white",
        )
        lefts = [a + b for a, b in zip(lefts, widths, strict=True)]
    ax.set_xlabel("ms per step (mean over the timed steps)")
    ax.set_xlim(left=0)
    ax.grid(axis="x", alpha=0.3)


def plot_phases(bars: list[tuple[str, dict[str, float]]], path: Path) -> None:
    save(phases_figure(bars), path)
