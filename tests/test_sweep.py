"""Multirun sweeps through ``python train.py -m`` and their report (TensorBoard, read over HTTP:
``test_tensorboard.py``)."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.image
import pytest
from conftest import (
    CONF,
    TINY,
    compose_config,
    resolve_on,
    run_python,
    run_script,
    start_script,
)
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from multigpu.config.errors import UserError
from multigpu.run.cli import register_resolvers

pytestmark = pytest.mark.subprocess

SWEEP = [
    *TINY,
    "data=synthetic",
    "data.num_train=128",
    "data.num_test=64",
    "data.batch_size_per_device=32",
    "model.lr_scaling.rule=linear",
    "model.lr_scaling.base_batch=32",
    "trainer.max_epochs=2",
    "strategy=scatter_allreduce",
]


def read_summary(sweep: Path) -> list[dict[str, str]]:
    with open(sweep / "summary.csv") as f:
        return list(csv.DictReader(f))


def assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = matplotlib.image.imread(path).shape
    assert height > 100 and width > 100


# The sweep's job folders, named by what the jobs differ in.
JOB_FOLDERS = ["devices_1-lr_0.05", "devices_1-lr_0.1", "devices_2-lr_0.05", "devices_2-lr_0.1"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """4 jobs: devices 1,2 x base lr 0.05,0.1, batch and lr scaled with the devices."""
    root = tmp_path_factory.mktemp("sweep")
    result = run_script(
        "train.py",
        "-m",
        *SWEEP,
        "trainer.devices=1,2",
        "model.optimizer.lr=0.05,0.1",
        f"hydra.sweep.dir={root}",
        cwd=root,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "speedup" in result.stdout  # the table is printed at the end
    (shown,) = [line for line in result.stdout.splitlines() if "tensorboard --logdir" in line]
    assert (root / shown.split("--logdir ")[1]).resolve() == root.resolve()  # from its cwd
    return root


@pytest.mark.slow
def test_every_job_has_its_own_complete_folder(sweep):
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [p.name for p in jobs] == JOB_FOLDERS
    for job in jobs:  # named by the swept values: the job's own
        devices, lr = (part.split("_", 1)[1] for part in job.name.split("-"))
        overrides = (job / ".hydra" / "overrides.yaml").read_text()
        assert f"trainer.devices={devices}" in overrides and f"model.optimizer.lr={lr}" in overrides
        assert (job / ".hydra" / "config.yaml").is_file()
        assert (job / "checkpoints" / "last.ckpt").is_file()
        assert list(job.glob("events.out.tfevents.*"))
        assert json.loads((job / "metrics.json").read_text())["status"] == "completed"


def test_summary_rows_follow_the_jobs_metrics(sweep):
    rows = read_summary(sweep)
    assert len(rows) == 4
    metrics = {r["job"]: json.loads((sweep / r["job"] / "metrics.json").read_text()) for r in rows}
    settings = {(int(r["devices"]), int(r["batch_size"]), float(r["lr"])) for r in rows}
    assert settings == {(1, 32, 0.05), (2, 64, 0.1), (1, 32, 0.1), (2, 64, 0.2)}
    for row in rows:
        job = metrics[row["job"]]
        assert float(row["test_acc"]) == pytest.approx(job["test_acc"])
        assert float(row["samples_per_s"]) == pytest.approx(job["samples_per_s"])
        # Speedup against the one-device job with the same base settings (same lr per sample).
        lr_per_sample = job["run"]["lr"] / job["run"]["batch_size"]
        base = next(
            m
            for m in metrics.values()
            if m["run"]["devices"] == 1 and m["run"]["lr"] / m["run"]["batch_size"] == lr_per_sample
        )
        expected = job["samples_per_s"] / base["samples_per_s"]
        assert float(row["speedup"]) == pytest.approx(expected, rel=1e-3)
        assert float(row["efficiency"]) == pytest.approx(expected / int(row["devices"]), rel=1e-3)
    assert_png(sweep / "test_acc.png")
    assert_png(sweep / "scaling.png")
    assert "| job | status |" in (sweep / "summary.md").read_text()


@pytest.mark.slow
def test_report_command_rewrites_a_copied_sweep(sweep, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(sweep, copy)
    for name in ("summary.csv", "summary.md", "test_acc.png", "scaling.png"):
        (copy / name).unlink()
    result = subprocess.run(
        [sys.executable, "-m", "multigpu.tools.report", str(copy)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert read_summary(copy) == read_summary(sweep)
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()}
    assert "matplotlib" in imported and "torch" not in imported  # JSON in, pictures out
    assert_png(copy / "scaling.png")
    missing = subprocess.run(
        [sys.executable, "-m", "multigpu.tools.report", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1


def test_a_sweep_with_a_job_that_cannot_run_is_refused_whole(tmp_path):
    """Every job's config is checked before the first starts: none runs, one line lists the
    jobs that cannot, and nothing is written."""
    result = run_script(
        "train.py",
        "-m",
        *TINY,
        "data=synthetic",
        "data.num_train=64",
        "data.num_test=32",
        "strategy=dp,scatter_allreduce",
        "trainer.devices=2",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        cwd=tmp_path,
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    started = "error: 1 of 2 jobs cannot run, so none was started: job 0 (strategy_dp)"
    assert line.startswith(started)
    assert "DataParallel needs CUDA" in line
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_with_a_job_torch_refuses_when_built_is_refused_whole(tmp_path):
    """The tester's case: torch refuses a compile backend only when the network is compiled.
    The sweep had started: a traceback per job, exit 1, and the sweep folder with its report.
    Every job's parts are built before the first starts (tests/test_sweep_objects.py)."""
    result = run_script(
        "train.py",
        "-m",
        *TINY,
        "data=synthetic",
        "data.num_train=64",
        "data.num_test=32",
        "model.optimizer.lr=0.1,0.2",
        "model.compile={backend:nonsense}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        cwd=tmp_path,
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    started = "error: 2 of 2 jobs cannot run, so none was started: job 0 (lr_0.1): "
    assert line.startswith(started + "model.compile={backend:nonsense}: torch.compile refuses it")
    assert "| job 1 (lr_0.2): model.compile={backend:nonsense}: " in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_failing_job_is_recorded_and_the_others_run(tmp_path):
    result = run_script(
        "train.py",
        "-m",
        *TINY,
        "data=synthetic",
        "data.num_train=64",
        "data.num_test=32",
        "data.batch_size=16",
        "check_finite_every_n_steps=1",
        "model.optimizer.lr=0.1,1e12",
        f"hydra.sweep.dir={tmp_path}",
        cwd=tmp_path,
    )
    assert result.returncode == 1
    rows = {float(r["lr"]): r for r in read_summary(tmp_path)}
    assert rows[1e12]["status"] == "diverged" and "diverged" in rows[1e12]["reason"]
    assert rows[0.1]["status"] == "completed"


def test_d2l_scaling_pairs_batch_and_lr_with_devices(tmp_path):
    seen = []
    for devices in (1, 2):
        cfg = compose_config(["experiment=d2l_scaling", f"trainer.devices={devices}"], tmp_path)
        run = resolve_on(cfg, cuda_devices=2)  # dp: a machine with two GPUs
        seen.append((run.strategy, run.batch_size, run.lr))
    assert seen == [("dp", 256, 0.1), ("dp", 512, 0.2)]


def test_optuna_and_slurm_configs_compose():
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                "hparams_search=optuna",
                "hydra/launcher=slurm",
                "strategy=ddp",  # one task per device (other strategies: one task)
                "trainer.devices=4",
                "trainer.num_nodes=2",
                "paths.output_dir=.",
            ],
            return_hydra_config=True,
        )
    assert cfg.hydra.sweeper._target_.endswith("multigpu_sweeper.optuna_trials.OptunaTrials")
    assert cfg.hydra.sweeper.direction == "maximize"
    assert set(cfg.hydra.sweeper.params) == {"model.optimizer.lr", "data.batch_size"}
    assert cfg.hydra.launcher._target_.endswith("SlurmLauncher")
    assert (cfg.hydra.launcher.nodes, cfg.hydra.launcher.tasks_per_node) == (2, 4)


