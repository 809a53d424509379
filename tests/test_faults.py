"""Faults during real ``train.py`` runs: Ctrl-C and SIGTERM, then resume; a kill during a
checkpoint write; a diverging learning rate; a DDP process that fails or hangs."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import REPO, SHARED_DATA, TINY, run_script

from multigpu.checkpoint import load_checkpoint, network_state

pytestmark = pytest.mark.subprocess

TESTS = Path(__file__).resolve().parent
PROBES_ENV = {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
# Two epochs of 32 steps on real data; deterministic on the CPU.
RUN = [
    *TINY,
    "trainer.max_epochs=2",
    "data.train_subset=2048",
    "data.test_subset=256",
    "data.batch_size=64",
    "model.optimizer.momentum=0.9",
]


def run_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("outputs/*/*/.hydra"))


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return network_state(load_checkpoint(run_dir / "checkpoints" / "last.ckpt"))


def metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, data_root) -> Path:
    cwd = tmp_path_factory.mktemp("uninterrupted")
    result = run_script("train.py", *RUN, f"data.root={data_root}", cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = run_dirs(cwd)
    return run_dir


def start_and_signal(cwd: Path, data_root: Path, signum: signal.Signals):
    """Start a run, send ``signum`` once epoch 1's checkpoint exists (epoch 2 is slowed down
    so the signal lands in it), and return (result, seconds from signal to exit)."""
    env = {**os.environ, "MULTIGPU_DATA": str(SHARED_DATA), **PROBES_ENV}
    env.pop("HYDRA_FULL_ERROR", None)
    slow = ["+callbacks.slow._target_=probes.SlowAfterEpoch", "+callbacks.slow.epoch=1"]
    command = [sys.executable, str(REPO / "train.py"), *RUN, f"data.root={data_root}", *slow]
    proc = subprocess.Popen(
        [*command, "+callbacks.slow.seconds=0.2"],
        cwd=cwd,
        env=env,
        # A shell starts background jobs with Ctrl-C ignored, and children inherit that; the
        # run under test must see SIGINT as a terminal's Ctrl-C would deliver it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while not list(cwd.glob("outputs/*/*/checkpoints/last.ckpt")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.05)
    time.sleep(0.5)
    sent = time.monotonic()
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr), (
        time.monotonic() - sent
    )


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_the_run_and_resuming_matches_an_uninterrupted_run(
    signum, tmp_path, data_root, uninterrupted
):
    result, seconds = start_and_signal(tmp_path, data_root, signum)
    assert result.returncode == 128 + signum, result.stderr[-3000:]
    assert seconds < 10
    (stopped,) = run_dirs(tmp_path)
    last = stopped / "checkpoints" / "last.ckpt"
    error = result.stderr.strip().splitlines()[-1]
    assert error == f"error: interrupted by {signum.name}; resume with ckpt_path={last} " + (
        "(or ckpt_path=latest)"
    )
    assert "Traceback" not in result.stderr
    assert metrics(stopped)["status"] == "interrupted" and metrics(stopped)["epochs"] == 1
    assert load_checkpoint(last)["epoch"] == 0  # the last finished epoch, complete
    assert not list(stopped.rglob("*.partial"))

    if signum == signal.SIGTERM:
        return  # resuming (via ckpt_path=latest) is also tested after a kill mid-write
    resumed = run_script(
        "train.py", *RUN, f"data.root={data_root}", f"ckpt_path={last}", cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    resumed_dir = next(d for d in run_dirs(tmp_path) if d != stopped)
    assert metrics(resumed_dir)["status"] == "completed"
    assert [h["epoch"] for h in metrics(resumed_dir)["history"]] == [0, 1]
    expected, got = final_weights(uninterrupted), final_weights(resumed_dir)
    assert expected.keys() == got.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=1e-6, msg=name)


def test_kill_during_checkpoint_write_keeps_the_previous_checkpoint(
    tmp_path, data_root, uninterrupted
):
    die = ["+callbacks.die._target_=probes.DieDuringCheckpointWrite", "+callbacks.die.epoch=1"]
    result = run_script(
        "train.py", *RUN, f"data.root={data_root}", *die, cwd=tmp_path, env=PROBES_ENV
    )
    assert result.returncode == 9, result.stderr[-3000:]
    (run_dir,) = run_dirs(tmp_path)
    checkpoints = run_dir / "checkpoints"
    (partial,) = checkpoints.glob("last.ckpt.*.partial")
    assert partial.stat().st_size > 0  # the write really began
    previous = load_checkpoint(checkpoints / "last.ckpt")
    assert previous["epoch"] == 0 and previous["global_step"] == 32

    resumed = run_script(
        "train.py", *RUN, f"data.root={data_root}", "ckpt_path=latest", cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    resumed_dir = next(d for d in run_dirs(tmp_path) if d != run_dir)
    expected, got = final_weights(uninterrupted), final_weights(resumed_dir)
    for name in expected:  # epoch 2 redone from the kept checkpoint: the same end
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=1e-6, msg=name)


def test_diverging_lr_stops_with_the_step_and_keeps_the_last_good_checkpoint(tmp_path, data_root):
    losses = tmp_path / "losses.txt"
    result = run_script(
        "train.py",
        *RUN,
        "trainer.max_epochs=3",
        # lr 0.1 for epoch 1 (saved), then 10000: the loss blows up a few steps into epoch 2
        "+model/scheduler=step",
        "model.scheduler.step_size=1",
        "model.scheduler.gamma=100000",
        f"data.root={data_root}",
        "+callbacks.losses._target_=probes.LossLog",
        f"+callbacks.losses.path={losses}",
        cwd=tmp_path,
        env=PROBES_ENV,
    )
    assert result.returncode == 3, result.stderr[-3000:]
    error = result.stderr.strip().splitlines()[-1]
    match = re.fullmatch(
        r"error: training diverged: loss is (nan|inf) at step (\d+) \(epoch (\d+)\) with lr "
        r"10000; (.*): lower model.optimizer.lr and train again",
        error,
    )
    assert match, error
    logged = [float(line) for line in losses.read_text().split()]
    first_bad = next(i for i, loss in enumerate(logged) if not math.isfinite(loss)) + 1
    assert int(match[2]) == first_bad
    epoch = int(match[3])
    assert epoch == (first_bad - 1) // 32 + 1

    (run_dir,) = run_dirs(tmp_path)
    recorded = metrics(run_dir)
    assert recorded["status"] == "diverged" and recorded["reason"] == error[len("error: ") :]
    assert recorded["epochs"] == epoch - 1
    last = run_dir / "checkpoints" / "last.ckpt"
    assert epoch == 2 and f"kept the last good checkpoint {last} (after epoch 1)" in error
    assert load_checkpoint(last)["epoch"] == 0  # epoch 1, saved before the divergence
    assert all(torch.isfinite(t.float()).all() for t in final_weights(run_dir).values())


DDP_RUN = [
    *TINY,
    "strategy=ddp",
    "trainer.devices=2",
    "data.train_subset=2048",
    "data.batch_size=64",
]


@pytest.mark.distributed
@pytest.mark.parametrize(
    "probe,extra",
    [
        ("RaiseOnRank", []),
        pytest.param("HangOnRank", ["strategy.timeout_s=15"], marks=pytest.mark.slow),
    ],
    ids=["rank_raises", "rank_hangs"],
)
def test_ddp_process_failure_ends_the_run(probe, extra, tmp_path, data_root):
    started = time.monotonic()
    result = run_script(
        "train.py",
        *DDP_RUN,
        *extra,
        f"data.root={data_root}",
        f"+callbacks.fault._target_=probes.{probe}",
        "+callbacks.fault.rank=1",
        "+callbacks.fault.step=3",
        cwd=tmp_path,
        env=PROBES_ENV,
        timeout=240,
    )
    assert result.returncode != 0
    assert time.monotonic() - started < 150
    if probe == "RaiseOnRank":
        assert "rank 1 fails on purpose at step 3" in result.stderr
    (run_dir,) = run_dirs(tmp_path)
    assert metrics(run_dir)["status"] == "failed"
