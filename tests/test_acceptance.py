"""The GPU acceptance's dry run on the CPU (``scripts/gpu_acceptance.sh all --cpu``): the same
command a GPU machine runs, every step but CUDA, so it cannot rot while no GPU is at hand."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, SHARED_DATA
from test_gpu import STRATEGIES

pytestmark = pytest.mark.subprocess


def acceptance(out: Path, *args: str, timeout: float) -> str:
    """``scripts/gpu_acceptance.sh args`` as a user types it, writing into ``out``; its report."""
    path = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "OUT": str(out), "MULTIGPU_DATA": str(SHARED_DATA), "PATH": path}
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_acceptance.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = (out / "gpu.md").read_text()
    assert report.startswith("# GPU acceptance (CPU dry run)")
    return report


@pytest.mark.slow
def test_the_acceptance_script_takes_cpu_before_the_part(tmp_path):
    """``--cpu`` first, as a user may type it (the gpu tests only: collected and skipped)."""
    report = acceptance(tmp_path, "--cpu", "tests", timeout=300)
    assert "| gpu tests | pass (0 passed, 0 failed," in report and "Whole epochs" not in report


@pytest.mark.slow
def test_the_gpu_acceptance_runs_dry_on_the_cpu(tmp_path):
    report = acceptance(tmp_path, "all", "--cpu", timeout=600)
    # Every gpu test was collected, and skipped for want of CUDA, with the reason.
    skipped = re.findall(
        r"^\| (test_\w+(?:\[[^\]]*\])?) \| skipped: needs a CUDA GPU", report, re.M
    )
    assert len(skipped) == 2 * len(STRATEGIES) + 2 * len(STRATEGIES) + 3  # + phases on CUDA
    assert "| gpu tests | pass (0 passed, 0 failed," in report
    # Both whole-epoch configurations ran and were measured.
    for name in ("epoch_d2l", "epoch_fast"):
        row = re.search(rf"^\| {name} \| (\d+) \| ([\d.]+) \|", report, re.M)
        assert row and float(row[2]) > 0, report
    bench = json.loads((tmp_path / "bench" / "bench.json").read_text())
    epochs = {r["name"]: r for r in bench["configurations"]}
    assert set(epochs) == {"epoch_d2l", "epoch_fast"}
    assert all(0 <= r["test_acc"] <= 1 and r["epoch_s"] > 0 for r in epochs.values())
    assert (tmp_path / "junit.xml").is_file()
    # The speedrun ran once per seed, each seed's record read back into the report.
    assert "| speedrun_gpu | ran (mean test acc " in report
    seeds = re.findall(r"^\| (\d) \| (0\.\d{4}) \|", report, re.M)
    assert [seed for seed, _ in seeds] == ["0", "1", "2"], report
    for seed, acc in seeds:
        record = json.loads((tmp_path / "speedrun" / f"seed_{seed}" / "metrics.json").read_text())
        assert f"{record['test_acc']:.4f}" == acc and record["settings"]["seed"] == int(seed)