def slurm_job(*overrides: str) -> DictConfig:
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(
            "config",
            overrides=["hydra/launcher=slurm", "paths.output_dir=.", *overrides],
            return_hydra_config=True,
        )


@pytest.mark.parametrize("strategy", ["ddp", "auto", "scatter_allreduce"])
@pytest.mark.parametrize("devices", ["1", "2", "[0,1]", "[0,1,2]", "'0,1'"])
def test_a_slurm_job_asks_for_what_the_run_resolves(strategy, devices):
    """Each node's tasks and GPUs, for every way ``trainer.devices`` is written (a list of ids
    had failed to resolve), are what the run's settings make of the same config on a machine
    with GPUs to spare: a task per process on the node, a GPU per device."""
    cfg = slurm_job(f"strategy={strategy}", f"trainer.devices={devices}", "data.batch_size=240")
    cfg.trainer.accelerator = "gpu"
    run = resolve_on(cfg, cuda_devices=8, cpu_cores=8)
    asked = (cfg.hydra.launcher.tasks_per_node, cfg.hydra.launcher.gpus_per_node)
    assert asked == (run.processes // run.num_nodes, len(run.device_ids))


@pytest.mark.parametrize("accelerator", ["gpu", "cpu"])
def test_a_slurm_sweep_is_checked_on_the_node_it_asks_for(accelerator):
    """A login node has no GPU: a GPU sweep submitted from it is resolved on the node its jobs
    ask Slurm for (its GPUs, its tasks' cores), as the job itself will be there."""
    from multigpu.config.settings import Machine, resolve_run
    from multigpu.run.cli import hydra_runtime
    from multigpu.run.preflight import job_machine

    cfg = slurm_job("strategy=ddp", "trainer.devices=2", f"trainer.accelerator={accelerator}")
    login = Machine(cuda_devices=0, cpu_cores=1, environ={}, multirun=True)
    run = resolve_run(cfg, hydra_runtime(cfg)[0], job_machine(cfg, login))
    assert (run.accelerator, run.device_ids, run.processes) == (
        "cuda" if accelerator == "gpu" else "cpu",
        (0, 1),
        2,
    )
    if accelerator == "gpu":  # the login node itself has none
        with pytest.raises(UserError, match="has no CUDA device"):
            resolve_run(cfg, hydra_runtime(cfg)[0], login)


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["trainer.devices=-1"], "trainer.devices=-1 asks for every GPU of a node, which hydra/"),
        (["trainer.devices=auto"], "trainer.devices=auto asks for every GPU of a node"),
        (["trainer.devices=[2,3,5]"], "trainer.devices=[2, 3, 5] under hydra/launcher=slurm: "),
        (
            ["trainer.devices=4", "hydra.launcher.gpus_per_node=2"],
            "trainer.devices=4 needs 4 GPUs on each node, but the job asks Slurm for 2",
        ),
        (
            ["trainer.devices=2", "hydra.launcher.tasks_per_node=1"],
            "hydra.launcher.tasks_per_node=1, but strategy=ddp with trainer.devices=2 runs 2 ",
        ),
        (
            ["trainer.devices=2", "hydra.launcher.timeout_min=2"],
            "hydra.launcher.signal_delay_s=90: Slurm warns a job that long (and up to 60 s "
            "more) before its time limit, hydra.launcher.timeout_min=2 (120 s), so it would be "
            "requeued as it starts",
        ),
    ],
)
def test_a_slurm_gpu_job_asks_for_what_it_runs_on(overrides, said):
    """Slurm is asked for a number of GPUs, which the job sees as 0..n-1, and starts the tasks
    asked for: every GPU of a node (it would get one), ids beyond the count or GPUs fewer than
    the devices (the job would fail on the node) and tasks other than the strategy's processes
    are refused before anything is submitted, naming the setting."""
    from multigpu.config.settings import Machine
    from multigpu.run.preflight import job_machine

    cfg = slurm_job("strategy=ddp", *overrides, "trainer.accelerator=gpu")
    with pytest.raises(UserError, match=re.escape(said)):
        job_machine(cfg, Machine(cuda_devices=0, cpu_cores=1, environ={}, multirun=True))


