"""``python -m multigpu.tools.predict``: predicted speedup of each strategy on GPUs, one node and
several, for the d2l ResNet-18 and a network ten times larger, assumptions printed beside.

``--check <sweep dir>``: the same model, fed with this machine's measurements (the sweep's
one-device jobs and the links measured now), against what the sweep's multi-device jobs
measured with ``phases=true``. The model is ``multigpu.tools.predict.cost_model``.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from multigpu.tools.arguments import (
    DefaultsHelp,
    OneLineParser,
    existing_folder,
    number,
    output_file,
)
from multigpu.tools.predict.cost_model import (
    Cluster,
    Link,
    Workload,
    predict,
    speedup,
    step_s,
)

# Nominal one-direction bandwidths of common links; latencies are order-of-magnitude guesses.
LINKS = {
    "nvlink": Link("NVLink 4 (H100 SXM, 450 GB/s)", 5e-6, 450e9),
    "pcie": Link("PCIe 4.0 x16 (32 GB/s)", 10e-6, 32e9),
    "infiniband": Link("InfiniBand NDR (400 Gb/s = 50 GB/s)", 10e-6, 50e9),
}
LAYOUTS = [(1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (8, 4)]  # (devices per node, nodes)
STRATEGIES = ("ddp", "scatter_allreduce", "dp")


def gpu_workloads(images_per_s: float, fixed_ms: float) -> list[Workload]:
    from multigpu.tools.predict.measure import INPUT_BYTES, network_bytes

    params, buffers = network_bytes(64)
    base = Workload(
        "d2l ResNet-18 (11.2 M parameters)",
        compute_s_per_sample=1 / images_per_s,
        fixed_s=fixed_ms / 1000,
        param_bytes=params,
        buffer_bytes=buffers,
        input_bytes_per_sample=INPUT_BYTES,
        output_bytes_per_sample=40,
    )
    larger = replace(
        base,
        name="10x larger (112 M parameters, 10x the compute)",
        compute_s_per_sample=10 * base.compute_s_per_sample,
        fixed_s=10 * base.fixed_s,
        param_bytes=10 * params,
        buffer_bytes=10 * buffers,
    )
    return [base, larger]


def gpu_table(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for work in gpu_workloads(args.gpu_images_per_s, args.fixed_ms):
        for link in ("nvlink", "pcie"):
            for per_node, nodes in LAYOUTS:
                cluster = Cluster(per_node, nodes, LINKS[link], LINKS["infiniband"])
                for strategy in STRATEGIES:
                    if nodes > 1 and strategy != "ddp":
                        continue
                    gpus = f"{per_node} x {nodes} nodes" if nodes > 1 else str(per_node)
                    value = speedup(strategy, work, cluster, args.batch_per_device)
                    rows.append(
                        {
                            "network": work.name,
                            "link": link,
                            "strategy": strategy,
                            "gpus": gpus,
                            "devices": cluster.devices,
                            "speedup": value,
                        }
                    )
    return rows


def assumptions(args: argparse.Namespace) -> list[str]:
    nvlink, pcie, between = LINKS["nvlink"], LINKS["pcie"], LINKS["infiniband"]
    return [
        f"compute: {args.gpu_images_per_s:,.0f} images/s per GPU for the d2l ResNet-18 "
        "(the H100 target of docs/performance.md, ratio 5: not a measurement); 10x for the "
        "larger network",
        f"fixed work per step (loss, optimizer): {args.fixed_ms} ms; 10x for the larger network",
        f"batch: {args.batch_per_device} per GPU (the global batch grows with the GPUs, as d2l's)",
        f"links in a node: {nvlink.name} or {pcie.name}, alpha {nvlink.alpha_s * 1e6:g} and "
        f"{pcie.alpha_s * 1e6:g} us",
        f"between nodes: {between.name}, alpha {between.alpha_s * 1e6:g} us",
        "DDP buckets of 25 MiB, fp32 gradients; backward = 2/3 of the compute",
        "left out: kernel launch on the host, stragglers, data loading, efficiency that changes "
        "with the per-GPU batch",
    ]


def print_gpu_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    for network in dict.fromkeys(r["network"] for r in rows):
        for link in dict.fromkeys(r["link"] for r in rows):
            mine = [r for r in rows if r["network"] == network and r["link"] == link]
            print(f"\npredicted speedup over one GPU: {network}, {LINKS[link].name} in a node")
            layouts = list(dict.fromkeys(r["gpus"] for r in mine))
            print("  " + "strategy".ljust(18) + "".join(g.rjust(14) for g in layouts))
            for strategy in STRATEGIES:
                cells = {r["gpus"]: r["speedup"] for r in mine if r["strategy"] == strategy}
                line = "".join(
                    (f"{cells[g]:.2f}" if g in cells else "-").rjust(14) for g in layouts
                )
                print("  " + strategy.ljust(18) + line)
    print("\nassumptions:")
    for line in assumptions(args):
        print(f"  - {line}")


# Checking against this machine ----------------------------------------------------------------
def check(sweep_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Predicted against measured step time for every multi-device job of the sweep that
    timed its phases, from the one-device job of the same strategy and the links measured now;
    and the problems of the ``phases.json`` and ``metrics.json`` files that could not be used."""
    from multigpu.tools.predict.measure import copy_link, gloo_link, workload_from_run
    from multigpu.tools.report.summary import device_count, load_jobs

    loaded = load_jobs(sweep_dir)
    problems = [j.get("note") or j.get("reason") for j in loaded if j.get("note")]
    problems += [j["reason"] for j in loaded if j.get("status") == "unreadable"]
    jobs = [
        j for j in loaded if j.get("status") == "completed" and (j.get("phases") or {}).get("steps")
    ]  # runs that timed at least one step
    one = {j["run"]["strategy"]: j for j in jobs if device_count(j) == 1}
    links: dict[str, Link] = {}
    rows = []
    for job in jobs:
        strategy, devices = job["run"]["strategy"], device_count(job)
        base = one.get(strategy) or one.get("single")
        if devices < 2 or base is None:
            continue
        work = workload_from_run(base["job"], base["phases"], base["run"])
        in_process = strategy in ("scatter_allreduce", "dp")
        if in_process:
            link = links.setdefault("copy", copy_link())
            concurrent = 1  # CPU replicas in one process take turns on the same cores
        else:
            link = links.setdefault("gloo", gloo_link())
            threads = job["phases"].get("threads") or os.cpu_count() or 1
            concurrent = max(1, (os.cpu_count() or 1) // threads)
        cluster = Cluster(devices, job["run"].get("num_nodes", 1), link, link, concurrent)
        predicted = predict(strategy, work, cluster, job["run"]["batch_size"])
        measured = job["phases"]["step_ms"]["mean_ms"] / 1000
        phases = job["phases"]["phases"]
        rows.append(
            {
                "job": job["job"],
                "strategy": strategy,
                "devices": devices,
                "measured_ms": measured * 1000,
                "predicted_ms": step_s(predicted) * 1000,
                "error": step_s(predicted) / measured - 1,
                "phases": predicted,
                "measured_phases": {n: p["mean_ms"] / 1000 for n, p in phases.items()},
                "link": link,
            }
        )
    return rows, problems


COMMUNICATION = ("scatter", "replicate", "gather", "reduce", "allreduce_wait", "broadcast")


def print_check(rows: list[dict[str, Any]]) -> None:
    """The step, then each communication phase as measured / predicted (ms)."""
    header = "job".ljust(40) + "measured ms".rjust(13) + "predicted ms".rjust(14)
    print(header + "error".rjust(9) + "   communication, ms measured / predicted")
    for r in rows:
        measured = r["measured_phases"]
        comm = ", ".join(
            f"{name} {measured.get(name, 0.0) * 1000:.2f} / {r['phases'][name] * 1000:.2f}"
            for name in COMMUNICATION
            if name in r["phases"]
        )
        print(
            r["job"].ljust(40)
            + f"{r['measured_ms']:.1f}".rjust(13)
            + f"{r['predicted_ms']:.1f}".rjust(14)
            + f"{r['error']:+.0%}".rjust(9)
            + f"   {comm}"
        )
    if rows:
        mean_abs = sum(abs(r["error"]) for r in rows) / len(rows)
        print(f"mean absolute error: {mean_abs:.0%} over {len(rows)} jobs")
        for link in {id(r["link"]): r["link"] for r in rows}.values():
            print(
                f"measured link: {link.name}: alpha {link.alpha_s * 1e6:.0f} us, "
                f"beta {link.beta / 1e9:.2f} GB/s"
            )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Every argument checked as it is parsed: a mistake is one ``error:`` line, exit 2."""
    parser = OneLineParser(
        prog="python -m multigpu.tools.predict", description=__doc__, formatter_class=DefaultsHelp
    )
    parser.add_argument(
        "--check",
        type=existing_folder,
        metavar="SWEEP_DIR",
        help="compare with a sweep run with phases=true on this machine, instead of predicting "
        "for GPUs",
    )
    parser.add_argument(
        "--plot",
        type=output_file(".png"),
        metavar="PNG",
        help="write the predicted speedup figure to this .png file",
    )
    parser.add_argument(
        "--gpu-images-per-s",
        type=number(1, 1e9),
        default=30_000,
        help="training images per second of one GPU for the d2l ResNet-18",
    )
    parser.add_argument(
        "--fixed-ms",
        type=number(0, 1e6),
        default=0.5,
        help="work per step that does not grow with the batch (loss, optimizer), in ms",
    )
    parser.add_argument(
        "--batch-per-device",
        type=number(1, 2**20, integer=True),
        default=256,
        help="images per GPU per step (the global batch grows with the GPUs)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.check is not None:
        rows, problems = check(args.check)
        if not rows:
            unusable = f" (unusable: {'; '.join(problems)[:600]})" if problems else ""
            print(
                f"error: no multi-device job with phases.json (and its one-device job) below "
                f"{args.check}{unusable}: sweep with phases=true and trainer.devices=1,2",
                file=sys.stderr,
            )
            return 2
        print_check(rows)
        return 0
    rows = gpu_table(args)
    print_gpu_table(rows, args)
    if args.plot:
        from multigpu.tools.predict.plot import plot_speedup

        plot_speedup(rows, assumptions(args), args.plot)
        print(f"\nwrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
