"""``python -m multigpu.tools.acceptance``: every CUDA path checked and measured in one
command, with one Markdown report (and its JSON) and a verdict, kept however the command ends.

Parts, each a list of steps run one after the other, each step a process of its own under its
own time cap (and all of them under ``--budget``): ``tests``, the ``gpu`` tests
(``tests/test_gpu.py``); ``speedrun``, ``python train.py experiment=speedrun_gpu`` for three
seeds against test accuracy 0.93 within 5 s of training and 30 s for the whole command
(docs/speedrun.md); ``bench``, ``experiment=fast`` and the d2l recipe for 10 full-width epochs
through ``python -m multigpu.tools.bench`` (s/epoch, test accuracy, TFLOP/s, MFU, peak GPU
memory), the d2l recipe's input pipeline alone (does the loader or the step limit an epoch?)
and the host-device synchronisations of a steady training step; ``profile``, where a steady
step's time goes, the host or the device, for each fast path (``PROFILES``).

``gpu.md`` and ``gpu.json`` are rewritten before and after every step: a step cut by its cap
or a kill of the whole command leaves the finished steps in the report and the others named
as unfinished. The runs share one compile cache (``--cache``), so compilation is paid once per
configuration, not once per seed.

``--cpu`` is a dry run of the same on the CPU: the ``gpu`` tests are collected and skipped, the
runs are tiny, no target applies. It keeps this command working where no GPU is.

A machine without internet that has torch and Lightning but not Hydra: see
``scripts/gpu_prepare.sh`` (run where pip works) and ``scripts/gpu_acceptance.sh``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from multigpu.config.settings import MIN_CPU_NHWC_WIDTH
from multigpu.storage.atomic import write_atomically, write_json
from multigpu.storage.json_file import BadRecord
from multigpu.tools.bench.bench_file import read_bench_file
from multigpu.tools.bench.report import EPOCH_TARGETS
from multigpu.tools.markdown import cell, table

REPO = Path(__file__).resolve().parents[3]
PARTS = ("tests", "speedrun", "bench", "profile")
# The GPU speedrun, each seed: test accuracy (the mean over the seeds) at least, training
# seconds to it at most, the whole command (start-up and compile included) at most.
SPEEDRUN = {"accuracy": 0.93, "train_s": 5.0, "command_s": 30.0, "seeds": (0, 1, 2)}
# One seed more of the speedrun, for each change the last GPU run pointed at (docs/gpu.md):
# without cuDNN's autotuning, which a step bound by the host may not need in its first epoch.
SPEEDRUN_VARIANTS = {"no_autotune": ["trainer.benchmark=false"]}
# What a run imports before its first line, one library after the other (each one's time is what
# it adds to those before it): the speedrun spent 17-21 s before its first logged line on an
# H200 (2026-11-28), 8.9 s here on a 2-core CPU, 7.8 s of them imports.
IMPORTS = "import torch, pytorch_lightning, torchvision, torchmetrics, hydra, multigpu.run.fit"
IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \| (\S+)$", re.M)  # top level only
# A dry run on the CPU: the same command, tiny (as narrow as its NHWC layout takes on a CPU).
SPEEDRUN_DRY = [
    *("trainer.accelerator=cpu", "trainer.precision=32-true", "model.compile=false"),
    *(f"model.net.width={MIN_CPU_NHWC_WIDTH}", "data.train_subset=1024", "data.test_subset=512"),
    "trainer.max_epochs=1",
]
# The steady steps whose host-device synchronisations are counted, of experiment=fast.
SYNCS_WINDOW = {
    False: ["--first-step", "20", "--steps", "50"],
    True: ["--first-step", "2", "--steps", "6"],
}
SYNCS_BY_DESIGN = ("bar_loss.py", "divergence.py")  # every refresh_rate / n steps
SYNCS_DRY = [*SPEEDRUN_DRY, "data.train_subset=2048", "data.test_subset=256"]
# Where a steady step's time goes (the host or the device), for each fast path and what it
# changed since the last GPU run (docs/gpu.md): CUDA graphs for ``fast`` (against its plain
# compile), d2l in NHWC (it ran 2.87 s/epoch against NCHW's 2.78, two H200 runs a day apart)
# and with cuDNN's autotuning (neither changes d2l's arithmetic; its step is bound by its
# kernels), and the speedrun's fused optimizer (against torch's default).
PROFILES = {
    "speedrun_gpu": ["experiment=speedrun_gpu"],
    "fast": ["experiment=fast"],
    "d2l": ["experiment=d2l"],
    "fast_without_cuda_graphs": ["experiment=fast", "model.compile=true"],
    "d2l_channels_last": ["experiment=d2l", "model.channels_last=true"],
    "d2l_autotune": ["experiment=d2l", "+trainer.benchmark=true"],
    "speedrun_gpu_unfused": ["experiment=speedrun_gpu", "model.optimizer.fused=false"],
}
PROFILE_WINDOW = {
    False: ["--first-step", "30", "--steps", "20"],
    True: ["--first-step", "2", "--steps", "2"],  # 8 steps an epoch (SYNCS_DRY)
}
# Each step's cap in seconds on a GPU (a dry run's are the same); the whole command's budget
# (--budget) also bounds every step: a GPU rented by the minute.
CAPS = {"tests": 150.0, "imports": 60.0, "speedrun": 90.0, "epoch": 100.0, "loader": 40.0,
        "syncs": 60.0, "profile": 60.0}  # fmt: skip
# Within one 10-minute call of a GPU machine. The parts' times on the H200 (2026-11-27) add up
# to about 9.5 minutes: what does not fit is named NOT RUN; two calls (tests speedrun, bench
# profile) run them all.
BUDGET_S = 540.0
PACKAGES = ("torch", "torchvision", "pytorch-lightning", "torchmetrics", "hydra-core", "omegaconf")
UNFINISHED = ("pending", "running")


@dataclass
class Step:
    """One process of the acceptance: what it runs, its cap, and how its result is read."""

    part: str
    name: str
    command: list[str]
    cap_s: float
    read: Callable[[Path], dict[str, Any]]
    state: dict[str, Any] = field(default_factory=lambda: {"status": "pending"})


# The steps ---------------------------------------------------------------------------------------
def speedrun_overrides(seed: int, folder: Path, dry_run: bool) -> list[str]:
    """``python train.py`` arguments of one speedrun seed."""
    dry = SPEEDRUN_DRY if dry_run else []
    return ["experiment=speedrun_gpu", f"seed={seed}", f"hydra.run.dir={folder}", *dry]


def steps(parts: set[str], out: Path, dry_run: bool, workers: int) -> list[Step]:
    found = []
    python = sys.executable
    if "tests" in parts:
        command = [python, "-m", "pytest", "tests/test_gpu.py", "-m", "gpu", "-ra"]
        command += ["-p", "no:cacheprovider", "-o", "addopts=", f"--junitxml={out / 'junit.xml'}"]
        command += ["-n", str(workers)] if workers > 1 else []
        found.append(Step("tests", "gpu tests", command, CAPS["tests"], read_tests))
    if "speedrun" in parts:
        command = [python, "-X", "importtime", "-c", IMPORTS]
        found.append(Step("startup", "imports", command, CAPS["imports"], read_imports))
        runs = [("", seed, []) for seed in SPEEDRUN["seeds"]]
        runs += [(f"{name} ", 0, changes) for name, changes in SPEEDRUN_VARIANTS.items()]
        for variant, seed, changes in runs:
            name = f"speedrun {variant}seed {seed}"
            folder = out / "speedrun" / name.removeprefix("speedrun ").replace(" ", "_")
            command = [python, "train.py", *speedrun_overrides(seed, folder, dry_run), *changes]
            read = read_speedrun(folder, log_name(name))
            found.append(Step("speedrun_variant" if variant else "speedrun", name, command,
                              CAPS["speedrun"], read))  # fmt: skip
    if "bench" in parts:
        tiny = ["--tiny"] if dry_run else []
        bench = [python, "-m", "multigpu.tools.bench", "--repeats", "1", *tiny]
        for name in EPOCH_TARGETS:
            command = [*bench, "--only", name, "--epochs", "10", "--out", str(out / name)]
            found.append(Step("bench", name, command, CAPS["epoch"], read_bench(name)))
        command = [*bench, "--only", "loader_torchvision", "--out", str(out / "loader_d2l")]
        read = read_bench("loader_torchvision", "loader_d2l")
        found.append(Step("bench", "loader_d2l", command, CAPS["loader"], read))
        command = [python, "-m", "multigpu.tools.bench.host_syncs", *SYNCS_WINDOW[dry_run]]
        command += ["experiment=fast", *(SYNCS_DRY if dry_run else [])]
        read = read_printed(log_name("host_syncs"))
        found.append(Step("bench", "host_syncs", command, CAPS["syncs"], read))
    if "profile" in parts:
        for name, overrides in PROFILES.items():
            command = [python, "-m", "multigpu.tools.bench.step_profile", *PROFILE_WINDOW[dry_run]]
            # A dry run's are not compiled (a cold compile outlasts the cap on two cores), so
            # there fast runs as fast_without_cuda_graphs does: plumbing checked, nothing compared.
            command += [*overrides, *(SYNCS_DRY if dry_run else [])]
            read = read_printed(log_name(f"profile {name}"))
            found.append(Step("profile", f"profile {name}", command, CAPS["profile"], read))
    return found


# Reading what a step measured --------------------------------------------------------------------
def read_tests(out: Path) -> dict[str, Any]:
    junit = out / "junit.xml"
    cases = read_junit(junit) if junit.is_file() else []
    counts = {o: sum(c["outcome"] == o for c in cases) for o in ("passed", "failed", "skipped")}
    return {**counts, "cases": cases}


def read_junit(path: Path) -> list[dict[str, Any]]:
    cases = []
    for case in ElementTree.parse(path).iter("testcase"):
        outcome, detail = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, detail = "failed", (child.get("message") or "")[:200]
            elif child.tag == "skipped":
                outcome, detail = "skipped", (child.get("message") or "")[:200]
        cases.append({"name": case.get("name", "?"), "outcome": outcome,
                      "seconds": float(case.get("time", 0)), "detail": detail})  # fmt: skip
    return cases


def read_speedrun(folder: Path, log: str) -> Callable[[Path], dict[str, Any]]:
    def read(out: Path) -> dict[str, Any]:
        metrics = folder / "metrics.json"
        record = json.loads(metrics.read_text()) if metrics.is_file() else {}
        reached = (record.get("time_to") or {}).get(f"{SPEEDRUN['accuracy']:g}") or {}
        history = record.get("history") or []
        return {
            **logged_span(out / log),
            "test_acc": record.get("test_acc"),
            "train_s": reached.get("train_s"),
            "epoch": reached.get("epoch"),
            "compile_s": record.get("compile_s"),
            "test_acc_by_epoch": [h.get("test_acc") for h in history],
            "epoch_s": [h.get("epoch_s") for h in history],
        }

    return read


LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]", re.M)


def logged_span(log: Path) -> dict[str, float]:
    """When the run logged its first line and its last (Hydra's timestamps, this machine's
    clock, as seconds since the epoch): what comes before and after is start-up and exit."""
    stamps = LOG_TIME.findall(log.read_text(errors="replace")) if log.is_file() else []
    seconds = [time.mktime(time.strptime(s, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000
               for s, ms in stamps]  # fmt: skip
    return {"first_log_at": seconds[0], "last_log_at": seconds[-1]} if seconds else {}


def read_imports(out: Path) -> dict[str, Any]:
    """Seconds each library of ``IMPORTS`` added, from ``python -X importtime``'s top level."""
    log = out / log_name("imports")
    text = log.read_text(errors="replace") if log.is_file() else ""
    added = {name: int(micro) / 1e6 for micro, name in IMPORT_LINE.findall(text)}
    return {"seconds": sum(added.values()), "by_library": added} if added else {}