@pytest.mark.parametrize(
    ("overrides", "gpus"),
    [
        (["strategy=scatter_allreduce", "trainer.devices=[0,0]"], 1),  # two replicas on one GPU
        (
            [
                "trainer.devices=2",
                "hydra.launcher.gpus_per_node=null",
                "+hydra.launcher.gres=gpu:a100:2",
            ],
            2,
        ),
        (
            [
                "trainer.devices=2",
                "hydra.launcher.gpus_per_node=null",
                "hydra.launcher.gpus_per_task=1",
            ],
            2,
        ),
    ],
)
def test_a_slurm_job_runs_on_the_gpus_it_asks_for_however_it_asks(overrides, gpus):
    from multigpu.config.settings import Machine, resolve_run
    from multigpu.run.cli import hydra_runtime
    from multigpu.run.preflight import job_machine

    cfg = slurm_job("strategy=ddp", "trainer.accelerator=gpu", "data.batch_size=240", *overrides)
    node = job_machine(cfg, Machine(cuda_devices=0, cpu_cores=1, environ={}, multirun=True))
    assert node.cuda_devices == gpus
    assert resolve_run(cfg, hydra_runtime(cfg)[0], node).accelerator == "cuda"


def test_a_slurm_sweep_needs_slurms_commands(tmp_path, monkeypatch):
    """Where no ``srun`` is on the PATH, the launcher is refused in one line (submitit raised
    a traceback once the sweep's folder was made); with one there, it is not."""
    from multigpu.run.slurm_extra import cannot_submit

    monkeypatch.setenv("PATH", str(tmp_path))
    assert "whose srun is not on this machine's PATH" in (cannot_submit() or "")
    (tmp_path / "srun").write_text("#!/bin/sh\n")
    (tmp_path / "srun").chmod(0o755)
    assert cannot_submit() is None


