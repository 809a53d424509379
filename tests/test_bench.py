"""``python -m multigpu.bench --tiny``: every configuration runs and the files are written.
No timing is asserted (shared machines are noisy); the ratios are checked against the
configurations' own numbers."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest
from conftest import REPO, SHARED_DATA

from multigpu.bench.report import paired_ratio

pytestmark = pytest.mark.subprocess

# One configuration of each kind the bench runs (a plain loop, training steps, a loader alone,
# whole epochs, runs side by side) and the pairs behind ratios 1, 1b, 4 and 4b; the strategies'
# own configurations differ from lightning_memory only in their overrides, and
# tests/test_strategies.py runs those.
ONLY = [
    *("plain_loop", "lightning_memory", "lightning_torchvision", "lightning_memory_nhwc"),
    *("loader_memory", "loader_torchvision", "epoch_d2l", "independent_x2_1thread"),
]


def test_tiny_bench_writes_json_and_markdown(tmp_path, data_root):
    out = tmp_path / "bench"
    result = subprocess.run(
        [sys.executable, "-m", "multigpu.bench", "--tiny", "--out", str(out), "--jobs", "2"]
        + ["--data-root", str(data_root), "--data-source", str(SHARED_DATA), "--only", *ONLY],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((out / "bench.json").read_text())
    rows = {r["name"]: r for r in report["configurations"]}
    expected = set(ONLY)
    assert set(rows) == expected
    assert all(r["images_per_s"] > 0 for r in rows.values())
    assert all(r["peak_rss_mb"] > 0 for r in rows.values() if "epoch" not in r["name"])
    assert 0 <= rows["epoch_d2l"]["test_acc"] <= 1 and rows["epoch_d2l"]["epoch_s"] > 0
    side_by_side = rows["independent_x2_1thread"]  # two runs at once: their speeds add up
    assert rows["lightning_memory"]["batch"] == 32 and side_by_side["batch"] == 16  # DDP's share
    assert len(side_by_side["images_per_s_each"]) == 2
    assert side_by_side["images_per_s"] == pytest.approx(
        sum(side_by_side["images_per_s_each"]), rel=1e-3
    )

    ratios = {r["ratio"]: r["value"] for r in report["ratios"]}
    speed = {name: r["images_per_s"] for name, r in rows.items()}
    recomputed = {
        "1 framework overhead": speed["plain_loop"] / speed["lightning_memory"],
        "1b channels_last": speed["lightning_memory_nhwc"] / speed["lightning_memory"],
        "4 in-memory pipeline": speed["lightning_memory"] / speed["lightning_torchvision"],
        "4b pipelines alone": speed["loader_memory"] / speed["loader_torchvision"],
    }
    for name, value in recomputed.items():
        assert ratios[name] == pytest.approx(value, rel=1e-2)
    markdown = (out / "bench.md").read_text()
    assert all(f"| {name} |" in markdown for name in expected)
    assert "| 1 framework overhead |" in markdown and "| 4 in-memory pipeline |" in markdown


def test_bench_refuses_bad_arguments(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "multigpu.bench", "--steps", "0", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "--steps must be at least 1" in result.stderr


def test_ratios_pair_the_rounds_both_sides_ran_in():
    top = {"rounds": [0, 1, 2], "images_per_s_runs": [100.0, 200.0, 300.0], "images_per_s": 200}
    bottom = {"rounds": [0, 2], "images_per_s_runs": [50.0, 100.0], "images_per_s": 75}
    value, rounds = paired_ratio(top, bottom)  # round 1 failed on the bottom side
    assert rounds == [100 / 50, 300 / 100] and value == statistics.median(rounds)
    single = {"rounds": [0], "images_per_s_runs": [80.0], "images_per_s": 80.0}
    assert paired_ratio(top, single) == (200 / 80, [])


def test_startup_bench_times_the_cases_it_names(tmp_path):
    """No timing asserted: the cases run and report their exit status and error line."""
    result = subprocess.run(
        [sys.executable, "-m", "multigpu.bench.startup", "--repeats", "1", "--out", str(tmp_path)]
        + ["--only", "devices zero", "eval without ckpt_path"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads((tmp_path / "startup.json").read_text())["rows"]
    assert [(r["case"], r["exit"]) for r in rows] == [
        ("devices zero", 2),
        ("eval without ckpt_path", 2),
    ]
    assert rows[0]["last_line"].startswith("error: trainer.devices=0 must be at least 1")
    assert all(r["seconds"] > 0 for r in rows)
    assert "| devices zero | 2 |" in (tmp_path / "startup.md").read_text()
