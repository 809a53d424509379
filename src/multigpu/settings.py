"""The run, resolved once: the composed config turned into one frozen description of where and
how it runs (device kind and ids, how many processes and who starts them, the global and
per-process batch, the effective learning rate), with every check of the config's values here:
types (``multigpu.schema``), ranges, and the cross-checks between them.

A pure function of the config and of what it is told about the machine (``Machine``): it
imports neither torch nor Lightning, so a mistake is answered before they load (in about a
second), and a GPU machine's layout can be resolved (and tested) on a CPU.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from multigpu.errors import UserError
from multigpu.launch import check_world, cluster_started
from multigpu.names import (
    CPU_PRECISIONS,
    CUDA_PRECISIONS,
    LR_RULES,
    NORMS,
    PIPELINES,
    PRECISION_ALIASES,
    START_METHODS,
)
from multigpu.schema import check_types

# How each option of the ``strategy`` group places its work on the devices.
ONE_DEVICE = "one_device"  # the whole step on one device
IN_PROCESS = "in_process"  # one process drives every device (dp, scatter_allreduce)
PER_DEVICE = "per_device"  # one process per device (DDP)
PLACEMENTS = {
    "single": ONE_DEVICE,
    "dp": IN_PROCESS,
    "scatter_allreduce": IN_PROCESS,
    "ddp": PER_DEVICE,
    "ddp_spawn": PER_DEVICE,
}
# Without any of these, no GPU driver is loaded, so torch would see no GPU either.
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/dxg", "/dev/kfd", "/proc/driver/nvidia")
MAX_SEED = 2**32 - 1  # what seed_everything accepts


@dataclass(frozen=True)
class Machine:
    """What resolving a run needs to know about where it runs."""

    cuda_devices: int
    cpu_cores: int
    environ: Mapping[str, str]
    multirun: bool  # a job of a Hydra multirun (-m)

    @classmethod
    def this(cls, multirun: bool) -> Machine:
        """This machine, asking torch for its GPUs only where a GPU driver is loaded."""
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
    batch_size: int  # global: what one optimizer step sees, over every device
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


def plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def resolve_run(cfg: DictConfig, choices: Mapping[str, str], machine: Machine) -> Run:
    """Check the config's values and derive everything that depends on them."""
    check_types(cfg)
    check_values(cfg)
    strategy = choices["strategy"]
    if strategy not in PLACEMENTS:
        raise UserError(
            f"strategy={strategy} has no known device placement: use one of {', '.join(PLACEMENTS)}"
        )
    trainer = plain(cfg.trainer)
    accelerator = parse_accelerator(trainer.get("accelerator", "auto"), machine.cuda_devices)
    devices = trainer.get("devices", 1)
    ids = parse_devices(devices, machine.cuda_devices)
    check_available(accelerator, ids, machine.cuda_devices)
    num_nodes = trainer.get("num_nodes", 1)
    if not is_count(num_nodes) or num_nodes < 1:
        raise UserError(f"trainer.num_nodes={num_nodes!r} must be a positive integer, e.g. 1")
    strategy_cfg = plain(cfg.strategy)
    check_placement(strategy, accelerator, devices, ids, num_nodes, machine.cpu_cores)
    precision = parse_precision(trainer.get("precision"), accelerator)
    check_compile(strategy, accelerator, ids, plain(cfg.model.get("compile", False)))
    if strategy == "scatter_allreduce":
        check_split_weights(strategy_cfg.get("split_weights"), len(ids))

    placement = PLACEMENTS[strategy]
    processes = len(ids) * num_nodes if placement == PER_DEVICE else 1
    batch_size = global_batch(plain(cfg.data), len(ids) * num_nodes)
    check_batch_divides(batch_size, processes)
    net = plain(cfg.model.net)
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
        lr=scaled_lr(plain(cfg.model), batch_size),
        warmup_epochs=float(plain(cfg.model).get("lr_scaling", {}).get("warmup_epochs") or 0),
        warmup_from=warmup_from(plain(cfg.model)),
        precision=precision,
        width=net.get("width"),
        norm=net.get("norm"),
        max_epochs=trainer.get("max_epochs"),
        seed=cfg.get("seed"),
        data=choices.get("data", "?"),
    )