def test_the_slurm_launcher_declares_the_submitit_settings():
    """Its settings are declared without importing the Slurm extra: the same as the submitit
    launcher's, in its order and with its defaults, and the launcher made where the extra is."""
    from dataclasses import MISSING, fields

    from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import (
        SlurmLauncher as SubmititSlurmLauncher,
    )

    from hydra_plugins.multigpu_launcher.slurm_launcher import SlurmLauncher, SlurmLauncherConf

    def settings(conf) -> dict:
        """Each setting's default, in the order declared."""
        return {
            f.name: f.default_factory() if f.default is MISSING else f.default
            for f in fields(conf)
            if f.name != "_target_"
        }

    ours = settings(SlurmLauncherConf)
    assert ours.pop("unschedulable_after_s") == 300
    assert list(ours.items()) == list(settings(SlurmQueueConf).items())
    assert SlurmLauncherConf._target_ == f"{SlurmLauncher.__module__}.SlurmLauncher"
    launcher = SlurmLauncher(**settings(SlurmLauncherConf))
    assert isinstance(launcher.jobs, SubmititSlurmLauncher)


# Run before train.py: the interpreter as it is without the Slurm extra. The modules cannot be
# imported, and Hydra's plug-in scan (pkgutil.walk_packages) does not find them either.
WITHOUT_SLURM_EXTRA = """
import importlib.abc, pkgutil, runpy, sys
HIDDEN = ("submitit", "hydra_plugins.hydra_submitit_launcher")
def hidden(name):
    return any(name == h or name.startswith(h + ".") for h in HIDDEN)
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if hidden(name):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hide())
walk = pkgutil.walk_packages
pkgutil.walk_packages = lambda *a, **k: (m for m in walk(*a, **k) if not hidden(m.name))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
def test_without_the_slurm_extra_only_choosing_its_launcher_is_refused(tmp_path):
    """No plug-in warning on every command; ``hydra/launcher=slurm`` is one line, exit 2,
    nothing written."""
    train = str(Path(CONF).parent / "train.py")
    smoke = [*TINY, "data=synthetic", "+trainer.fast_dev_run=true", "hydra.run.dir=run"]
    ran = run_python("-c", WITHOUT_SLURM_EXTRA, train, *smoke, cwd=tmp_path, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "Error importing" not in ran.stderr and "Plugin is incompatible" not in ran.stderr
    assert "warn" not in ran.stderr.lower(), ran.stderr[-3000:]

    sweep = ["-m", "hydra/launcher=slurm", *TINY, "data=synthetic", "hydra.sweep.dir=sweep"]
    refused = run_python("-c", WITHOUT_SLURM_EXTRA, train, *sweep, cwd=tmp_path, timeout=300)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        "error: hydra/launcher=slurm needs the Slurm extra, not installed here (No module named "
        "'hydra_plugins.hydra_submitit_launcher'): pip install -e '.[slurm]'"
    ]
    assert not (tmp_path / "sweep").exists()


@pytest.mark.slow
def test_optuna_sweep_runs_trials(tmp_path):
    result = run_script(
        "train.py",
        "-m",
        "hparams_search=optuna",
        "hydra.sweeper.n_trials=2",
        *TINY,
        "data=synthetic",
        "data.num_train=64",
        "data.num_test=32",
        f"hydra.sweep.dir={tmp_path}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Best value" in result.stdout + result.stderr
    assert (tmp_path / "optimization_results.yaml").is_file()
    assert len(read_summary(tmp_path)) == 2


# Sweeps whose jobs start DDP processes of their own (spawned in a multirun): {name: (what is
# swept, each job's (folder, strategy it resolved to))}. ``auto`` is the sweep this project
# exists for, without a ``strategy=``: one device runs alone, two under DDP.
DDP_SWEEPS = {
    "auto_over_device_counts": (
        ["trainer.devices=1,2"],
        [("devices_1", "single"), ("devices_2", "ddp")],
    ),
    "ddp_and_ddp_spawn": (
        ["strategy=ddp,ddp_spawn", "trainer.devices=2"],
        [("strategy_ddp", "ddp"), ("strategy_ddp_spawn", "ddp_spawn")],
    ),
}


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("sweep", sorted(DDP_SWEEPS))
def test_ddp_jobs_of_a_multirun_complete_with_no_stray_folders(tmp_path, sweep):
    """Each job completes as what it resolved to, and the children write nothing outside
    the sweep's folder; the summary names the strategy each job became."""
    swept, expected = DDP_SWEEPS[sweep]
    result = run_script(
        "train.py",
        "-m",
        *TINY,
        "data=synthetic",
        "data.num_train=64",
        "data.num_test=32",
        "data.batch_size=32",
        *swept,
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_summary(tmp_path / "sweep")
    assert [(r["job"], r["strategy"], r["status"]) for r in rows] == [
        (job, strategy, "completed") for job, strategy in expected
    ]
    folders = sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.is_dir())
    assert folders == [job for job, _ in expected]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]  # no outputs/ from children


