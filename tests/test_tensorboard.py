"""TensorBoard opened over ``outputs/`` as the README says, read over HTTP from a real server:
run names that say what each run is, HParams columns for every setting (those that differ
ticked first, values as written), metric columns from the curves with no ``hp/*`` section, and
figures drawn at the size the Images tab shows them."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import torch
from conftest import TINY, run_script
from hydra.core.override_parser.overrides_parser import OverridesParser

from multigpu.callbacks.hparams import SUMMARY_TAGS, column_name, setting_columns
from multigpu.callbacks.tensorboard_logger import shown_value, trial_name
from multigpu.callbacks.test_figures import SHOWN_WIDTH, cell_text, confusion_figure
from multigpu.config.launch import run_label, run_name

TIME = r"\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d\.\d{6}"  # a run's start, to the microsecond
SYNTHETIC = [*TINY, "data=synthetic", "data.num_train=128", "data.num_test=64"]
SWEEP = ["strategy=scatter_allreduce", "trainer.devices=2", "model.optimizer.lr=0.05,0.1"]


def test_a_run_is_named_by_its_start_then_what_its_command_line_changed():
    changed = ["model.optimizer.lr=0.2", "+model/scheduler=cosine", "trainer.devices=[0,1]"]
    assert run_label(changed) == "lr_0.2-scheduler_cosine-devices_0+1"
    # Where it reads and writes, or how it shows, says nothing of what it is; a file, its name.
    quiet = ["data.root=/d", "callbacks.progress_bar=null", "logger=csv", "data.num_workers=0"]
    assert run_label([*quiet, "ckpt_path=outputs/a/checkpoints/last.ckpt"]) == (
        "ckpt_path_last.ckpt"
    )
    # Short enough for TensorBoard's run list: whole overrides, then "-etc".
    assert run_label(TINY) == "width_4-accelerator_cpu-max_epochs_1"
    assert run_label([*TINY, "seed=1", "trainer.max_epochs=2"]) == (
        "width_4-accelerator_cpu-max_epochs_2-etc"  # a key given twice: the value Hydra takes
    )
    assert run_label([f"seed={'9' * 80}"]) == f"seed_{'9' * 31}-etc"
    assert run_label(["x=1."]) == "x_1"  # a name ending in "." is another run to TensorBoard
    assert re.fullmatch(TIME, run_name({}))  # nothing changed: the start alone
    named = run_name({}, ["seed=3", "model.compile={mode:max-autotune}"])
    assert re.fullmatch(rf"{TIME}-seed_3-compile_mode_max-autotune", named)
    # The run's checkpoint is passed back as it is printed, unquoted.
    override = OverridesParser.create().parse_override(f"ckpt_path=outputs/{named}/last.ckpt")
    assert override.value() == f"outputs/{named}/last.ckpt"
    # Every process of a cluster run derives the same name, whatever its command line.
    slurm = {"SLURM_NTASKS": "2", "SLURM_JOB_ID": "41", "SLURM_STEP_ID": "0"}
    assert run_name(slurm, ["seed=3"]) == "slurm-41.0"


def test_settings_are_columns_named_alike_in_every_run():
    assert column_name("model.optimizer.lr") == "lr"
    assert column_name("model.optimizer.momentum") == "momentum"
    assert column_name("data.train_subset") == "train_subset"
    assert column_name("model.scheduler.T_max") == "T_max"
    assert column_name("model.scheduler._target_") == column_name("model.scheduler") == "scheduler"
    assert column_name("defaults.data") == "data"
    assert column_name("data.seed") == "data.seed" and column_name("seed") == "seed"
    assert column_name("model.optimizer._partial_") is None
    settings = {
        "seed": 1,
        "data.seed": 1,  # follows seed: not a second differing column in a seed sweep
        "model.optimizer._target_": "torch.optim.SGD",
        "model.optimizer._partial_": True,
        "model.optimizer.lr": 0.1,
        "model.scheduler": None,
    }
    assert setting_columns(settings) == {
        "seed": 1,
        "optimizer": "SGD",
        "lr": 0.1,
        "scheduler": None,
    }
    assert setting_columns({**settings, "data.seed": 2})["data.seed"] == 2


def test_values_are_shown_as_written():
    values = (0.1, 1e-05, 256, True, None, "ddp", [0, 1], 0.30000000000000004)
    assert [shown_value(v) for v in values] == [
        "0.1",  # not 0.10000
        "1e-05",
        "256",  # not 256.00
        True,
        "null",
        "ddp",
        "[0, 1]",
        "0.3",
    ]


def test_trial_ids_start_with_what_tells_runs_apart(tmp_path):
    runs = tmp_path / "outputs"
    job = runs / "2026-11-25/12-40-02.123456/lr_0.1"
    assert trial_name(job, runs) == "lr_0.1 (2026-11-25/12-40-02.123456)"
    assert trial_name(runs / "slurm-41.0", runs) == "slurm-41.0"
    assert trial_name(tmp_path / "x" / "run", runs) == f"run ({tmp_path / 'x'})"


@pytest.mark.parametrize("version", ["", 3, "v"])
@pytest.mark.parametrize("sub_dir", [None, "sub"])
def test_the_events_go_to_the_folder_as_it_is_spelt(tmp_path, monkeypatch, version, sub_dir):
    """A run folder named with a ``$``: Lightning's logger expands it, so the events went to
    another folder than the run's record; without one, both loggers agree."""
    from pytorch_lightning.loggers import TensorBoardLogger

    from multigpu.callbacks.tensorboard_logger import EpochTensorBoardLogger

    monkeypatch.setenv("RUN_PART", "elsewhere")
    for save_dir in (tmp_path / "plain", tmp_path / "$RUN_PART" / "x"):
        arguments = {"save_dir": str(save_dir), "name": "", "version": version, "sub_dir": sub_dir}
        ours = EpochTensorBoardLogger(**arguments).log_dir
        assert Path(ours).parts[: len(save_dir.parts)] == save_dir.parts
        with monkeypatch.context() as plain:
            plain.delenv("RUN_PART")
            assert ours == TensorBoardLogger(**arguments).log_dir