def read_bench(name: str, folder: str | None = None) -> Callable[[Path], dict[str, Any]]:
    """The configuration's row of the step's ``bench.json``; its one-line refusal as the row's
    ``error`` when the file is not to be trusted."""

    def read(out: Path) -> dict[str, Any]:
        report = out / (folder or name) / "bench.json"
        try:
            rows = read_bench_file(report)["configurations"] if report.is_file() else []
        except BadRecord as bad:
            return {"name": name, "error": str(bad)}
        return next((row for row in rows if row["name"] == name), {})

    return read


def read_printed(log_name: str) -> Callable[[Path], dict[str, Any]]:
    """The JSON a measuring tool prints last (its log holds the run's lines before it, and the
    tool's summary after it)."""

    def read(out: Path) -> dict[str, Any]:
        log = out / log_name
        text = log.read_text(errors="replace") if log.is_file() else ""
        start = text.rfind("\n{") + 1
        try:
            return json.JSONDecoder().raw_decode(text[start:])[0] if text else {}
        except json.JSONDecodeError:
            return {}

    return read


# Running a step under its cap --------------------------------------------------------------------
def run_capped(command: list[str], cap_s: float, log: Path, env: dict[str, str]) -> dict[str, Any]:
    """The command in a process group of its own, output to ``log`` (a file: nothing is lost
    when the step is cut); at the cap the group gets SIGTERM (a run records itself interrupted),
    then SIGKILL after 15 s."""
    started, started_at = time.perf_counter(), time.time()
    with log.open("w") as sink:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=sink,
                                   stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            process.wait(timeout=max(cap_s, 1.0))
            status = "finished" if process.returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            status = "capped"
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    seconds = time.perf_counter() - started
    return {"status": status, "exit": process.returncode, "seconds": round(seconds, 1),
            "started_at": started_at, "ended_at": time.time()}  # fmt: skip