@pytest.mark.slow  # five sweeps in a row
def test_a_killed_sweep_run_again_redoes_only_what_did_not_finish(tmp_path):
    """Killed in job 1's second epoch, then run again with the same command: job 0, finished,
    is skipped (its record and TensorBoard run untouched); job 1 goes on from its checkpoint."""
    sweep = tmp_path / "sweep"
    command = ["-m", *TINY, "data=synthetic"]
    command += ["data.num_train=128", "data.num_test=32", "data.batch_size=32"]
    command += ["trainer.max_epochs=2", "model.optimizer.lr=0.1,0.2"]
    command += ["+callbacks.slow._target_=probes.SlowAfterEpoch", "+callbacks.slow.epoch=1"]
    command += ["+callbacks.slow.seconds=1"]
    env = {"PYTHONPATH": str(Path(__file__).resolve().parent)}
    sweep_process = start_script(
        "train.py", *command, f"hydra.sweep.dir={sweep}", cwd=tmp_path, env=env
    )
    deadline = time.monotonic() + 240
    while not (sweep / "lr_0.2" / "checkpoints" / "last.ckpt").is_file():
        assert sweep_process.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    sweep_process.terminate()
    stderr = sweep_process.communicate(timeout=60)[1]
    assert sweep_process.returncode == 143, stderr[-3000:]
    first = (sweep / "lr_0.1" / "metrics.json").read_text()
    assert json.loads(first)["status"] == "completed"
    stopped = json.loads((sweep / "lr_0.2" / "metrics.json").read_text())
    goes_on = f"the sweep stops; its command run again with hydra.sweep.dir={sweep} runs the jobs"
    assert stopped["status"] == "interrupted"
    assert stopped["reason"] == f"interrupted by SIGTERM; {goes_on} left"  # not one job's resume
    assert f"error: {stopped['reason']}" in stderr.splitlines()

    advised = stopped["reason"].split(" with ")[1].removesuffix(" runs the jobs left")
    again = run_script("train.py", *command, advised, cwd=tmp_path, env=env)  # as it says
    assert again.returncode == 0, again.stderr[-3000:]
    said = again.stdout + again.stderr
    assert f"{sweep / 'lr_0.1'} already holds this run, completed after 2 epoch(s)" in said
    assert f"continuing this run from its own checkpoint {sweep / 'lr_0.2'}" in said
    assert (sweep / "lr_0.1" / "metrics.json").read_text() == first
    assert len(list((sweep / "lr_0.1").glob("events.out.tfevents.*"))) == 1
    resumed = json.loads((sweep / "lr_0.2" / "metrics.json").read_text())
    assert resumed["status"] == "completed" and [h["epoch"] for h in resumed["history"]] == [1, 2]
    assert [r["status"] for r in read_summary(sweep)] == ["completed", "completed"]


