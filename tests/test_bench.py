"""``python -m multigpu.tools.bench --tiny``: every configuration runs and the files are written.
No timing is asserted (shared machines are noisy); the ratios are checked against the
configurations' own numbers."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, SHARED_DATA, help_of, refusal_in

from multigpu.tools.bench.report import paired_ratio

pytestmark = pytest.mark.subprocess

# One configuration of each kind the bench runs (a plain loop, training steps, a loader alone,
# runs side by side) and the pairs behind ratios 1, 1b, 1c, 4 and 4b. Whole epochs:
# tests/test_acceptance.py runs epoch_d2l and epoch_fast through this bench. The strategies' own
# configurations (and compile's, which takes minutes to compile on a CPU) differ from
# lightning_memory only in their overrides, and tests/test_strategies.py (and
# tests/test_speed_options.py) run those.
ONLY = [
    *("plain_loop", "lightning_memory", "lightning_torchvision", "lightning_memory_nhwc"),
    "lightning_memory_bf16",
    *("loader_memory", "loader_torchvision", "independent_x2_1thread"),
]
# The default suite's share: a plain loop against Lightning's steps (ratio 1); the whole list
# runs under the slow marker.
CORE = ["plain_loop", "lightning_memory"]


@pytest.mark.parametrize(
    "only",
    [pytest.param(CORE, marks=pytest.mark.slow), pytest.param(ONLY, marks=pytest.mark.slow)],
    ids=["core", "all"],
)
def test_tiny_bench_writes_json_and_markdown(tmp_path, data_root, only):
    out = tmp_path / "bench"
    earlier = write_earlier_bench(out)
    result = subprocess.run(
        [sys.executable, "-m", "multigpu.tools.bench", "--tiny", "--out", str(out), "--jobs", "2"]
        + ["--data-root", str(data_root), "--data-source", str(SHARED_DATA), "--only", *only],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (kept,) = (out / "earlier").iterdir()  # the earlier bench, as it was
    assert f"the earlier bench in {out} is kept in {kept}" in result.stdout
    assert files_below(kept) == earlier
    report = json.loads((out / "bench.json").read_text())
    rows = {r["name"]: r for r in report["configurations"]}
    expected = set(only)
    assert set(rows) == expected
    assert all(r["images_per_s"] > 0 for r in rows.values())
    assert all(r["peak_rss_mb"] > 0 for r in rows.values() if "epoch" not in r["name"])
    assert rows["lightning_memory"]["batch"] == 32
    if "independent_x2_1thread" in rows:  # two runs at once: their speeds add up
        side_by_side = rows["independent_x2_1thread"]
        assert side_by_side["batch"] == 16  # DDP's share
        assert len(side_by_side["images_per_s_each"]) == 2
        assert side_by_side["images_per_s"] == pytest.approx(
            sum(side_by_side["images_per_s_each"]), rel=1e-3
        )

    ratios = {r["ratio"]: r["value"] for r in report["ratios"]}
    speed = {name: r["images_per_s"] for name, r in rows.items()}
    pairs = {
        "1 framework overhead": ("plain_loop", "lightning_memory"),
        "1b channels_last": ("lightning_memory_nhwc", "lightning_memory"),
        "1c bf16 autocast": ("lightning_memory_bf16", "lightning_memory"),
        "4 in-memory pipeline": ("lightning_memory", "lightning_torchvision"),
        "4b pipelines alone": ("loader_memory", "loader_torchvision"),
    }
    recomputed = {
        ratio: speed[a] / speed[b] for ratio, (a, b) in pairs.items() if {a, b} <= set(speed)
    }
    assert "1 framework overhead" in recomputed
    for name, value in recomputed.items():
        assert ratios[name] == pytest.approx(value, rel=1e-2)
    markdown = (out / "bench.md").read_text()
    assert all(f"| {name} |" in markdown for name in expected)
    assert "| 1 framework overhead |" in markdown


def test_bench_refuses_an_unknown_configuration_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "multigpu.tools.bench", "--only", "nosuch", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    (line,) = result.stderr.splitlines()
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert line.startswith("error: --only nosuch: no such configuration here; use any of ")
    assert "plain_loop" in line and "lightning_memory" in line
    assert not list(tmp_path.iterdir())  # nothing ran


@pytest.mark.parametrize(
    "args,text",
    [
        (["--steps", "0"], "argument --steps: 0 is not an integer from 1"),
        (["--warmup", "-1"], "argument --warmup: -1 is not an integer from 1"),
        (["--repeats", "0"], "argument --repeats: 0 is not an integer from 1 to 1000"),
        (["--batch", "2.5"], "argument --batch: '2.5' is not an integer"),
        (["--width", "100000"], "argument --width: 100000 is not an integer from 1 to 2048"),
        (["--jobs", "0"], "argument --jobs: 0 is not an integer from 1"),
        (["--replicas", "0"], "argument --replicas: 0"),
        (["--processes", "0"], "argument --processes: 0"),
        (["--epochs", "0"], "argument --epochs: 0"),
        (["--scaling-width", "0"], "argument --scaling-width: 0"),
        (["--out", "a-file"], "argument --out: a-file is a file, not a folder"),
        (["--out", "a-file/bench"], "argument --out: a-file is a file, not a folder"),
        (["--data-source", "nowhere"], "argument --data-source: nowhere is not a folder"),
        (["--data-root", ""], "argument --data-root: '' is not a path"),
        (["--only", "plain_loop", "nosuch", "other"], "--only nosuch other: no such"),
        (["--only"], "argument --only: expected at least one argument"),  # had run them all
        (["--tny"], "unrecognized arguments: --tny: did you mean --tiny?"),
        (["--data-root", "/dev/null"], "/dev/null is a file, not a folder"),
    ],
)
def test_every_argument_is_checked_in_one_line(args, text, tmp_path, monkeypatch, capsys):
    from multigpu.tools.bench.__main__ import parse_args

    assert text in refusal_in(tmp_path, parse_args, args, monkeypatch, capsys)


@pytest.mark.slow  # a bench's run, stopped
def test_a_stopped_bench_stops_its_runs_and_says_so(tmp_path, data_root):
    """SIGTERM to the bench: the runs under way had trained on, orphaned, and nothing was said.
    Now they record the stop, none of the next round starts, and one line ends the bench, 143,
    no bench.json."""
    out = tmp_path / "bench"
    bench = subprocess.Popen(
        [sys.executable, "-m", "multigpu.tools.bench", "--out", str(out), "--width", "8"]
        + ["--batch", "32", "--steps", "100000", "--warmup", "1", "--repeats", "2", "--jobs", "2"]
        + ["--data-root", str(data_root), "--data-source", str(SHARED_DATA)]
        + ["--only", "lightning_memory", "plain_loop"],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
    )
    record = out / "runs" / "lightning_memory" / "metrics.json"
    deadline = time.monotonic() + 120
    while not (record.is_file() and (out / "runs" / "plain_loop.log").is_file()):
        assert bench.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(1)  # into their steps
    bench.terminate()
    stderr = bench.communicate(timeout=120)[1]
    assert bench.returncode == 143, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == (
        f"error: interrupted by SIGTERM after 0 of 4 runs: no bench.json written; each run's "
        f"output is in {out / 'runs'}"
    )
    time.sleep(2)  # a run of the next round, started by a pool thread, would be under way now
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout
    assert left == "", left
    assert json.loads(record.read_text())["status"] == "interrupted"
    assert not (out / "bench.json").exists()


def write_earlier_bench(out: Path) -> dict[str, str]:
    """A bench's files in ``out``, as an earlier bench left them; their contents by path."""
    (out / "runs").mkdir(parents=True)
    for name in ("bench.json", "bench.md", "runs/plain_loop.json"):
        (out / name).write_text(f"earlier {name}")
    return files_below(out)