def step_env(cache: Path) -> dict[str, str]:
    """Every step's environment: one compile cache for all of them (inductor's FX graph and
    autotuning caches, Triton's kernels), and dynamo's reasons for any graph break or
    recompile in the step's log."""
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "TORCH_LOGS": os.environ.get("TORCH_LOGS", "recompiles,graph_breaks"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
    }


# Verdicts ----------------------------------------------------------------------------------------
def verdicts(steps: list[Step], dry_run: bool) -> list[tuple[str, str]]:
    """(what, verdict) for every target whose steps ran; unfinished steps say so."""
    found = []
    for step in steps:
        state, result = step.state, step.state.get("result") or {}
        if state["status"] in UNFINISHED or state["status"] == "skipped":
            found.append((step.name, unfinished(state)))
        elif step.part == "tests":
            counts = f"{result['passed']} passed, {result['failed']} failed, "
            counts += f"{result['skipped']} skipped"
            ok = state["exit"] == 0 and result["failed"] == 0 and (dry_run or result["passed"])
            found.append((step.name, f"{'pass' if ok else 'FAIL'} ({counts})"))
        elif step.name in EPOCH_TARGETS:
            found.append((step.name, epoch_verdict(step, dry_run)))
        elif step.name == "host_syncs":
            found.append((step.name, syncs_verdict(step, dry_run)))
        elif step.name == "loader_d2l":
            found.append((step.name, loader_verdict(step, steps)))
        elif step.part == "profile":
            found.append((step.name, profile_verdict(step)))
        elif step.part == "speedrun_variant":
            found.append((step.name, variant_verdict(step)))
        elif step.part == "startup":
            found.append((step.name, imports_verdict(step)))
    speedrun = [s for s in steps if s.part == "speedrun"]
    if speedrun:
        found.append(("speedrun_gpu", speedrun_verdict(speedrun, dry_run)))
    return found


