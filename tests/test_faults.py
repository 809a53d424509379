"""Faults during real ``train.py`` runs: Ctrl-C and SIGTERM, then resume, and once training is
over; a kill during a checkpoint write; a checkpoint damaged on disk; a diverging learning rate;
a DDP process that fails or hangs; every precision; a run extended under a cosine schedule."""

from __future__ import annotations

import json
import math
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import PROBES_ENV, TINY, flip_byte_in_a_tensor, run_script, start_script

from multigpu.storage.checkpoint import load_checkpoint, network_state

pytestmark = pytest.mark.subprocess

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
    slow = ["+callbacks.slow._target_=probes.SlowAfterEpoch", "+callbacks.slow.epoch=1"]
    return signal_when(
        cwd,
        [*RUN, f"data.root={data_root}", *slow, "+callbacks.slow.seconds=0.2"],
        lambda: bool(list(cwd.glob("outputs/*/*/checkpoints/last.ckpt"))),
        signum,
        settle=0.5,
    )


def signal_when(cwd: Path, overrides: list[str], ready, signum: signal.Signals, settle=0.0):
    """Start ``train.py``, send ``signum`` once ``ready()``, and return (result, seconds from
    signal to exit)."""
    # Ctrl-C reaches the run as a terminal delivers it (tests/warm.py), whatever this shell's.
    proc = start_script("train.py", *overrides, cwd=cwd, env=PROBES_ENV)
    deadline = time.monotonic() + 240
    while not ready():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.05)
    time.sleep(settle)
    sent = time.monotonic()
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), (
        time.monotonic() - sent
    )


@pytest.mark.parametrize(
    "signum",
    [
        pytest.param(signal.SIGINT, marks=pytest.mark.slow),
        pytest.param(signal.SIGTERM, marks=pytest.mark.slow),
    ],
    ids=["SIGINT", "SIGTERM"],
)
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
    assert [h["epoch"] for h in metrics(resumed_dir)["history"]] == [1, 2]
    expected, got = final_weights(uninterrupted), final_weights(resumed_dir)
    assert expected.keys() == got.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=1e-6, msg=name)


@pytest.mark.slow  # a checkpoint write that fails midway: test_storage's full disk, by default
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


