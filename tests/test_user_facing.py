"""What a user comparing runs sees: job folders named by what differs, one definition of speed,
epochs counted from 1 everywhere, TensorBoard by epoch, a quiet terminal, and closing lines."""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import TINY, examples, run_script
from hypothesis import assume, given
from hypothesis import strategies as st
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from multigpu.callbacks.process_setup import quiet_loader_workers
from multigpu.callbacks.progress import ProgressBar, epoch_description
from multigpu.callbacks.tensorboard_logger import EpochTensorBoardLogger, tensorboard_value
from multigpu.config.job_names import job_folder_name, short_names, swept_keys
from multigpu.run.quiet import quiet
from multigpu.run.run_summary import closing_lines
from multigpu.storage.record import SCHEMA, speed, summarize, upgrade
from multigpu.tools.acceptance import parse_args as acceptance_args
from multigpu.tools.bench.report import NOT_MEASURED, SMOKE_TEST_LINE, compute_ratios, to_markdown
from multigpu.tools.report.plots import accuracy_figure, scaling_figure


def test_swept_keys_come_from_the_command_line_and_the_sweeper():
    overrides = ["trainer.devices=1,2", "seed=3", "+trainer.x=range(1,3)", "data=a,b"]
    keys = swept_keys(overrides, {"model.optimizer.lr": "0.1,0.2", "data": "a,b"})
    assert keys == ["trainer.devices", "trainer.x", "data", "model.optimizer.lr"]
    # A searched key the config lacks (Optuna's +key) names its jobs' folders as the key they
    # set: without its +, each trial had been named as the first, whose folder it then found.
    searched = swept_keys(["model.optimizer.lr=0.1"], {"+trainer.gradient_clip_val": "x"})
    assert searched == ["trainer.gradient_clip_val"]
    job = ["+trainer.gradient_clip_val=0.55", "model.optimizer.lr=0.1"]
    assert job_folder_name(job, searched, 1) == "gradient_clip_val_0.55"


def test_job_folders_name_the_swept_values():
    keys = ["trainer.devices", "data.batch_size"]
    job = ["trainer.devices=2", "data.batch_size=512", "seed=1", "data.root=/a/b"]
    assert job_folder_name(job, keys, 3) == "devices_2-batch_size_512"
    assert job_folder_name(["+data.root=/a/b"], ["data.root"], 0) == "root_%2Fa%2Fb"
    assert job_folder_name(job, [], 3) == "3"  # nothing swept: the job's number
    assert short_names(["model.optimizer.lr", "scheduler.lr"]) == {
        "model.optimizer.lr": "model.optimizer.lr",
        "scheduler.lr": "scheduler.lr",
    }


def history(epochs: list[tuple[float, int]]) -> list[dict]:
    """Epochs of (seconds, samples), recorded as EpochTimer records them."""
    return [
        {"epoch": i + 1, "epoch_s": s, "samples_per_s": n / s, "test_acc": 0.5 + i / 100}
        for i, (s, n) in enumerate(epochs)
    ]


def test_speed_is_samples_over_time_after_the_first_epoch():
    fast = history([(9.0, 1000), (2.0, 1000), (3.0, 1000), (2.5, 1000)])
    slow = history([(4.0, 1000), (4.0, 1000), (6.0, 1000)])
    fast_epoch_s, fast_rate = speed(fast)
    slow_epoch_s, slow_rate = speed(slow)
    assert fast_epoch_s == pytest.approx((2.0 + 3.0 + 2.5) / 3)
    assert fast_rate == pytest.approx(3000 / 7.5)
    # Equal epochs: faster by time exactly as much as by samples per second.
    assert slow_epoch_s / fast_epoch_s == pytest.approx(fast_rate / slow_rate)
    assert speed(history([(5.0, 800)])) == pytest.approx((5.0, 160.0))  # one epoch: that one
    assert speed([]) == (None, None)