def unfinished(state: dict[str, Any]) -> str:
    if state["status"] == "running":
        return "UNFINISHED: the command stopped while this step ran"
    if state["status"] == "skipped":
        return "NOT RUN: the budget was spent before it"
    return "NOT RUN: the command stopped before it"


def failed(step: Step) -> str | None:
    state = step.state
    if state["status"] == "capped":
        return f"FAIL: cut at its cap of {step.cap_s:.0f} s (see {log_name(step.name)})"
    if state["status"] == "failed" or not state.get("result"):
        return f"FAIL: exit {state.get('exit')} (see {log_name(step.name)})"
    return None


def epoch_verdict(step: Step, dry_run: bool) -> str:
    if (problem := failed(step)) or "error" in step.state["result"]:
        return problem or f"FAIL: {step.state['result']['error']}"
    row = step.state["result"]
    measured = f"{row['epoch_s']:.2f} s/epoch, test acc {row['test_acc']:.4f}"
    if dry_run:
        return f"ran ({measured}; a tiny CPU run: no target applies)"
    most, least = EPOCH_TARGETS[step.name]
    met = row["epoch_s"] <= most and row["test_acc"] >= least
    return f"{'met' if met else 'MISSED'} ({measured}; target <= {most} s/epoch at >= {least})"


