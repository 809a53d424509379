"""The study's table and curves, from sweeps laid out as ``outputs/study/<experiment>/<job>``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from multigpu.storage.record import summarize
from multigpu.tools.report.study import study_rows


def write_job(
    folder, seed: int, accs: list[float], devices: int = 1, status="completed", lr: float = 0.1
):
    history = [
        {"epoch": i + 1, "epoch_s": 2.0 + seed, "samples_per_s": 100.0, "test_acc": a}
        for i, a in enumerate(accs)
    ]
    run = {"strategy": "ddp", "devices": devices, "batch_size": 256 * devices, "lr": lr * devices}
    settings = {"seed": seed, "data.seed": seed, "model.optimizer.lr": lr * devices}
    record = {**summarize(history, {**run, "seed": seed}), "status": status, "settings": settings}
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps(record))


def test_rows_give_each_experiment_mean_and_spread_over_seeds(tmp_path):
    accs = {1: [0.5, 0.8, 0.7], 2: [0.6, 0.9, 0.75], 3: [0.4, 0.85, 0.8]}
    for seed, acc in accs.items():
        write_job(tmp_path / "b_two" / f"seed={seed}", seed, acc, devices=2)
    write_job(tmp_path / "a_one" / "0", 1, [0.7, 0.9])
    write_job(tmp_path / "a_one" / "seed=2", 2, [0.1, 0.1], status="failed")  # left out
    one, two = study_rows(tmp_path)
    assert (one["name"], one["finals"], one["sd"]) == ("a_one", [0.9], 0.0)
    finals = np.array([a[-1] for a in accs.values()])
    assert two["seeds"] == [1, 2, 3] and two["finals"] == list(finals)
    assert two["mean"] == np.mean(finals) and np.isclose(two["sd"], np.std(finals, ddof=1))
    assert np.isclose(two["best_mean"], np.mean([max(a) for a in accs.values()]))
    assert np.isclose(two["epoch_s"], np.mean([2.0 + s for s in accs]))  # after the first


@pytest.mark.slow
def test_the_command_prints_the_table_and_writes_the_curves(tmp_path):
    for seed in (1, 2):
        write_job(tmp_path / "study" / "row" / f"seed={seed}", seed, [0.5, 0.6 + seed / 100])
    plot = tmp_path / "curves.png"
    command = [sys.executable, "-m", "multigpu.tools.report.study", str(tmp_path / "study")]
    result = subprocess.run([*command, "--plot", str(plot)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "| `row` | ddp | 1 | 256 | 0.1 | none | 2 | 0.6150 ± 0.0071 |" in result.stdout
    assert plot.read_bytes()[:4] == b"\x89PNG"
    missing = subprocess.run([*command[:-1], str(tmp_path / "nowhere")], capture_output=True)
    assert missing.returncode == 2 and missing.stderr.decode().count("\n") == 1


def test_a_job_stopped_untested_and_untested_epochs_are_left_out_not_crashed_on(tmp_path, capsys):
    """A job that ``+trainer.max_steps`` stopped inside an epoch completes with no test accuracy
    after it, and ``check_val_every_n_epoch=2`` leaves epochs untested: the report had crashed
    on the nulls (``statistics.mean``). The untested job is left out, named on stderr; the
    curves are drawn over the epochs every seed was tested after."""
    from multigpu.tools.report.study import plot_curves

    write_job(tmp_path / "row" / "seed=1", 1, [None, 0.6, None, 0.7])
    write_job(tmp_path / "row" / "seed=2", 2, [None, 0.5, None, 0.8])
    write_job(tmp_path / "row" / "seed=3", 3, [0.4, None])  # stopped: no final accuracy
    (row,) = study_rows(tmp_path)
    assert row["seeds"] == [1, 2] and row["finals"] == [0.7, 0.8]
    assert "1 completed job(s) with no test accuracy" in capsys.readouterr().err
    plot_curves([row], tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("tool", ["study", "predict"])
@pytest.mark.parametrize("mark", ["metrics.json", "multirun.yaml"])
def test_a_plot_in_a_run_or_sweep_folder_is_refused_and_writes_nothing(
    tool, mark, tmp_path, monkeypatch, capsys
):
    """``--plot`` into a run's or a sweep's folder had written there (over the sweep's own
    report figure of that name, or among a run's files); refused, naming a place outside it,
    as bench's ``--out`` is."""
    from conftest import refusal_in

    from multigpu.tools.predict.__main__ import parse_args as predict_args
    from multigpu.tools.report.study import main as study_main

    def parse(argv: list[str]) -> None:
        if tool == "predict":
            predict_args(argv)
        else:
            study_main([str(tmp_path), *argv])

    held = tmp_path / "held"
    (held / "deeper").mkdir(parents=True)
    (held / mark).write_text("")
    (held / "test_acc.png").write_bytes(b"the sweep's")
    owner = "run" if mark == "metrics.json" else "sweep"
    (held / "0").mkdir()
    (held / "0" / "metrics.json").write_text("")  # a job's folder, in a sweep's or not
    for given in ("held/test_acc.png", "held/deeper/new.png", "held/0/job.png"):
        said = refusal_in(tmp_path, parse, ["--plot", given], monkeypatch, capsys)
        inner, what = (held / "0", "run") if "/0/" in given else (held, owner)
        name = "metrics.json" if "/0/" in given else mark
        assert said.strip() == (
            f"error: argument --plot: {given}: {inner} is another {what}'s folder (it holds that "
            f"{what}'s {name}), which only it writes in; pass a file outside it, e.g. "
            f"{tmp_path / Path(given).name}"
        )
    assert sorted(p.name for p in held.iterdir()) == sorted(["0", "deeper", mark, "test_acc.png"])
    assert (held / "test_acc.png").read_bytes() == b"the sweep's"
    assert not list((held / "deeper").iterdir())


def test_a_folder_with_no_sweep_below_says_which_folder_to_pass(tmp_path, capsys):
    """A run's or a sweep's own folder (its jobs no rows) had been answered "no completed job
    below" with no fix."""
    from multigpu.tools.report.study import main

    write_job(tmp_path / "run", 1, [0.5, 0.6])
    assert main([str(tmp_path / "run")]) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and said.startswith("error: no completed job in a sweep folder")
    assert said.rstrip().endswith("pass the folder that holds the study's sweeps, one per row "
                                  "(e.g. outputs/study)")  # fmt: skip
    assert main([str(tmp_path)]) == 0  # its parent holds it as a row


@pytest.mark.parametrize(
    ("differ", "said"),
    [
        ({"lr": 0.2}, "differ in model.optimizer.lr (0.1, 0.2)"),
        ({"devices": 2, "lr": 0.05}, "differ in run.devices (1, 2)"),  # the same lr
        ({}, None),  # the seed (and the data's, which follows it) alone: a row
    ],
)
def test_a_sweep_over_more_than_seeds_is_no_row(differ, said, tmp_path, capsys):
    """A sweep over lr (or devices) had been averaged as if its jobs were seeds, and named by
    its first job's values."""
    from multigpu.tools.report.study import main

    write_job(tmp_path / "row" / "a", 1, [0.5, 0.6])
    write_job(tmp_path / "row" / "b", 2, [0.5, 0.7], **differ)
    code = main([str(tmp_path)])
    err = capsys.readouterr().err
    if said is None:
        assert code == 0 and err == ""
        return
    assert code == 2 and err.count("\n") == 1 and said in err
    assert err.startswith(f"error: {tmp_path / 'row'}: its jobs differ in ")