@examples(60)
@given(
    st.lists(
        st.tuples(st.floats(0.01, 100), st.integers(1, 10_000), st.none() | st.integers(0, 50)),
        max_size=6,
    )
)
def test_an_epoch_stopped_before_its_last_batch_is_shorter_not_faster(epochs):
    """``+trainer.max_steps`` or ``max_time`` ending an epoch early: its seconds are no epoch's,
    so seconds per epoch come from whole epochs only (none: no figure), and samples per second
    from the whole ones too, or from the stopped ones when none ran whole."""
    from multigpu.storage.record_model import timed_epochs

    drawn = [
        {"epoch": i + 1, "epoch_s": s, "samples_per_s": n / s, "partial_batches": cut}
        for i, (s, n, cut) in enumerate(epochs)
    ]
    whole = [(s, n) for s, n, cut in epochs if cut is None]
    counted = whole or [(s, n) for s, n, _ in epochs]
    counted = counted[1:] if len(counted) > 1 else counted
    epoch_s, rate = speed(drawn)
    if not counted:
        assert (epoch_s, rate) == (None, None)
        return
    assert rate == pytest.approx(sum(n for _, n in counted) / sum(s for s, _ in counted))
    if whole:
        assert epoch_s == pytest.approx(sum(s for s, _ in counted) / len(counted))
    else:
        assert epoch_s is None
    assert all(h["partial_batches"] is None for h in timed_epochs(drawn)) == bool(whole)


@pytest.mark.slow
def test_a_run_stopped_by_max_steps_mid_epoch_records_that_epoch_as_stopped(tmp_path):
    """It had been recorded as a whole epoch: its half-length seconds counted as an epoch's,
    its test accuracy the epoch before's (it was not evaluated), and the closing line said
    nothing of the stop. Now it is evaluated and checkpointed where it stopped."""
    from conftest import CONF, compose_config
    from hydra import compose, initialize_config_dir
    from test_integrity import SYNTHETIC

    from multigpu.config.settings import Machine
    from multigpu.run.admission import admit
    from multigpu.run.cli import hydra_runtime
    from multigpu.run.evaluation import evaluate
    from multigpu.run.training import train

    overrides = [*SYNTHETIC, "data.batch_size=16", "trainer.max_epochs=3", "+trainer.max_steps=6"]
    cfg = compose_config(overrides, tmp_path / "run")
    record = train(cfg)  # 4 batches an epoch
    assert record["status"] == "completed"
    assert [h["partial_batches"] for h in record["history"]] == [None, 2]
    # Its command again: finished (a notice), not "trained further in place" (refused).
    again = admit(cfg, hydra_runtime(cfg)[0], Machine(0, 2, {}, False), tmp_path / "run")
    assert again.finished is not None and again.finished["run_id"] == record["run_id"]
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        checking = [f"ckpt_path={last}", f"paths.output_dir={tmp_path}", *SYNTHETIC[-3:]]
        evaluated = evaluate(compose("eval", overrides=checking, return_hydra_config=True))
    assert evaluated["epochs_trained"] == 2  # the checkpoint of the stop
    assert record["history"][-1]["test_acc"] == record["test_acc"] == evaluated["test_acc"]
    assert record["epoch_s"] == pytest.approx(record["history"][0]["epoch_s"])
    (said, *_) = closing_lines(record, tmp_path / "run")
    assert "after 2 epoch(s), the last stopped after 2 batch(es)" in said
    # Continued without the limit: the partial epoch stays one, the next is whole.
    resume = [f"ckpt_path={last}", "resume_changes=[trainer.max_steps]"]
    resumed = train(compose_config([*overrides[:-1], *resume], tmp_path / "resumed"))
    assert [h["partial_batches"] for h in resumed["history"]] == [None, 2, None]
    whole = [resumed["history"][i]["epoch_s"] for i in (0, 2)]
    assert resumed["epoch_s"] == pytest.approx(whole[1])  # the whole epochs but the first


@pytest.mark.slow
def test_a_run_without_a_limit_of_epochs_that_max_steps_ended_is_finished(tmp_path):
    """``trainer.max_epochs=-1 +trainer.max_steps=6``, its command again: refused as "trained
    further in place", with a fix that trained nothing; a sweep run again refused each job."""
    from conftest import compose_config
    from test_integrity import SYNTHETIC

    from multigpu.config.settings import Machine
    from multigpu.run.admission import admit
    from multigpu.run.cli import hydra_runtime
    from multigpu.run.training import train

    overrides = [*SYNTHETIC, "data.batch_size=16", "trainer.max_epochs=-1", "+trainer.max_steps=6"]
    cfg = compose_config(overrides, tmp_path / "run")
    record = train(cfg)
    assert record["status"] == "completed" and record["epochs"] == 2
    again = admit(cfg, hydra_runtime(cfg)[0], Machine(0, 2, {}, False), tmp_path / "run")
    assert again.finished is not None and again.finished["run_id"] == record["run_id"]