def syncs_verdict(step: Step, dry_run: bool) -> str:
    if problem := failed(step):
        return problem
    result = step.state["result"]
    where = result.get("where") or {}
    planned = sum(n for place, n in where.items() if place_by_design(place))
    others = result["syncs"] - planned
    measured = f"{others} in {result['steps']} steady steps, besides {planned} by design "
    measured += f"({result.get('method')})"
    if dry_run:
        return f"ran ({measured}; target 0)"
    return f"{'met' if others == 0 else 'MISSED'} ({measured}; target 0)"


def place_by_design(place: str) -> bool:
    """A read a setting asks for every N steps: the progress bar's loss, the divergence check."""
    return any(name in place for name in SYNCS_BY_DESIGN)


def loader_verdict(step: Step, steps: list[Step]) -> str:
    """The d2l recipe's loader alone against the d2l epoch's rate: which one limits it."""
    if problem := failed(step):
        return problem
    loader = step.state["result"].get("images_per_s")
    epoch = next((s.state.get("result") or {} for s in steps if s.name == "epoch_d2l"), {})
    if not loader or not epoch.get("images_per_s"):
        return f"ran ({cell(loader, '{:.0f}')} images/s; no epoch to compare)"
    ratio = loader / epoch["images_per_s"]
    limit = "the loader limits the epoch" if ratio < 1.2 else "the step limits the epoch"
    return f"{limit} (loader alone {loader:.0f} images/s, {ratio:.1f}x the epoch's)"


def profile_verdict(step: Step) -> str:
    """Which side limits the step: measured, no target (it says what to speed up next)."""
    if problem := failed(step):
        return problem
    result = step.state["result"]
    if not result.get("complete"):
        return "FAIL: the run ended before the profiled steps"
    measured = f"{result['ms_per_step']:.2f} ms a step"
    if "summary_error" in result:
        return f"ran ({measured}; the profile could not be read: {result['summary_error']})"
    busy = result.get("device_busy_ms_per_step")
    if busy is None:
        return f"ran ({measured}; no device timeline)"
    side = "the host" if busy < 0.8 * result["ms_per_step"] else "the device"
    return f"{side} limits the step ({measured}, the device's kernels {busy:.2f} ms)"


def imports_verdict(step: Step) -> str:
    """Measured, no target: how much of a run's start-up its imports are."""
    if problem := failed(step):
        return problem
    result = step.state["result"]
    largest = sorted(result["by_library"].items(), key=lambda item: -item[1])[:4]
    each = ", ".join(f"{name} {seconds:.1f}" for name, seconds in largest)
    return f"ran ({result['seconds']:.1f} s of imports: {each})"


