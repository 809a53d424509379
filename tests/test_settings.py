"""Resolving the config into the run's settings: devices, processes and who starts them, the
global and per-process batch, the learning rate, and every value error, for this machine and
for machines it is not (a GPU server, a cluster job), since the resolution is pure."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import compose_config, resolve_on

from multigpu.errors import UserError
from multigpu.fit import build_strategy
from multigpu.settings import check_split_weights, parse_devices
from multigpu.training import resolve


@pytest.mark.parametrize(
    "devices,ids",
    [(1, [0]), (3, [0, 1, 2]), ([2, 3], [2, 3]), ("2,3", [2, 3]), ("[0,1]", [0, 1]), ("2", [0, 1])],
)
def test_device_ids(devices, ids):
    assert parse_devices(devices, cuda_devices=0) == ids


def test_every_device_means_every_gpu_or_one_cpu():
    assert parse_devices(-1, cuda_devices=4) == parse_devices("auto", 4) == [0, 1, 2, 3]
    assert parse_devices(-1, cuda_devices=0) == [0]


@pytest.mark.parametrize("devices", [0, -2, [], [-1], "two", True, [0.5]])
def test_bad_device_values_name_the_value(devices):
    with pytest.raises(UserError, match="trainer.devices"):
        parse_devices(devices, cuda_devices=0)


def test_device_list_from_the_command_line_builds_replicas(tmp_path):
    cfg = compose_config(
        ["strategy=scatter_allreduce", "trainer.accelerator=cpu", "trainer.devices=[2,3]"], tmp_path
    )
    run = resolve(cfg)
    strategy = build_strategy(cfg.strategy, run)
    assert run.strategy == "scatter_allreduce" and len(strategy.parallel_devices) == 2
    assert run.trainer_devices == 1 and run.processes == 1 and run.launcher == "none"


def test_ddp_trainer_devices_are_a_count_on_cpu(tmp_path):
    cfg = compose_config(
        ["strategy=ddp", "trainer.accelerator=cpu", "trainer.devices=[0,1]"], tmp_path
    )
    run = resolve(cfg)
    assert run.trainer_devices == 2 and run.processes == 2 and run.launcher == "popen"
    spawn = resolve(compose_config(["strategy=ddp_spawn", "trainer.accelerator=cpu"], tmp_path))
    assert spawn.strategy == "ddp_spawn" and spawn.launcher == "spawn"


@pytest.mark.parametrize(
    "strategy,torch_devices,trainer_devices",
    [
        ("single", ["cuda:3"], 1),
        ("dp", ["cuda:2", "cuda:3"], 1),
        ("scatter_allreduce", ["cuda:2", "cuda:3"], 1),
        ("ddp", ["cuda:2", "cuda:3"], [2, 3]),
    ],
)
def test_gpu_layouts(strategy, torch_devices, trainer_devices, tmp_path):
    devices = "[3]" if strategy == "single" else "[2,3]"
    cfg = compose_config([f"strategy={strategy}", f"trainer.devices={devices}"], tmp_path)
    run = resolve_on(cfg, cuda_devices=4)
    assert run.accelerator == "cuda"  # auto, on a machine with GPUs
    assert run.torch_devices == torch_devices and run.trainer_devices == trainer_devices


def test_gpu_ids_must_exist(tmp_path):
    cfg = compose_config(["strategy=dp", "trainer.devices=[0,7]"], tmp_path)
    with pytest.raises(UserError, match=r"CUDA device\(s\) \[7\], but this machine has 2"):
        resolve_on(cfg, cuda_devices=2)


TORCHRUN_2 = {"RANK": "0", "GROUP_RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
TORCHRUN_2 |= {"WORLD_SIZE": "2"}
SRUN_2 = {"SLURM_NTASKS": "2", "SLURM_JOB_NAME": "train", "SLURM_PROCID": "0"}


@pytest.mark.parametrize(
    "environ,multirun,start_method,launcher",
    [
        ({}, False, "auto", "popen"),
        ({}, True, "auto", "spawn"),
        ({}, False, "spawn", "spawn"),
        (TORCHRUN_2, True, "auto", "cluster"),
        ({**SRUN_2, "SLURM_NTASKS_PER_NODE": "2"}, True, "spawn", "cluster"),
        ({"SLURM_NTASKS": "2", "SLURM_JOB_NAME": "bash"}, False, "auto", "popen"),
    ],
    ids=["plain", "multirun", "ddp_spawn", "torchrun", "srun", "salloc-shell"],
)
def test_who_starts_ddp_processes(environ, multirun, start_method, launcher, tmp_path):
    overrides = ["strategy=ddp", "trainer.devices=2", f"strategy.start_method={start_method}"]
    run = resolve_on(compose_config(overrides, tmp_path), environ=environ, multirun=multirun)
    assert run.launcher == launcher
    assert run.start_method == ("spawn" if launcher == "spawn" else "popen")


@pytest.mark.parametrize(
    "environ,overrides,message",
    [
        (SRUN_2, ["strategy=ddp", "trainer.devices=2"], "SLURM started 2 tasks without "
         "--ntasks-per-node: Lightning places one process per device on each node from it: use "
         "#SBATCH --nodes=1 --ntasks-per-node=2"),
        ({**SRUN_2, "SLURM_NTASKS_PER_NODE": "2"}, ["strategy=ddp", "trainer.devices=4"],
         "the launcher started 2 processes (2 per node), but trainer.devices=4 x "
         "trainer.num_nodes=1 asks for 4: use #SBATCH --nodes=1 --ntasks-per-node=4"),
        (TORCHRUN_2, ["strategy=ddp", "trainer.devices=2", "trainer.num_nodes=2"],
         "asks for 4: use torchrun --nproc_per_node=2 --nnodes=2"),
        (TORCHRUN_2, ["strategy=scatter_allreduce", "trainer.devices=2"],
         "the launcher started 2 processes, but this strategy runs in one: use strategy=ddp"),
    ],
    ids=["srun-n2", "srun-fewer-tasks", "torchrun-one-node", "torchrun-in-process"],
)  # fmt: skip
def test_a_launcher_that_started_other_processes_is_named(environ, overrides, message, tmp_path):
    cfg = compose_config(["trainer.accelerator=cpu", *overrides], tmp_path)
    with pytest.raises(UserError, match=re.escape(message)):
        resolve_on(cfg, cpu_cores=8, environ=environ)


def test_every_process_of_a_cluster_run_names_its_folder_alike():
    from multigpu.launch import run_name

    slurm = {**SRUN_2, "SLURM_JOB_ID": "41", "SLURM_STEP_ID": "0"}
    assert run_name(slurm) == run_name({**slurm, "SLURM_PROCID": "1"}) == "slurm-41.0"
    array = {**slurm, "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "3"}
    assert run_name(array) == "slurm-40_3.0"
    torchrun = {**TORCHRUN_2, "TORCHELASTIC_RUN_ID": "abc"}
    assert run_name(torchrun) == run_name({**torchrun, "RANK": "1"}) == "torchrun-abc"
    alone = run_name({})
    assert re.fullmatch(r"\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d\.\d{6}", alone)


def test_batch_and_lr_follow_the_devices_and_nodes(tmp_path):
    overrides = [
        "strategy=ddp",
        "trainer.devices=4",
        "trainer.num_nodes=2",
        "data.batch_size_per_device=32",
        "model.lr_scaling.rule=linear",
        "model.lr_scaling.base_batch=256",
        "model.optimizer.lr=0.1",
    ]
    run = resolve_on(compose_config(overrides, tmp_path), cuda_devices=4)
    assert (run.devices, run.processes, run.batch_size, run.process_batch_size) == (8, 8, 256, 32)
    assert run.lr == 0.1
    record = run.record()
    assert record["devices"] == 8 and record["device_ids"] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["strategy=dp", "trainer.devices=2"], "DataParallel needs CUDA"),
        (["strategy=single", "trainer.devices=2"], "strategy=single runs on one device"),
        (["strategy=scatter_allreduce", "trainer.num_nodes=2"], "use strategy=ddp for several"),
        (["trainer.num_nodes=0"], "trainer.num_nodes=0 must be a positive integer"),
        (["strategy=ddp", "trainer.devices=3"], "this machine has 2 CPU cores"),
        (["strategy=ddp", "trainer.devices=2", "data.batch_size=5"], "does not divide over 2"),
        (["data.batch_size_per_device=0"], "data.batch_size_per_device=0 must be a positive"),
        (["model.lr_scaling.rule=sqrt"], "model.lr_scaling.rule='sqrt' is not known"),
        (["strategy=ddp", "strategy.start_method=fork"], "strategy.start_method='fork'"),
        (["trainer.accelerator=tpu"], "trainer.accelerator='tpu' is not supported"),
        (["model.net.init_std=0"], "model.net.init_std=0 must be positive, or null"),
        (["model.net.num_classes=1"], "model.net.num_classes=1 must be 2 or more"),
        (["model.optimizer.momentum=-0.5"], "model.optimizer.momentum=-0.5 must be 0 or more"),
        (["data.train_subset=0"], "data.train_subset=0 must be a positive integer"),
        (["+trainer.max_steps=-2"], "trainer.max_steps=-2 must be -1 (no limit) or more"),
        (["strategy=ddp", "strategy.timeout_s=0"], "strategy.timeout_s=0 must be positive"),
        (["check_finite_every_n_steps=0"], "check_finite_every_n_steps=0 must be 1 or more"),
        (["trainer.precision=transformer-engine"], "is not supported on cpu: use one of"),
        (["trainer.num_nodes=two"], "trainer.num_nodes='two' must be an integer, e.g."),
        (["data.flip=sideways"], "data.flip='sideways' must be true or false, e.g. data.flip=true"),
    ],
)
def test_bad_layouts_name_the_value_and_the_fix(overrides, message, tmp_path):
    cfg = compose_config(["trainer.accelerator=cpu", *overrides], tmp_path)
    with pytest.raises(UserError, match=re.escape(message)):
        resolve_on(cfg)


def test_precision_aliases_resolve_and_fp16_needs_cuda(tmp_path):
    assert resolve_on(compose_config(["trainer.precision=bf16"], tmp_path)).precision == (
        "bf16-mixed"
    )
    on_gpu = compose_config(["trainer.precision=16"], tmp_path)
    assert resolve_on(on_gpu, cuda_devices=1).precision == "16-mixed"
    with pytest.raises(UserError, match="fp16 needs CUDA"):
        resolve_on(compose_config(["trainer.precision=16-true"], tmp_path))


def test_compiled_dataparallel_is_refused_on_several_gpus(tmp_path):
    overrides = ["strategy=dp", "trainer.devices=2", "model.compile=true"]
    with pytest.raises(UserError, match="scatter_allreduce"):
        resolve_on(compose_config(overrides, tmp_path), cuda_devices=2)
    one = resolve_on(compose_config([*overrides[:1], "model.compile=true"], tmp_path), 2)
    assert one.strategy == "dp" and one.devices == 1


@pytest.mark.parametrize(
    "weights,message",
    [([1.0], "1 entries for 2 devices"), ([0.5, -0.5], ">= 0"), ([0, 0], "sum to 0")],
)
def test_bad_split_weights(weights, message):
    with pytest.raises(UserError, match=message):
        check_split_weights(weights, 2)


def test_dp_on_cpu_runs_one_device(tmp_path):
    cfg = compose_config(["strategy=dp", "trainer.accelerator=cpu"], tmp_path)
    strategy = build_strategy(cfg.strategy, resolve(cfg))
    assert strategy.root_device == torch.device("cpu")
