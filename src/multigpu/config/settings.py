"""The run, resolved once: the composed config turned into one frozen description of where and
how it runs (device kind and ids, how many processes and who starts them, the global and
per-process batch, the effective learning rate), with every check of the config's values here:
types (the declared models of ``multigpu.config.schema``), then the keys each node may have,
finiteness, ranges and names (the same models), then the cross-checks between values, the
machine and the data's sizes.

A pure function of the config and of what it is told about the machine (``Machine``): it
imports neither torch nor Lightning, so a mistake is answered before they load (in about a
second), and a GPU machine's layout can be resolved (and tested) on a CPU.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from multigpu.config.errors import UserError, as_override, closest, did_you_mean, plain_or_quoted
from multigpu.config.launch import check_port_free, check_world, cluster_started, mark_parent
from multigpu.config.names import (
    COSINE,
    CPU_PRECISIONS,
    CUDA_PRECISIONS,
    DATA_SIZES,
    HYDRA_KEYS,
    IMAGE_CHANNELS,
    NETWORK,
    PRECISION_ALIASES,
    SET_BY_THE_RUN,
    SGD,
    SYNTHETIC,
)
from multigpu.config.schema import (  # noqa: F401 (the limits: this module's too)
    ABSENT,
    BUILDS,
    MAX_SEED,
    MAX_WIDTH,
    Compile,
    Node,
    Synthetic,
    Top,
    Trainer,
    check_ranges_and_names,
    check_types,
    compile_options,
    config_tree,
    default_of,
    example,
    plain,
    select,
    target_of,
)

# How each option of the ``strategy`` group places its work on the devices.
ONE_DEVICE = "one_device"  # the whole step on one device
IN_PROCESS = "in_process"  # one process drives every device (dp, scatter_allreduce)
PER_DEVICE = "per_device"  # one process per device (DDP)
AUTO = "auto"  # the default: single on one device, ddp on several (``chosen_strategy``)
PLACEMENTS = {
    "single": ONE_DEVICE,
    "dp": IN_PROCESS,
    "scatter_allreduce": IN_PROCESS,
    "ddp": PER_DEVICE,
    "ddp_spawn": PER_DEVICE,
}
# The strategies that run several replicas on one device (``trainer.devices=[0,0]``).
REPLICAS_ON_ONE_DEVICE = ("scatter_allreduce",)
# Without any of these, no GPU driver is loaded, so torch would see no GPU either.
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/dxg", "/dev/kfd", "/proc/driver/nvidia")
MAX_INT = 2**63 - 1  # torch keeps integers (sizes, indices) in 64 bits
MAX_DEVICES = 1024  # per node: more than any machine has
SYNTHETIC_SIZES = {
    key: default_of(Synthetic, key) for key in ("num_train", "num_test", "num_classes")
}
# hydra/launcher options whose jobs run under srun, which starts every node's processes.
CLUSTER_LAUNCHERS = ("slurm", "submitit_slurm")


@dataclass(frozen=True)
class Machine:
    """What resolving a run needs to know about where it runs."""

    cuda_devices: int
    cpu_cores: int
    environ: Mapping[str, str]
    multirun: bool  # a job of a Hydra multirun (-m)

    @classmethod
    def this(cls, multirun: bool) -> Machine:
        """This machine, asking torch for its GPUs only where a GPU driver is loaded; this
        process marked as the parent of the processes Lightning may start from it."""
        mark_parent()
        return cls(cuda_device_count(), os.cpu_count() or 1, dict(os.environ), multirun)


def cuda_device_count() -> int:
    if not any(Path(p).exists() for p in GPU_DEVICE_FILES):
        return 0
    import torch  # a GPU machine: only torch knows what CUDA_VISIBLE_DEVICES and the driver allow

    return torch.cuda.device_count()


@dataclass(frozen=True)
class Run:
    """One run's resolved settings; ``metrics.json`` stores them under ``run``."""

    strategy: str  # the ``strategy`` group's option
    accelerator: str  # cpu or cuda
    device_ids: tuple[int, ...]  # on each node; on the CPU, logical devices 0..n-1
    num_nodes: int
    processes: int  # the world size: 1, or one process per device under DDP
    launcher: str  # who starts the processes: none (one), popen, spawn or cluster
    batch_size: int  # global: what one training step loads, over every device
    process_batch_size: int  # what each process loads per step
    lr: float  # after ``model.lr_scaling``
    warmup_epochs: float  # the lr rises to ``lr`` over these first epochs, per step
    warmup_from: float  # from this lr: the unscaled one under the linear rule, else 0
    precision: str
    width: int | None
    norm: str | None
    max_epochs: int | None
    seed: int | None
    data: str  # the ``data`` group's option
    num_workers: int = 0  # loader processes of each training process (``loader_defaults``)
    pin_memory: bool = False  # page-locked host batches, copied to the GPU asynchronously
    fused: bool = False  # SGD's update in one operation per group (``fused_update``)

    @property
    def placement(self) -> str:
        return PLACEMENTS[self.strategy]

    @property
    def devices(self) -> int:
        """Every device of the run, over all nodes: the factor the global batch grows with."""
        return len(self.device_ids) * self.num_nodes

    @property
    def torch_devices(self) -> list[str]:
        """The devices of this node as ``torch.device`` strings (CPU devices repeat ``cpu``)."""
        if self.accelerator == "cuda":
            return [f"cuda:{i}" for i in self.device_ids]
        return ["cpu"] * len(self.device_ids)

    @property
    def trainer_devices(self) -> int | list[int]:
        """Lightning's ``Trainer(devices=...)``: our single-process strategies carry their own
        device list; for DDP, Lightning wants a count on the CPU and ids on CUDA."""
        if self.placement != PER_DEVICE:
            return 1
        return list(self.device_ids) if self.accelerator == "cuda" else len(self.device_ids)

    @property
    def start_method(self) -> str:
        """DDP's ``start_method``: under a cluster launcher Lightning starts nothing itself."""
        return "spawn" if self.launcher == "spawn" else "popen"

    def describe(self) -> str:
        """The layout in one line, for the log."""
        nodes = f" on each of {self.num_nodes} nodes" if self.num_nodes > 1 else ""
        started = f", started by {self.launcher}" if self.launcher != "none" else ""
        return (
            f"strategy={self.strategy}: {len(self.device_ids)} {self.accelerator} device(s)"
            f"{nodes}, {self.processes} process(es){started}; global batch {self.batch_size} "
            f"({self.process_batch_size} per process), lr {self.lr:g}"
            + (f" after {self.warmup_epochs:g} epochs of warm-up" if self.warmup_epochs else "")
        )

    def record(self) -> dict[str, Any]:
        """The settings reports compare runs by, as plain JSON values."""
        return {**asdict(self), "device_ids": list(self.device_ids), "devices": self.devices}


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def chosen_strategy(choice: str, devices: int) -> str:
    """``strategy=auto`` as Lightning's own default resolves: one device runs alone, several
    (over every node) get DDP; any other choice stands."""
    if choice != AUTO:
        return choice
    return "single" if devices == 1 else "ddp"