def variant_verdict(step: Step) -> str:
    """A variant is measured against the speedrun's seeds, not judged."""
    if problem := failed(step):
        return problem
    result = step.state["result"]
    reached = "never" if result["train_s"] is None else f"{result['train_s']:.2f} s"
    accuracy = cell(result["test_acc"], "{:.4f}")
    return f"ran (test acc {accuracy}; training to {SPEEDRUN['accuracy']}: {reached})"


def speedrun_verdict(steps: list[Step], dry_run: bool) -> str:
    if any(s.state["status"] in (*UNFINISHED, "skipped") for s in steps):
        return "UNFINISHED: not every seed ran (see below)"
    problems = [failed(s) for s in steps if failed(s) or s.state["result"]["test_acc"] is None]
    if problems:
        return problems[0] or "FAIL: a seed has no test accuracy"
    runs = [s.state["result"] | {"command_s": s.state["seconds"]} for s in steps]
    mean = sum(run["test_acc"] for run in runs) / len(runs)
    times = ", ".join("never" if r["train_s"] is None else f"{r['train_s']:.2f}" for r in runs)
    slowest = max(run["command_s"] for run in runs)
    measured = f"mean test acc {mean:.4f}; training s to {SPEEDRUN['accuracy']}: {times}; "
    measured += f"slowest command {slowest:.0f} s"
    if dry_run:
        return f"ran ({measured}; a tiny CPU run: no target applies)"
    met = mean >= SPEEDRUN["accuracy"] and slowest <= SPEEDRUN["command_s"]
    met = met and all(
        r["train_s"] is not None and r["train_s"] <= SPEEDRUN["train_s"] for r in runs
    )
    target = f"mean >= {SPEEDRUN['accuracy']}, each within {SPEEDRUN['train_s']:g} s of training "
    target += f"and {SPEEDRUN['command_s']:g} s for the whole command"
    return f"{'met' if met else 'MISSED'} ({measured}; target {target})"


# The report --------------------------------------------------------------------------------------
def log_name(name: str) -> str:
    """A step's log, named after it."""
    return name.replace(" ", "_") + ".log"


