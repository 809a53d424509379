"""Real engines: jobs on a single-node Slurm cluster (``scripts/slurm_cluster.sh start``, which
``.ci/run`` runs) and torchrun on localhost. One folder per run whoever launches it, the
processes the config asks for, requeues and elastic restarts that continue from the last
checkpoint, a sweep through Hydra's SLURM launcher, and a job SLURM will never start.

Without a Slurm cluster or torchrun these skip and say so; where ``MULTIGPU_REQUIRE_ENGINES=1``
(``.ci/run``) they fail instead."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from conftest import REPO, SHARED_DATA, TINY

from multigpu.storage.checkpoint import load_checkpoint, network_state

pytestmark = [pytest.mark.subprocess, pytest.mark.distributed]

TESTS = Path(__file__).resolve().parent
# 3 epochs of 2 DDP processes at width 4 on real data, a batch of 128 for each.
DDP = [
    *TINY,
    "strategy=ddp",
    "trainer.devices=2",
    "trainer.max_epochs=3",
    "data.train_subset=1024",
    "data.test_subset=256",
    "data.batch_size=256",
]


def engine_missing(reason: str) -> None:
    if os.environ.get("MULTIGPU_REQUIRE_ENGINES") == "1":
        pytest.fail(f"{reason}, and MULTIGPU_REQUIRE_ENGINES=1 asks for it")
    pytest.skip(reason)


# The name of every job these tests submit, so that none outlives them.
JOB_NAME = f"multigpu-tests-{os.getpid()}"


def queue() -> str:
    """Every job SLURM lists, one entry each: what a job waiting for resources waits behind."""
    jobs = ["squeue", "-h", "-o", "%i %j %T %r %M"]
    listed = subprocess.run(jobs, capture_output=True, text=True)
    return "; ".join(listed.stdout.splitlines()) or "none"


@pytest.fixture(scope="module")
def slurm() -> Iterator[None]:
    if shutil.which("sbatch") is None:
        engine_missing("no Slurm here: scripts/slurm_cluster.sh start (as root) installs one")
    answer = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True)
    if answer.returncode != 0 or not answer.stdout.strip():
        engine_missing("the Slurm cluster does not answer: scripts/slurm_cluster.sh start")
    yield
    # A test that failed leaves its job queued or running; the next test run would wait behind it.
    subprocess.run(["scancel", f"--name={JOB_NAME}"], check=False)


def environment(**extra: str) -> dict[str, str]:
    env = {**os.environ, "MULTIGPU_DATA": str(SHARED_DATA), **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env.pop("HYDRA_FULL_ERROR", None)
    return env


def sbatch(script: str, cwd: Path) -> str:
    """Submit a batch script; return the job id."""
    path = cwd / "job.sh"
    path.write_text(script)
    out = subprocess.run(
        ["sbatch", "--parsable", f"--job-name={JOB_NAME}", f"--output={cwd}/job.out", str(path)],
        cwd=cwd,
        env=environment(),
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip().split(";")[0]


def state(job: str) -> tuple[str, str]:
    """(state, reason) while SLURM lists the job, else ("", "")."""
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T %r"], capture_output=True, text=True)
    return tuple((out.stdout.strip().split(maxsplit=1) + ["", ""])[:2])


def wait_for(job: str, timeout: float = 300) -> None:
    """Until the job has left the queue; a requeued job held until later starts at once."""
    deadline = time.monotonic() + timeout
    while (current := state(job))[0]:
        assert time.monotonic() < deadline, f"job {job} still {current}; queue: {queue()}"
        if current == ("PENDING", "BeginTime"):  # SLURM holds a requeued job for a while
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=False)
        time.sleep(1)


def job_output(cwd: Path) -> str:
    """The job's output so far (none before it starts)."""
    out = cwd / "job.out"
    return out.read_text()[-3000:] if out.is_file() else "no output yet"


def batch_script(overrides: list[str], tasks: int = 2) -> str:
    """The README's batch script, with this environment's Python and these overrides."""
    options = ["--nodes=1", f"--ntasks-per-node={tasks}", "--cpus-per-task=1", "--mem=4G"]
    options.append("--requeue")
    options += ["--signal=USR1@90", "--open-mode=append"]
    lines = ["#!/bin/bash", *(f"#SBATCH {option}" for option in options)]
    lines.append(f"srun {sys.executable} {REPO / 'train.py'} {' '.join(overrides)}")
    return "\n".join(lines) + "\n"


def metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return network_state(load_checkpoint(run_dir / "checkpoints" / "last.ckpt"))


