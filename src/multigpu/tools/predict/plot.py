"""The predicted scaling figure: one panel per network, efficiency (speedup over one GPU per
GPU) against GPUs, a colour per strategy, solid over NVLink and dashed over PCIe."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from multigpu.tools.report.plots import plt, save

STYLES = {"nvlink": "-", "pcie": "--"}


def plot_speedup(rows: list[dict[str, Any]], notes: list[str], path: Path) -> None:
    networks = list(dict.fromkeys(r["network"] for r in rows))
    fig, axes = plt.subplots(1, len(networks), figsize=(6 * len(networks), 6), squeeze=False)
    ticks = sorted({r["devices"] for r in rows})
    colors = {s: f"C{i}" for i, s in enumerate(dict.fromkeys(r["strategy"] for r in rows))}
    for ax, network in zip(axes[0], networks, strict=True):
        for (strategy, link), style in _lines(rows, network):
            points = [
                r for r in rows
                if (r["network"], r["strategy"], r["link"]) == (network, strategy, link)
            ]  # fmt: skip
            points.sort(key=lambda r: r["devices"])
            ax.plot(
                [r["devices"] for r in points],
                [r["speedup"] / r["devices"] for r in points],
                style,
                marker="o",
                color=colors[strategy],
                label=f"{strategy}, {link}",
            )
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axvline(8.5, color="grey", lw=0.8)
        ax.text(9, 0.05, "several nodes,\n8 GPUs each,\nInfiniBand", fontsize=8, color="grey")
        ax.set(xlabel="GPUs", ylabel="efficiency: speedup over one GPU / GPUs", title=network)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower left")
    fig.text(0.01, 0.01, "\n".join(notes), fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.18, 1, 1))
    save(fig, path)


def _lines(rows: list[dict[str, Any]], network: str) -> list[tuple[tuple[str, str], str]]:
    keys = dict.fromkeys((r["strategy"], r["link"]) for r in rows if r["network"] == network)
    return [(key, STYLES.get(key[1], "-")) for key in keys]
