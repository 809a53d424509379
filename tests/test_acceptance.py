"""The GPU acceptance's dry run on the CPU (``scripts/gpu_acceptance.sh all --cpu``): the same
command a GPU machine runs, every step but CUDA, so it cannot rot while no GPU is at hand."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from conftest import REPO, SHARED_DATA
from test_gpu import STRATEGIES

pytestmark = pytest.mark.subprocess


@pytest.mark.slow
def test_the_gpu_acceptance_runs_dry_on_the_cpu(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "MULTIGPU_DATA": str(SHARED_DATA)}
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_acceptance.sh"), "all", "--cpu"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = (tmp_path / "gpu.md").read_text()
    assert report.startswith("# GPU acceptance (CPU dry run)")
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
    assert (tmp_path / "bench" / "bench.json").is_file() and (tmp_path / "junit.xml").is_file()
    # The speedrun ran once per seed, each seed's record read back into the report.
    assert "| speedrun_gpu | ran (mean test acc " in report
    seeds = re.findall(r"^\| (\d) \| (0\.\d{4}) \|", report, re.M)
    assert [seed for seed, _ in seeds] == ["0", "1", "2"], report
    for seed, acc in seeds:
        record = json.loads((tmp_path / "speedrun" / f"seed_{seed}" / "metrics.json").read_text())
        assert f"{record['test_acc']:.4f}" == acc and record["settings"]["seed"] == int(seed)