# What a SLURM job asks for, from the same settings ---------------------------------------------
def slurm_tasks_per_node(strategy: str, devices: Any) -> int:
    """One task per device under DDP, else one (the strategy drives its devices itself)."""
    per_device = PLACEMENTS.get(strategy) == PER_DEVICE
    return len(parse_devices(plain(devices), cuda_devices=0)) if per_device else 1


def slurm_gpus_per_node(accelerator: str, devices: Any) -> int | None:
    """GPUs only for a GPU run: a CPU partition refuses any request for them."""
    if accelerator not in ("gpu", "cuda"):
        return None
    return len(parse_devices(plain(devices), cuda_devices=0))


# Values that stand alone -----------------------------------------------------------------------
def check_values(cfg: DictConfig) -> None:
    """Ranges and names of the values that need no other value to be checked (their types are
    already right)."""
    seed = cfg.get("seed")
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise UserError(f"seed={seed} must be between 0 and {MAX_SEED} (or null), e.g. seed=42")
    at_least("check_finite_every_n_steps", cfg.get("check_finite_every_n_steps"), 1)
    data, net, trainer = plain(cfg.data), plain(cfg.model.net), plain(cfg.trainer)
    one_of("data.pipeline", data.get("pipeline"), PIPELINES)
    for key in ("num_workers", "crop_padding", "val_size"):
        at_least(f"data.{key}", data.get(key), 0)
    for key in ("train_subset", "test_subset", "num_train", "num_test", "num_classes"):
        at_least(f"data.{key}", data.get(key), 1, "a positive integer")
    if net.get("width") is not None and net["width"] < 1:
        raise UserError(f"model.net.width={net['width']} must be a positive integer, e.g. 64")
    one_of("model.net.norm", net.get("norm"), NORMS)
    at_least("model.net.num_classes", net.get("num_classes"), 2)
    at_least("model.net.in_channels", net.get("in_channels"), 1)
    if net.get("init_std") is not None and net["init_std"] <= 0:
        raise UserError(f"model.net.init_std={net['init_std']} must be positive, or null")
    optimizer = plain(cfg.model.optimizer)
    for key in ("momentum", "weight_decay"):
        at_least(f"model.optimizer.{key}", optimizer.get(key), 0)
    warmup = (plain(cfg.model).get("lr_scaling") or {}).get("warmup_epochs")
    at_least("model.lr_scaling.warmup_epochs", warmup, 0)
    compile = plain(cfg.model.get("compile"))
    if not isinstance(compile, (bool, dict)) and compile is not None:
        raise UserError(
            f"model.compile={compile!r} must be true, false, or torch.compile's arguments, "
            "e.g. model.compile={mode:max-autotune}"
        )
    for key in ("max_epochs", "max_steps", "num_sanity_val_steps"):
        at_least(f"trainer.{key}", trainer.get(key), -1, "-1 (no limit) or more")
    if cfg.strategy.get("timeout_s") is not None and cfg.strategy.timeout_s <= 0:
        raise UserError(f"strategy.timeout_s={cfg.strategy.timeout_s} must be positive, e.g. 300")


def at_least(key: str, value: Any, least: int, wanted: str | None = None) -> None:
    if value is not None and value < least:
        raise UserError(f"{key}={value} must be {wanted or f'{least} or more'}")


def one_of(key: str, value: Any, names: tuple[str, ...]) -> None:
    if value is not None and value not in names:
        raise UserError(f"{key}={value!r} is not known: use one of {', '.join(names)}")