@pytest.mark.parametrize(
    "given,evaluated",
    [
        (["+trainer.max_steps=6", "+trainer.min_epochs=3"], [True, True]),
        (
            ["+trainer.max_steps=10", "trainer.max_epochs=4", "+trainer.check_val_every_n_epoch=2"],
            [False, True, True],
        ),
    ],
    ids=["min_epochs", "every_2_epochs"],
)
def test_the_epoch_max_steps_stops_is_evaluated_whatever_else_is_set(tmp_path, given, evaluated):
    """Lightning ends the fit at ``max_steps`` before ``min_epochs``, but evaluated the stopped
    epoch only once ``min_epochs`` was met, and only in the epochs ``check_val_every_n_epoch``
    names: the run ended with a null ``test_acc``, which an Optuna study records as a failed
    trial."""
    from conftest import compose_config
    from test_integrity import SYNTHETIC

    from multigpu.run.training import train

    overrides = [*SYNTHETIC, "data.batch_size=16", "trainer.max_epochs=3"]
    record = train(compose_config([*overrides, *given], tmp_path / "run"))  # 4 batches an epoch
    assert record["status"] == "completed"
    assert [h["partial_batches"] for h in record["history"]] == [None] * (len(evaluated) - 1) + [2]
    assert [h["test_acc"] is not None for h in record["history"]] == evaluated
    assert record["test_acc"] == record["history"][-1]["test_acc"]


def test_records_of_earlier_schemas_count_epochs_from_one():
    new = summarize(history([(9.0, 1000), (2.0, 1000), (3.0, 1000)]), {"devices": 1})
    old = {
        **new,
        "schema": 2,
        "best_epoch": new["best_epoch"] - 1,
        "history": [{**h, "epoch": h["epoch"] - 1} for h in new["history"]],
        "epoch_s": 2.0,  # schema 2: medians
        "samples_per_s": 333.0,
    }
    upgraded = upgrade(old)
    assert new["schema"] == SCHEMA == 3 and new["best_epoch"] == 3
    assert {k: upgraded[k] for k in new if k != "schema"} == {
        k: new[k] for k in new if k != "schema"
    }
    assert upgrade(new) is new


def test_tensorboard_logger_plots_epoch_scalars_by_epoch_from_one(tmp_path):
    logger = EpochTensorBoardLogger(save_dir=str(tmp_path), name="", version="")
    logger.log_metrics({"test/acc": 0.5, "epoch": 0}, step=99)  # Lightning's epoch is 0-based
    logger.log_metrics({"test/acc": 0.7, "epoch": 1}, step=199)
    logger.log_metrics({"loss": 2.0}, step=7)  # no epoch: the step as given
    logger.log_hyperparams({"batch_size": 256, "lr": 0.1, "nodes": None, "strategy": "ddp"})
    logger.finalize("success")
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [(e.step, round(e.value, 6)) for e in events.Scalars("test/acc")] == [(1, 0.5), (2, 0.7)]
    assert [e.step for e in events.Scalars("loss")] == [7]
    # Only this run's session start: TensorBoard then compares runs and marks what differs.
    content = events.PluginTagToContent("hparams")
    assert set(content) == {"_hparams_/session_start_info"}
    start = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/session_start_info"]
    ).session_start_info
    shown = {k: v.WhichOneof("kind") for k, v in start.hparams.items()}
    assert shown == {
        "batch_size": "string_value",  # an integer column shows 256, not 256.00
        "lr": "number_value",
        "nodes": "string_value",
        "strategy": "string_value",
    }
    assert start.hparams["batch_size"].string_value == "256"
    assert (tmp_path / "hparams.yaml").read_text().count("batch_size: 256") == 1


def test_tensorboard_values():
    assert [tensorboard_value(v) for v in (3, 0.5, True, None, "x", [1])] == [
        "3",
        0.5,
        True,
        "none",
        "x",
        "[1]",
    ]


def test_progress_bar_counts_epochs_from_one():
    trainer = SimpleNamespace(current_epoch=2, max_epochs=10)
    assert epoch_description(trainer) == "Epoch 3/10"
    assert epoch_description(SimpleNamespace(current_epoch=0, max_epochs=-1)) == "Epoch 1"


DISTRIBUTED = pytest.mark.distributed

