"""``python -m multigpu.tools.bench``: each configuration in its own fresh process, one after the
other in one invocation, then the ratios the performance targets are stated in.

Writes ``bench.json`` and ``bench.md`` into ``--out`` and prints the table. ``--tiny`` runs
the same configurations for a few steps of a very narrow network (a smoke test, not a
measurement).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from multigpu.config import settings
from multigpu.config.launch import Signal, answering_stops
from multigpu.config.settings import MAX_DEVICES, MAX_WIDTH, MIN_CPU_NHWC_WIDTH
from multigpu.storage.atomic import write_atomically, write_json
from multigpu.storage.record_file import BadRecord, read_record
from multigpu.tools.arguments import (
    DefaultsHelp,
    OneLineParser,
    existing_folder,
    number,
    output_folder,
    run_folder_around,
)
from multigpu.tools.bench.bench_file import built, keep_earlier
from multigpu.tools.bench.report import RATIOS, compute_ratios, mfu, to_markdown

REPO = Path(__file__).resolve().parents[4]
MAX_COUNT = 2**31 - 1  # steps, batches, epochs: far beyond any benchmark
WIDTH = number(1, MAX_WIDTH, integer=True)
DEVICES = number(1, MAX_DEVICES, integer=True)


@functools.cache
def has_cuda() -> bool:
    """Torch-free on a machine without a GPU driver; the one count a test can simulate."""
    return settings.cuda_device_count() > 0


def configurations(args: argparse.Namespace) -> list[dict[str, Any]]:
    """(name, how it runs, width, extra overrides, environment) for every measured setting."""
    narrow, wide, n = args.width, args.scaling_width, args.replicas
    cpu = ["trainer.accelerator=cpu"] if not has_cuda() else []
    one_thread = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    memory = ["data.pipeline=memory"]
    configs = [
        ("plain_loop", "plain", narrow, [], {}),
        ("lightning_memory", "train", narrow, memory, {}),
        ("lightning_torchvision", "train", narrow, ["data.pipeline=torchvision"], {}),
        ("lightning_memory_nhwc", "train", narrow, [*memory, "model.channels_last=true"], {}),
        ("lightning_memory_bf16", "train", narrow, [*memory, "trainer.precision=bf16-mixed"], {}),
        ("lightning_memory_compile", "train", narrow, [*memory, "model.compile=true"], {}),
        ("single", "train", wide, memory, {}),
        (
            f"scatter_allreduce_x{n}",
            "train",
            wide,
            [*memory, "strategy=scatter_allreduce", f"trainer.devices={n}"],
            {},
        ),
        (
            f"scatter_allreduce_x{n}_phases",
            "train",
            wide,
            [*memory, "strategy=scatter_allreduce", f"trainer.devices={n}", "phases=true"],
            {},
        ),
    ]
    configs += [
        ("loader_memory", "loader", 0, ["--pipeline", "memory"], {}),
        # The d2l recipe's input alone (batch 256), with the loader processes a run here
        # starts: against epoch_d2l's images/s, whether the loader or the step limits an epoch.
        ("loader_torchvision", "loader", 0, ["--pipeline", "torchvision"], {}),
    ]
    if has_cuda() or args.tiny:  # whole epochs: the GPU targets (ratio 5)
        subset = ["data.train_subset=2048", "data.test_subset=512"] if args.tiny else []
        width = narrow if args.tiny else 64
        # Tiny on a CPU: no compilation or bf16 emulation, which take minutes there.
        light = ["model.compile=false", "trainer.precision=32-true"] if args.tiny and cpu else []
        for recipe in ("d2l", "fast"):
            overrides = [f"experiment={recipe}", f"model.net.width={width}", *subset, *cpu]
            overrides += light if recipe == "fast" else []
            configs.append((f"epoch_{recipe}", "epoch", width, overrides, {}))
    if not has_cuda():
        for processes in (1, args.processes):
            configs.append(
                (
                    f"ddp_x{processes}_1thread",
                    "train",
                    wide,
                    [*memory, "strategy=ddp", f"trainer.devices={processes}"],
                    one_thread,
                )
            )
        if args.processes > 1:  # what the hardware allows: DDP's per-process work, no talking
            independent = f"independent_x{args.processes}_1thread"
            configs.append((independent, "independent", wide, memory, one_thread))
    return [
        {
            "name": name,
            "kind": kind,
            # Each independent run does one DDP process's share of the batch.
            "batch": args.batch // args.processes if kind == "independent" else args.batch,
            "width": width,
            "overrides": [*cpu, *extra] if kind in ("train", "independent") else extra,
            "env": env,
        }
        for name, kind, width, extra, env in configs
    ]


def command(config: dict[str, Any], args: argparse.Namespace, result: Path) -> list[str]:
    data = [*("--data-root", args.data_root)]
    data += ["--data-source", args.data_source] if args.data_source else []
    if config["kind"] == "loader":
        return [
            *(sys.executable, "-m", "multigpu.tools.bench.loader_only", *config["overrides"]),
            *("--batch", str(args.batch), "--steps", str(args.steps)),
            *("--warmup", str(args.warmup), *data, "--out", str(result)),
        ]
    if config["kind"] == "epoch":  # the recipe as users run it; metrics.json has the epochs
        return [
            *(sys.executable, str(REPO / "train.py"), *config["overrides"]),
            f"trainer.max_epochs={1 if args.tiny else args.epochs}",
            *(f"data.root={args.data_root}", f"data.source={args.data_source or 'null'}"),
            *("callbacks.progress_bar=null", "callbacks.test_figures=null", "~logger"),
            f"hydra.run.dir={result.with_suffix('')}",
        ]
    if config["kind"] == "plain":
        return [
            *(sys.executable, "-m", "multigpu.tools.bench.plain_loop"),
            *("--width", str(config["width"]), "--batch", str(args.batch)),
            *("--steps", str(args.steps), "--warmup", str(args.warmup)),
            *(*data, "--out", str(result)),
            *(("--device", "cpu") if not has_cuda() else ()),
        ]
    run_dir = result.with_suffix("")
    return [
        sys.executable,
        str(REPO / "train.py"),
        f"model.net.width={config['width']}",
        f"data.batch_size={config['batch']}",
        f"data.root={args.data_root}",
        f"data.source={args.data_source or 'null'}",
        f"+trainer.max_steps={args.warmup + args.steps}",
        "trainer.max_epochs=-1",
        "+trainer.limit_val_batches=0",
        "callbacks=none",
        "+trainer.enable_progress_bar=false",
        "~logger",
        "+callbacks.timer._target_=multigpu.tools.bench.step_timer.StepTimer",
        f"+callbacks.timer.path={result}",
        f"+callbacks.timer.warmup={args.warmup}",
        f"+callbacks.timer.global_batch={config['batch']}",
        f"hydra.run.dir={run_dir}",
        *config["overrides"],
    ]


def run(config: dict[str, Any], args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One configuration: one process, or ``--processes`` independent ones side by side."""
    copies = args.processes if config["kind"] == "independent" else 1
    suffixes = [f".{k}" for k in range(copies)] if copies > 1 else [""]
    results = [out / "runs" / f"{config['name']}{suffix}.json" for suffix in suffixes]
    env = {**os.environ, **config["env"]}
    with STARTING:  # none starts, and no earlier output goes, once the bench is stopping
        if STOPPING.is_set():
            raise RuntimeError("the bench is stopping")
        for result in results:  # each round from scratch: a finished run is not trained again
            result.parent.mkdir(parents=True, exist_ok=True)
            result.unlink(missing_ok=True)
            shutil.rmtree(result.with_suffix(""), ignore_errors=True)  # its run folder
        started = time.perf_counter()
        procs = [start(command(config, args, r), r.with_suffix(".log"), env) for r in results]
    for proc in procs:
        proc.wait()
        RUNNING.discard(proc)
    entry = {k: config[k] for k in ("name", "width", "overrides", "env")}
    entry["wall_s"] = round(time.perf_counter() - started, 1)
    for proc, result in zip(procs, results, strict=True):
        try:
            if config["kind"] == "epoch" and proc.returncode == 0:
                epoch_result(result.with_suffix(""), result)
        except BadRecord as bad:  # the run's record, not to be trusted: its one line
            entry["error"] = str(bad)
            return entry
        if proc.returncode != 0 or not result.is_file():
            entry["error"] = last_line(result.with_suffix(".log"), proc.returncode)
            return entry
    measured = [json.loads(result.read_text()) for result in results]
    entry.update(measured[0])
    if copies > 1:  # side by side: their throughputs add up; memory is each one's
        entry["images_per_s"] = sum(m["images_per_s"] for m in measured)
        entry["images_per_s_each"] = [round(m["images_per_s"], 2) for m in measured]
    return entry