def files_below(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()}


def test_an_earlier_bench_in_the_out_folder_is_kept_apart(tmp_path):
    """A second bench into one ``--out`` had replaced the first's figures."""
    from multigpu.tools.bench.bench_file import keep_earlier

    out = tmp_path / "bench"
    out.mkdir()
    assert keep_earlier(out) is None and files_below(out) == {}  # nothing to keep
    earlier = write_earlier_bench(out)
    kept = keep_earlier(out)
    assert kept is not None and kept.parent == out / "earlier"
    assert files_below(kept) == earlier and [p.name for p in out.iterdir()] == ["earlier"]
    # A stopped bench (its runs alone, no bench.json), kept within the same second: apart too.
    (out / "runs").mkdir()
    (out / "runs" / "plain_loop.log").write_text("stopped")
    os.utime(out / "runs", (kept.joinpath("bench.json").stat().st_mtime,) * 2)  # its second
    again = keep_earlier(out)
    assert again is not None and again != kept and again.parent == out / "earlier"
    assert files_below(again) == {"runs/plain_loop.log": "stopped"}
    assert files_below(kept) == earlier


@pytest.mark.parametrize("option", ["--out", "--data-root"])
@pytest.mark.parametrize("mark", ["metrics.json", "multirun.yaml"])
@pytest.mark.parametrize("below", ["", "bench", "bench/deeper"])
def test_a_folder_in_a_run_or_sweep_folder_is_refused_and_writes_nothing(
    option, mark, below, tmp_path, monkeypatch, capsys
):
    """``--out`` or ``--data-root`` in a run's or a sweep's folder: each of the bench's runs was
    refused there (a run writing inside another's folder) once the bench had begun, and
    bench.json (or the unpacked data set) went among the run's files."""
    from multigpu.tools.bench.__main__ import parse_args

    held = tmp_path / "held"
    held.mkdir()
    (held / mark).write_text("")
    given = str(Path("held", below)) if below else "held"
    said = refusal_in(tmp_path, parse_args, [option, given], monkeypatch, capsys)
    owner = "run" if mark == "metrics.json" else "sweep"
    assert (
        f"{option} {given}: {held} is another {owner}'s folder (it holds that {owner}'s {mark})"
        in said
    )
    assert sorted(p.name for p in held.iterdir()) == [mark]
    apart = parse_args([option, str(tmp_path / "apart")])
    assert getattr(apart, option[2:].replace("-", "_")) == tmp_path / "apart"


