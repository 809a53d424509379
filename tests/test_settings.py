"""Resolving the config into the run's settings: devices, processes and who starts them, the
global and per-process batch, the learning rate, and every value error, for this machine and
for machines it is not (a GPU server, a cluster job), since the resolution is pure."""

from __future__ import annotations

import ast
import atexit
import inspect
import os
import re
import socket
import tempfile
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import CONF, TINY, compose_config, examples, resolve_on, run_script
from hydra.utils import get_class as locate
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from multigpu.config import names, schema
from multigpu.config.errors import UserError
from multigpu.config.launch import PROCESS_VARIABLES, check_launched
from multigpu.config.settings import check_split_weights, parse_devices
from multigpu.run.command_line import refusal
from multigpu.run.fit import build_strategy
from multigpu.tools.bench.mistakes import CORES, MISTAKES


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
    run = resolve_on(cfg)
    strategy = build_strategy(cfg.strategy, run)
    assert run.strategy == "scatter_allreduce" and len(strategy.parallel_devices) == 2
    assert run.trainer_devices == 1 and run.processes == 1 and run.launcher == "none"


def test_ddp_trainer_devices_are_a_count_on_cpu(tmp_path):
    cfg = compose_config(
        ["strategy=ddp", "trainer.accelerator=cpu", "trainer.devices=[0,1]"], tmp_path
    )
    run = resolve_on(cfg)
    assert run.trainer_devices == 2 and run.processes == 2 and run.launcher == "popen"
    spawn = resolve_on(compose_config(["strategy=ddp_spawn", "trainer.accelerator=cpu"], tmp_path))
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
TORCHRUN_2 |= {"WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "none"}  # torchrun sets its run id
SRUN_2 = {"SLURM_NTASKS": "2", "SLURM_JOB_NAME": "train", "SLURM_PROCID": "0"}
SRUN_2 |= {"SLURM_LOCALID": "0", "SLURM_NODEID": "0"}  # srun sets them in every task


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


def test_a_rank_set_by_hand_is_refused_before_anything(tmp_path):
    """``LOCAL_RANK=1 python train.py``: the run had trained as rank 1, which writes nothing, and
    exited 0 with a checkpoint but no ``metrics.json`` and no lock."""
    cfg = compose_config(TINY, tmp_path)
    with pytest.raises(UserError) as refused:
        resolve_on(cfg, environ={"LOCAL_RANK": "1"})
    assert str(refused.value) == (
        "LOCAL_RANK=1 is set, but no launcher started this process (torchrun, srun and "
        "Lightning's DDP set it together with TORCHELASTIC_RUN_ID, SLURM_JOB_ID or MASTER_ADDR "
        "and MASTER_PORT): unset LOCAL_RANK, or start the run with torchrun or srun"
    )


# An LSF job's rank file: its launch host, then its compute hosts, this one among them.
_descriptor, RANKFILE = tempfile.mkstemp(prefix="ranks")
os.close(_descriptor)
Path(RANKFILE).write_text(f"launch-host\n{socket.gethostname()}\n")
atexit.register(os.unlink, RANKFILE)
LAUNCHED_BY = {  # what each launcher sets besides a process's rank
    "nothing": {},
    "torchrun": {**TORCHRUN_2, "TORCHELASTIC_RUN_ID": "abc"},
    "srun": {**SRUN_2, "SLURM_JOB_ID": "41"},
    "salloc": {"SLURM_JOB_ID": "41", "SLURM_JOB_NAME": "bash"},
    "lsf_batch_script": {"LSB_JOBID": "5"},
    "jsrun": {"LSB_JOBID": "5", "LSB_DJOB_RANKFILE": RANKFILE}
    | {"JSM_NAMESPACE_LOCAL_RANK": "0", "JSM_NAMESPACE_SIZE": "2"},
    "lightning": {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "9101", "NODE_RANK": "0"},
    "lightning_child": {
        **{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "9101", "NODE_RANK": "0"},
        "MULTIGPU_DDP_PARENT": str(os.getppid()),  # this process's parent started it
    },
}


def started_by_hand(environ: dict, launcher: str) -> bool:
    """A rank no launcher set: none there, srun's beyond the first outside srun, or a rank
    beside Lightning's address in a process Lightning did not start (the second computation
    of ``check_launched``'s rule)."""
    if not any(name in environ for name in PROCESS_VARIABLES):
        return False
    child_rank = {"RANK", "LOCAL_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE", "JSM_NAMESPACE_RANK"}
    # torchrun sets every rank itself; srun only SLURM_PROCID: any other rank in an srun task
    # or a Lightning address comes from Lightning's start of a process (its parent marked).
    own = {"torchrun": child_rank, "jsrun": {"JSM_NAMESPACE_RANK"}}.get(launcher, set())
    others = child_rank & set(environ) - own
    return (
        launcher in ("nothing", "lsf_batch_script")
        or launcher == "salloc"
        and environ.get("SLURM_PROCID", "0") != "0"
        or bool(others)
        and launcher != "lightning_child"
    )


def rank_beyond_size(environ: dict) -> str | None:
    """The rank at or above its size (ranks count from 0 to the size - 1), if one is."""
    pairs = (("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE"))
    for rank, size in (*pairs, ("SLURM_PROCID", "SLURM_NTASKS")):
        if environ.get(rank, "").isdigit() and environ.get(size, "").isdigit():
            if int(environ[rank]) >= int(environ[size]):
                return rank
    return None


@examples(60)
@given(
    st.dictionaries(st.sampled_from(PROCESS_VARIABLES), st.sampled_from(["0", "1", "3", ""])),
    st.sampled_from(sorted(LAUNCHED_BY)),
)
def test_a_process_is_taken_as_one_of_a_run_only_where_a_launcher_started_it(given_, launcher):
    """Whatever rank variables are set, and by whatever else: they are believed where a
    launcher's own variables are there too, else refused in one line naming each of them."""
    environ = {**LAUNCHED_BY[launcher], **given_}
    by_hand = started_by_hand(environ, launcher)
    no_number = [name for name in PROCESS_VARIABLES if not environ.get(name, "0").isdigit()]
    try:
        check_launched(environ)
    except UserError as refused:
        said = str(refused)
        assert "\n" not in said
        if no_number:  # a rank no launcher sets, wherever it came from: named with its value
            assert said.startswith(f"{no_number[0]}={environ[no_number[0]]!r} is not a process")
            return
        if beyond := rank_beyond_size(environ):  # no launcher starts it
            assert said.startswith(f"{beyond}={environ[beyond]} is not a process of ")
            return
        assert by_hand
        assert all(f"{name}={value}" in said for name, value in given_.items())
        assert said.endswith("or start the run with torchrun or srun")
        return
    assert not by_hand and not no_number and not rank_beyond_size(environ)


def test_every_process_of_a_cluster_run_names_its_folder_alike():
    from multigpu.config.launch import run_name

    slurm = {**SRUN_2, "SLURM_JOB_ID": "41", "SLURM_STEP_ID": "0"}
    assert run_name(slurm) == run_name({**slurm, "SLURM_PROCID": "1"}) == "slurm-41.0"
    array = {**slurm, "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "3"}
    assert run_name(array) == "slurm-40_3.0"
    torchrun = {**TORCHRUN_2, "TORCHELASTIC_RUN_ID": "abc"}
    assert run_name(torchrun) == run_name({**torchrun, "RANK": "1"}) == "torchrun-abc"
    # An id given by hand is one folder's name: ../../x had written outside the runs folder.
    assert run_name({**slurm, "SLURM_JOB_ID": "../../x"}) == "slurm-..%2F..%2Fx.0"
    assert run_name({**torchrun, "TORCHELASTIC_RUN_ID": "a/b"}) == "torchrun-a%2Fb"
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
    torchrun = {**TORCHRUN_2, "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}  # two nodes of four
    run = resolve_on(compose_config(overrides, tmp_path), cuda_devices=4, environ=torchrun)
    assert (run.devices, run.processes, run.batch_size, run.process_batch_size) == (8, 8, 256, 32)
    assert run.lr == 0.1
    record = run.record()
    assert record["devices"] == 8 and record["device_ids"] == [0, 1, 2, 3]


def test_precision_aliases_resolve_and_fp16_needs_cuda(tmp_path):
    assert resolve_on(compose_config(["trainer.precision=bf16"], tmp_path)).precision == (
        "bf16-mixed"
    )
    on_gpu = compose_config(["trainer.precision=16"], tmp_path)
    assert resolve_on(on_gpu, cuda_devices=1).precision == "16-mixed"
    with pytest.raises(UserError, match="fp16 needs CUDA"):
        resolve_on(compose_config(["trainer.precision=16-true"], tmp_path))


@pytest.mark.parametrize("fused", ["true", "false", "null"])
@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed", "32-true", "bf16-true"])
@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_the_update_is_fused_where_lightning_can_clip_it(fused, precision, clip, tmp_path):
    """Lightning clips no fused optimizer's gradients under mixed precision (it would unscale
    fp16's itself, after the clipping): null fuses everywhere else, an explicit true there is
    refused before anything starts, false never fuses."""
    overrides = [f"trainer.precision={precision}", f"model.optimizer.fused={fused}"]
    cfg = compose_config([*overrides, f"+trainer.gradient_clip_val={clip}"], tmp_path)
    refused = clip > 0 and precision.endswith("-mixed")
    if fused == "true" and refused:
        with pytest.raises(UserError, match=r"^model.optimizer.fused=true with trainer.gradient"):
            resolve_on(cfg, cuda_devices=1)
        return
    run = resolve_on(cfg, cuda_devices=1)
    assert run.fused == {"true": True, "false": False, "null": not refused}[fused]
    assert run.record()["fused"] == run.fused


@examples(60)
@given(
    fused=st.sampled_from([True, False, None]),
    precision=st.sampled_from(names.CUDA_PRECISIONS),
    clip=st.none() | st.sampled_from([0.0, 0]) | st.floats(1e-6, 1e6),
)
def test_a_fused_update_is_chosen_or_refused_exactly_where_lightning_clips_it(
    fused, precision, clip
):
    """Against Lightning's own precision plugin: the resolved update is one Lightning can clip
    (its ``clip_gradients`` on that optimizer raises nothing); an explicit ``fused=true`` is
    refused exactly where Lightning's would raise; null fuses wherever Lightning can clip."""
    from pytorch_lightning.plugins.precision import MixedPrecision, Precision

    from multigpu.config.settings import fused_update

    trainer = {} if clip is None else {"gradient_clip_val": clip}
    mixed = precision.endswith("-mixed")
    plugin = MixedPrecision(precision, device="cpu") if mixed else Precision()

    def clips(fused_optimizer: bool) -> bool:
        weight = torch.nn.Parameter(torch.ones(3))
        weight.grad = torch.ones(3)
        optimizer = torch.optim.SGD([weight], lr=0.1, fused=fused_optimizer)
        try:
            plugin.clip_gradients(optimizer, clip_val=clip or 0.0)
        except RuntimeError:
            return False
        return True

    try:
        chosen = fused_update({"fused": fused}, trainer, precision)
    except UserError:
        assert fused is True and not clips(True)
        return
    assert clips(chosen)
    assert chosen == (fused if fused is not None else clips(True))


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
    strategy = build_strategy(cfg.strategy, resolve_on(cfg))
    assert strategy.root_device == torch.device("cpu")


# Every value checked before torch: one line naming the value and the fix ------------------------
SRUN_2_NODES = {**SRUN_2, "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "1"}


def values_on(cpu_cores: int, cuda_devices: int = 0):
    """The command line's check of the values (``training_values``), on a machine described."""

    def check(cfg) -> None:
        resolve_on(cfg, cuda_devices=cuda_devices, cpu_cores=cpu_cores)

    return check


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_every_mistake_is_answered_in_one_line_before_torch(case, tmp_path):
    """The one list of config mistakes, each through what ``train.py`` runs before torch
    (``command_line.refusal``: the names, then the values on the same composition), or the
    job's own check of the values where the command line is not plain enough for that."""
    overrides, text = MISTAKES[case]
    message = refusal([*TINY, *overrides], "config", values_on(CORES))
    if message is None:
        with pytest.raises(UserError) as err:
            resolve_on(compose_config([*TINY, *overrides], tmp_path), cpu_cores=CORES)
        message = str(err.value)
    assert text in message and "\n" not in message


@pytest.mark.parametrize(
    "environ,overrides",
    [
        (TORCHRUN_2 | {"WORLD_SIZE": "4"}, ["trainer.devices=2"]),
        (SRUN_2_NODES, ["trainer.devices=1"]),
        ({}, ["trainer.devices=1", "hydra/launcher=slurm"]),
    ],
    ids=["torchrun", "srun", "sweep-on-slurm"],
)
def test_several_nodes_run_under_a_cluster_launcher(environ, overrides, tmp_path):
    """Accepted where a launcher starts the other machines' processes (the SLURM sweep
    launcher's jobs run under srun, and a sweep is checked before they are submitted)."""
    cfg = compose_config([*TINY, "strategy=ddp", "trainer.num_nodes=2", *overrides], tmp_path)
    run = resolve_on(cfg, cpu_cores=4, environ=environ)
    assert run.num_nodes == 2 and run.processes == 2 * len(run.device_ids)


def test_a_batch_larger_than_the_training_set_is_one_step_per_epoch(tmp_path):
    """Allowed: smoke runs on a few images rely on it (the batch is then the whole set)."""
    overrides = ["data=synthetic", "data.num_train=64", "data.batch_size=256"]
    assert resolve_on(compose_config([*TINY, *overrides], tmp_path)).batch_size == 256


@pytest.mark.parametrize(
    "group", ["experiment", "strategy", "data", "model/scheduler", "hparams_search"]
)
def test_every_shipped_option_passes_the_checks(group, tmp_path):
    """The checks refuse mistakes, not what the project ships."""
    plus = "+" if group == "model/scheduler" else ""
    for path in sorted((CONF / group).glob("*.yaml")):
        cfg = compose_config([f"{plus}{group}={path.stem}"], tmp_path)
        assert resolve_on(cfg, cuda_devices=4, cpu_cores=8).lr > 0, path.stem


# The names the checks read without torch, against what torch and our code take -----------------
def parameters(target) -> list[str]:
    return [p for p in inspect.signature(target).parameters if p not in ("kwargs", "params")]


def keys(model) -> list[str]:
    return [*model.model_fields, *model.nodes]


def test_network_keys_are_the_network_parameters():
    from multigpu.models import resnet18

    assert keys(schema.BUILDS["model.net"][names.NETWORK]) == parameters(resnet18)


def test_optimizer_scheduler_and_compile_keys_are_torchs():
    assert set(keys(schema.Optimizer)) <= set(parameters(torch.optim.SGD))
    for target, model in schema.BUILDS["model.scheduler"].items():
        scheduler = locate(target)
        assert set(keys(model)) <= set(parameters(scheduler)), target
        required = [
            name
            for name, p in inspect.signature(scheduler).parameters.items()
            if p.default is inspect.Parameter.empty and name != "optimizer"
        ]
        assert [k for k, f in model.model_fields.items() if f.is_required()] == required
        assert list(names.SCHEDULER_EPOCH_KEYS[target]) == required  # the lengths
    assert set(keys(schema.Compile)) <= set(parameters(torch.compile))


def test_trainer_keys_are_lightnings_in_its_order():
    import pytorch_lightning as pl

    assert keys(schema.Trainer) == parameters(pl.Trainer.__init__)[1:]


def test_data_strategy_and_model_keys_are_their_constructors():
    from multigpu.data import ImageDataModule
    from multigpu.models.classifier import ImageClassifier

    per_device = {"batch_size_per_device"}  # the settings turn it into the global batch
    assert set(keys(schema.ImageData)) - per_device == set(parameters(ImageDataModule))
    for target, model in schema.BUILDS["data"].items():
        own = set(parameters(ImageDataModule)) | set(parameters(locate(target)))
        assert set(keys(model)) - per_device == own, target
    assert set(keys(schema.Data)) == set().union(*map(keys, schema.BUILDS["data"].values()))
    for target, model in schema.BUILDS["strategy"].items():
        own = set(parameters(locate(target))) - {"device", "parallel_devices", "accelerator"}
        own -= {"checkpoint_io", "precision_plugin"}  # set by Lightning, not the config
        assert set(keys(model)) == own, target
    assert set(keys(schema.Model)) == set(parameters(ImageClassifier)) - {"warmup"} | {"lr_scaling"}
    for option in ("fashion_mnist", "synthetic"):
        data = OmegaConf.load(CONF / "data" / f"{option}.yaml")
        assert data._target_ in schema.BUILDS["data"]


def test_logger_keys_are_what_each_logger_and_its_writer_take():
    """Lightning's loggers' arguments, ours (``runs_dir``), and the writer's keyword arguments
    TensorBoardLogger hands on (``SummaryWriter``'s, but the folder it sets itself)."""
    from torch.utils.tensorboard import SummaryWriter

    for target, model in schema.BUILDS["logger"].items():
        logger = locate(target)
        takes = set(parameters(logger)) | set(parameters(logger.__mro__[1]))
        if model is schema.TensorBoard:
            takes |= set(parameters(SummaryWriter)) - {"log_dir"}
        assert set(keys(model)) == takes - {"args"}, target
    for option in ("tensorboard", "csv"):
        logger_cfg = OmegaConf.load(CONF / "logger" / f"{option}.yaml")
        assert logger_cfg._target_ in schema.BUILDS["logger"]


@examples(300)
@given(
    st.lists(
        st.sampled_from(["a", "..", ".", "", "b c", "x..y", "~", "a~"]), min_size=1, max_size=4
    ),
    st.booleans(),
    st.sampled_from(["name", "version", "sub_dir"]),
)
def test_a_logger_folder_taken_lies_below_its_save_dir(parts, from_root, key):
    """``logger.name``, ``version`` and ``sub_dir`` are folders below ``save_dir``: whatever the
    model takes stays there, as ``os.path.normpath`` joins it (``logger.version=..`` had
    written this run's logs into the date's folder, beside other runs), and none starts with
    ``~`` (``logger.name=~/x`` made a folder named ``~`` in the run's)."""
    from pydantic import ValidationError

    value, save_dir = "/" * from_root + "/".join(parts), "/runs/r"
    try:
        schema.TensorBoard.model_validate({"save_dir": save_dir, key: value})
    except ValidationError:
        assert value.startswith(("/", "~")) or ".." in value.split("/")  # a way out only
        return
    assert not value.startswith("~")
    joined = os.path.normpath(os.path.join(save_dir, value))
    assert joined == save_dir or joined.startswith(save_dir + "/")


def schema_defaults(schema_class) -> dict:
    return {name: schema.default_of(schema_class, name) for name in schema_class.model_fields}


def test_schema_yaml_and_constructor_defaults_agree():
    """One default per key: wherever a constructor's signature or a shipped YAML sets a key the
    schema declares, they agree with the schema (interpolations such as ``${seed}`` aside)."""
    from multigpu.data import FashionMNISTDataModule, ImageDataModule, SyntheticDataModule
    from multigpu.models import resnet18
    from multigpu.models.classifier import ImageClassifier

    nodes = [
        ("data", [ImageDataModule, FashionMNISTDataModule, SyntheticDataModule], "data", None),
        ("model", [ImageClassifier], "model", None),
        ("model.net", [resnet18], "model", "net"),
        ("model.optimizer", [], "model", "optimizer"),
        ("trainer", [], "trainer", None),
    ]
    # Each group's default option (another option, such as data=synthetic, sets its own values).
    default_option = {"data": "fashion_mnist", "model": "resnet18", "trainer": "default"}
    checked = 0
    for path, constructors, group, inner in nodes:
        defaults = schema_defaults(schema.SCHEMAS[path])
        for constructor in constructors:
            for name, p in inspect.signature(constructor).parameters.items():
                if name in defaults and p.default is not inspect.Parameter.empty:
                    assert p.default == defaults[name], f"{constructor.__name__}({name}=...)"
                    checked += 1
        node = OmegaConf.load(CONF / group / f"{default_option[group]}.yaml")
        node = node[inner] if inner else node
        for key in node:
            if key in defaults and not OmegaConf.is_interpolation(node, key):
                value = OmegaConf.to_container(node)[key]
                assert value == defaults[key], f"{group}/{default_option[group]}.yaml: {key}"
                checked += 1
    assert checked > 30


def test_each_choice_is_one_literal_type_that_the_checks_and_the_code_read():
    """A choice's names live in one ``Literal`` type: the schema annotates its key with it (the
    checks refuse any other name and list exactly these), and the code implementing it takes it."""
    from multigpu.data import ImageDataModule
    from multigpu.models import resnet18
    from multigpu.models.classifier import ImageClassifier

    found = schema.choices()
    for key, accepted in found.items():
        cfg = compose_config([*TINY, f"++{key}=nosuch"], Path("/tmp/x"))
        with pytest.raises(UserError, match="use one of (.*)") as refused:
            resolve_on(cfg)
        assert str(refused.value).endswith(f"use one of {', '.join(accepted)}"), key
    implemented_by = {
        "data.pipeline": (ImageDataModule.__init__, "pipeline"),
        "model.net.norm": (resnet18, "norm"),
        "model.scheduler_interval": (ImageClassifier.__init__, "scheduler_interval"),
        "model.weight_decay_on": (ImageClassifier.__init__, "weight_decay_on"),
    }
    for key, (code, argument) in implemented_by.items():
        assert typing.get_args(typing.get_type_hints(code)[argument]) == found[key], key
    assert set(found) >= {*implemented_by, "model.lr_scaling.rule", "strategy.start_method"}


def test_every_number_of_the_schema_has_a_range():
    """One table of ranges, over exactly the schema's numbers (keys whose type takes a number,
    alone or among others: ``fast_dev_run`` is true, false or a count)."""
    numbers = set()
    schedulers = [("model.scheduler", node) for node in schema.SCHEDULERS.values()]
    for path, node in [*schema.SCHEMAS.items(), *schedulers]:
        for name in node.model_fields:
            annotation = typing.get_type_hints(node)[name]
            alone = typing.get_origin(annotation) in (list, None)  # a list is not a number
            takes = {annotation} if alone else set(typing.get_args(annotation))
            if {int, float} & takes:
                numbers.add(f"{path}.{name}".lstrip("."))
    # Besides: a list of accuracies, and a value allowed alone, whose words say why.
    assert numbers == set(schema.ranges()) - {"time_to_targets", "trainer.barebones"}


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "overrides,text",
    [
        (["model.optimizer.lr=nan"], "model.optimizer.lr=nan must be a finite number"),
        (["strategy=ddp", "trainer.num_nodes=2"], "trainer.num_nodes=2 needs a launcher"),
    ],
    ids=["lr_nan", "nodes_without_launcher"],
)
def test_train_py_answers_in_one_line_before_torch(overrides, text, tmp_path):
    env = {"PYTHONPROFILEIMPORTTIME": "1"}
    result = run_script("train.py", *TINY, *overrides, cwd=tmp_path, timeout=120, env=env)
    said = result.stderr.splitlines()
    imported = {line.rsplit("|", 1)[-1].strip() for line in said if line.startswith("import time:")}
    lines = [line for line in said if line.strip() and not line.startswith("import time:")]
    assert result.returncode == 2, "\n".join(lines[-20:])
    assert "Traceback" not in result.stderr and lines[-1].startswith("error: ")
    assert text in lines[-1] and sum(line.startswith("error:") for line in lines) == 1
    assert "hydra" in imported and "torch" not in imported


def test_the_default_strategy_is_single_on_one_device_and_ddp_on_several():
    from multigpu.config.settings import slurm_tasks_per_node

    def resolved(*overrides: str, **machine):
        return resolve_on(compose_config(list(overrides), Path("/tmp/x")), **machine)

    one, two = resolved(cpu_cores=4), resolved("trainer.devices=2", cpu_cores=4)
    assert (one.strategy, one.processes, two.strategy, two.processes) == ("single", 1, "ddp", 2)
    gpus = resolved("trainer.devices=[2,3]", "trainer.accelerator=gpu", cuda_devices=4)
    assert (gpus.strategy, gpus.device_ids, gpus.trainer_devices) == ("ddp", (2, 3), [2, 3])
    assert slurm_tasks_per_node("auto", 2) == 2 and slurm_tasks_per_node("auto", 1) == 1


def test_the_compile_modes_are_torchs():
    """``model.compile.mode`` is checked before torch loads against this copy of its list."""
    from torch._inductor import list_mode_options

    assert set(typing.get_args(names.CompileMode)) == set(list_mode_options())


def test_the_profilers_are_lightnings_in_any_case():
    """``+trainer.profiler`` is checked before torch loads against this copy of Lightning's
    names, which Lightning reads in any case; its own refusal lists them."""
    from pytorch_lightning.trainer.setup import _init_profiler
    from pytorch_lightning.utilities.exceptions import MisconfigurationException

    from multigpu.config.schema import check_ranges_and_names

    with pytest.raises(MisconfigurationException) as refused:
        _init_profiler(SimpleNamespace(), "sideways")
    listed = ast.literal_eval(str(refused.value).rpartition("one of ")[2])
    assert list(typing.get_args(names.Profiler)) == [n for n in listed if n != "xla"]  # TPUs'
    listed.remove("xla")
    for name in (*listed, "Simple", "PYTORCH"):
        check_ranges_and_names({"trainer": {"profiler": name}}, ("trainer.",))
    with pytest.raises(UserError, match="trainer.profiler='sideways' is not known: use one of"):
        check_ranges_and_names({"trainer": {"profiler": "sideways"}}, ("trainer.",))


@pytest.mark.parametrize(
    ("environ", "said"),
    [
        ({"TORCHELASTIC_RUN_ID": "abc"}, "TORCHELASTIC_RUN_ID=abc is set, but not RANK, "
         "LOCAL_RANK, WORLD_SIZE, which torchrun sets with it: unset TORCHELASTIC_RUN_ID (left "
         "over from another job?), or start the run with torchrun"),
        ({"TORCHELASTIC_RUN_ID": "abc", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"},
         "RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 is set with TORCHELASTIC_RUN_ID=abc, but not "
         "GROUP_RANK, LOCAL_WORLD_SIZE, which torchrun sets with them: unset RANK LOCAL_RANK "
         "WORLD_SIZE and TORCHELASTIC_RUN_ID"),
        ({**SRUN_2, "SLURM_JOB_ID": "77", "SLURM_NODEID": None}, "SLURM_NTASKS=2 is set, but "
         "not SLURM_NODEID, which srun sets with it"),
        ({"SLURM_NTASKS": "2", "SLURM_JOB_NAME": "interactive"}, None),  # Lightning reads none
    ],
    ids=["torchrun_id_alone", "torchrun_id_with_ranks", "srun_without_node",
         "interactive_allocation"],
)  # fmt: skip
def test_a_launchers_mark_without_what_it_sets_beside_is_refused(environ, said):
    """``TORCHELASTIC_RUN_ID=abc python train.py``: Lightning takes the id alone for torchrun and
    read ``LOCAL_RANK`` (a KeyError after the run's folder was made, a ``failed`` record)."""
    environ = {name: value for name, value in environ.items() if value is not None}
    if said is None:
        check_launched(environ)
        return
    with pytest.raises(UserError, match=f"^{re.escape(said)}"):
        check_launched(environ)


@pytest.mark.parametrize(
    ("environ", "said"),
    [
        ({"PL_TRAINER_LIMIT_TRAIN_BATCHES": "1"}, "PL_TRAINER_LIMIT_TRAIN_BATCHES=1 is set: "
         "Lightning would give the Trainer limit_train_batches=1 behind the config and the "
         "run's record; unset PL_TRAINER_LIMIT_TRAIN_BATCHES, and set trainer."
         "limit_train_batches in the config (+trainer.limit_train_batches=... where it has "
         "none)"),
        ({"PL_TRAINER_MAX_EPOCHS": "1\n2"}, "PL_TRAINER_MAX_EPOCHS='1\\n2' is set"),
        ({"PL_TRAINER_MAX_EPOCHS": ""}, None),  # Lightning skips an empty one
        ({"MASTER_PORT": "²"}, "MASTER_PORT='²' is not a TCP port"),
        ({"SLURM_JOB_ID": "1", **SRUN_2, "SLURM_NTASKS": "²"}, "SLURM_NTASKS='²' is not a "
         "process number"),
        ({"PL_TRAINER_NOSUCH": "1"}, None),  # Lightning reads only its Trainer's arguments
        ({"SLURM_JOB_ID": "123", **SRUN_2, "SLURM_NTASKS": "1", "SLURM_PROCID": "1"},
         "SLURM_PROCID=1 is not a process of SLURM_NTASKS=1 (ranks count from 0 to "
         "SLURM_NTASKS - 1)"),
        ({"SLURM_JOB_ID": "123", **SRUN_2, "SLURM_NTASKS": "two"},
         "SLURM_NTASKS='two' is not a process number"),
        ({"MASTER_PORT": "abc"}, "MASTER_PORT='abc' is not a TCP port (1 to 65535)"),
        ({"MASTER_PORT": "65536"}, "MASTER_PORT='65536' is not a TCP port (1 to 65535)"),
        ({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "65535"}, None),
        ({"MASTER_ADDR": "nohost.invalid", "MASTER_PORT": "29500"}, "MASTER_ADDR="
         "'nohost.invalid' is no host this machine can find ("),  # .invalid: never a host
        ({"MASTER_ADDR": "localhost", "MASTER_PORT": "29500"}, None),
    ],
    ids=["trainer_default", "value_of_two_lines", "empty", "port_not_ascii", "tasks_not_ascii",
         "not_an_argument", "srun_rank_beyond", "srun_tasks_no_number",
         "port_no_number", "port_too_high", "port_highest", "address_unknown", "address_known"],
)  # fmt: skip
def test_what_the_environment_changes_behind_the_config_is_refused(environ, said):
    """Found by a fresh try: ``PL_TRAINER_LIMIT_TRAIN_BATCHES=1`` trained one batch an epoch,
    recorded as whole ones; ``SLURM_PROCID=1`` of one task trained unrecorded and exited 0;
    ``MASTER_PORT=abc`` was a traceback once the run's folder was made, an unknown
    ``MASTER_ADDR`` one after the collective's time-out."""
    if said is None:
        check_launched(environ)
        return
    with pytest.raises(UserError, match=f"^{re.escape(said)}"):
        check_launched(environ)


def test_a_master_port_another_program_holds_is_refused_before_the_run(tmp_path):
    """Found by a fresh try: a ``MASTER_PORT`` another program held was torch's EADDRINUSE
    traceback once the run's folder was made. The processes Lightning starts meet at their
    first process's port, which it holds by then: not refused."""
    import socket

    cfg = compose_config([*TINY, "strategy=ddp", "trainer.devices=2"], tmp_path)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = str(held.getsockname()[1])
        with pytest.raises(UserError, match=f"^MASTER_PORT={port} cannot be opened for DDP's"):
            resolve_on(cfg, environ={"MASTER_PORT": port})
        child = {**LAUNCHED_BY["lightning_child"], "MASTER_PORT": port, "LOCAL_RANK": "1"}
        assert resolve_on(cfg, environ=child).launcher == "popen"
    assert resolve_on(cfg, environ={"MASTER_PORT": port}).processes == 2  # free again


def test_a_rank_that_is_no_number_is_named_with_its_value(monkeypatch):
    """``RANK=abc python train.py`` had answered ``the config could not be checked (ValueError:
    invalid literal for int() ...)``, naming neither the variable nor the fix."""
    from multigpu.storage import record

    with pytest.raises(UserError, match=r"^RANK='abc' is not a process number .*unset RANK"):
        check_launched({"RANK": "abc", "TORCHELASTIC_RUN_ID": "x"})
    monkeypatch.setattr(record.rank_zero_only, "rank", None, raising=False)  # Lightning unset
    monkeypatch.setenv("RANK", "abc")
    assert record.is_rank_zero() is False  # read before the check: no traceback
    monkeypatch.setenv("RANK", "0")
    assert record.is_rank_zero() is True


def test_an_lsf_task_is_refused_where_its_rank_file_does_not_list_this_host(tmp_path):
    """Lightning finds a jsrun task's node in ``LSB_DJOB_RANKFILE``: a file it cannot read,
    without compute hosts or without this one was an IndexError or a KeyError from inside it
    once the run's folder existed (found by a fresh try)."""
    jsrun = LAUNCHED_BY["jsrun"]
    check_launched(jsrun)
    ranks = tmp_path / "ranks"
    for text, said in [
        (None, "cannot be read (No such file or directory)"),
        ("", "does not list this host"),
        (f"{socket.gethostname()}\n", "does not list this host"),  # the launch host alone
        ("launch\nelsewhere\n", f"does not list this host, {socket.gethostname()}, after"),
    ]:
        if text is not None:
            ranks.write_text(text)
        with pytest.raises(UserError, match=f"^LSB_DJOB_RANKFILE='{ranks}' {re.escape(said)}"):
            check_launched({**jsrun, "LSB_DJOB_RANKFILE": str(ranks)})


@pytest.mark.parametrize(
    ("environ", "said"),
    [
        ({"SLURM_JOB_ID": "1", "RANK": "1"}, "RANK=1 is set, but SLURM did not start"),
        ({"SLURM_JOB_ID": "1", "LOCAL_RANK": "1"}, "LOCAL_RANK=1 is set, but SLURM did not"),
        ({"LSB_JOBID": "7", "LOCAL_RANK": "2", "WORLD_SIZE": "3"}, "LOCAL_RANK=2 WORLD_SIZE=3 is"),
        (  # outside a jsrun task Lightning runs the process alone: it trained as rank 1
            {"LSB_JOBID": "5", "JSM_NAMESPACE_RANK": "1", "JSM_NAMESPACE_LOCAL_RANK": "1"},
            "JSM_NAMESPACE_RANK=1 is set, but no launcher started this process",
        ),
        (
            {"TORCHELASTIC_RUN_ID": "abc", "RANK": "1", "WORLD_SIZE": "1"},
            "RANK=1 is not a process of WORLD_SIZE=1",
        ),
    ],
)
def test_a_rank_a_cluster_job_did_not_give_is_refused(environ, said):
    """A rank beside a cluster job's variables that neither its launcher (srun sets only
    SLURM_PROCID) nor Lightning's start of a process gave, or one beyond its world: the run
    had trained as that rank, written no record, and replaced a finished run's checkpoint."""
    with pytest.raises(UserError, match=f"^{re.escape(said)}"):
        check_launched(environ)


# The study at TINY's width, which NHWC does not take on a CPU (settings.check_channels_last).
STUDY_TWO_DEVICES = ["experiment=study_two_devices", "~data.normalize", "model.channels_last=false"]


@pytest.mark.parametrize(
    ("overrides", "batch"),
    [
        (["data.batch_size=32"], None),  # the experiment's per-device batch would win, silently
        (["data.batch_size=32", "data.batch_size_per_device=null"], 32),
        (["data.batch_size_per_device=16"], 32),  # 16 on each of 2 devices
        (["~data.batch_size"], 512),  # deleted, not given
    ],
)
def test_a_batch_size_the_per_device_batch_overrules_is_refused(overrides, batch, tmp_path):
    """``experiment=study_two_devices data.batch_size=32`` trained at 512 (its
    ``batch_size_per_device=256`` x 2), with nothing said."""
    from multigpu.config.settings import Machine
    from multigpu.run.admission import admit
    from multigpu.run.cli import hydra_runtime

    given = [*TINY, *STUDY_TWO_DEVICES, "data=synthetic"]
    cfg = compose_config([*given, *overrides], tmp_path / "run")
    machine = Machine(0, CORES, {}, False)
    if batch is not None:
        assert admit(cfg, hydra_runtime(cfg)[0], machine, tmp_path / "run").run.batch_size == batch
        return
    with pytest.raises(UserError, match=r"^data.batch_size=32 is not used: data.batch_size_per_"):
        admit(cfg, hydra_runtime(cfg)[0], machine, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    # As the line says (it had said to pass the per-device batch, which was passed already):
    with pytest.raises(UserError, match="drop data.batch_size=32 from the command, or pass "):
        admit(cfg, hydra_runtime(cfg)[0], machine, tmp_path / "run")
    advised = [o for o in [*given, *overrides] if o != "data.batch_size=32"]
    cfg = compose_config(advised, tmp_path / "run")
    per_device = OmegaConf.select(cfg, "data.batch_size_per_device")
    run = admit(cfg, hydra_runtime(cfg)[0], machine, tmp_path / "run").run
    assert run.devices == 2 and run.batch_size == per_device * run.devices


BATCHES = st.sampled_from([16, 32, 48])


@pytest.mark.slow  # a second an example: admission composes and checks the whole config
@examples(20)
@given(
    experiment=st.sampled_from([[], STUDY_TWO_DEVICES]),
    batch=st.one_of(st.none(), st.tuples(st.sampled_from(["", "++"]), BATCHES)),
    per_device=st.one_of(st.just("absent"), st.none(), BATCHES),
    deleted=st.booleans(),
)
def test_a_batch_size_is_refused_exactly_where_the_per_device_batch_overrules_it(
    experiment, batch, per_device, deleted, tmp_path_factory
):
    """Whatever the command line holds (``data.batch_size`` given plainly or with ``++``,
    deleted with ``~``, ``batch_size_per_device`` set, nulled or left to the config), admission
    either refuses in one line a given batch size that the per-device batch makes unused, or
    admits a run whose batch is the one the settings say: per device x devices where the
    per-device batch is set, else ``data.batch_size`` (deleted, with nothing in its place: the
    line that asks for one)."""
    from multigpu.config.settings import Machine
    from multigpu.run.admission import admit
    from multigpu.run.cli import hydra_runtime

    overrides = [*TINY, "data=synthetic", "strategy=scatter_allreduce", *experiment]
    overrides += [] if batch is None else [f"{batch[0]}data.batch_size={batch[1]}"]
    overrides += ["~data.batch_size"] if deleted and batch is None else []
    if per_device != "absent":
        overrides.append(
            f"data.batch_size_per_device={'null' if per_device is None else per_device}"
        )
    folder = tmp_path_factory.mktemp("run") / "run"
    cfg = compose_config(overrides, folder)
    configured = OmegaConf.select(cfg, "data.batch_size_per_device")
    machine = Machine(0, CORES, {}, False)
    if configured is None and deleted and batch is None:
        with pytest.raises(UserError, match=r"^data.batch_size=null must be a positive integer"):
            admit(cfg, hydra_runtime(cfg)[0], machine, folder)
        return
    if configured is not None and batch is not None:
        with pytest.raises(UserError, match=rf"^data.batch_size={batch[1]} is not used: "):
            admit(cfg, hydra_runtime(cfg)[0], machine, folder)
        assert not folder.exists()
        return
    run = admit(cfg, hydra_runtime(cfg)[0], machine, folder).run
    devices = run.devices
    expected = configured * devices if configured is not None else cfg.data.batch_size
    assert run.batch_size == expected