RUNNING: set[subprocess.Popen] = set()  # the configurations' processes, until they end
STARTING = threading.Lock()  # held while a run starts, and while a stop ends the starts
STOPPING = threading.Event()


def start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    """Output to a file: a pipe left unread while a sibling runs would stall the run. Called
    holding ``STARTING``: a stop finds every process started in ``RUNNING``."""
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT)
    RUNNING.add(proc)
    return proc


def stopped(out: Path, done: Callable[[], str]) -> Callable[[Signal], None]:
    """A stop signal's answer: the runs under way are stopped too (they had trained on, orphaned,
    with nothing said), then one line, 128 + the signal; no ``bench.json`` (its ratios would
    stand on what ran)."""

    def stop(signum: Signal) -> None:
        finished = done()  # before the runs stopped now end (as failed ones)
        with STARTING:  # every run that started is in RUNNING, and none starts after
            STOPPING.set()
        under_way = list(RUNNING)
        for proc in under_way:
            proc.terminate()  # a run records it, as a stopped run does
        for proc in under_way:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        sys.stdout.flush()
        said = f"error: interrupted by {signum.name} after {finished}: no bench.json written; "
        said += f"each run's output is in {out / 'runs'}\n"
        os.write(2, said.encode())
        os._exit(128 + signum)  # not sys.exit: the pool's threads would wait on their runs

    return stop


