"""Every strategy computes what one device computes on the full batch.

BatchNorm-free network (``norm=none``), SGD with momentum, unshuffled synthetic data whose last
batch is smaller than the others: K optimizer steps under each strategy must end with the same
parameters as one device, to 1e-5.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from conftest import compose_config, run_script

from multigpu.run.fit import build_module
from multigpu.run.training import resolve, train

BATCH, SAMPLES = 32, 80  # steps of 32, 32, 16: K = 3 per epoch, the last one uneven
EXACT = [
    "data=synthetic",
    f"data.num_train={SAMPLES}",
    "data.num_test=32",
    f"data.batch_size={BATCH}",
    "data.shuffle=false",
    "data.num_workers=0",
    "model.net.width=4",
    "model.net.norm=none",
    "model.net.init_std=null",
    "model.optimizer.lr=0.05",
    "model.optimizer.momentum=0.9",
    "trainer.accelerator=cpu",
    "trainer.max_epochs=1",
    "callbacks.progress_bar=null",
]


def run(tmp_path, name: str, *overrides: str) -> tuple[dict, dict]:
    """Train in-process; return the checkpoint's state dict and ``metrics.json``."""
    out = tmp_path / name
    train(compose_config([*EXACT, *overrides], out))
    state = torch.load(out / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    return state, json.loads((out / "metrics.json").read_text())


def assert_same_parameters(actual: dict, expected: dict, initial: dict | None = None) -> None:
    assert actual.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(
            actual[key], expected[key], rtol=0, atol=1e-5, msg=lambda m, k=key: f"{k}: {m}"
        )
    if initial is not None:  # the runs did move: equality is not the trivial kind
        moved = max((expected[k] - initial[k]).abs().max().item() for k in expected)
        assert moved > 1e-3


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("single")
    state, metrics = run(tmp, "single")
    return state, metrics, initial_state(tmp)


def initial_state(tmp_path) -> dict:
    """The parameters before training: the module built after the same seeding as ``train``."""
    cfg = compose_config(EXACT, tmp_path)
    run = resolve(cfg)
    pl.seed_everything(run.seed, verbose=False)
    return build_module(cfg.model, run).state_dict()


@pytest.mark.parametrize(
    "overrides",
    [
        ["strategy=scatter_allreduce", "trainer.devices=2"],
        ["strategy=scatter_allreduce", "trainer.devices=3"],
        [
            "strategy=scatter_allreduce",
            "trainer.devices=4",
            "data.batch_size=30",
            "data.num_train=75",
        ],
        ["strategy=scatter_allreduce", "trainer.devices=2", "strategy.split_weights=[0.6,0.4]"],
        ["strategy=scatter_allreduce", "trainer.devices=[2,3]"],
        ["strategy=dp", "trainer.devices=1"],
    ],
    ids=["scatter2", "scatter3", "scatter4-batch30", "weighted", "device-list", "dp1"],
)
def test_strategy_matches_one_device(tmp_path, reference, overrides):
    expected, expected_metrics, initial = reference
    if "data.batch_size=30" in overrides:  # its own single-device reference
        expected, expected_metrics = run(tmp_path, "single30", *overrides[2:])
    state, metrics = run(tmp_path, "strategy", *overrides)
    assert_same_parameters(state, expected, initial)
    # The logged loss is the full-batch loss, not one shard's.
    assert metrics["train_loss"] == pytest.approx(expected_metrics["train_loss"], abs=1e-5)
    assert metrics["run"]["strategy"] == overrides[0].split("=")[1]


def test_batch_smaller_than_devices_runs_on_fewer(tmp_path):
    small = ["data.batch_size=3", "data.num_train=7", "trainer.devices=4"]
    expected, _ = run(tmp_path, "single", *small[:2])
    state, _ = run(tmp_path, "scatter", "strategy=scatter_allreduce", *small)
    assert_same_parameters(state, expected)


@pytest.mark.slow
def test_on_after_backward_sees_the_summed_gradient(tmp_path):
    probe = "+callbacks.probe._target_=probes.GradientProbe"
    run(tmp_path, "single", probe, f"+callbacks.probe.path={tmp_path / 'single.pt'}")
    run(
        tmp_path,
        "scatter",
        "strategy=scatter_allreduce",
        "trainer.devices=3",
        probe,
        f"+callbacks.probe.path={tmp_path / 'scatter.pt'}",
    )
    expected, actual = torch.load(tmp_path / "single.pt"), torch.load(tmp_path / "scatter.pt")
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], rtol=1e-5, atol=1e-7, msg=key)