def to_markdown(facts: dict[str, Any], steps: list[Step], dry_run: bool) -> str:
    title = "GPU acceptance" + (" (CPU dry run)" if dry_run else "")
    command = "python -m multigpu.tools.acceptance" + (" --cpu" if dry_run else "")
    lines = [f"# {title}", "", f"Run {facts['date']} with `{command}`.", ""]
    lines += [*table(["", ""], ((k, str(v)) for k, v in facts.items() if k != "date")), ""]
    lines += ["## Verdict", "", *table(["what", "verdict"], verdicts(steps, dry_run)), ""]
    lines += ["## Steps", ""]
    lines += table(
        ["step", "status", "s", "cap s", "log"],
        ([s.name, s.state["status"], cell(s.state.get("seconds")), f"{s.cap_s:.0f}",
          log_name(s.name)] for s in steps),
    )  # fmt: skip
    tests = [s for s in steps if s.part == "tests" and s.state.get("result")]
    for step in tests:
        lines += ["", "## gpu tests", ""]
        lines += table(
            ["test", "outcome", "s"],
            ([c["name"], c["outcome"] + (f": {c['detail']}" if c["detail"] else ""),
              f"{c['seconds']:.1f}"] for c in step.state["result"]["cases"]),
        )  # fmt: skip
    for part, title in (("speedrun", "Speedrun"), ("speedrun_variant", "Speedrun variants")):
        runs = [s for s in steps if s.part == part and s.state.get("result")]
        if runs:
            lines += ["", f"## {title}", "", *speedrun_table(runs)]
    if any(s.part == "speedrun" and s.state.get("result") for s in steps):
        lines += ["", "Start-up: from the command's start to the run's first logged line; "
                  "exit: from its last (after the last epoch's evaluation) to the command's "
                  "end."]  # fmt: skip
    epochs = [s for s in steps if s.name in EPOCH_TARGETS and s.state.get("result")]
    if epochs:
        lines += ["", "## Whole epochs", ""]
        lines += table(
            ["configuration", "width", "s/epoch (last)", "each epoch (s)", "test acc", "images/s",
             "TFLOP/s", "MFU", "peak GPU MB"],
            ([s.name, cell(r.get("width")), cell(r.get("epoch_s"), "{:.3g}"),
              ", ".join(f"{e:.2f}" for e in r.get("epoch_s_each", [])),
              cell(r.get("test_acc"), "{:.4g}"), cell(r.get("images_per_s"), "{:.5g}"),
              cell(r.get("tflops"), "{:.3g}"), cell(r.get("mfu"), "{:.3g}"),
              cell(r.get("peak_gpu_mb"), "{:.5g}")]
             for s in epochs for r in [s.state["result"]]),
        )  # fmt: skip
        lines += ["", "TFLOP/s counts forward and backward FLOPs per image (PyTorch's counter); "
                  "MFU is that over the H100's dense bf16 peak (989 TFLOP/s)."]  # fmt: skip
    profiles = [s for s in steps if s.part == "profile" and s.state.get("result")]
    if profiles:
        lines += ["", "## Where a step's time goes", ""]
        lines += table(
            ["configuration", "ms a step", "profiled", "kernels, ms a step", "device events",
             "host ops"],
            ([s.name.removeprefix("profile "), cell(r.get("ms_per_step"), "{:.2f}"),
              cell(r.get("profiled_ms_per_step"), "{:.2f}"),
              cell(r.get("device_busy_ms_per_step"), "{:.2f}"),
              cell(r.get("kernels_per_step"), "{:.0f}"), cell(r.get("host_ops_per_step"), "{:.0f}")]
             for s in profiles for r in [s.state["result"]]),
        )  # fmt: skip
        lines += ["", "Steady steps timed, then as many profiled (`python -m multigpu.tools."
                  "bench.step_profile`; each step's command, its window included, is in "
                  "gpu.json); each configuration's log lists its costliest kernels and host "
                  "ops."]  # fmt: skip
    return "\n".join(lines) + "\n"


def speedrun_table(runs: list[Step]) -> list[str]:
    def span(state: dict[str, Any], result: dict[str, Any]) -> tuple[float | None, ...]:
        if "first_log_at" not in result or "started_at" not in state:
            return None, None
        return (result["first_log_at"] - state["started_at"],
                state["ended_at"] - result["last_log_at"])  # fmt: skip

    return table(
        ["seed", "test acc", "training s to 0.93", "epoch", "compile s", "whole command s",
         "start-up s", "exit s", "test acc by epoch", "s per epoch"],
        ([s.name.removeprefix("speedrun ").replace("seed ", ""), cell(r["test_acc"], "{:.4f}"),
          cell(r["train_s"], "{:.3g}"),
          cell(r["epoch"]), cell(r["compile_s"], "{:.3g}"), cell(s.state["seconds"], "{:.3g}"),
          *(cell(x, "{:.3g}") for x in span(s.state, r)),
          ", ".join(cell(a, "{:.3f}") for a in r["test_acc_by_epoch"]),
          ", ".join(cell(e, "{:.2f}") for e in r["epoch_s"])]
         for s in runs for r in [s.state["result"]]),
    )  # fmt: skip


def write_report(out: Path, facts: dict[str, Any], steps: list[Step], dry_run: bool) -> str:
    """``gpu.md`` and ``gpu.json``, whole, after every change: what a kill leaves is current."""
    report = to_markdown(facts, steps, dry_run)
    write_json(out / "gpu.json", {
        "facts": facts, "dry_run": dry_run, "verdicts": dict(verdicts(steps, dry_run)),
        "steps": [{"part": s.part, "name": s.name, "command": s.command, "cap_s": s.cap_s,
                   **s.state} for s in steps],
    })  # fmt: skip
    write_atomically(out / "gpu.md", report)
    return report


