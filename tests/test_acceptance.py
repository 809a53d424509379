"""The GPU acceptance's dry run on the CPU (``scripts/gpu_acceptance.sh all --cpu``): the same
command a GPU machine runs, every step but CUDA, so it cannot rot while no GPU is at hand; and
what it keeps when a step meets its cap or the whole command is killed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, SHARED_DATA
from gpu_commands import STRATEGIES

from multigpu.tools import acceptance as acceptance_module

pytestmark = pytest.mark.subprocess


def environment() -> dict[str, str]:
    path = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "MULTIGPU_DATA": str(SHARED_DATA), "PATH": path}


def acceptance(out: Path, *args: str, timeout: float) -> str:
    """``scripts/gpu_acceptance.sh args`` as a user types it, writing into ``out``; its report."""
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_acceptance.sh"), *args],
        env={**environment(), "OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = (out / "gpu.md").read_text()
    assert report.startswith("# GPU acceptance (CPU dry run)")
    return report


def start(out: Path, *args: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "multigpu.tools.acceptance", "--cpu", "--out", str(out)]
    return subprocess.Popen([*command, *args], cwd=REPO, env=environment(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)  # fmt: skip


def steps_of(out: Path) -> dict[str, dict]:
    found = out / "gpu.json"
    try:
        return {s["name"]: s for s in json.loads(found.read_text())["steps"]}
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


@pytest.mark.slow
def test_a_killed_acceptance_keeps_the_steps_it_finished(tmp_path):
    """Killed (SIGKILL, as a lent machine's time limit does) once the first speedrun seed has
    finished: ``gpu.md`` holds that seed's figures and names the others unfinished."""
    process = start(tmp_path, "speedrun")
    deadline = time.monotonic() + 240
    # Killed once seed 0 has finished and seed 1 is under way (killed between the two, seed 1
    # is rightly "not run": the test had raced the acceptance's next write).
    wanted = {"speedrun seed 0": "finished", "speedrun seed 1": "running"}
    while any(steps_of(tmp_path).get(n, {}).get("status") != s for n, s in wanted.items()):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the first seed did not finish in 240 s"
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    report = (tmp_path / "gpu.md").read_text()
    record = json.loads((tmp_path / "speedrun" / "seed_0" / "metrics.json").read_text())
    assert re.search(rf"^\| 0 \| {record['test_acc']:.4f} \|", report, re.M), report
    assert "| speedrun seed 1 | UNFINISHED: the command stopped while this step ran |" in report
    assert "| speedrun seed 2 | NOT RUN: the command stopped before it |" in report
    assert "| speedrun_gpu | UNFINISHED: not every seed ran" in report


@pytest.mark.slow  # a step that runs to its cap, 5 s: the default suite's 5 minutes
def test_a_step_past_its_cap_is_cut_and_the_rest_still_run(tmp_path):
    """A cap of a second: each seed is stopped (SIGTERM to its process group), reported as
    cut at its cap, and the acceptance goes on to the next and fails at the end."""
    scale = 1 / acceptance_module.CAPS["speedrun"]  # a speedrun's cap of 1 s
    process = start(tmp_path, "speedrun", "--cap-scale", str(scale))
    stdout, stderr = process.communicate(timeout=240)
    assert process.returncode == 1, stderr[-2000:]
    steps = steps_of(tmp_path)
    assert [steps[f"speedrun seed {s}"]["status"] for s in range(3)] == ["capped"] * 3
    assert all(steps[f"speedrun seed {s}"]["seconds"] < 20 for s in range(3))
    assert "FAIL: cut at its cap of 1 s (see speedrun_seed_0.log)" in stdout


@pytest.mark.slow
def test_the_budget_skips_what_it_cannot_fit(tmp_path):
    process = start(tmp_path, "bench", "speedrun", "--budget", "1")
    stdout, _ = process.communicate(timeout=120)
    assert process.returncode == 1
    assert set(s["status"] for s in steps_of(tmp_path).values()) == {"skipped"}
    assert "NOT RUN: the budget was spent before it" in stdout


def test_import_times_are_read_per_library_from_pythons_own_account(tmp_path):
    """``-X importtime``'s top-level lines, one per library imported: each one's cumulative time
    is what it added to those before it, and the total is their sum."""
    libraries = "json, decimal, email.mime.text"
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {libraries}"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    (tmp_path / acceptance_module.log_name("imports")).write_text(done.stdout + done.stderr)
    result = acceptance_module.read_imports(tmp_path)
    assert {"json", "decimal", "email.mime.text"} <= set(result["by_library"])
    assert result["seconds"] == pytest.approx(sum(result["by_library"].values()))
    nested = re.findall(r"\| {2,}email\.mime$", done.stderr, re.M)  # under email.mime.text
    assert nested and "email.mime" not in result["by_library"]  # what a library imports is its own


@pytest.mark.slow
def test_the_acceptance_script_takes_cpu_before_the_part(tmp_path):
    """``--cpu`` first, as a user may type it (the gpu tests only: collected and skipped)."""
    report = acceptance(tmp_path, "--cpu", "tests", timeout=300)
    assert "| gpu tests | pass (0 passed, 0 failed," in report and "Whole epochs" not in report


@pytest.mark.slow
@pytest.mark.timeout(1200)  # its own limit below (900 s) answers first, with the report's tail
def test_the_gpu_acceptance_runs_dry_on_the_cpu(tmp_path):
    report = acceptance(tmp_path, "all", "--cpu", timeout=900)
    # Every gpu test was collected, and skipped for want of CUDA, with the reason.
    skipped = re.findall(
        r"^\| (test_\w+(?:\[[^\]]*\])?) \| skipped: needs a CUDA GPU", report, re.M
    )
    # Per strategy: trains at 2 precisions, compiled with and without CUDA graphs, phases; + 3.
    assert len(skipped) == 5 * len(STRATEGIES) + 3
    assert "| gpu tests | pass (0 passed, 0 failed," in report
    # Both whole-epoch configurations ran and were measured; the loader alone and the host
    # synchronisations too.
    for name in ("epoch_d2l", "epoch_fast"):
        row = re.search(rf"^\| {name} \| (\d+) \| ([\d.]+) \|", report, re.M)
        assert row and float(row[2]) > 0, report
        bench = json.loads((tmp_path / name / "bench.json").read_text())
        (epochs,) = bench["configurations"]
        assert 0 <= epochs["test_acc"] <= 1 and epochs["epoch_s"] > 0
    assert re.search(r"^\| loader_d2l \| the (loader|step) limits the epoch", report, re.M)
    assert re.search(r"^\| host_syncs \| ran \(0 in \d+ steady steps, besides", report, re.M)
    assert (tmp_path / "junit.xml").is_file()
    # Each step profile ran its windows and is in the table (a CPU: no device timeline).
    for name in acceptance_module.PROFILES:
        assert re.search(rf"^\| profile {name} \| ran \([\d.]+ ms a step; no device", report, re.M)
        assert re.search(rf"^\| {name} \| [\d.]+ \| [\d.]+ \| - \| 0 \| \d+ \|", report, re.M)
    # The speedrun ran once per seed, each seed's record read back into the report.
    assert "| speedrun_gpu | ran (mean test acc " in report
    seeds = re.findall(r"^\| (\d) \| (0\.\d{4}) \|", report, re.M)
    assert [seed for seed, _ in seeds] == ["0", "1", "2"], report
    for seed, acc in seeds:
        record = json.loads((tmp_path / "speedrun" / f"seed_{seed}" / "metrics.json").read_text())
        assert f"{record['test_acc']:.4f}" == acc and record["settings"]["seed"] == int(seed)
    # Each variant ran once, with its change; every run's start-up and exit are timed apart.
    for name, changes in acceptance_module.SPEEDRUN_VARIANTS.items():
        assert re.search(rf"^\| {name} 0 \| 0\.\d{{4}} \|", report, re.M), report
        given = tmp_path / "speedrun" / f"{name}_seed_0" / ".hydra" / "overrides.yaml"
        assert all(change in given.read_text() for change in changes)
    spans = re.findall(
        r"^\| [\w ]+ \| 0\.\d{4} \|(?: [^|]+ \|){4} ([\d.]+) \| ([\d.]+) \|", report, re.M
    )
    assert len(spans) == 3 + len(acceptance_module.SPEEDRUN_VARIANTS), report
    # The imports a run makes before its first line, each library's share.
    imports = re.search(r"^\| imports \| ran \(([\d.]+) s of imports: (\w+) ([\d.]+)", report, re.M)
    assert imports and float(imports[1]) >= float(imports[3]) > 0, report
    assert all(0 < float(up) < 60 and 0 < float(down) < 60 for up, down in spans)