def last_line(log: Path, returncode: int) -> str:
    """What a failed run said last (its one-line error), for the table."""
    lines = log.read_text(errors="replace").strip().splitlines()
    lines = [line for line in lines if line.strip() and "HYDRA_FULL_ERROR" not in line]
    return (lines[-1] if lines else f"exit status {returncode}")[:300]


def combine(entries: list[dict[str, Any]], config: dict[str, Any]) -> dict[str, Any]:
    """One row per configuration: the median images/s over the rounds, the worst memory."""
    good = [e for e in entries if "error" not in e]
    if not good:
        return entries[-1]
    good.sort(key=lambda e: e["round"])
    row = dict(good[-1])
    row["rounds"] = [e["round"] for e in good]
    row["images_per_s_runs"] = [round(e["images_per_s"], 2) for e in good]
    row["images_per_s"] = statistics.median(e["images_per_s"] for e in good)
    for key in ("peak_rss_mb", "peak_gpu_mb"):
        values = [e[key] for e in good if e.get(key) is not None]
        row[key] = max(values) if values else None
    flops = training_flops_per_image(config["width"]) if config["width"] else None
    row["tflops"], row["mfu"] = mfu(flops, row.get("images_per_s"), machine()["gpu"])
    return row


def epoch_result(run_dir: Path, result: Path) -> None:
    """Seconds per epoch (the last one: the first pays for compilation and autotuning) and
    test accuracy, from the run's ``metrics.json``."""
    metrics = read_record(run_dir / "metrics.json")
    last = metrics["history"][-1]
    summary = {
        "epoch_s": last["epoch_s"],
        "epoch_s_each": [round(h["epoch_s"], 3) for h in metrics["history"]],
        "images_per_s": last["samples_per_s"],
        "test_acc": last["test_acc"],
        "epochs": metrics["epochs"],
        "peak_gpu_mb": last.get("peak_gpu_mb"),
    }
    write_json(result, summary)