@pytest.mark.parametrize("only", [None, ["lightning_memory_nhwc"]])
def test_a_width_nhwc_cannot_take_on_a_cpu_is_refused_before_any_row_runs(
    only, tmp_path, monkeypatch, capsys
):
    """Below it, settings.check_channels_last refuses the NHWC row, once the others had run."""
    from multigpu.tools.bench import __main__ as bench

    monkeypatch.setattr(bench, "has_cuda", lambda: False)
    args = ["--width", "7", *(["--only", *only] if only else [])]
    said = refusal_in(tmp_path, bench.parse_args, args, monkeypatch, capsys)
    assert "--width 7: lightning_memory_nhwc (NHWC) needs width 8 or more on a CPU" in said
    assert bench.parse_args(["--width", "7", "--only", "plain_loop"]).width == 7  # no NHWC row


def test_every_option_says_its_default(capsys):
    from multigpu.tools.bench.__main__ import parse_args

    shown = help_of(parse_args, capsys)
    for option in ("--batch", "--steps", "--warmup", "--width", "--repeats", "--jobs", "--out"):
        assert f"{option} " in shown
    assert shown.count("(default: ") >= 13  # every option but --tiny, whose default is off


def test_ratios_pair_the_rounds_both_sides_ran_in():
    top = {"rounds": [0, 1, 2], "images_per_s_runs": [100.0, 200.0, 300.0], "images_per_s": 200}
    bottom = {"rounds": [0, 2], "images_per_s_runs": [50.0, 100.0], "images_per_s": 75}
    value, rounds = paired_ratio(top, bottom)  # round 1 failed on the bottom side
    assert rounds == [100 / 50, 300 / 100] and value == statistics.median(rounds)
    single = {"rounds": [0], "images_per_s_runs": [80.0], "images_per_s": 80.0}
    assert paired_ratio(top, single) == (200 / 80, [])


@pytest.mark.slow
def test_startup_bench_times_the_cases_it_names(tmp_path):
    """No timing asserted: the cases run and report their exit status and error line."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "multigpu.tools.bench.startup",
            "--repeats",
            "1",
            "--out",
            str(tmp_path),
        ]
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
