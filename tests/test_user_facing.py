"""What a user comparing runs sees: job folders named by what differs, one definition of speed,
epochs counted from 1 everywhere, TensorBoard by epoch, a quiet terminal, and closing lines."""

from __future__ import annotations

import json
import logging
import re
import warnings
from types import SimpleNamespace

import pytest
from conftest import TINY, run_script
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from multigpu.callbacks.progress import epoch_description
from multigpu.job_names import job_folder_name, short_names, swept_keys
from multigpu.quiet import quiet
from multigpu.record import SCHEMA, speed, summarize, upgrade
from multigpu.report.plots import accuracy_figure, scaling_figure
from multigpu.run_summary import closing_lines
from multigpu.tensorboard_logger import EpochTensorBoardLogger, tensorboard_value


def test_swept_keys_come_from_the_command_line_and_the_sweeper():
    overrides = ["trainer.devices=1,2", "seed=3", "+trainer.x=range(1,3)", "data=a,b"]
    keys = swept_keys(overrides, {"model.optimizer.lr": "0.1,0.2", "data": "a,b"})
    assert keys == ["trainer.devices", "trainer.x", "data", "model.optimizer.lr"]


def test_job_folders_name_the_swept_values():
    keys = ["trainer.devices", "data.batch_size"]
    job = ["trainer.devices=2", "data.batch_size=512", "seed=1", "data.root=/a/b"]
    assert job_folder_name(job, keys, 3) == "devices=2,batch_size=512"
    assert job_folder_name(["+data.root=/a/b"], ["data.root"], 0) == "root=_a_b"
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
    with caplog.at_level(logging.INFO):
        lightning.info("💡 Tip: For seamless cloud logging ...")
        lightning.info("GPU available: False, used: False")
    assert [r.getMessage() for r in caplog.records] == ["GPU available: False, used: False"]


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
    [["strategy=single"], pytest.param(["strategy=ddp", "trainer.devices=2"], marks=DISTRIBUTED)],
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
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    said = result.stdout + result.stderr
    assert "Epoch 1/2" in said and "Epoch 2/2" in said and "Test set" in said
    assert "loss=" in said and "test/acc=" in said
    for noise in ("💡", "LeafSpec", "srun", "log_every_n_steps", "DataLoader 0", "v_num", "Warn"):
        assert noise not in said
    record = json.loads((tmp_path / "outputs" / "run" / "metrics.json").read_text())
    assert [h["epoch"] for h in record["history"]] == [1, 2]
    closing = result.stdout.strip().splitlines()[-3:]
    assert re.fullmatch(rf"test accuracy {record['test_acc']:.4f} after 2 epoch\(s\).*", closing[0])
    assert closing[1:] == [
        "run folder: outputs/run",
        "look at it: tensorboard --logdir outputs/run",
    ]