def test_sbatch_and_srun_give_one_folder_and_two_ranks(slurm, tmp_path, data_root):
    probe = ["+callbacks.probe._target_=probes.RankBatch", f"+callbacks.probe.folder={tmp_path}"]
    job = sbatch(
        batch_script([*DDP, "trainer.max_epochs=1", f"data.root={data_root}", *probe]), tmp_path
    )
    wait_for(job)
    (run_dir,) = (tmp_path / "outputs").iterdir()  # no hydra.run.dir, and still one folder
    assert run_dir.name == f"slurm-{job}.0", job_output(tmp_path)
    recorded = metrics(run_dir)
    assert recorded["status"] == "completed" and recorded["run"]["launcher"] == "cluster"
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks == [{"rank": r, "world": 2, "batch": 128} for r in (0, 1)]  # half each


def test_tasks_that_do_not_match_the_devices_are_named(slurm, tmp_path):
    """``--ntasks=2`` without ``--ntasks-per-node``: one line saying what to write instead."""
    script = batch_script([*TINY, "data=synthetic", "strategy=ddp", "trainer.devices=2"])
    job = sbatch(script.replace("--ntasks-per-node=2", "--ntasks=2"), tmp_path)
    wait_for(job)
    log = (tmp_path / "job.out").read_text()
    assert "error: SLURM started 2 tasks without --ntasks-per-node: Lightning places one " in log
    assert "use #SBATCH --nodes=1 --ntasks-per-node=2" in log and "Traceback" not in log


@pytest.mark.slow  # the default suite keeps one sbatch/srun and one torchrun run
@pytest.mark.parametrize("tasks", [2, 1], ids=["ddp", "one_task"])
def test_a_requeued_job_continues_from_its_checkpoint(slurm, tmp_path, data_root, tasks):
    """SLURM's warning signal (what --signal=USR1@90 sends before a time limit) requeues the
    job; it stops, starts again in the same folder and goes on from epoch 1's checkpoint. In a
    job of one task, Lightning's own requeue had answered it (a mid-epoch checkpoint, resumed
    unchecked, its record naming no resume)."""
    slow = ["+callbacks.slow._target_=probes.SlowAfterEpoch", "+callbacks.slow.epoch=1"]
    overrides = [*DDP, f"data.root={data_root}", *slow, "+callbacks.slow.seconds=1"]
    if tasks == 1:
        overrides += ["strategy=single", "trainer.devices=1"]
    job = sbatch(batch_script(overrides, tasks), tmp_path)
    run_dir = tmp_path / "outputs" / f"slurm-{job}.0"
    deadline = time.monotonic() + 240
    while not (run_dir / "checkpoints" / "last.ckpt").is_file():
        waiting = f"queue: {queue()}; {job_output(tmp_path)}"
        assert state(job)[0] and time.monotonic() < deadline, waiting
        time.sleep(0.5)
    subprocess.run(["scancel", "--signal=USR1", job], check=True)
    wait_for(job)
    log = (tmp_path / "job.out").read_text()
    assert f"SLURM's warning signal: requeueing job {job}" in log
    assert "continuing this run from its own checkpoint" in log, log[-3000:]
    recorded = metrics(run_dir)
    assert recorded["status"] == "completed"
    assert [h["epoch"] for h in recorded["history"]] == [1, 2, 3]  # none twice, none missing
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True)
    assert "Restarts=1" in shown.stdout