def training_flops_per_image(width: int) -> float:
    """Forward and backward FLOPs of one 28x28 image, counted by PyTorch's FLOP counter."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from multigpu.models import resnet18

    net = resnet18(width=width)
    with FlopCounterMode(display=False) as counter:
        net(torch.zeros(2, 1, 28, 28)).sum().backward()
    return counter.get_total_flops() / 2


def machine() -> dict[str, Any]:
    import torch

    gpu = torch.cuda.get_device_name(0) if has_cuda() else None
    return {
        "cpu_cores": os.cpu_count(),
        "gpu": gpu,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }


COUNT = number(1, MAX_COUNT, integer=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Every argument checked as it is parsed, ``--only`` against the configurations this
    machine runs: a mistake is one ``error:`` line, exit 2."""
    parser = OneLineParser(
        prog="python -m multigpu.tools.bench", description=__doc__, formatter_class=DefaultsHelp
    )
    add = parser.add_argument
    add(
        "--out",
        type=output_folder,
        default="outputs/bench",
        help="folder for bench.json and bench.md (created if missing; an earlier bench there "
        "is moved to its earlier/<time it was written>)",
    )
    add("--batch", type=COUNT, default=256, help="global batch size")
    add("--steps", type=COUNT, default=30, help="timed steps per configuration")
    add("--warmup", type=COUNT, default=5, help="untimed steps before them")
    add("--width", type=WIDTH, default=8, help="network width for ratios 1 and 4")
    add("--scaling-width", type=WIDTH, default=16, help="network width for ratios 2 and 3")
    add("--replicas", type=DEVICES, default=2, help="scatter_allreduce devices")
    add("--processes", type=DEVICES, default=2, help="DDP processes (CPU)")
    add("--epochs", type=COUNT, default=10, help="epochs of the GPU recipes")
    add(
        "--repeats",
        type=number(1, 1000, integer=True),
        default=2,
        help="rounds, alternating the order of the configurations",
    )
    add("--jobs", type=DEVICES, default=1, help="configurations run at once (for --tiny)")
    add("--data-root", type=output_folder, default="data", help="data.root of the runs")
    add(
        "--data-source",
        type=existing_folder,
        default=os.environ.get("MULTIGPU_DATA") or None,
        help="data.source of the runs (default: $MULTIGPU_DATA, else none)",
    )
    add("--only", nargs="+", metavar="NAME", help="run only these configurations (default: all)")
    add("--tiny", action="store_true", help=f"smoke test: width {MIN_CPU_NHWC_WIDTH}, 3 steps")
    args = parser.parse_args(argv)
    if args.tiny:
        # The narrowest width that every configuration takes on a CPU (NHWC's bound).
        args.width = args.scaling_width = MIN_CPU_NHWC_WIDTH
        args.steps, args.warmup, args.batch, args.repeats = 3, 1, 32, 1
        args.jobs = max(args.jobs, os.cpu_count() or 1)
    known = [c["name"] for c in configurations(args)]
    unknown = [name for name in args.only or [] if name not in known]
    if unknown:
        parser.error(
            f"--only {' '.join(unknown)}: no such configuration here; use any of {', '.join(known)}"
        )
    for option, folder, example in (
        ("--out", args.out, "outputs/bench"),
        ("--data-root", args.data_root, "data"),
    ):
        held = run_folder_around(folder)
        if held is not None:  # its runs would be refused there, after the bench had begun
            parser.error(
                f"{option} {folder}: {held}, and the bench's runs would write among its files; "
                f"pass a folder of its own, e.g. {option} {example}"
            )
    nhwc = "lightning_memory_nhwc"
    if nhwc in (args.only or known) and not has_cuda() and args.width < MIN_CPU_NHWC_WIDTH:
        parser.error(  # settings.check_channels_last would refuse that row, after the others ran
            f"--width {args.width}: {nhwc} (NHWC) needs width {MIN_CPU_NHWC_WIDTH} or more on a "
            f"CPU; use --width {MIN_CPU_NHWC_WIDTH}, or --only without {nhwc}"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if (kept := keep_earlier(out)) is not None:
        print(f"the earlier bench in {out} is kept in {kept}", flush=True)
    configs = configurations(args)
    if args.only:
        configs = [c for c in configs if c["name"] in args.only]
    # Round r runs the configurations forwards when r is even and backwards when odd, so that
    # a machine that slows down or speeds up over the run affects both sides of a ratio alike.
    runs: dict[str, list[dict[str, Any]]] = {c["name"]: [] for c in configs}
    order = [c for r in range(args.repeats) for c in (configs if r % 2 == 0 else configs[::-1])]

    def measure(numbered: tuple[int, dict[str, Any]]) -> None:
        number, config = numbered
        entry = run(config, args, out)
        entry["round"] = (number - 1) // len(configs)
        outcome = entry.get("error") or f"{entry['images_per_s']:.0f} images/s"
        print(f"[{number}/{len(order)}] {config['name']}: {outcome}", flush=True)
        runs[config["name"]].append(entry)

    # --jobs > 1 runs configurations at the same time: for smoke tests, never for numbers.
    def finished() -> str:
        return f"{sum(map(len, runs.values()))} of {len(order)} runs"

    with answering_stops(stopped(out, finished)), ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(measure, enumerate(order, 1)))
    results = [combine(runs[c["name"]], c) for c in configs]
    report = built(
        machine=machine(),
        settings={
            k: str(v) if isinstance(v, Path) else v
            for k, v in vars(args).items()
            if k not in ("out", "only")
        },
        configurations=results,
        ratios=compute_ratios(results, vars(args)),
    )
    write_json(out / "bench.json", report)
    markdown = to_markdown(report)
    write_atomically(out / "bench.md", markdown)
    print("\n" + markdown, end="")
    failed = [r["name"] for r in results if "error" in r]
    if failed:
        print(f"error: {len(failed)} configurations failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


__all__ = ["RATIOS", "main"]

if __name__ == "__main__":
    sys.exit(main())