@pytest.mark.slow
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
        # The default suite has a DDP rank's death in the rank-0-killed test below.
        pytest.param("RaiseOnRank", [], marks=pytest.mark.slow),
        pytest.param("HangOnRank", ["strategy.timeout_s=15"], marks=pytest.mark.slow),
    ],
    ids=["rank_raises", "rank_hangs"],
)
def test_ddp_process_failure_ends_the_run(probe, extra, tmp_path, data_root):
    """Rank 0 is slow to handle the error (8 s, longer than Lightning's observer gives it
    before a SIGKILL) and still records how the run ended, naming the rank that failed."""
    started = time.monotonic()
    result = run_script(
        "train.py",
        *DDP_RUN,
        *extra,
        f"data.root={data_root}",
        f"+callbacks.fault._target_=probes.{probe}",
        "+callbacks.fault.rank=1",
        "+callbacks.fault.step=3",
        "+callbacks.slow_to_fail._target_=probes.SlowToFail",
        "+callbacks.slow_to_fail.seconds=8",
        cwd=tmp_path,
        env=PROBES_ENV,
        timeout=240,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert time.monotonic() - started < 150
    (run_dir,) = run_dirs(tmp_path)
    record = metrics(run_dir)
    assert record["status"] == "failed"
    if probe == "RaiseOnRank":
        assert "rank 1 fails on purpose at step 3" in result.stderr
        assert re.match(r"rank 1 \(pid \d+\) exited with code 1; rank 0 then", record["reason"])
        assert record["reason"] in result.stderr  # the error line says the same


@pytest.mark.slow
@pytest.mark.distributed
def test_a_stop_while_rank_0_waits_at_the_rendezvous_is_answered_at_once(tmp_path, data_root):
    """Rank 0 waits inside the rendezvous for a process that is slow to start: there its
    signal handler cannot run, and a SIGTERM was answered only when the wait ended (here when
    rank 1 came, 90 s later; ``strategy.timeout_s`` otherwise). Now at once: the process it
    started is killed, the run recorded interrupted, and rank 0 exits 143."""
    marker = tmp_path / "rank1.pid"
    hold = ["+callbacks.hold._target_=probes.HoldRank", "+callbacks.hold.rank=1"]
    hold += ["+callbacks.hold.seconds=90", f"+callbacks.hold.marker={marker}"]
    run = start_script(
        "train.py", *DDP_RUN, f"data.root={data_root}", *hold, cwd=tmp_path, env=PROBES_ENV
    )
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.2)
    assert marker.exists(), run.communicate()[1][-3000:]
    time.sleep(3)  # rank 0 is at the rendezvous
    stopped = time.monotonic()
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert time.monotonic() - stopped < 15
    (run_dir,) = run_dirs(tmp_path)
    record = metrics(run_dir)
    said = "interrupted by SIGTERM while waiting for the run's other processes; no checkpoint "
    assert record["status"] == "interrupted" and record["reason"].startswith(said), record
    assert stderr.strip().splitlines()[-1] == f"error: {record['reason']}"
    rank_1 = int(marker.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{rank_1}").exists():
        time.sleep(0.1)  # a zombie until its parent's reaper: gone with rank 0
    assert not Path(f"/proc/{rank_1}").exists()


def test_the_stop_handler_makes_no_collective(monkeypatch):
    """A collective inside a signal handler runs at whatever point the process was (in the
    middle of a gradient allreduce), against the others' collectives: Lightning's handler
    broadcasts there (as this test sees), the run's notes the stop and passes it on only; the
    broadcast that starts every step shares it."""
    import pytorch_lightning as pl
    import torch.distributed as dist

    from multigpu.callbacks.lightning_compat import stop_without_a_broadcast_in_the_handler

    broadcasts = []
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "broadcast", lambda tensor, src: broadcasts.append(src))
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    monkeypatch.setattr(type(trainer), "world_size", property(lambda self: 2))
    trainer._signal_connector._sigterm_notifier_fn(signal.SIGTERM, None)  # Lightning's own
    assert broadcasts == [0] and trainer.received_sigterm
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    stop_without_a_broadcast_in_the_handler(trainer)
    trainer._signal_connector._sigterm_notifier_fn(signal.SIGTERM, None)
    assert broadcasts == [0] and trainer.received_sigterm


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("after_s", [0.5, 1.5, 3.0])
def test_a_stop_during_ddp_training_ends_every_process_interrupted(tmp_path, after_s):
    """SIGTERM to rank 0 at any point of a step: Lightning's handler broadcast rank 0's stop
    from inside the handler, which met the other process in the middle of another collective
    (2 of 5 tries here: gloo aborted it, SIGABRT, and the run was recorded failed; or both
    waited until the collective timeout). Every try ends interrupted, within seconds. A race:
    these tries may miss it; ``test_the_stop_handler_makes_no_collective`` does not."""
    from conftest import REPO, process_env

    log = tmp_path / "run.log"
    tiny = [t for t in TINY if not t.startswith("callbacks.progress_bar")]  # its epoch lines
    tiny += ["data=synthetic", "data.num_train=2048", "data.num_test=32", "data.batch_size=16"]
    command = [sys.executable, str(REPO / "train.py"), *tiny]
    command += ["strategy=ddp", "trainer.devices=2", "trainer.max_epochs=3", "hydra.run.dir=run"]
    with open(log, "w") as out:
        run = subprocess.Popen(command, cwd=tmp_path, stdout=out, stderr=out, env=process_env())
    deadline = time.monotonic() + 120
    while "Epoch 1/3" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert run.poll() is None, log.read_text()[-3000:]  # training its second epoch
    time.sleep(after_s)
    stopped = time.monotonic()
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=60) == 128 + signal.SIGTERM, log.read_text()[-3000:]
    assert time.monotonic() - stopped < 20
    record = metrics(tmp_path / "run")
    assert record["status"] == "interrupted", record["reason"]
    assert record["reason"].startswith("interrupted by SIGTERM")