def parse_precision(precision: Any, accelerator: str) -> str:
    """Lightning's name for ``trainer.precision``; fp16 needs CUDA (Lightning would quietly
    switch a CPU run to bf16, and the record would name the wrong precision)."""
    name = PRECISION_ALIASES.get(str(precision), str(precision or "32-true"))
    supported = CUDA_PRECISIONS if accelerator == "cuda" else CPU_PRECISIONS
    if name in supported:
        return name
    hint = " (fp16 needs CUDA; on the CPU use bf16-mixed)" if name in CUDA_PRECISIONS else ""
    raise UserError(
        f"trainer.precision={precision} is not supported on {accelerator}{hint}: use one of "
        f"{', '.join(supported)}"
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
    if isinstance(devices, bool):
        raise UserError(f"trainer.devices={devices!r} must be a count or a list of ids")
    if isinstance(devices, int):
        if devices == -1:
            return every
        if devices <= 0:
            raise UserError(
                f"trainer.devices={devices} must be at least 1 (or a list of ids, e.g. [0,1])"
            )
        return list(range(devices))
    ids = list(devices)
    if not ids or any(not is_count(i) or i < 0 for i in ids):
        raise UserError(f"trainer.devices={ids} must list device ids >= 0, e.g. [0,1]")
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


def check_compile(strategy: str, accelerator: str, ids: list[int], compile: Any) -> None:
    """DataParallel makes new replicas of the network every step, and a compiled network's
    replicas would call the original on the wrong device; its other strategies compile."""
    if compile and strategy == "dp" and accelerator == "cuda" and len(ids) > 1:
        raise UserError(
            f"model.compile with strategy=dp on {len(ids)} GPUs: DataParallel re-replicates the "
            "network every step, which torch.compile cannot follow; use "
            "strategy=scatter_allreduce (persistent replicas) or strategy=ddp"
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
    if start_method not in START_METHODS:
        raise UserError(
            f"strategy.start_method={start_method!r} is not known: use {', '.join(START_METHODS)}"
        )
    if cluster_started(machine.environ):
        return "cluster"
    if start_method == "spawn" or (start_method == "auto" and machine.multirun):
        return "spawn"
    return "popen"


# Batch and learning rate ------------------------------------------------------------------------
def global_batch(data: dict[str, Any], devices: int) -> int:
    """``data.batch_size``, or ``data.batch_size_per_device`` x every device of the run."""
    per_device = data.get("batch_size_per_device")
    if per_device is not None:
        if not is_count(per_device) or per_device <= 0:
            raise UserError(
                f"data.batch_size_per_device={per_device!r} must be a positive integer "
                "(or null to use data.batch_size)"
            )
        return per_device * devices
    batch_size = data.get("batch_size")
    if not is_count(batch_size) or batch_size <= 0:
        raise UserError(f"data.batch_size={batch_size!r} must be a positive integer, e.g. 256")
    return batch_size


def check_batch_divides(batch_size: int, processes: int) -> None:
    """Every DDP process loads the same share of the global batch, at least one sample."""
    if batch_size % processes:
        multiple = (batch_size // processes + 1) * processes
        raise UserError(
            f"data.batch_size={batch_size} (global) does not divide over {processes} "
            f"processes: use a multiple of {processes}, e.g. data.batch_size={multiple}"
        )


def warmup_from(model: dict[str, Any]) -> float:
    """Goyal et al.'s gradual warm-up starts at the lr the base batch would use; without a
    scaling rule there is none, and it starts at 0."""
    scaling = model.get("lr_scaling") or {}
    return float(model["optimizer"]["lr"]) if scaling.get("rule") == "linear" else 0.0


def scaled_lr(model: dict[str, Any], batch_size: int) -> float:
    """``model.optimizer.lr``, times global batch / ``base_batch`` under the linear rule."""
    lr = model["optimizer"].get("lr")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or lr <= 0:
        raise UserError(f"model.optimizer.lr={lr!r} must be a positive number, e.g. 0.1")
    scaling = model.get("lr_scaling") or {}
    rule = scaling.get("rule") or "none"
    if rule not in LR_RULES:
        raise UserError(f"model.lr_scaling.rule={rule!r} is not known: use none or linear")
    if rule == "none":
        return float(lr)
    base_batch = scaling.get("base_batch")
    if not is_count(base_batch) or base_batch <= 0:
        raise UserError(
            f"model.lr_scaling.base_batch={base_batch!r} must be a positive integer, e.g. 256"
        )
    return round(lr * batch_size / base_batch, 12)  # 0.1 * 3 is 0.3, not 0.30000000000000004