def test_the_confusion_matrix_is_drawn_as_wide_as_the_images_tab_shows_it():
    names = [f"class {i}" for i in range(10)]
    matrix = torch.eye(10, dtype=torch.long) * 95 + 1
    figure = confusion_figure(matrix, names)
    width, height = figure.get_size_inches() * figure.dpi
    assert round(width) == SHOWN_WIDTH and height <= SHOWN_WIDTH
    # Percentages of each true class, never rounded to 0 or 100 when they are not.
    assert [cell_text(*c) for c in [(0, 0.0), (1, 0.4), (2, 0.9), (995, 99.5), (5, 100.0)]] == [
        "",
        "<1",
        "<1",
        ">99",
        "100",
    ]


# A real server over one outputs/ with a single run and a two-job sweep -------------------------
@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Path:
    """``python train.py`` and ``python train.py -m`` in one project, with the default folder
    names: a run with momentum, and two jobs of another strategy on 2 devices."""
    project = tmp_path_factory.mktemp("project")
    common = [*SYNTHETIC, "trainer.max_epochs=2", "data.batch_size=32"]
    single = run_script("train.py", *common, "model.optimizer.momentum=0.9", cwd=project)
    assert single.returncode == 0, single.stderr[-3000:]
    sweep = run_script("train.py", "-m", *common, *SWEEP, cwd=project)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    return project / "outputs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url: str, body: dict | None = None, raw: bool = False):
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "X-TensorBoard-Feature-Flags": "{}"}
    request = urllib.request.Request(url, data=data, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        content = response.read()
    return content if raw else json.loads(content)


@pytest.fixture(scope="module")
def server(outputs):
    """``tensorboard --logdir outputs`` on 127.0.0.1, once it lists the three runs."""
    port = free_port()
    tensorboard = Path(sys.executable).with_name("tensorboard")
    command = [str(tensorboard), "--logdir", str(outputs), "--host", "127.0.0.1"]
    process = subprocess.Popen(
        [*command, "--port", str(port), "--reload_interval", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline, runs = time.time() + 90, []
        while time.time() < deadline and len(runs) < 3:
            try:
                runs = fetch(f"{base}/data/runs")
            except OSError:
                pass
            time.sleep(1)
        assert len(runs) == 3, runs
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def records(outputs: Path) -> dict[str, dict]:
    """Each run's ``metrics.json``, by its TensorBoard run name."""
    return {
        path.parent.relative_to(outputs).as_posix(): json.loads(path.read_text())
        for path in outputs.rglob("metrics.json")
    }


@pytest.mark.slow
@pytest.mark.subprocess
def test_runs_are_named_by_what_they_are(server):
    runs = sorted(fetch(f"{server}/data/runs"))
    single, *jobs = sorted(runs, key=lambda r: r.count("/"))
    assert re.fullmatch(rf"{TIME}-width_4-accelerator_cpu-max_epochs_2-etc", single), single
    sweep = jobs[0].rsplit("/", 1)[0]
    assert re.fullmatch(TIME, sweep) and sorted(jobs) == [f"{sweep}/lr_0.05", f"{sweep}/lr_0.1"]


@pytest.mark.subprocess
def test_time_series_has_the_curves_once_and_no_hp_section(server, outputs):
    tags = fetch(f"{server}/data/plugin/scalars/tags")
    recorded = records(outputs)
    assert set(tags) == set(recorded)
    for run, run_tags in tags.items():
        assert not [t for t in run_tags if t.startswith("hp/")]
        assert {"train/loss", "test/acc", "time/epoch_s", *SUMMARY_TAGS} <= set(run_tags)
        for tag, key in SUMMARY_TAGS.items():  # one point, at the last epoch: not a curve
            query = urllib.parse.urlencode({"run": run, "tag": tag})
            ((_, step, value),) = fetch(f"{server}/data/plugin/scalars/scalars?{query}")
            assert step == 2 and value == pytest.approx(recorded[run][key], rel=1e-5)
        images = fetch(f"{server}/data/plugin/images/tags")[run]
        assert {"test/confusion_matrix", "test/misclassified"} <= set(images)
        query = urllib.parse.urlencode({"run": run, "tag": "test/confusion_matrix", "sample": 0})
        (image,) = fetch(f"{server}/data/plugin/images/images?{query}")
        png = fetch(f"{server}/data/plugin/images/individualImage?{image['query']}", raw=True)
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert int.from_bytes(png[16:20], "big") == SHOWN_WIDTH  # shown at its own size


@pytest.mark.subprocess
def test_hparams_has_a_column_per_setting_and_the_runs_summaries(server, outputs):
    experiment = fetch(f"{server}/data/plugin/hparams/experiment", {"experimentName": ""})
    infos = {h["name"]: h for h in experiment["hparamInfos"]}
    assert {"momentum", "scheduler", "train_subset", "batch_size", "precision", "width"} <= set(
        infos
    )
    differ = [h["name"] for h in experiment["hparamInfos"] if h.get("differs")]
    assert sorted(differ) == ["devices", "lr", "momentum", "strategy"]
    # The tab ticks the first five columns, those that differ first: every one of them here.
    assert [h["name"] for h in experiment["hparamInfos"][: len(differ)]] == differ
    metrics = [m["name"]["tag"] for m in experiment["metricInfos"]]
    assert not [m for m in metrics if m.startswith("hp/")]
    assert {m["name"].get("group", "") for m in experiment["metricInfos"]} == {""}  # each once
    assert {"test/acc", *SUMMARY_TAGS} <= set(metrics[:5])  # ticked: the first five
    groups = fetch(
        f"{server}/data/plugin/hparams/session_groups",
        {
            "experimentName": "",
            "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS"],
            "colParams": [],
            "startIndex": 0,
            "sliceSize": 100,
        },
    )["sessionGroups"]
    recorded = records(outputs)
    assert len(groups) == 3
    for group in groups:
        ((session,),) = [group["sessions"]]
        record = recorded[session["name"]]
        assert session["status"] == "STATUS_SUCCESS"
        # The Trial ID: the run's folder name first, then where it is.
        where, _, folder = session["name"].rpartition("/")
        assert group["name"] == f"{folder} ({where})"
        shown = group["hparams"]
        assert shown["strategy"] == record["run"]["strategy"]
        assert shown["lr"] == f"{record['run']['lr']:g}"  # 0.1, not 0.10000
        assert shown["momentum"] == f"{record['settings']['model.optimizer.momentum']:g}"
        assert shown["devices"] == str(record["run"]["devices"])
        values = {m["name"]["tag"]: m["value"] for m in group["metricValues"]}
        assert values["test/acc"] == pytest.approx(record["test_acc"], rel=1e-5)
        for tag, key in SUMMARY_TAGS.items():
            assert values[tag] == pytest.approx(record[key], rel=1e-5)