# Printed by Lightning or torch on every run, about nothing the user did.
NOISE = [
    ("`isinstance(treespec, LeafSpec)` is deprecated, use ...", FutureWarning),
    ("The `srun` command is available on your system but is not used.", UserWarning),
    ("The number of training batches (4) is smaller than the logging interval", UserWarning),
]


def test_quiet_drops_only_the_noise(caplog):
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        quiet()
        for message, category in [*NOISE, ("something about the user's run", UserWarning)]:
            warnings.warn(message, category, stacklevel=1)
    assert [str(w.message) for w in shown] == ["something about the user's run"]
    lightning = logging.getLogger("pytorch_lightning.utilities.rank_zero")
    kept = ["`Trainer.fit` stopped: No training batches.", "Restoring states from ckpt"]
    kept += ["`Trainer(limit_train_batches=0.5)` was configured so 50% of the batches per epoch "
             "will be used.."]  # fmt: skip
    with caplog.at_level(logging.INFO):
        lightning.info("`Trainer(limit_train_batches=1.0)` was configured so 100% of the batches "
                       "per epoch will be used..")  # fmt: skip
        lightning.info("`Trainer(limit_val_batches=1.0)` was configured so 100% of the batches "
                       "will be used..")  # fmt: skip
        lightning.info("💡 Tip: For seamless cloud logging ...")
        lightning.info("GPU available: False, used: False")
        lightning.info("TPU available: False, using: 0 TPU cores")
        lightning.info("`Trainer.fit` stopped: `max_epochs=2` reached.")
        for message in kept:
            lightning.info(message)
    assert [r.getMessage() for r in caplog.records] == kept
    caplog.clear()
    fabric = logging.getLogger("lightning_fabric.utilities.rank_zero")
    cuda = logging.getLogger("pytorch_lightning.accelerators.cuda")
    with caplog.at_level(logging.INFO):  # what float32_matmul_precision already decides
        fabric.info("You are using a CUDA device ('NVIDIA H100') that has Tensor Cores. To ...")
        cuda.info("LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0]")  # the run's first line says
    assert not caplog.records
    # Every stop signal is handed to Lightning's SIGTERM handling, which logs "SIGTERM: 15" for
    # a SIGHUP too: the run's closing line names the signal that came.
    from lightning_fabric.utilities.rank_zero import rank_prefixed_message

    connector = logging.getLogger("pytorch_lightning.trainer.connectors.signal_connector")
    with caplog.at_level(logging.INFO):
        connector.info(rank_prefixed_message("Received SIGTERM: 15", 0))
        connector.info("SLURM auto-requeueing enabled. Setting signal handlers.")
    assert [r.getMessage() for r in caplog.records] == [
        "SLURM auto-requeueing enabled. Setting signal handlers."
    ]


WORKERS_HINT = (
    "The 'train_dataloader' does not have many workers which may be a bottleneck. Consider "
    "increasing the value of the `num_workers` argument` to `num_workers=15` in the `DataLoader`"
)


@pytest.mark.parametrize("pipeline,shown", [("memory", False), ("torchvision", True)])
def test_the_workers_hint_is_left_out_for_the_pipeline_without_workers(pipeline, shown):
    from pytorch_lightning.utilities.warnings import PossibleUserWarning

    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        quiet_loader_workers(pipeline)
        warnings.warn(WORKERS_HINT, PossibleUserWarning, stacklevel=1)
    assert bool(warned) == shown