def test_scatter_allreduce_reuses_its_buffers_and_keeps_replicas_in_step(tmp_path):
    """With BatchNorm (float and int64 buffers): after every step each replica holds exactly
    the root's parameters and buffers, and no transfer buffer was allocated again."""
    probe = tmp_path / "buffers.pt"
    run(
        tmp_path,
        "scatter",
        "strategy=scatter_allreduce",
        "trainer.devices=3",
        "model.net.norm=batch",
        "trainer.max_epochs=2",
        "+callbacks.probe._target_=probes.FlatBufferProbe",
        f"+callbacks.probe.path={probe}",
    )
    steps = torch.load(probe)
    assert len(steps) == 6
    assert all(s["buffers"] == steps[0]["buffers"] for s in steps)
    assert all(s["root_grads_in_flat"] and s["replicas_in_flat"] for s in steps)
    assert all(s["replicas_equal_root"] for s in steps)


@pytest.mark.slow  # four trainings, 5 s: the default suite's 5 minutes
def test_checkpoints_resume_across_strategies(tmp_path):
    two_epochs = "trainer.max_epochs=2"
    expected, _ = run(tmp_path, "straight", two_epochs)
    run(tmp_path, "first", "strategy=scatter_allreduce", "trainer.devices=2")
    first = tmp_path / "first" / "checkpoints" / "last.ckpt"
    state, _ = run(tmp_path, "resumed_single", two_epochs, f"ckpt_path={first}")
    assert_same_parameters(state, expected)
    run(tmp_path, "first_single", "strategy=single")
    first_single = tmp_path / "first_single" / "checkpoints" / "last.ckpt"
    state, _ = run(
        tmp_path,
        "resumed_scatter",
        two_epochs,
        "strategy=scatter_allreduce",
        "trainer.devices=3",
        f"ckpt_path={first_single}",
    )
    assert_same_parameters(state, expected)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.subprocess
def test_ddp_two_processes_match_one_device(tmp_path, reference):
    expected, expected_metrics, initial = reference
    result = run_script(
        "train.py",
        *EXACT,
        "strategy=ddp",
        "trainer.devices=2",
        f"hydra.run.dir={tmp_path / 'ddp'}",  # beside the runs below: none inside another's
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ckpt = tmp_path / "ddp" / "checkpoints" / "last.ckpt"
    state = torch.load(ckpt, weights_only=True)["state_dict"]
    assert_same_parameters(state, expected, initial)
    metrics = json.loads((tmp_path / "ddp" / "metrics.json").read_text())
    assert metrics["run"]["strategy"] == "ddp" and metrics["status"] == "completed"
    assert metrics["train_loss"] == pytest.approx(expected_metrics["train_loss"], abs=1e-5)
    # A DDP checkpoint resumes on one device.
    resumed, _ = run(tmp_path, "resumed", "trainer.max_epochs=2", f"ckpt_path={ckpt}")
    straight, _ = run(tmp_path, "straight", "trainer.max_epochs=2")
    assert_same_parameters(resumed, straight)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.subprocess
def test_an_unseeded_ddp_run_is_not_seeded_behind_the_config(tmp_path):
    """``seed=null`` under DDP: Lightning seeds its processes from ``PL_GLOBAL_SEED`` where the
    environment holds one (an earlier job's of a sweep, or the shell's), behind a record that
    says unseeded; ``PL_GLOBAL_SEED=abc`` was a ValueError traceback after the run's folder."""
    result = run_script(
        "train.py", *EXACT, "strategy=ddp", "trainer.devices=2", "seed=null", "data.seed=1",
        "hydra.run.dir=ddp", cwd=tmp_path, env={"PL_GLOBAL_SEED": "abc"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((tmp_path / "ddp" / "metrics.json").read_text())
    assert metrics["run"]["seed"] is None and metrics["status"] == "completed"


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.subprocess
def test_a_ddp_run_ends_after_its_workers_and_warns_of_nothing(tmp_path):
    """With every warning an error (``PYTHONWARNINGS=error``, as a careful user's CI runs), a
    DDP run with its test figures completes, and when its command returns no process it
    started is left: Lightning did not wait for its worker (a ResourceWarning at exit), and
    the figures passed tensors to matplotlib through numpy's deprecated ``__array__``."""
    folder = tmp_path / "ddp"
    result = run_script(
        "train.py",
        *EXACT,
        "strategy=ddp",
        "trainer.devices=2",
        f"hydra.run.dir={folder}",
        cwd=tmp_path,
        env={"PYTHONWARNINGS": "error"},
        cold=True,  # the warnings filter is set as the interpreter starts
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Warning" not in result.stderr and "Exception ignored" not in result.stderr
    assert json.loads((folder / "metrics.json").read_text())["status"] == "completed"
    left = [p for p in Path("/proc").glob("[0-9]*") if str(folder) in command_of(p)]
    assert left == [], [command_of(p) for p in left]


def command_of(process: Path) -> str:
    try:
        return (process / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # ended meanwhile
        return ""