@pytest.mark.slow  # two sweeps of train.py
def test_a_sweep_whose_job_failed_ends_saying_how_to_run_it_again(tmp_path):
    """Its last line says the setting that runs the jobs left, and following it runs the failed
    job alone (the completed one is skipped, its record untouched)."""
    sweep = tmp_path / "sweep"
    command = ["-m", *TINY, "data=synthetic", "data.num_train=64", "data.num_test=32"]
    command += ["+callbacks.fail._target_=probes.FailOnce"]
    command += [f"+callbacks.fail.flag={os.devnull},{tmp_path / 'failed_once'}"]
    env = {"PYTHONPATH": str(Path(__file__).resolve().parent)}
    first = run_script("train.py", *command, f"hydra.sweep.dir={sweep}", cwd=tmp_path, env=env)
    assert first.returncode == 1, first.stderr[-3000:]
    last = first.stderr.strip().splitlines()[-1]
    goes_on = f"the sweep's command run again with hydra.sweep.dir={sweep} runs the jobs left"
    assert last == f"error: 1 of 2 jobs did not complete; {goes_on}"
    (done,) = [row["job"] for row in read_summary(sweep) if row["status"] == "completed"]
    recorded = (sweep / done / "metrics.json").read_text()

    advised = last.split(" with ")[1].removesuffix(" runs the jobs left")
    again = run_script("train.py", *command, advised, cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [row["status"] for row in read_summary(sweep)] == ["completed", "completed"]
    assert (sweep / done / "metrics.json").read_text() == recorded


@pytest.mark.slow  # three sweeps of train.py
def test_a_finished_sweep_is_trained_further_as_its_refusal_says(tmp_path):
    """More epochs for a finished sweep: the refusal had advised job 0's checkpoint for every
    job (the others were then refused as trained with other settings). Each job goes on from
    its own checkpoint, also where two jobs compute the same (another strategy), which
    ``ckpt_path=latest`` could not tell apart."""
    sweep, more = tmp_path / "sweep", tmp_path / "more"
    command = ["-m", *TINY, "data=synthetic", "data.num_train=64", "data.num_test=32"]
    command += ["strategy=single,scatter_allreduce"]
    first = run_script("train.py", *command, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    again = run_script(
        "train.py", *command, "trainer.max_epochs=2", f"hydra.sweep.dir={sweep}", cwd=tmp_path
    )
    assert again.returncode == 2
    own = f"'ckpt_path={sweep}/${{hydra:sweep.subdir}}/checkpoints/last.ckpt'"
    advice = (
        f"resume the sweep into a new one with {own} trainer.max_epochs=2, and another "
        "hydra.sweep.dir"
    )
    assert again.stderr.strip().splitlines()[-1].endswith(advice), again.stderr[-3000:]
    advised = shlex.split(advice.split(" with ")[1].removesuffix(", and another hydra.sweep.dir"))
    resumed = run_script("train.py", *command, *advised, f"hydra.sweep.dir={more}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for job in ("strategy_single", "strategy_scatter_allreduce"):
        record = json.loads((more / job / "metrics.json").read_text())
        assert record["epochs"] == 2 and record["status"] == "completed"
        origin = str(sweep / job / "checkpoints" / "last.ckpt")
        assert record["resumed_from"]["checkpoint"] == origin


@pytest.mark.slow  # two sweeps of train.py; test_folder_contract.py checks the refusal in-process
def test_a_sweep_run_again_with_other_settings_leaves_the_old_jobs_alone(tmp_path):
    base = [*TINY, "data=synthetic", "data.num_train=64", "data.num_test=32"]
    first = run_script("train.py", "-m", *base, f"hydra.sweep.dir={tmp_path}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    recorded = (tmp_path / "0" / "metrics.json").read_text()
    other = run_script(
        "train.py",
        "-m",
        *base,
        "model.optimizer.lr=0.3",
        f"hydra.sweep.dir={tmp_path}",
        cwd=tmp_path,
    )
    assert other.returncode == 2  # the whole sweep stops: its folder is another sweep's
    last = other.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 1 of 1 jobs cannot run, so none was started: job 0 (0): ")
    assert f"{tmp_path / '0'} holds a run with other settings (model.optimizer.lr=0.1 there" in last
    assert (tmp_path / "0" / "metrics.json").read_text() == recorded