# The machine -------------------------------------------------------------------------------------
def environment() -> dict[str, Any]:
    """The device and the versions the figures were measured with."""
    import torch

    facts: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M")}
    facts |= {"python": platform.python_version(), "cpu_cores": os.cpu_count()}
    facts.update({name: version(name) for name in PACKAGES})
    facts["torch built for cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        facts["gpu"] = (
            f"{props.name}, {props.total_memory / 2**30:.0f} GiB, {props.multi_processor_count} SMs"
        )
        facts["cudnn"] = torch.backends.cudnn.version()
        facts["driver"] = command_output(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        )
    else:
        facts["gpu"] = "none"
    return facts


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def command_output(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# The command -------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The parts as words (``all --cpu`` or ``--cpu speedrun bench``, as the shell script is
    called) or as ``--part``, and the options in any order."""
    parser = argparse.ArgumentParser(
        prog="python -m multigpu.tools.acceptance", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    choices = ("all", *PARTS)
    parser.add_argument("part", nargs="*", help=f"what to run: {', '.join(choices)} (default: all)")
    parser.add_argument(
        "--part", dest="part_option", choices=choices, help="the same, as an option"
    )
    parser.add_argument("--cpu", action="store_true", help="dry run on the CPU")
    parser.add_argument("--out", type=Path, default=Path("outputs/gpu"))
    parser.add_argument("--cache", type=Path, help="compile cache (default: <out>/compile_cache)")
    parser.add_argument("--workers", type=int, default=12, help="pytest-xdist workers for tests")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for every step")
    parser.add_argument("--cap-scale", type=float, default=1.0, help="multiply every step's cap")
    args = parser.parse_intermixed_args(argv)
    unknown = [part for part in args.part if part not in choices]
    if unknown:
        parser.error(f"no part {unknown[0]!r}: use any of {', '.join(choices)}")
    if args.part and args.part_option and args.part_option not in args.part:
        parser.error(f"parts given twice: {' '.join(args.part)} and --part {args.part_option}")
    named = [*args.part, *([args.part_option] if args.part_option else [])]
    if len(set(named)) > 1 and "all" in named:
        parser.error(f"parts {' and '.join(named)}: 'all' runs every part; name it alone")
    args.parts = set(PARTS) if not named or "all" in named else set(named)
    args.part = "all" if args.parts == set(PARTS) else " ".join(p for p in PARTS if p in args.parts)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not args.cpu and not torch.cuda.is_available():
        print(
            "error: no CUDA GPU here: run on a GPU machine, or --cpu for a dry run", file=sys.stderr
        )
        return 2
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = step_env((args.cache or out / "compile_cache").resolve())
    facts = environment()
    plan = steps(args.parts, out, args.cpu, 1 if args.cpu else args.workers)
    for step in plan:
        step.cap_s *= args.cap_scale
    deadline = time.monotonic() + args.budget
    write_report(out, facts, plan, args.cpu)
    for step in plan:
        left = deadline - time.monotonic()
        if left < 5:
            step.state = {"status": "skipped"}
            continue
        step.cap_s = min(step.cap_s, left)
        step.state = {"status": "running"}
        write_report(out, facts, plan, args.cpu)
        print(f"[acceptance] {step.name} (cap {step.cap_s:.0f} s) ...", file=sys.stderr, flush=True)
        step.state = run_capped(step.command, step.cap_s, out / log_name(step.name), env)
        step.state["result"] = step.read(out)
        write_report(out, facts, plan, args.cpu)
    report = write_report(out, facts, plan, args.cpu)
    print(report, end="")
    return 1 if any(s.state["status"] != "finished" for s in plan) else 0


if __name__ == "__main__":
    sys.exit(main())