@pytest.mark.subprocess
@pytest.mark.parametrize("pipeline,hinted", [("memory", False), ("torchvision", True)])
def test_a_run_applies_its_matmul_precision_and_hints_workers_only_where_they_exist(
    pipeline, hinted, tmp_path
):
    """On a 16-core machine (as Lightning sees it), a run with no loader workers hears the hint
    to raise them only where there are workers to raise; the run's float32 matmul precision is
    torch's while it trains, and in its record."""
    probes = str(Path(__file__).resolve().parent)
    result = run_script(
        "train.py",
        *TINY,
        "data=synthetic",
        "data.num_train=64",
        "data.num_test=32",
        "data.batch_size=32",
        f"data.pipeline={pipeline}",
        "float32_matmul_precision=medium",
        "+callbacks.cores._target_=probes.ManyCores",
        "+callbacks.cores.cores=16",
        "+callbacks.probe._target_=probes.MatmulPrecisionProbe",
        f"+callbacks.probe.path={tmp_path / 'precision'}",
        "hydra.run.dir=outputs/run",
        cwd=tmp_path,
        env={"PYTHONPATH": os.pathsep.join([probes, os.environ.get("PYTHONPATH", "")])},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert ("does not have many workers" in result.stderr) == hinted, result.stderr[-3000:]
    assert (tmp_path / "precision").read_text() == "medium"
    record = json.loads((tmp_path / "outputs" / "run" / "metrics.json").read_text())
    assert record["settings"]["float32_matmul_precision"] == "medium"


@DISTRIBUTED
@pytest.mark.subprocess
@pytest.mark.slow  # spawns DDP workers (12 s): CI's slow suite runs it
def test_spawned_ddp_workers_compute_with_the_runs_matmul_precision(tmp_path):
    """A spawned process starts with torch's default (``highest``) and no logging: the run sets
    its own precision, and its epochs' lines reach the console and ``train.log`` as under every
    other strategy (without what Lightning says on every run)."""
    probes = str(Path(__file__).resolve().parent)
    result = run_script(
        "train.py",
        *TINY,
        "strategy=ddp_spawn",
        "trainer.devices=2",
        "data=synthetic",
        "data.num_train=128",
        "data.num_test=64",
        "data.batch_size=64",
        "float32_matmul_precision=medium",
        "callbacks.progress_bar={_target_:multigpu.callbacks.ProgressBar,lines:true}",
        "+callbacks.probe._target_=probes.MatmulPrecisionProbe",
        f"+callbacks.probe.path={tmp_path / 'precision'}",
        cwd=tmp_path,
        env={"PYTHONPATH": os.pathsep.join([probes, os.environ.get("PYTHONPATH", "")])},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "precision").read_text() == "medium"
    (log,) = tmp_path.glob("outputs/**/train.log")
    for said in (result.stdout, log.read_text()):
        assert "Epoch 1/1: " in said and "Initializing distributed" not in said


def test_closing_lines_say_how_the_run_did_and_where_it_is(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "outputs" / "run"
    run.mkdir(parents=True)
    record = summarize(history([(9.0, 1000), (2.0, 1000), (3.0, 1000)]), {})
    lines = closing_lines({**record, "best_epoch": 2, "best_test_acc": 0.9}, run)
    assert lines == [
        "test accuracy 0.5200 after 3 epoch(s) (best 0.9000 at epoch 2); "
        "2.5 s/epoch, 400 samples/s",
        "run folder: outputs/run",
    ]
    (run / "events.out.tfevents.1.host").write_bytes(b"")
    assert closing_lines(record, run)[-1] == "look at it: tensorboard --logdir outputs/run"
    assert closing_lines(record, run)[0].startswith("test accuracy 0.5200 after 3 epoch(s);")


@given(name=st.text(st.characters(blacklist_characters="\0/"), min_size=1, max_size=12))
def test_the_tensorboard_line_runs_as_a_command_whatever_the_folder_is_named(name):
    """``hydra.run.dir=-x``: ``tensorboard --logdir -x`` read the folder as an option."""
    import argparse

    from multigpu.run.run_summary import tensorboard_line

    assume(name not in (".", ".."))
    said = tensorboard_line(Path.cwd() / name).removeprefix("look at it: ")
    parser = argparse.ArgumentParser(prog="tensorboard")
    parser.add_argument("--logdir")
    arguments = shlex.split(said)
    assert arguments[0] == "tensorboard"
    assert Path(parser.parse_args(arguments[1:]).logdir) == Path(name)


def test_plots_use_whole_epochs_and_axes_from_zero():
    fig = accuracy_figure([("a", history([(1.0, 10), (1.0, 10), (1.0, 10)]))])
    (ax,) = fig.axes
    assert list(ax.lines[0].get_xdata()) == [1, 2, 3]
    assert all(float(t).is_integer() for t in ax.get_xticks())
    rows = [
        {
            "status": "completed",
            "strategy": "ddp",
            "devices": d,
            "batch_size": 256,
            "lr": 0.1,
            "samples_per_s": rate,
            "speedup": rate / 76,
        }  # fmt: skip
        for d, rate in ((1, 76.0), (2, 90.0))
    ]
    left, right = scaling_figure(rows).axes
    assert left.get_ylim()[0] == 0 and right.get_ylim()[0] == 0 and left.get_xlim()[0] == 0
    ideal = [line for line in left.lines if line.get_linestyle() == ":" and len(line.get_xdata())]
    assert [list(line.get_ydata()) for line in ideal] == [[0, 152.0]]  # 76/s on each of 2


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "layout",
    [
        ["strategy=single"],
        pytest.param(["strategy=ddp", "trainer.devices=2"], marks=[DISTRIBUTED, pytest.mark.slow]),
    ],
)
def test_a_run_ends_with_its_summary_and_no_noise(tmp_path, layout):
    """As a user sees it in the terminal: the bar names epochs and the test set, the run ends
    with its accuracy, folder and TensorBoard command, and nothing else is printed at all."""
    result = run_script(
        "train.py",
        *layout,
        *[a for a in TINY if not a.startswith("callbacks.progress_bar")],
        "data=synthetic",
        "data.num_train=64",
        "data.num_test=32",
        "data.batch_size=32",
        "trainer.max_epochs=2",
        "hydra.run.dir=outputs/run",
        "callbacks.progress_bar.lines=false",  # the bar, as a terminal shows it
        cwd=tmp_path,
        cold="strategy=single" in layout,  # what imports print too (DDP's rank 1 starts cold)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    said = result.stdout + result.stderr
    assert "Epoch 1/2" in said and "Epoch 2/2" in said and "Test set" in said
    assert "loss=" in said and "test/acc=" in said
    for noise in ("💡", "LeafSpec", "srun", "log_every_n_steps", "DataLoader 0", "v_num", "Warn"):
        assert noise not in said
    for noise in ("GPU available", "TPU available", "`Trainer.fit` stopped"):
        assert noise not in said
    assert not glued_to_a_bar(result.stdout), result.stdout[-3000:]
    record = json.loads((tmp_path / "outputs" / "run" / "metrics.json").read_text())
    assert [h["epoch"] for h in record["history"]] == [1, 2]
    closing = result.stdout.strip().splitlines()[-3:]
    assert re.fullmatch(rf"test accuracy {record['test_acc']:.4f} after 2 epoch\(s\).*", closing[0])
    assert closing[1:] == [
        "run folder: outputs/run",
        "look at it: tensorboard --logdir outputs/run",
    ]


# A tqdm bar as the progress bar draws it: its description, then "[elapsed<left, rate, ...]".
BAR = re.compile(
    r"(Epoch \d+(/\d+)?|Test set|Training|Validation set|Sanity Checking)[^\[\n]*\[[^\]\n]*\]"
)


def glued_to_a_bar(output: str) -> list[str]:
    """Lines where a progress bar and other text share a line (a terminal starts over at each
    carriage return: text mode reads those as line ends too)."""
    lines = output.replace("\r", "\n").splitlines()
    return [line for line in lines if BAR.search(line) and BAR.sub("", line).strip(" \x1b[A")]


def test_glued_lines_are_found():
    bar = "Epoch 2/2: 100%|██████████| 2/2 [00:05<00:00,  0.38it/s, loss=2.270, test/acc=0.0625]"
    assert glued_to_a_bar(f"{bar}[2026-11-25][rank_zero][INFO] - `Trainer.fit` stopped\n")
    assert glued_to_a_bar(f"{bar}test accuracy 0.1\n")
    assert not glued_to_a_bar(f"\r{bar}\r{bar}\n\r                \x1b[A\ntest accuracy 0.1\n")


def fit_with_progress_bar(capsys, module) -> tuple[str, Exception | None]:
    """A tiny in-process fit with this project's bar, log lines going to the bar's stdout (as
    Hydra's console handler does): what the terminal got, and the error the fit raised."""
    import pytorch_lightning as pl
    import torch

    console = logging.StreamHandler(sys.stdout)
    root = logging.getLogger()
    root.addHandler(console)
    data = torch.utils.data.DataLoader(torch.zeros(8, 2), batch_size=2)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[ProgressBar(lines=False)],  # the bar, as on a terminal
    )
    error = None
    try:
        trainer.fit(module, data)
    except RuntimeError as err:
        error = err
    finally:
        restored = console in root.handlers  # the bar hands the console back
        root.removeHandler(console)
    assert restored
    return capsys.readouterr().out, error


def tiny_module(fail_at_step: int | None = None):
    """Logs a line in the middle of every epoch; raises at ``fail_at_step`` if given."""
    import pytorch_lightning as pl
    import torch

    class Talking(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            if self.global_step == fail_at_step:
                raise RuntimeError("the step failed")
            if batch_idx == 2:
                logging.getLogger("multigpu.test").warning("a line logged mid-epoch")
            return self.layer(batch).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Talking()


def test_log_lines_during_training_get_lines_of_their_own(capsys):
    out, error = fit_with_progress_bar(capsys, tiny_module())
    assert error is None
    lines = out.replace("\r", "\n").splitlines()
    assert lines.count("a line logged mid-epoch") == 2, out
    assert "Epoch 2/2" in out and out.endswith("\n")
    assert not glued_to_a_bar(out), out


def test_a_failed_fit_ends_the_bar_line_before_the_error(capsys):
    out, error = fit_with_progress_bar(capsys, tiny_module(fail_at_step=5))
    assert str(error) == "the step failed"
    assert "Epoch 2/2" in out and out.endswith("\n"), out[-500:]


def test_the_acceptance_takes_its_part_and_options_in_any_order():
    for argv in (["--cpu", "tests"], ["tests", "--cpu"], ["--part", "tests", "--cpu"]):
        args = acceptance_args(["--out", "x", *argv])
        assert (args.part, args.cpu, str(args.out)) == ("tests", True, "x")
    assert acceptance_args(["--cpu"]).part == "all"
    with pytest.raises(SystemExit):
        acceptance_args(["tests", "--part", "bench"])


def bench_report(tiny: bool) -> dict:
    """A bench report of three configurations, as ``python -m multigpu.tools.bench`` makes it."""
    rows = [
        {"name": "plain_loop", "width": 2, "images_per_s": 300.0},
        {"name": "lightning_memory", "width": 2, "images_per_s": 100.0},
        {"name": "epoch_d2l", "width": 2, "images_per_s": 50.0, "epoch_s": 30.0,
         "test_acc": 0.1, "epochs": 1},
    ]  # fmt: skip
    settings = {"width": 2, "scaling_width": 2, "replicas": 2, "processes": 2, "batch": 32}
    settings.update({"steps": 3, "warmup": 1, "jobs": 2 if tiny else 1, "tiny": tiny})
    machine = {"cpu_cores": 2, "gpu": None, "torch": "2"}
    ratios = compute_ratios(rows, settings)
    return {"machine": machine, "settings": settings, "configurations": rows, "ratios": ratios}


def verdicts(markdown: str) -> list[str]:
    """The ``met`` cells of the ratios that have a target (1 and 5 here)."""
    return [line.split(" | ")[4] for line in markdown.splitlines() if line[:4] in ("| 1 ", "| 5 ")]


def test_a_smoke_test_bench_says_its_numbers_measure_nothing():
    smoke = bench_report(tiny=True)
    markdown = to_markdown(smoke)
    assert markdown.splitlines()[0] == SMOKE_TEST_LINE
    assert all(ratio["met"] is None for ratio in smoke["ratios"])  # bench.json judges nothing
    assert verdicts(markdown) == [NOT_MEASURED, NOT_MEASURED]
    measured = to_markdown(bench_report(tiny=False))
    assert measured.startswith("Machine:") and "one after the other" in measured
    assert verdicts(measured) == ["no", "no"]


@pytest.mark.parametrize("where", ["in_a_finalizer", "in_the_block"])
def test_a_stop_signal_after_training_is_one_line_wherever_it_lands(where, capsys):
    """SIGTERM during the test figures landed inside matplotlib's ``__del__``: Python printed
    ``Exception ignored in ...`` with a traceback, the figures went on, and no line said the
    signal came. Now the figures finish and one warning says so; in the block itself the
    rest is skipped, as before."""
    import os
    import signal
    import time

    from multigpu.callbacks.interrupts import skipped_on_signal

    class SignalledWhileFinalized:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the handler runs here, inside the finalizer

    finished = []
    with skipped_on_signal("the test figures"):
        if where == "in_a_finalizer":
            SignalledWhileFinalized()  # made and finalized at once
        else:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
        finished.append(True)
    assert finished == ([True] if where == "in_a_finalizer" else [])
    said = capsys.readouterr().err.strip().splitlines()
    skipped = "skipped the test figures; " if where == "in_the_block" else ""
    assert said == [
        f"warning: SIGTERM after the last epoch: {skipped}the run completed and its checkpoint "
        "is written"
    ]


def resumed_with_more_steps(tmp_path: Path, steps: int, more: int) -> tuple[dict, Path]:
    """A run of ``steps`` steps (4 batches an epoch), then one resuming its checkpoint with
    ``more`` steps more: the second's record and checkpoint."""
    from conftest import compose_config
    from test_integrity import SYNTHETIC

    from multigpu.run.training import train

    common = [*SYNTHETIC, "data.batch_size=16", "trainer.max_epochs=5"]
    train(compose_config([*common, f"+trainer.max_steps={steps}"], tmp_path / "first"))
    resume = [
        f"+trainer.max_steps={steps + more}",
        f"ckpt_path={tmp_path / 'first' / 'checkpoints' / 'last.ckpt'}",
        "resume_changes=[trainer.max_steps]",
    ]
    record = train(compose_config([*common, *resume], tmp_path / "resumed"))
    return record, tmp_path / "resumed" / "checkpoints" / "last.ckpt"


@pytest.mark.slow
def test_a_max_steps_run_resumed_with_more_steps_goes_on_with_the_next_epoch(tmp_path):
    """Under ``max_steps`` Lightning went on with the epoch the checkpoint had ended: a run
    stopped after 2 of an epoch's 4 batches, resumed with 4 steps more, trained 2 of them in
    that epoch again, counted it twice (its checkpoint then refused as malformed), and recorded
    it once more in place of the next. An epoch the run stopped inside stays a partial one, as
    without ``max_steps``; the next is whole, and trained in full from its first batch."""
    from multigpu.storage.checkpoint import load_checkpoint

    record, last = resumed_with_more_steps(tmp_path, steps=6, more=4)
    assert record["status"] == "completed"
    assert [(h["epoch"], h["partial_batches"]) for h in record["history"]] == [
        (1, None),
        (2, 2),
        (3, None),
    ]
    assert all(h["train_loss"] is not None for h in record["history"])
    checkpoint = load_checkpoint(last)  # was refused as malformed
    assert (checkpoint["global_step"], checkpoint["epoch"]) == (10, 2)


@pytest.mark.slow  # three trainings: the default suite keeps the partial epoch's resume
def test_a_max_steps_run_resumed_at_an_epochs_end_matches_one_never_stopped(tmp_path):
    """The same at a whole epoch's end (4 steps, then 4 more) had failed with a traceback (two
    epoch 1s in the record). The weights are those of one run of 8 steps."""
    import torch
    from conftest import compose_config
    from test_integrity import SYNTHETIC

    from multigpu.run.training import train

    record, last = resumed_with_more_steps(tmp_path, steps=4, more=4)
    assert [(h["epoch"], h["partial_batches"]) for h in record["history"]] == [(1, None), (2, None)]
    overrides = [*SYNTHETIC, "data.batch_size=16", "trainer.max_epochs=5", "+trainer.max_steps=8"]
    once = train(compose_config(overrides, tmp_path / "once"))
    assert [h["train_loss"] for h in once["history"]] == pytest.approx(
        [h["train_loss"] for h in record["history"]]
    )
    weights = [
        torch.load(path, weights_only=True)["state_dict"]
        for path in (last, tmp_path / "once" / "checkpoints" / "last.ckpt")
    ]
    for name, value in weights[0].items():
        torch.testing.assert_close(value, weights[1][name], msg=name)


PATH_PARTS = st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from(["\\", "${", '"'])


@examples(40)
@given(st.lists(PATH_PARTS, min_size=1, max_size=20).map("".join))
def test_a_printed_checkpoint_path_pastes_back_as_that_path(name):
    """``resume with ckpt_path=...`` is pasted back as it is printed: the shell reads it as one
    word and Hydra's grammar as that path, whatever the folder's name (spaces, quotes,
    letters beyond ASCII had been printed bare: neither read them), and OmegaConf reads no
    interpolation in it."""
    import shlex

    from hydra.core.override_parser.overrides_parser import OverridesParser

    from multigpu.run.resume import as_typed

    path = Path("/runs") / name.replace("/", "_") / "checkpoints" / "last.ckpt"
    (word,) = shlex.split(as_typed(path))
    override = OverridesParser.create().parse_override(word)
    assert override.key_or_group == "ckpt_path"
    assert OmegaConf.create({"ckpt_path": override.value()}).ckpt_path == str(path)  # resolved