def slurm_sweep(cwd: Path, *overrides: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python train.py -m hydra/launcher=slurm <overrides>`` in ``cwd``, as a user runs it."""
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), "-m", "hydra/launcher=slurm", *overrides],
        cwd=cwd,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# Two jobs of 3 epochs of 4 steps, each step of epochs 2 and 3 slowed (by the seconds given).
SLOW_SWEEP = [
    *("hydra.launcher.partition=cpu", f"hydra.launcher.name={JOB_NAME}"),
    *(*TINY, "data=synthetic", "data.num_train=64", "data.num_test=32"),
    *("data.batch_size=16", "trainer.max_epochs=3", "seed=1,2"),
    *("+callbacks.slow._target_=probes.SlowAfterEpoch", "+callbacks.slow.epoch=1"),
]


def start_slurm_sweep(cwd: Path, *overrides: str) -> subprocess.Popen:
    """``slurm_sweep``, started: its stderr to read once it ends."""
    command = [sys.executable, str(REPO / "train.py"), "-m", "hydra/launcher=slurm", *overrides]
    return subprocess.Popen(command, cwd=cwd, env=environment(), stderr=subprocess.PIPE, text=True)


def read_summary(sweep: Path) -> list[dict[str, str]]:
    with open(sweep / "summary.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow  # the default suite keeps one sbatch/srun and one torchrun run
def test_a_slurm_sweep_gives_each_job_its_processes(slurm, tmp_path, data_root):
    """The launcher config as shipped, plus the partition: one task, then two."""
    result = slurm_sweep(
        tmp_path,
        *("hydra.launcher.partition=cpu", *DDP, "trainer.max_epochs=1", "trainer.devices=1,2"),
        *(f"data.root={data_root}", f"hydra.sweep.dir={tmp_path / 'sweep'}"),
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_summary(tmp_path / "sweep")
    assert [(r["devices"], r["status"]) for r in rows] == [("1", "completed"), ("2", "completed")]
    assert [r["job"] for r in rows] == ["devices_1", "devices_2"]  # named in the SLURM jobs
    assert "Bypassing sacct" not in result.stdout + result.stderr


@pytest.mark.slow
def test_a_stopped_slurm_sweep_stops_its_jobs_and_its_command_continues_them(slurm, tmp_path):
    """SIGTERM to the sweep while its jobs run on Slurm: they are stopped too (they had run on,
    and the sweep's command run again submitted them a second time), each records it with its
    checkpoint, and the command the line names finishes them."""
    sweep = tmp_path / "sweep"
    overrides = [*SLOW_SWEEP, "+callbacks.slow.seconds=5"]
    started = start_slurm_sweep(tmp_path, *overrides, f"hydra.sweep.dir={sweep}")
    deadline = time.monotonic() + 240
    while not all((sweep / f"seed_{n}" / "checkpoints" / "last.ckpt").is_file() for n in (1, 2)):
        assert started.poll() is None and time.monotonic() < deadline
        time.sleep(0.5)
    started.terminate()
    stderr = started.communicate(timeout=60)[1]
    assert started.returncode == 143, stderr[-3000:]
    said = [line for line in stderr.splitlines() if line.startswith("error:")]
    goes_on = f"the sweep stops; its command run again with hydra.sweep.dir={sweep} runs the jobs"
    assert said == [
        "error: interrupted by SIGTERM while the sweep's jobs were on Slurm: 2 cancelled (a "
        f"running one records it); {goes_on} left"
    ]
    while subprocess.run(["squeue", "-h", f"--name={JOB_NAME}"], capture_output=True).stdout:
        assert time.monotonic() < deadline
        time.sleep(1)
    for n in (1, 2):
        record = json.loads((sweep / f"seed_{n}" / "metrics.json").read_text())
        assert record["status"] == "interrupted", record

    advised = said[0].split(" with ")[1].removesuffix(" runs the jobs left")
    again = slurm_sweep(tmp_path, *overrides, advised)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [(r["job"], r["status"]) for r in read_summary(sweep)] == [
        ("seed_1", "completed"),
        ("seed_2", "completed"),
    ]


@pytest.mark.slow
def test_a_slurm_job_cancelled_alone_leaves_its_sweep_going_and_says_how_to_go_on(slurm, tmp_path):
    """``scancel`` of one job: it records the stop with its checkpoint, saying that the sweep's
    command goes on with it once the sweep has ended (it had said that the sweep stops); the
    sweep's other job completes, its last line says the same, and following it completes the
    cancelled job."""
    sweep = tmp_path / "sweep"
    overrides = [*SLOW_SWEEP, "+callbacks.slow.seconds=3"]
    started = start_slurm_sweep(tmp_path, *overrides, f"hydra.sweep.dir={sweep}")
    deadline = time.monotonic() + 240
    while not (sweep / "seed_1" / "checkpoints" / "last.ckpt").is_file():
        assert started.poll() is None and time.monotonic() < deadline
        time.sleep(0.5)
    listed = ["squeue", "-h", "-r", f"--name={JOB_NAME}", "--format=%i"]
    (first,) = [j for j in subprocess.check_output(listed, text=True).split() if j.endswith("_0")]
    subprocess.run(["scancel", first], check=True)
    stderr = started.communicate(timeout=240)[1]
    assert started.returncode == 1, stderr[-3000:]
    goes_on = f"the sweep's command run again with hydra.sweep.dir={sweep}"
    assert stderr.strip().splitlines()[-1] == (
        f"error: 1 of 2 jobs did not complete; {goes_on} runs the jobs left"
    )
    cancelled = json.loads((sweep / "seed_1" / "metrics.json").read_text())
    assert cancelled["status"] == "interrupted", cancelled
    assert cancelled["reason"].endswith(f"; {goes_on}, once it has ended, runs the jobs left")
    assert [r["status"] for r in read_summary(sweep)] == ["interrupted", "completed"]

    again = slurm_sweep(tmp_path, *overrides, f"hydra.sweep.dir={sweep}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert [r["status"] for r in read_summary(sweep)] == ["completed", "completed"]


@pytest.mark.slow  # the default suite keeps one sbatch/srun and one torchrun run
@pytest.mark.parametrize("folder_was_there", [False, True], ids=["new_folder", "given_folder"])
def test_a_submission_slurm_refuses_is_one_line_and_leaves_nothing(
    slurm, tmp_path, folder_was_there
):
    """Two arrays (the launcher's memory follows the seed): the first goes out, sbatch refuses
    the second (no node has 100 GB). Its reason is the one line (sbatch's own lines had come
    first), the first array is cancelled, and what the sweep wrote is gone: the folder it made,
    or, in a folder that was there, submitit's files and the sweep's config (which would mark
    it as this sweep's)."""
    sweep = tmp_path / "sweep"
    if folder_was_there:
        sweep.mkdir()
        (sweep / "notes.txt").write_text("kept")
    result = slurm_sweep(
        tmp_path,
        *("hydra.launcher.partition=cpu", f"hydra.launcher.name={JOB_NAME}"),
        *("hydra.launcher.mem_gb=${seed}", "seed=1,100", *TINY, "data=synthetic"),
        f"hydra.sweep.dir={sweep}",
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    said = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(said) == 1 and said[0].startswith("error: SLURM refused the jobs (sbatch: "), said
    assert "Memory specification can not be satisfied" in said[0] and "mem_gb=100" in said[0]
    queued = subprocess.run(["squeue", "-h", f"--name={JOB_NAME}"], capture_output=True)
    assert queued.stdout == b""
    kept = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    assert kept == (["sweep", "sweep/notes.txt"] if folder_was_there else [])


@pytest.mark.slow  # the default suite keeps one sbatch/srun and one torchrun run
def test_a_job_slurm_will_never_start_is_reported(slurm, tmp_path):
    """Partition "short" allows 1 minute; the job asks for 120: it would wait forever."""
    started = time.monotonic()
    sweep = f"hydra.sweep.dir={tmp_path / 'sweep'}"
    result = slurm_sweep(
        tmp_path,
        *("hydra.launcher.partition=short", "hydra.launcher.unschedulable_after_s=3"),
        *(*TINY, "data=synthetic", sweep),
    )
    assert result.returncode == 1 and time.monotonic() - started < 120
    assert "cannot start (PartitionTimeLimit): cancelled" in result.stderr
    (row,) = read_summary(tmp_path / "sweep")
    assert row["status"] == "failed" and "PartitionTimeLimit" in row["reason"]
    # Its command on a partition that takes it goes on with the sweep (its folder had been
    # refused as holding "a record of an older version").
    again = slurm_sweep(tmp_path, "hydra.launcher.partition=cpu", *TINY, "data=synthetic", sweep)
    assert again.returncode == 0, again.stderr[-3000:]
    (row,) = read_summary(tmp_path / "sweep")
    assert row["status"] == "completed"


def torchrun(launcher: list[str], overrides: list[str], cwd: Path) -> subprocess.Popen:
    """``torchrun <launcher> train.py <overrides>`` in ``cwd``."""
    command = [sys.executable, "-m", "torch.distributed.run", *launcher, str(REPO / "train.py")]
    return subprocess.Popen(
        [*command, *overrides],
        cwd=cwd,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-4000:]
    return out


@pytest.mark.slow  # the default suite keeps one sbatch/srun and one torchrun run
def test_torchrun_restarts_continue_in_one_folder(tmp_path, data_root):
    """``--standalone`` makes one folder; after a worker dies, the elastic restart continues
    from the last checkpoint and ends with the weights of a run that was never interrupted."""
    if shutil.which("torchrun") is None:
        engine_missing("no torchrun (it comes with torch)")
    common = [*DDP, f"data.root={data_root}"]
    plain, restarted = tmp_path / "plain", tmp_path / "restarted"
    plain.mkdir()
    restarted.mkdir()
    finish(torchrun(["--standalone", "--nproc_per_node=2"], common, cwd=plain))
    die = ["+callbacks.die._target_=probes.DieOnFirstAttempt", "+callbacks.die.rank=1"]
    launcher = ["--standalone", "--nproc_per_node=2", "--max-restarts=1"]
    out = finish(torchrun(launcher, [*common, *die, "+callbacks.die.epoch=1"], cwd=restarted))
    assert "continuing this run from its own checkpoint" in out
    ((plain_run,), (run_dir,)) = (list((p / "outputs").iterdir()) for p in (plain, restarted))
    assert run_dir.name.startswith("torchrun-") and plain_run.name.startswith("torchrun-")
    assert [h["epoch"] for h in metrics(run_dir)["history"]] == [1, 2, 3]
    expected, got = final_weights(plain_run), final_weights(run_dir)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=1e-6, msg=name)


@pytest.mark.slow  # the default suite keeps one sbatch/srun and one torchrun run
def test_a_bad_value_under_torchrun_is_said_once(tmp_path):
    """Every process torchrun starts checks the same command line: the node's first says the
    mistake, torchrun stops the others (each had said it too); nothing is written."""
    if shutil.which("torchrun") is None:
        engine_missing("no torchrun (it comes with torch)")
    bad = [*DDP, "model.optimizer.lr=-1"]
    proc = torchrun(["--standalone", "--nproc_per_node=2"], bad, cwd=tmp_path)
    out, _ = proc.communicate(timeout=120)
    said = [line for line in out.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0 and said == [
        "error: model.optimizer.lr=-1 must be a positive number, e.g. model.optimizer.lr=0.1"
    ], out[-3000:]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_finished_run_under_torchrun_is_trained_further_as_its_refusal_says(tmp_path):
    """Under torchrun the run folder is named by ``--rdzv-id``: the advice to drop
    ``hydra.run.dir`` ("or none") led to the same folder, refused again, where the command kept
    its id."""
    if shutil.which("torchrun") is None:
        engine_missing("no torchrun (it comes with torch)")
    port = 29500 + uuid.uuid4().int % 1000

    def launched(run_id: str, *overrides: str) -> subprocess.Popen:
        launcher = ["--nnodes=1", "--nproc_per_node=1", f"--rdzv-id={run_id}"]
        launcher += ["--master_addr=127.0.0.1", f"--master_port={port}"]
        return torchrun(launcher, [*TINY, "data=synthetic", *overrides], cwd=tmp_path)

    finish(launched("first", "trainer.max_epochs=1"))
    refused = launched("first", "trainer.max_epochs=2")
    out, _ = refused.communicate(timeout=120)
    (said,) = {line for line in out.splitlines() if line.startswith("error:")}
    assert refused.returncode != 0 and said.endswith(
        "trainer.max_epochs=2, and another hydra.run.dir or none with another torchrun --rdzv-id"
    ), out[-3000:]
    advised = said.split("resume it into a new folder with ")[1].split(",")[0].split()
    finish(launched("second", *advised))
    record = metrics(tmp_path / "outputs" / "torchrun-second")
    assert record["status"] == "completed" and record["epochs"] == 2


@pytest.mark.slow
def test_torchrun_on_two_nodes_shares_a_fresh_data_folder(tmp_path):
    """Two torchrun agents on localhost, one process each: both nodes prepare the data in the
    same fresh folder at once, and the run has one folder (named by ``--rdzv-id``)."""
    if shutil.which("torchrun") is None:
        engine_missing("no torchrun (it comes with torch)")
    port = 29500 + uuid.uuid4().int % 1000
    shared = tmp_path / "data"  # fresh: nothing unpacked yet
    run_id = f"two-nodes-{uuid.uuid4().hex[:8]}"
    overrides = [*DDP, "trainer.devices=1", "trainer.num_nodes=2", "trainer.max_epochs=1"]
    nodes = []
    for rank in (0, 1):
        launcher = ["--nnodes=2", "--nproc_per_node=1", f"--node_rank={rank}"]
        launcher += [f"--rdzv-id={run_id}", "--master_addr=127.0.0.1", f"--master_port={port}"]
        nodes.append(torchrun(launcher, [*overrides, f"data.root={shared}"], cwd=tmp_path))
    for node in nodes:
        finish(node)
    (run_dir,) = (tmp_path / "outputs").iterdir()
    assert run_dir.name == f"torchrun-{run_id}"
    recorded = metrics(run_dir)
    assert recorded["status"] == "completed"
    assert (recorded["run"]["processes"], recorded["run"]["num_nodes"]) == (2, 2)
    assert not list(shared.rglob("*.partial"))