@pytest.mark.slow
@pytest.mark.distributed
def test_ddp_rank_0_killed_is_recorded_by_the_rank_that_survives(tmp_path, data_root):
    """Rank 0, the record's owner, SIGKILLed mid-epoch: rank 1 fails at its next collective,
    says so in one line, and records the run failed, since the owner is gone."""
    result = run_script(
        "train.py",
        *DDP_RUN,
        f"data.root={data_root}",
        "+callbacks.fault._target_=probes.KillRank",
        "+callbacks.fault.rank=0",
        "+callbacks.fault.step=3",
        cwd=tmp_path,
        env=PROBES_ENV,
        timeout=240,
    )
    assert result.returncode == -signal.SIGKILL
    (run_dir,) = run_dirs(tmp_path)
    record = metrics(run_dir)
    assert record["status"] == "failed", result.stderr[-3000:]
    assert (
        "a collective failed: another process of the run ended or stopped first; rank 1"
        in (record["reason"])
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: {record['reason']}"] and "Traceback" not in result.stderr
    assert not list(run_dir.rglob("*.partial"))


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize(
    "signum,step",
    [("SIGTERM", 3), ("SIGINT", 3), ("SIGTERM", -1)],
    ids=["SIGTERM", "SIGINT", "setup"],
)
def test_ddp_worker_stopped_by_a_signal_stops_the_run_interrupted(
    tmp_path, data_root, signum, step
):
    """SIGTERM to rank 1 alone, mid-epoch: Lightning's handler there broadcast from inside the
    handler while rank 0 waited in another collective; both hung until the collective timeout
    and the run was recorded failed. Now rank 1 ends at once, and rank 0 records the run
    interrupted by SIGTERM, naming the rank, in one line, with 143. Ctrl-C to rank 1, or a
    signal while it sets up (before its handlers), had printed rank 1's own line too."""
    started = time.monotonic()
    result = run_script(
        "train.py",
        *DDP_RUN,
        "strategy.timeout_s=60",
        f"data.root={data_root}",
        "+callbacks.fault._target_=probes.KillRank",
        "+callbacks.fault.rank=1",
        f"+callbacks.fault.step={step}",
        f"+callbacks.fault.signum={signum}",
        cwd=tmp_path,
        env=PROBES_ENV,
        timeout=240,
    )
    code = 128 + signal.Signals[signum]
    assert result.returncode == code, result.stderr[-3000:]
    assert time.monotonic() - started < 55  # not the collective timeout
    (run_dir,) = run_dirs(tmp_path)
    record = metrics(run_dir)
    assert record["status"] == "interrupted"
    assert re.match(
        rf"interrupted by {signum} \(rank 1 \(pid \d+\) exited with code {code}\)",
        record["reason"],
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: {record['reason']}"] and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "signum,where",
    [
        pytest.param(signal.SIGTERM, "figures", marks=pytest.mark.slow),
        pytest.param(signal.SIGINT, "figures", marks=pytest.mark.slow),
        pytest.param(signal.SIGINT, "train_end", marks=pytest.mark.slow),
    ],
    ids=["SIGTERM-figures", "SIGINT-figures", "SIGINT-train_end"],
)
def test_a_signal_after_the_last_epoch_leaves_the_run_completed(signum, where, tmp_path, data_root):
    """After the last epoch's checkpoint: while the test figures are drawn (Lightning has put
    the default SIGTERM handler back by then) or just before (Lightning's teardown has not run)."""
    marker = tmp_path / "slow"
    slow = [
        "+callbacks.slow._target_=probes.SlowAfterTraining",
        f"+callbacks.slow.where={where}",
        f"+callbacks.slow.marker={marker}",
    ]
    result, seconds = signal_when(
        tmp_path, [*RUN, f"data.root={data_root}", *slow], marker.exists, signum
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert seconds < 10 and "Traceback" not in result.stderr
    skipped = (
        "the test figures" if where == "figures" else "the end-of-training work (test figures)"
    )
    assert result.stderr.strip().splitlines()[-1] == (
        f"warning: {signum.name} after the last epoch: skipped {skipped}; the run completed "
        "and its checkpoint is written"
    )
    (run_dir,) = run_dirs(tmp_path)
    assert metrics(run_dir)["status"] == "completed" and metrics(run_dir)["epochs"] == 2
    assert load_checkpoint(run_dir / "checkpoints" / "last.ckpt")["epoch"] == 1


@pytest.mark.slow
def test_a_damaged_checkpoint_is_named_with_the_one_to_use_instead(
    tmp_path, data_root, uninterrupted
):
    run_dir = tmp_path / "copy"
    shutil.copytree(uninterrupted, run_dir)
    last, previous = (
        run_dir / "checkpoints" / "last.ckpt",
        run_dir / "checkpoints" / "previous.ckpt",
    )
    assert load_checkpoint(last)["epoch"] == 1 and load_checkpoint(previous)["epoch"] == 0
    flip_byte_in_a_tensor(last)
    expected = (
        f"error: ckpt_path={last} is damaged: its contents no longer match the digest written "
        f"with it (a disk or copy error, or an edit); use the one before it, ckpt_path={previous}"
    )
    for script, args in (
        ("train.py", [*RUN, "trainer.max_epochs=3"]),
        ("eval.py", ["trainer.accelerator=cpu", "data.test_subset=256"]),
    ):
        result = run_script(
            script, *args, f"data.root={data_root}", f"ckpt_path={last}", cwd=tmp_path
        )
        assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == expected
    # The one it names is good: resumed from it, training ends where the original run ended.
    resumed = run_script(
        "train.py", *RUN, f"data.root={data_root}", f"ckpt_path={previous}", cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    expected_weights, got = final_weights(uninterrupted), final_weights(run_dirs(tmp_path)[-1])
    for name in expected_weights:
        torch.testing.assert_close(got[name], expected_weights[name], rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "precision",
    [
        *(pytest.param(p, marks=pytest.mark.slow) for p in ("32-true", "64-true", "bf16-true")),
        "bf16-mixed",
    ],
)
def test_every_cpu_precision_completes_with_its_figures(precision, tmp_path):
    """Every precision the CPU takes trains, evaluates and draws the test figures under
    Lightning's precision plugin (fp16 is refused on the CPU up front: test_bad_input)."""
    result = run_script(
        "train.py",
        *TINY,
        "data=synthetic",
        "data.num_train=128",
        "data.num_test=64",
        "data.batch_size=32",
        f"trainer.precision={precision}",
        "strategy=scatter_allreduce",
        "trainer.devices=2",
        f"hydra.run.dir={tmp_path}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    recorded = metrics(tmp_path)
    assert recorded["status"] == "completed" and recorded["run"]["precision"] == precision
    (events,) = tmp_path.glob("events.out.tfevents.*")
    assert b"test/confusion_matrix" in events.read_bytes()


@pytest.mark.slow
def test_an_extended_run_follows_its_new_cosine_schedule(tmp_path, data_root):
    """2 epochs of cosine decay over 2 epochs, then resumed with trainer.max_epochs=4: the
    last two epochs follow the cosine over 4 epochs, lr = 0.1 (1 + cos(pi e / 4)) / 2."""
    common = [*RUN, f"data.root={data_root}", "+model/scheduler=cosine"]
    first = run_script("train.py", *common, "hydra.run.dir=first", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    extended = run_script(
        "train.py",
        *common,
        "trainer.max_epochs=4",
        f"ckpt_path={tmp_path / 'first' / 'checkpoints' / 'last.ckpt'}",
        "resume_changes=[model.scheduler.T_max]",  # deliberate: without it, refused
        "hydra.run.dir=extended",
        cwd=tmp_path,
    )
    assert extended.returncode == 0, extended.stderr[-3000:]
    lrs = [h["lr"] for h in metrics(tmp_path / "extended")["history"]]
    cosine = [
        0.1 * (1 + math.cos(math.pi * e / t)) / 2 for e, t in ((0, 2), (1, 2), (2, 4), (3, 4))
    ]
    assert lrs == pytest.approx(cosine, abs=1e-7)
    changed = metrics(tmp_path / "extended")["resumed_from"]["changed"]
    assert changed == {"model.scheduler.T_max": {"from": 2, "to": 4}}
    assert "with the optimizer as configured now: lr 0.05 (the checkpoint's had 0)" in (
        extended.stdout + extended.stderr
    )


@pytest.mark.parametrize("window", [10, 1])
def test_weights_that_overflow_after_the_last_step_are_a_divergence(window, tmp_path):
    """lr 1e24 and one step: its loss is finite (taken before the update), but the weights it
    leaves overflow in the forward pass. The run had been recorded ``completed``, with the test
    accuracy of NaN outputs (eval.py repeated it), and an Optuna trial told COMPLETE. Also where
    the step's own check has just emptied the window (``check_finite_every_n_steps=1``)."""
    from conftest import compose_config

    from multigpu.config.errors import Diverged
    from multigpu.run.training import train

    run = tmp_path / "run"
    overrides = [*TINY, "data=synthetic", "data.num_train=64", "data.num_test=32"]
    overrides += [f"check_finite_every_n_steps={window}", "data.batch_size=64"]
    cfg = compose_config([*overrides, "model.optimizer.lr=1e24"], run)
    with pytest.raises(Diverged) as diverged:
        train(cfg)
    said = str(diverged.value)
    assert said.startswith("training diverged: the test loss is NaN or infinite after step 1 ")
    record = json.loads((run / "metrics.json").read_text())
    assert record["status"] == "diverged" and record["reason"] == said
    assert record["epochs"] == 0 and not (run / "checkpoints" / "last.ckpt").exists()


@pytest.mark.parametrize("accumulate,bad", [(1, 3), (2, 3), (2, 2)])
def test_a_divergence_names_the_lr_its_step_was_taken_at(accumulate, bad, tmp_path):
    """The window is checked after its steps, by when a schedule has moved the lr on (a cosine
    over the epoch's steps is at 0 at its end): the line names the lr of the bad step, as a
    second optimizer and scheduler stepped the same number of times give it. Under gradient
    accumulation a step is several batches: the line names the step and the batch, and the lr
    of a step still to come (the bad batch opens it) is the one it starts from."""
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader, TensorDataset

    from multigpu.callbacks.divergence import DivergenceGuard
    from multigpu.config.errors import Diverged

    def schedule(params):
        optimizer = torch.optim.SGD(params, lr=0.5)
        return optimizer, torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=4)

    class BlowsUpAtTheLastStep(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            return loss * math.nan if batch_idx == bad else loss

        def configure_optimizers(self):
            optimizer, scheduler = schedule(self.parameters())
            return [optimizer], [{"scheduler": scheduler, "interval": "step"}]

    data = DataLoader(TensorDataset(torch.randn(4, 2), torch.randn(4, 1)), batch_size=1)
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        accumulate_grad_batches=accumulate,
        callbacks=[DivergenceGuard(check_every_n_steps=100)],  # checked at the epoch's end
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    with pytest.raises(Diverged) as diverged:
        trainer.fit(BlowsUpAtTheLastStep(), data)
    optimizer, scheduler = schedule([torch.nn.Parameter(torch.zeros(1))])
    bad_step = bad // accumulate + 1  # the optimizer step the bad batch is part of
    for _ in range(bad_step - 1):  # the scheduler's steps before it
        optimizer.step()
        scheduler.step()
    taken_at = optimizer.param_groups[0]["lr"]
    assert trainer.optimizers[0].param_groups[0]["lr"] != pytest.approx(taken_at)
    batch = f", batch {bad + 1}" if accumulate > 1 else ""
    assert f"at step {bad_step} (epoch 1{batch}) with lr {taken_at:g};" in str(diverged.value)


@pytest.mark.slow  # a run of a few seconds, one of its loader's workers killed
def test_a_loader_worker_killed_ends_the_run_in_one_line_with_its_record(tmp_path):
    """The system's memory killer ends a loader worker with SIGKILL: the run had ended with
    Hydra's page of traceback; now one line, exit 1, the record failed with the same line."""
    from conftest import REPO, process_env

    run = tmp_path / "run"
    command = [sys.executable, str(REPO / "train.py"), *TINY, "data=synthetic"]
    command += ["data.num_train=4096", "data.batch_size=16", "data.num_workers=1"]
    command += ["trainer.max_epochs=3", f"hydra.run.dir={run}"]
    proc = subprocess.Popen(command, cwd=tmp_path, env=process_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline, workers = time.monotonic() + 120, []
    while not workers and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        found = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
        workers = found.stdout.split() if (run / "metrics.json").exists() else []
    assert workers, proc.communicate()[1][-3000:]
    time.sleep(0.5)
    subprocess.run(["kill", "-9", workers[0]], check=True)
    _, stderr = proc.communicate(timeout=120)
    said = stderr.strip().splitlines()
    assert proc.returncode == 1 and "Traceback" not in stderr, stderr[-3000:]
    killed = ("was killed by signal: Killed", "exited unexpectedly")  # torch says either
    assert any(said[-1].startswith(f"error: a data loader worker {how} (") for how in killed)
    record = json.loads((run / "metrics.json").read_text())
    assert record["status"] == "failed" and said[-1] == f"error: {record['reason']}"