def resolve_run(cfg: DictConfig, choices: Mapping[str, str], machine: Machine) -> Run:
    """Check the config's values and derive everything that depends on them."""
    check_types(cfg)
    check_values(cfg, choices)
    strategy = choices["strategy"]
    if strategy not in PLACEMENTS and strategy != AUTO:
        raise UserError(
            f"strategy={strategy} has no known device placement: use one of {', '.join(PLACEMENTS)}"
        )
    tree = config_tree(cfg)
    trainer, model, data, strategy_cfg = (tree[k] for k in ("trainer", "model", "data", "strategy"))
    accelerator, ids, precision = resolve_hardware(trainer, machine)
    devices = trainer.get("devices", 1)
    num_nodes = trainer.get("num_nodes", 1)
    strategy = chosen_strategy(strategy, len(ids) * num_nodes)
    check_placement(strategy, accelerator, devices, ids, num_nodes, machine.cpu_cores)
    check_nodes_started(num_nodes, len(ids), machine, choices)
    check_compile(strategy, accelerator, ids, model, trainer)
    check_channels_last(accelerator, model)
    if strategy == "scatter_allreduce":
        check_split_weights(strategy_cfg.get("split_weights"), len(ids))

    placement = PLACEMENTS[strategy]
    processes = len(ids) * num_nodes if placement == PER_DEVICE else 1
    batch_size = global_batch(data, len(ids) * num_nodes)
    check_batch_divides(batch_size, processes, num_nodes)
    check_data(data, model["net"], choices)
    check_whole_batches(data, batch_size, choices)
    batches = epoch_batches(data, batch_size // processes, processes)
    check_batch_limits(trainer, batches)
    check_val_interval(trainer, batches)
    check_evaluation_shares(data, processes, choices)
    lr = scaled_lr(model, batch_size * (trainer.get("accumulate_grad_batches") or 1))
    check_optimizer(model["optimizer"])
    check_schedule(model, trainer, lr)
    per_node = len(ids) if placement == PER_DEVICE else 1
    num_workers, pin_memory = loader_defaults(data, accelerator, machine.cpu_cores, per_node)
    return Run(
        strategy=strategy,
        accelerator=accelerator,
        device_ids=tuple(ids),
        num_nodes=num_nodes,
        processes=processes,
        launcher=launcher(
            placement, strategy_cfg.get("start_method", "auto"), machine, ids, num_nodes
        ),
        batch_size=batch_size,
        process_batch_size=batch_size // processes,
        lr=lr,
        warmup_epochs=float((model.get("lr_scaling") or {}).get("warmup_epochs") or 0),
        warmup_from=warmup_from(model),
        precision=precision,
        width=model["net"].get("width"),
        norm=model["net"].get("norm"),
        max_epochs=trainer.get("max_epochs"),
        seed=tree.get("seed"),
        data=choices.get("data", "?"),
        num_workers=num_workers,
        pin_memory=pin_memory,
        fused=fused_update(model["optimizer"], trainer, precision),
    )


def loader_defaults(
    data: Mapping[str, Any], accelerator: str, cores: int, processes: int
) -> tuple[int, bool]:
    """``data.num_workers`` and ``data.pin_memory``, or (null) what the machine calls for: the
    in-memory pipeline has no loader processes to start; the torchvision pipeline gets the
    cores each training process can spare (one left for its step), 2 to 8, and pinned batches
    on CUDA, whose copies to the GPU then overlap the step. The d2l recipe on a 16-core GPU
    machine thus decodes with 8 processes instead of a laptop's 2."""
    memory = data.get("pipeline") == "memory"
    workers = data.get("num_workers")
    if workers is None:
        workers = 0 if memory else min(8, max(2, cores // max(processes, 1) - 1))
    pin = data.get("pin_memory")
    if pin is None:
        pin = accelerator == "cuda" and not memory
    return workers, pin


def resolve_hardware(trainer: Mapping[str, Any], machine: Machine) -> tuple[str, list[int], str]:
    """The accelerator, device ids and precision ``trainer`` asks for, checked against the
    machine: training (``resolve_run``) and ``eval.py`` read them the same way."""
    accelerator = parse_accelerator(trainer.get("accelerator", "auto"), machine.cuda_devices)
    ids = parse_devices(trainer.get("devices", 1), machine.cuda_devices)
    check_available(accelerator, ids, machine.cuda_devices)
    return accelerator, ids, parse_precision(trainer.get("precision"), accelerator)


# What a SLURM job asks for, from the same settings ---------------------------------------------
def slurm_tasks_per_node(strategy: str, devices: Any) -> int:
    """One task per device under DDP (and ``auto``, DDP on several devices), else one (the
    strategy drives its devices itself)."""
    per_device = strategy == AUTO or PLACEMENTS.get(strategy) == PER_DEVICE
    return len(parse_devices(plain(devices), cuda_devices=0)) if per_device else 1


def slurm_gpus_per_node(accelerator: str, devices: Any) -> int | None:
    """GPUs only for a GPU run (a CPU partition refuses any request for them): one per device
    named (``[0,0]``, two replicas on one GPU, asks for one)."""
    if accelerator not in ("gpu", "cuda"):
        return None
    return len(set(parse_devices(plain(devices), cuda_devices=0)))


SLURM_GPUS = re.compile(r"(?:^|,)gpu(?::[^:,]+)?:(\d+)")  # --gres=gpu:2, gpu:a100:2


def slurm_node(
    launcher: Mapping[str, Any], trainer: Mapping[str, Any], strategy: str, here: Machine
) -> Machine:
    """The machine a job submitted to Slurm runs on, as the job asks for it: its GPUs (which the
    machine submitting it need not have: a login node has none, as a rule) and its tasks'
    cores. Slurm gives a job the GPUs it asks for by number, numbered from 0, and starts the
    tasks it asks for: one per process the strategy runs on the node."""
    gres = SLURM_GPUS.search(str(launcher.get("gres") or ""))
    per_task = (launcher.get("gpus_per_task") or 0) * (launcher.get("tasks_per_node") or 1)
    gpus = launcher.get("gpus_per_node") or (int(gres[1]) if gres else per_task)
    devices, tasks = trainer.get("devices", 1), launcher.get("tasks_per_node") or 1
    if gpus and str(devices).strip() in ("-1", "auto"):
        raise UserError(
            f"trainer.devices={devices} asks for every GPU of a node, which hydra/launcher=slurm "
            "asks Slurm for by number: give it, e.g. trainer.devices=4"
        )
    distinct = sorted(set(parse_devices(devices, cuda_devices=max(gpus, 1))))
    if gpus and distinct != list(range(len(distinct))):
        raise UserError(
            f"trainer.devices={devices} under hydra/launcher=slurm: Slurm numbers the GPUs it "
            f"gives a job from 0; use trainer.devices={len(distinct)}"
        )
    if gpus and len(distinct) > gpus:
        raise UserError(
            f"trainer.devices={devices} needs {len(distinct)} GPUs on each node, but the job "
            f"asks Slurm for {gpus} (hydra.launcher.gpus_per_node, gres or gpus_per_task): drop "
            "that setting (gpus_per_node follows trainer.devices), or use fewer devices"
        )
    expected = slurm_tasks_per_node(strategy, devices)
    if tasks != expected:
        raise UserError(
            f"hydra.launcher.tasks_per_node={tasks}, but strategy={strategy} with trainer.devices"
            f"={devices} runs {expected} process(es) on each node: drop "
            "hydra.launcher.tasks_per_node (it follows the strategy and the devices)"
        )
    warned, limit = launcher.get("signal_delay_s") or 0, launcher.get("timeout_min") or 0
    if limit and warned + 60 >= 60 * limit:  # Slurm may warn up to a minute early
        raise UserError(
            f"hydra.launcher.signal_delay_s={warned}: Slurm warns a job that long (and up to "
            f"60 s more) before its time limit, hydra.launcher.timeout_min={limit} "
            f"({60 * limit} s), so it would be requeued as it starts: raise timeout_min, or "
            "lower signal_delay_s"
        )
    cores = (launcher.get("cpus_per_task") or 1) * tasks
    return replace(here, cuda_devices=gpus, cpu_cores=cores)


# Values that stand alone -----------------------------------------------------------------------
PATHS = {  # what may be given besides a path
    "ckpt_path": ", or null",
    "data.root": "",
    "data.source": ", or null (it follows MULTIGPU_DATA: unset that if it is empty)",
}
TOP_KEYS = (*Top.model_fields, *Top.nodes)  # the config's own keys and its nodes
# The nodes training builds from; eval.py's config has only some of them.
REQUIRED = ("data", "model", "model.net", "model.optimizer", "trainer", "strategy")


def check_values(cfg: DictConfig, choices: Mapping[str, str] | None = None) -> None:
    """Each value alone (its type is already right): the keys each node may have, finiteness,
    ranges and names; ``choices`` (the group options) name the data and strategy in messages."""
    check_known("", dict.fromkeys(cfg), Top, "the config")  # a key nothing would read
    tree = config_tree(cfg)
    for path in (*Top.model_fields, *REQUIRED):  # dropped (~key): training reads each
        if select(tree, path) is ABSENT:
            raise UserError(f"{path} is missing from the config: training needs it")
    check_keys(tree, choices or {})
    check_paths(tree)
    check_numbers(tree)
    check_cosine_length(tree)
    check_max_time(select(tree, "trainer.max_time"))
    check_ranges_and_names(tree)


def check_evaluation(cfg: DictConfig, choices: Mapping[str, str]) -> None:
    """``eval.py``'s config, through training's checks of what it shares: the data's keys,
    numbers, ranges, names and sizes, and the trainer's numbers."""
    tree = config_tree(cfg)
    shared = ("data.", "trainer.")
    check_numbers({key: tree[key] for key in ("data", "trainer") if key in tree})
    data = tree["data"]
    check_builds("data", data, choices)
    check_ranges_and_names(tree, shared)
    sizes = data_sizes(data)
    if sizes is not None:  # the classes are the checkpoint's: eval.py compares them
        check_data(data, {"num_classes": sizes[2]}, choices)


def data_classes(data: Mapping[str, Any]) -> int | None:
    """The number of classes of the configured data, where it is known without reading it."""
    sizes = data_sizes(data)
    return None if sizes is None else sizes[2]


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_numbers(node: Any, key: str = "") -> None:
    """Every number anywhere in the config is finite, and every integer fits the 64 bits torch
    keeps integers in: NaN or infinity would train (and "diverge") rather than fail."""
    if isinstance(node, Mapping):
        for name, value in node.items():
            check_numbers(value, f"{key}.{name}" if key else str(name))
    elif isinstance(node, list):
        if any(not fine_number(v) for v in node if is_number(v)):
            raise UserError(f"{key}={node!r} must hold finite numbers only")
        for value in node:
            check_numbers(value, key)
    elif is_number(node) and not fine_number(node):
        if isinstance(node, int):
            raise UserError(f"{key}={node} is more than torch's 64-bit integers hold: {MAX_INT}")
        raise UserError(f"{key}={as_override(node)} must be a finite number")


def fine_number(value: float) -> bool:
    return abs(value) <= MAX_INT if isinstance(value, int) else math.isfinite(value)


def check_paths(tree: Mapping[str, Any]) -> None:
    """A path is a non-empty name without NUL (which the OS would refuse with a traceback)."""
    for key, or_null in PATHS.items():
        value = select(tree, key)
        if value == "":
            raise UserError(f"{key}='' names no path: give one{example(key)}{or_null}")
        if isinstance(value, str) and "\0" in value:
            raise UserError(f"{key}={value!r} contains a NUL character, which no path can hold")


def check_cosine_length(tree: Mapping[str, Any]) -> None:
    """A cosine over "no limit" (``T_max`` follows ``trainer.max_epochs=-1``) would cycle."""
    scheduler, epochs = select(tree, "model.scheduler"), select(tree, "trainer.max_epochs")
    if not isinstance(scheduler, Mapping) or target_of(scheduler) != COSINE:
        return
    t_max = scheduler.get("T_max")
    if t_max == epochs == -1:
        raise UserError(
            f"model.scheduler.T_max={t_max} follows trainer.max_epochs={epochs} (no limit), but "
            "a cosine decays over a known length: set trainer.max_epochs to the run's epochs, "
            "or model.scheduler.T_max"
        )


DURATION = re.compile(r"(\d+):(\d\d):(\d\d):(\d\d)")  # DD:HH:MM:SS, as Lightning's Timer reads it


def check_max_time(value: Any) -> float | None:
    """``+trainer.max_time`` as Lightning's Timer reads it (``DD:HH:MM:SS``, or timedelta's
    arguments), and above zero: a malformed one would fail, and a zero one stop the run before
    its first batch, only once the run had started. Its seconds (None: no limit)."""
    if value in (None, ABSENT):
        return None
    fix = "give a duration above 0: DD:HH:MM:SS (00:01:30:00 is 90 minutes) or {minutes:90}"
    try:
        if isinstance(value, Mapping):
            duration = timedelta(**value)
        elif isinstance(value, str) and (parts := DURATION.fullmatch(value.strip())):
            days, hours, minutes, seconds = map(int, parts.groups())
            duration = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
        else:
            raise TypeError(value)
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"trainer.max_time={as_override(value)} is not a duration: {fix}") from None
    if duration <= timedelta(0):
        raise UserError(f"trainer.max_time={as_override(value)} leaves no time to train: {fix}")
    return duration.total_seconds()


# Keys: what each node's target takes ----------------------------------------------------------
# The model's nodes that must build what the project checks, and the fix that says so.
MUST_BUILD = {
    "model.net": ("a network", NETWORK),
    "model.optimizer": ("an optimizer", SGD),
    "model.scheduler": ("a scheduler", "+model/scheduler=step or cosine, or model.scheduler=null"),
}


def check_keys(tree: Mapping[str, Any], choices: Mapping[str, str]) -> None:
    """Every key of a node is one its ``_target_`` takes (its model's fields,
    ``multigpu.config.schema.BUILDS``), so that a typo or an unknown ``+key`` is named now, with
    the keys it could have been, not by the constructor once torch has loaded."""
    if isinstance(tree["trainer"], Mapping):
        check_known("trainer", tree["trainer"], Trainer, "Lightning's Trainer")
        for key in (k for k in SET_BY_THE_RUN if k in tree["trainer"]):
            raise UserError(
                f"trainer.{key} is set by the run from {SET_BY_THE_RUN[key]}: drop "
                f"trainer.{key} and say it there"
            )
    scheduler = select(tree, "model.scheduler")
    if scheduler is not None and not isinstance(scheduler, Mapping):
        raise UserError(
            f"model.scheduler={scheduler!r} must be null or a scheduler's settings, "
            "e.g. +model/scheduler=cosine"
        )
    for path in BUILDS:
        check_builds(path, select(tree, path), choices)
    if isinstance(select(tree, "model.compile"), Mapping):
        check_known("model.compile", tree["model"]["compile"], Compile, Compile.what)


def check_builds(path: str, node: Any, choices: Mapping[str, str]) -> None:
    """``node`` builds a target the project knows (where it must), with keys that target takes
    and those it cannot do without."""
    if not isinstance(node, Mapping):
        return
    schema = BUILDS[path].get(target_of(node))
    if schema is None:
        if path in MUST_BUILD:
            what, use = MUST_BUILD[path]
            raise UserError(
                f"{path}._target_={node.get('_target_')!r} is not {what} this project checks: "
                f"use {use}"
            )
        return
    what = f"{path}={choices.get(path, '?')}" if path in ("data", "strategy") else schema.what
    check_known(path, node, schema, what)
    missing = [k for k, f in schema.model_fields.items() if f.is_required() and k not in node]
    if missing:
        raise UserError(f"{path}.{missing[0]} is missing: {schema.what} needs it")


def check_known(path: str, node: Mapping[str, Any], schema: type[Node], what: str) -> None:
    """Every key of ``node`` is one ``schema`` takes: else the closest ones, or all of them."""
    known = (*schema.model_fields, *schema.nodes)
    unknown = [key for key in node if key not in known and key not in HYDRA_KEYS]
    if not unknown:
        return
    name = f"{path}.{unknown[0]}" if path else unknown[0]
    if close := closest(str(unknown[0]), known):
        takes = did_you_mean([f"{path}.{key}" if path else key for key in close])[2:]
    else:  # a key a config sets (an experiment's, over another data group) is dropped with ~
        takes = f"use one of {', '.join(known)}" if known else "it takes none"
        takes += f" (where a config sets it, drop it: ~{name})"
    raise UserError(f"{name} is not a setting of {what}: {takes}")


def parse_precision(precision: Any, accelerator: str) -> str:
    """Lightning's name for ``trainer.precision``; fp16 needs CUDA (Lightning would quietly
    switch a CPU run to bf16, and the record would name the wrong precision)."""
    name = "32-true" if precision is None else str(precision)
    name = PRECISION_ALIASES.get(name, name)
    supported = CUDA_PRECISIONS if accelerator == "cuda" else CPU_PRECISIONS
    if name in supported:
        return name
    hint = " (fp16 needs CUDA; on the CPU use bf16-mixed)" if name in CUDA_PRECISIONS else ""
    shown = plain_or_quoted(precision) if isinstance(precision, str) else repr(precision)
    raise UserError(
        f"trainer.precision={shown} is not supported on {accelerator}{hint}: "
        f"use one of {', '.join(supported)}"
    )


# Devices ----------------------------------------------------------------------------------------
def parse_accelerator(accelerator: str, cuda_devices: int) -> str:
    """``auto`` falls back to the CPU; asking for ``gpu``/``cuda`` on a machine without one
    is an error rather than a silently slow run."""
    if accelerator == "auto":
        return "cuda" if cuda_devices else "cpu"
    if accelerator not in ("cpu", "cuda", "gpu"):
        raise UserError(
            f"trainer.accelerator={accelerator!r} is not supported: use auto, cpu or gpu"
        )
    if accelerator != "cpu" and not cuda_devices:
        raise UserError(
            f"trainer.accelerator={accelerator} but this machine has no CUDA device: "
            "use trainer.accelerator=cpu (or auto)"
        )
    return "cpu" if accelerator == "cpu" else "cuda"


def parse_devices(devices: Any, cuda_devices: int) -> list[int]:
    """``2`` -> [0, 1]; ``[2, 3]`` or ``"2,3"`` -> [2, 3]; ``-1`` or ``auto`` -> every device."""
    every = list(range(max(cuda_devices, 1)))
    if isinstance(devices, str):
        text = devices.strip()
        if text in ("auto", "-1"):
            return every
        try:
            parts = [int(p) for p in text.strip("[]").split(",") if p.strip()]
        except ValueError:
            raise UserError(
                f"trainer.devices={devices!r} is not a count or a list of ids: "
                "use e.g. trainer.devices=2 or trainer.devices=[2,3]"
            ) from None
        if text.startswith("[") or "," in text:
            return parse_devices(parts, cuda_devices)
        return parse_devices(parts[0] if parts else 0, cuda_devices)
    if isinstance(devices, bool) or not isinstance(devices, (int, list, tuple)):
        shown = "null" if devices is None else repr(devices)
        raise UserError(
            f"trainer.devices={shown} must be a count or a list of ids, "
            "e.g. trainer.devices=2 or trainer.devices=[0,1]"
        )
    if isinstance(devices, int):
        if devices == -1:
            return every
        if devices <= 0:
            raise UserError(
                f"trainer.devices={devices} must be at least 1 (or a list of ids, e.g. [0,1])"
            )
        if devices > MAX_DEVICES:
            raise UserError(
                f"trainer.devices={devices} is more devices than any machine has: "
                f"use at most {MAX_DEVICES}"
            )
        return list(range(devices))
    ids = list(devices)
    if not ids or any(not is_count(i) or not 0 <= i < MAX_DEVICES for i in ids):
        raise UserError(
            f"trainer.devices={ids} must list device ids >= 0 (below {MAX_DEVICES}), e.g. [0,1]"
        )
    return ids


def check_available(accelerator: str, ids: list[int], cuda_devices: int) -> None:
    """CUDA ids must exist; CPU "devices" are logical replicas or processes, any count runs."""
    missing = [i for i in ids if i >= cuda_devices]
    if accelerator == "cuda" and missing:
        raise UserError(
            f"trainer.devices asks for CUDA device(s) {missing}, but this machine has "
            f"{cuda_devices} (ids 0-{cuda_devices - 1}): use fewer devices, or "
            "trainer.accelerator=cpu"
        )


def check_placement(
    strategy: str, accelerator: str, devices: Any, ids: list[int], num_nodes: int, cores: int
) -> None:
    placement = PLACEMENTS[strategy]
    check_replicas(strategy, ids)
    if placement != PER_DEVICE and num_nodes > 1:
        raise UserError(
            f"strategy={strategy} runs in one process on one machine, but "
            f"trainer.num_nodes={num_nodes}: use strategy=ddp for several machines"
        )
    if placement == ONE_DEVICE and len(ids) != 1:
        raise UserError(
            f"strategy=single runs on one device, but trainer.devices={devices}: "
            "use strategy=dp, scatter_allreduce or ddp for several"
        )
    if strategy == "dp" and accelerator != "cuda" and len(ids) > 1:
        raise UserError(
            f"strategy=dp with trainer.devices={devices}: DataParallel needs CUDA devices and "
            "this run is on the CPU; use strategy=scatter_allreduce or strategy=ddp "
            "(trainer.accelerator=cpu) for several CPU devices, or trainer.devices=1"
        )
    if placement == PER_DEVICE and accelerator == "cpu" and len(ids) > cores:
        raise UserError(
            f"trainer.devices={len(ids)} starts {len(ids)} DDP processes but this machine has "
            f"{cores} CPU cores: use trainer.devices<={cores}, or a GPU machine"
        )


def check_replicas(strategy: str, ids: list[int]) -> None:
    """A device listed twice holds two replicas: a feature of ``scatter_allreduce`` (its own
    split, copy and reduce run any number of replicas on one GPU, the one way to exercise the
    path on a one-GPU machine), a mistake elsewhere (DDP would start two processes on one GPU,
    DataParallel broadcasts to each device once, ``single`` has one device)."""
    twice = next((i for i in ids if ids.count(i) > 1), None)
    if twice is None or strategy in REPLICAS_ON_ONE_DEVICE:
        return
    raise UserError(
        f"trainer.devices={ids} names device {twice} twice, which strategy={strategy} cannot "
        f"share: list each device once (several replicas on one device: "
        f"strategy={' or '.join(REPLICAS_ON_ONE_DEVICE)})"
    )


def check_nodes_started(
    num_nodes: int, per_node: int, machine: Machine, choices: Mapping[str, str]
) -> None:
    """Lightning starts the processes of this machine only: those of the other machines must
    come from a cluster launcher (torchrun, srun, or a sweep's SLURM launcher, whose jobs run
    under srun), else rank 0 waits ``strategy.timeout_s`` for peers that never come."""
    if num_nodes == 1 or cluster_started(machine.environ):
        return
    if choices.get("hydra/launcher") in CLUSTER_LAUNCHERS:
        return
    raise UserError(
        f"trainer.num_nodes={num_nodes} needs a launcher that starts the other machines' "
        f"processes: torchrun --nnodes={num_nodes} --nproc_per_node={per_node} train.py ... "
        f"on each machine, or srun (#SBATCH --nodes={num_nodes} "
        f"--ntasks-per-node={per_node}); on one machine use trainer.num_nodes=1"
    )


# torch.compile's modes that replay the compiled graphs as CUDA graphs (on CUDA; a CPU has none).
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def check_compile(
    strategy: str,
    accelerator: str,
    ids: list[int],
    model: Mapping[str, Any],
    trainer: Mapping[str, Any],
) -> None:
    """DataParallel makes new replicas of the network every step, and a compiled network's
    replicas would call the original on the wrong device; its other strategies compile.
    Replayed as CUDA graphs, a backward's gradients live in the graphs' memory, which the next
    batch's replay writes over: a step that accumulates them over several batches would add into
    overwritten memory (the warm-up did, and failed on an H200)."""
    options = compile_options(model.get("compile"))
    if options is None:
        return
    if strategy == "dp" and accelerator == "cuda" and len(ids) > 1:
        raise UserError(
            f"model.compile with strategy=dp on {len(ids)} GPUs: DataParallel re-replicates the "
            "network every step, which torch.compile cannot follow; use "
            "strategy=scatter_allreduce (persistent replicas) or strategy=ddp"
        )
    mode, accumulate = options.get("mode"), trainer.get("accumulate_grad_batches") or 1
    if (
        accelerator == "cuda"
        and mode in CUDA_GRAPH_MODES
        and is_count(accumulate)
        and accumulate > 1
    ):
        raise UserError(
            f"model.compile.mode={mode} with trainer.accumulate_grad_batches={accumulate}: CUDA "
            "graphs write over the gradients a step accumulates over its batches; use "
            "model.compile=true (no CUDA graphs) or leave out +trainer.accumulate_grad_batches"
        )


# Below this width a ResNet shortcut (1x1, stride 2) has fewer than 8 input channels, and torch
# 2.14's oneDNN computes its NHWC weight gradient out of bounds on a CPU without AVX-512: the
# process aborts ("free(): invalid pointer") or hangs. Seen at every input width 1-7 on one
# thread, and at 2 on two; 8 and up ran (tests/test_speed_options.py holds the bound).
MIN_CPU_NHWC_WIDTH = 8


def check_channels_last(accelerator: str, model: Mapping[str, Any]) -> None:
    width = model["net"].get("width")
    narrow = isinstance(width, int) and width < MIN_CPU_NHWC_WIDTH
    if model.get("channels_last") and accelerator == "cpu" and narrow:
        raise UserError(
            f"model.channels_last=true with model.net.width={width} on the CPU: oneDNN's NHWC "
            f"gradient of a shortcut convolution narrower than {MIN_CPU_NHWC_WIDTH} channels "
            "corrupts memory (the process aborts or hangs); use model.channels_last=false or "
            f"model.net.width={MIN_CPU_NHWC_WIDTH} (or more)"
        )


def check_split_weights(weights: Any, devices: int) -> None:
    if weights is None:
        return
    weights = list(weights)
    if len(weights) != devices:
        raise UserError(
            f"strategy.split_weights={weights} has {len(weights)} entries for {devices} devices: "
            f"give one weight per device, e.g. {[round(1 / devices, 2)] * devices}, or null"
        )
    if any(isinstance(w, bool) or not isinstance(w, (int, float)) or w < 0 for w in weights):
        raise UserError(f"strategy.split_weights={weights} must be numbers >= 0")
    if sum(weights) <= 0:
        raise UserError(f"strategy.split_weights={weights} sum to 0: give some device a share")
    if not math.isfinite(sum(weights)):
        raise UserError(
            f"strategy.split_weights={weights} sum to more than a number holds: give shares, "
            f"e.g. {[round(1 / devices, 2)] * devices}"
        )


def launcher(
    placement: str, start_method: str, machine: Machine, ids: list[int], num_nodes: int
) -> str:
    """Who starts DDP's processes: a cluster that already started one per device (torchrun,
    SLURM's srun, a submitit job), spawned workers inside a multirun (relaunching train.py would
    re-run the whole sweep in every child), else Lightning relaunching ``train.py`` (popen).
    What a cluster started must be what the config asks for."""
    check_world(machine.environ, len(ids), num_nodes, per_device=placement == PER_DEVICE)
    if placement != PER_DEVICE:
        return "none"
    if cluster_started(machine.environ):
        return "cluster"
    check_port_free(machine.environ)  # this process opens it for the ones Lightning starts
    if start_method == "spawn" or (start_method == "auto" and machine.multirun):
        return "spawn"
    return "popen"


# Batch and learning rate ------------------------------------------------------------------------
def global_batch(data: dict[str, Any], devices: int) -> int:
    """``data.batch_size``, or ``data.batch_size_per_device`` x every device of the run. A batch
    larger than the training set is allowed: each epoch is then one step over all of it, as
    the last, short batch of any epoch is (smoke runs on a few images rely on it)."""
    per_device = data.get("batch_size_per_device")
    if per_device is not None:
        if per_device * devices > MAX_INT:
            raise UserError(
                f"data.batch_size_per_device={per_device} x {devices} devices is more than "
                f"torch's 64-bit integers hold: use at most {MAX_INT // devices}"
            )
        return per_device * devices
    batch_size = data.get("batch_size")
    if batch_size is None:
        raise UserError("data.batch_size=null must be a positive integer, e.g. 256")
    return batch_size


def check_batch_given(data: Mapping[str, Any], devices: int, given: Collection[str]) -> None:
    """``data.batch_size`` named on the command line where ``data.batch_size_per_device`` (an
    experiment's, say) makes the batch: it was not used, and nothing said so. Named null, it
    says just that."""
    per_device = data.get("batch_size_per_device")
    if per_device is None or "data.batch_size" not in given or data.get("batch_size") is None:
        return
    raise UserError(
        f"data.batch_size={data.get('batch_size')} is not used: data.batch_size_per_device="
        f"{per_device} makes the batch ({per_device} x {devices} device(s)): drop "
        f"data.batch_size={data.get('batch_size')} from the command, or pass "
        "data.batch_size_per_device=null to use it"
    )


def check_batch_divides(batch_size: int, processes: int, num_nodes: int = 1) -> None:
    """Every DDP process loads the same share of the global batch, at least one sample."""
    if batch_size % processes:
        multiple = (batch_size // processes + 1) * processes
        keep = ", or, to keep this batch (as a resume must), strategy=scatter_allreduce, whose "
        keep += "replicas split any batch"
        raise UserError(
            f"data.batch_size={batch_size} (global) does not divide over {processes} "
            f"processes: use a multiple of {processes}, e.g. data.batch_size={multiple}"
            + (keep if num_nodes == 1 else "")
        )


def warmup_from(model: dict[str, Any]) -> float:
    """Goyal et al.'s gradual warm-up starts at the lr the base batch would use; without a
    scaling rule there is none, and it starts at 0."""
    scaling = model.get("lr_scaling") or {}
    return float(model["optimizer"]["lr"]) if scaling.get("rule") == "linear" else 0.0


def scaled_lr(model: dict[str, Any], update_batch: int) -> float:
    """``model.optimizer.lr``, times the images of an update / ``base_batch`` under the linear
    rule: the global batch, times ``accumulate_grad_batches`` where an update sums several."""
    lr = model["optimizer"].get("lr")
    if lr is None:
        raise UserError("model.optimizer.lr=null must be a positive number, e.g. 0.1")
    scaling = model.get("lr_scaling") or {}
    if (scaling.get("rule") or "none") == "none":
        return float(lr)
    base_batch = scaling.get("base_batch")
    if base_batch is None:
        raise UserError(
            "model.lr_scaling.base_batch=null must be a positive integer under "
            "model.lr_scaling.rule=linear, e.g. 256"
        )
    scaled = float(f"{lr * update_batch / base_batch:.12g}")  # 0.1 * 3 is 0.3, not 0.300...04
    if not (math.isfinite(scaled) and scaled > 0):
        raise UserError(
            f"model.optimizer.lr={lr} x the update's batch {update_batch} / model.lr_scaling."
            f"base_batch={base_batch} (model.lr_scaling.rule=linear) is {scaled:g}, not a "
            "learning rate: change model.optimizer.lr or model.lr_scaling.base_batch"
        )
    return scaled


def check_optimizer(optimizer: Mapping[str, Any]) -> None:
    """SGD's Nesterov momentum needs a momentum and no dampening (else SGD refuses mid-setup)."""
    if optimizer.get("nesterov") and (
        optimizer.get("momentum", 0) <= 0 or optimizer.get("dampening", 0) != 0
    ):
        raise UserError(
            f"model.optimizer.nesterov=true needs model.optimizer.momentum > 0 (it is "
            f"{optimizer.get('momentum', 0)}) and model.optimizer.dampening=0 (it is "
            f"{optimizer.get('dampening', 0)})"
        )


def fused_update(optimizer: Mapping[str, Any], trainer: Mapping[str, Any], precision: str) -> bool:
    """``model.optimizer.fused``, or (null) fused wherever Lightning can step it: not with
    gradient clipping under mixed precision, which Lightning refuses (at the first step) for an
    optimizer that would unscale fp16's gradients itself, after they were to be clipped."""
    clip, fused = trainer.get("gradient_clip_val") or 0, optimizer.get("fused")
    refused = clip > 0 and precision.endswith("-mixed")
    if fused and refused:
        raise UserError(
            f"model.optimizer.fused=true with trainer.gradient_clip_val={clip} under "
            f"trainer.precision={precision}: Lightning clips no fused optimizer's gradients "
            "under mixed precision; use model.optimizer.fused=null (fused where it can be) "
            "or false"
        )
    return not refused if fused is None else fused


def check_schedule(model: Mapping[str, Any], trainer: Mapping[str, Any], lr: float) -> None:
    """The warm-up and the scheduler against the run's length and learning rate: a warm-up
    longer than the run never reaches its lr, a cosine shorter than the run rises again after
    ``T_max``, and one whose floor is above the lr raises it."""
    epochs = trainer.get("max_epochs")
    ends = trainer.get("max_steps", -1) != -1 or trainer.get("max_time")
    if epochs is None and not (ends or trainer.get("fast_dev_run")):
        raise UserError(  # Lightning's default then: 1000 epochs, with a warning in the log
            "trainer.max_epochs is null (or dropped) and nothing else ends the run: Lightning "
            "would train 1000 epochs; set trainer.max_epochs=<epochs> (-1: until stopped), "
            "+trainer.max_steps=<steps> or +trainer.max_time=DD:HH:MM:SS"
        )
    epochs = epochs if is_count(epochs) and epochs >= 1 else None
    every = trainer.get("check_val_every_n_epoch")
    if epochs is not None and is_count(every) and epochs % every:
        raise UserError(
            f"trainer.check_val_every_n_epoch={every} does not divide trainer.max_epochs="
            f"{epochs}: the last epoch would end without a test accuracy; use a divisor, e.g. "
            "trainer.check_val_every_n_epoch=${trainer.max_epochs} (the test set once, at the end)"
        )
    for least, most in (("min_epochs", "max_epochs"), ("min_steps", "max_steps")):
        low, high = trainer.get(least), trainer.get(most)
        if is_count(low) and is_count(high) and high != -1 and low > high:
            raise UserError(
                f"trainer.{least}={low} is more than trainer.{most}={high}: Lightning would "
                f"stop at {high}; use trainer.{least}<={high}, or raise trainer.{most}"
            )
    warmup = (model.get("lr_scaling") or {}).get("warmup_epochs") or 0
    if epochs is not None and warmup > epochs:
        raise UserError(
            f"model.lr_scaling.warmup_epochs={warmup} is longer than the run "
            f"(trainer.max_epochs={epochs}): the lr would never reach its value; use at most "
            f"{epochs}"
        )
    scheduler = model.get("scheduler") or {}
    if target_of(scheduler) != COSINE:
        return
    t_max, eta_min = scheduler["T_max"], scheduler.get("eta_min", 0.0)
    if epochs is not None and t_max < epochs:
        raise UserError(
            f"model.scheduler.T_max={t_max} is shorter than the run (trainer.max_epochs="
            f"{epochs}): the cosine would raise the lr again after epoch {t_max}; use "
            "model.scheduler.T_max=${trainer.max_epochs} (the default)"
        )
    if eta_min > lr:
        raise UserError(
            f"model.scheduler.eta_min={eta_min} is above the learning rate {lr:g}: the cosine "
            "would raise it; use a floor below it, e.g. model.scheduler.eta_min=0"
        )


# Against the data -------------------------------------------------------------------------------
def check_data(data: Mapping[str, Any], net: Mapping[str, Any], choices: Mapping[str, str]) -> None:
    """Subsets, the validation split, classes and channels against the data set's sizes, where
    they are known without reading it (``multigpu.config.names.DATA_SIZES``, or the synthetic set's
    settings)."""
    sizes = data_sizes(data)
    if sizes is None:
        return
    train, test, classes = sizes
    source = f"data={choices.get('data', '?')}"
    for key, total, what in (("train_subset", train, "training"), ("test_subset", test, "test")):
        subset = data.get(key)
        if subset is not None and subset > total:
            count = "num_train" if key == "train_subset" else "num_test"
            raise UserError(
                f"data.{key}={subset} is more than the {total} {what} images of {source}"
                f"{size_note(data, count)}: use at most {total}, or null for all"
            )
    check_val_size(data, train, source + size_note(data, "num_train"))
    wanted = net.get("num_classes", 10)
    if wanted != classes:
        raise UserError(
            f"model.net.num_classes={wanted} but the data has {classes} classes"
            f"{size_note(data, 'num_classes')}: set model.net.num_classes={classes}"
        )
    channels = net.get("in_channels", IMAGE_CHANNELS)
    if channels != IMAGE_CHANNELS:
        raise UserError(
            f"model.net.in_channels={channels} but the images of {source} have "
            f"{IMAGE_CHANNELS} channel: set model.net.in_channels={IMAGE_CHANNELS}"
        )


def check_whole_batches(data: Mapping[str, Any], batch: int, choices: Mapping[str, str]) -> None:
    """``data.drop_last`` trains on whole batches only: the training set must hold one."""
    sizes = data_sizes(data)
    if not data.get("drop_last") or sizes is None:
        return
    images = training_images(data, sizes[0])
    if images < batch:
        raise UserError(
            f"data.drop_last=true with a global batch of {batch} leaves no training batch: "
            f"data={choices.get('data', '?')} trains on {images} images; use a smaller "
            "data.batch_size, or data.drop_last=false"
        )


def epoch_batches(data: Mapping[str, Any], process_batch: int, processes: int) -> int | None:
    """The training batches of an epoch in each process, before any limit, where the data's
    sizes are known: its share of the training images (a short last batch included unless
    ``data.drop_last``)."""
    sizes = data_sizes(data)
    if sizes is None:
        return None
    share = -(-training_images(data, sizes[0]) // processes)
    return share // process_batch if data.get("drop_last") else -(-share // process_batch)


def check_batch_limits(trainer: Mapping[str, Any], batches: int | None) -> None:
    """A fraction of an epoch's batches (``limit_train_batches``) that is no whole batch:
    Lightning refuses it once the data is loaded, after the run's folder was made (a
    traceback, a failed job in a sweep)."""
    fraction = trainer.get("limit_train_batches")
    if batches is None or not isinstance(fraction, float) or not 0 < fraction < 1:
        return
    if int(batches * fraction) < 1:
        raise UserError(
            f"trainer.limit_train_batches={fraction} of the {batches} training batches of an "
            f"epoch is no batch: use at least {1 / batches:.3g}, or a number of batches (e.g. 1)"
        )


def as_batches(value: Any) -> Any:
    """A batch limit as Lightning reads it: a float above 1 is a whole count (``2.0`` -> 2)."""
    return int(value) if isinstance(value, float) and value > 1 else value


def check_val_interval(trainer: Mapping[str, Any], batches: int | None) -> None:
    """``+trainer.val_check_interval`` (batches, or a fraction of them) within an epoch's
    ``batches``, as Lightning requires once the data is loaded (a traceback after the run's
    folder was made), and dividing them: Lightning evaluates every that many batches, so the
    epoch's last batch is evaluated only then, and the epoch's test accuracy would be of earlier
    weights than its checkpoint's. The batches are each process's share of the training
    images, after ``limit_train_batches``; a whole number above 1 written as a float (2.0) is
    a count of batches, as Lightning reads both. Counted over the run instead
    (``check_val_every_n_epoch=null``), or a smoke run's (``fast_dev_run``), it is Lightning's
    to place: an epoch not evaluated after its last batch is recorded untested."""
    given = trainer.get("val_check_interval")
    interval = as_batches(given)
    if (
        not is_number(interval)
        or batches is None
        or trainer.get("check_val_every_n_epoch", 1) is None
        or trainer.get("fast_dev_run")
    ):
        return
    if trainer.get("limit_val_batches", 1.0) == 0:
        return
    limit = as_batches(trainer.get("limit_train_batches", 1.0))
    batches = min(batches, limit) if is_count(limit) else int(batches * limit)
    if is_count(interval) and interval > batches:
        raise UserError(
            f"trainer.val_check_interval={as_override(given)} is more than the {batches} "
            f"training batches of an epoch: use at most {batches}, a fraction of the epoch (e.g. "
            "0.5), or drop it"
        )
    every = interval if is_count(interval) else max(1, int(batches * interval))  # Lightning's
    if batches % every:
        divisors = ", ".join([str(n) for n in range(1, batches) if batches % n == 0][-6:])
        raise UserError(
            f"trainer.val_check_interval={as_override(given)} evaluates every {every} of the "
            f"{batches} training batches of an epoch, so not after its last: its test accuracy "
            f"would be of earlier weights than its checkpoint's; use a number of batches that "
            f"divides {batches} ({divisors}), 1.0, or drop it"
        )


def check_evaluation_shares(data: Mapping[str, Any], processes: int, choices: Mapping) -> None:
    """Under DDP each process evaluates its own share of the test set and of the validation
    split, each sample once (``multigpu.data.base.EpochSampler``): a process with no sample
    would skip the evaluation that the others sum their metrics over, and they would wait."""
    if processes == 1:
        return
    sizes, subset, val_size = data_sizes(data), data.get("test_subset"), data.get("val_size") or 0
    counts = [n for n in (subset, sizes[1] if sizes else None) if n is not None]
    test = min(counts, default=0)  # 0: not known (a data module of the user's)
    for images, key, fix in (
        (test, "the test set", "data.test_subset" if subset is not None else "data.num_test"),
        (val_size, "the validation split", "data.val_size"),
    ):
        if 0 < images < processes:
            raise UserError(
                f"{key} has {images} image(s) for {processes} processes, which evaluate a share "
                f"each: data={choices.get('data', '?')} needs {fix}>={processes}, or fewer "
                "processes"
            )


def training_images(data: Mapping[str, Any], train: int) -> int:
    """What an epoch trains on: ``data.train_subset`` of the ``train`` images, less the
    validation split carved from them."""
    subset = data.get("train_subset")
    return (min(subset, train) if subset is not None else train) - (data.get("val_size") or 0)


def data_sizes(data: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """(training images, test images, classes) of the configured data set, if known."""
    if target_of(data) == SYNTHETIC:
        return tuple(data.get(key, SYNTHETIC_SIZES[key]) for key in SYNTHETIC_SIZES)
    return DATA_SIZES.get(target_of(data))


def size_note(data: Mapping[str, Any], key: str) -> str:
    """Which setting a size comes from, where the config sets it (the synthetic set)."""
    if target_of(data) != SYNTHETIC:
        return ""
    return f" (data.{key}={data.get(key, SYNTHETIC_SIZES[key])})"


def check_val_size(data: Mapping[str, Any], train: int, source: str) -> None:
    """The validation split is carved from the training images and must leave some."""
    subset, val_size = data.get("train_subset"), data.get("val_size") or 0
    if training_images(data, train) <= 0:
        images = min(subset, train) if subset is not None else train
        after = f", {images} after data.train_subset={subset}" if subset is not None else ""
        raise UserError(
            f"data.val_size={val_size} leaves no training images: {source} has {train}{after}; "
            f"use at most {images - 1}"
        )
