"""The types of the config's values, checked before torch is imported: one structured-config
dataclass per node (the tools' command-line arguments have theirs in ``multigpu.tools.arguments``).

A config value of the wrong type becomes one line naming the key, the value and an example.
One dataclass per config node; its defaults are the shipped ones (they serve as the examples).
Only the keys a node has are checked, so options of a group may leave keys out; which keys a
node may have at all, and the ranges and cross-checks of the values, are
``multigpu.config.settings``'s.
The check is strict (a quoted ``'5'`` is not an integer, ``1`` is not ``true``): the values go
to torch as they are, unconverted.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from multigpu.config.errors import UserError
from multigpu.config.names import (
    COSINE,
    STEP_LR,
    Decayed,
    LrRule,
    MatmulPrecision,
    Norm,
    Pipeline,
    SchedulerInterval,
    StartMethod,
)


@dataclass
class Top:
    seed: int | None = 42
    ckpt_path: str | None = field(default=None, metadata={"example": "<run>/checkpoints/last.ckpt"})
    resume_changes: list[str] = field(
        default_factory=list, metadata={"example": "[model.scheduler.T_max]"}
    )
    init_from: str | None = field(default=None, metadata={"example": "<run>/checkpoints/last.ckpt"})
    check_finite_every_n_steps: int = 10
    phases: bool = False
    time_to_targets: list[float] = field(
        default_factory=lambda: [0.8, 0.85, 0.9, 0.92], metadata={"example": "[0.85,0.9]"}
    )
    float32_matmul_precision: MatmulPrecision = "high"


@dataclass
class Data:
    root: str = "data"
    source: str | None = field(default=None, metadata={"example": "../shared/data"})
    download: bool = True
    batch_size: int = 256
    batch_size_per_device: int | None = field(default=None, metadata={"example": 256})
    num_workers: int | None = None
    pipeline: Pipeline = "torchvision"
    augment: bool = False
    crop_padding: int = 2
    flip: bool = True
    pin_memory: bool | None = None
    shuffle: bool = True
    drop_last: bool = False
    normalize: bool | None = True
    train_subset: int | None = field(default=None, metadata={"example": 20000})
    test_subset: int | None = field(default=None, metadata={"example": 1000})
    val_size: int = 0
    seed: int = 42
    num_train: int = 1024  # data=synthetic
    num_test: int = 256
    num_classes: int = 10


@dataclass
class Model:
    channels_last: bool = False
    compile: Any = False  # true, false, or torch.compile's keyword arguments (``Compile``)
    label_smoothing: float = field(default=0.0, metadata={"example": 0.1})
    tta_flip: bool = False
    scheduler_interval: SchedulerInterval = "epoch"
    weight_decay_on: Decayed = "all"


@dataclass
class Net:
    num_classes: int = 10
    in_channels: int = 1
    width: int = 64
    norm: Norm = "batch"
    init_std: float | None = 0.01
    zero_init_residual: bool = False


@dataclass
class Optimizer:
    lr: float = 0.1
    momentum: float = 0.0
    dampening: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False


@dataclass
class LrScaling:
    rule: LrRule = "none"
    base_batch: int = 256
    warmup_epochs: float = 0


@dataclass
class Trainer:
    accelerator: str = "auto"
    devices: Any = 1  # a count, a list of ids, or "auto": settings.parse_devices reads it
    num_nodes: int = 1
    max_epochs: int | None = 10
    max_steps: int = -1
    limit_train_batches: float = field(default=1.0, metadata={"example": 0.5})  # or a count
    limit_val_batches: float = field(default=1.0, metadata={"example": 0.5})  # the test set's
    precision: Any = "32-true"  # Lightning also takes 64, 32, 16
    num_sanity_val_steps: int = 0
    enable_model_summary: bool = False
    gradient_clip_val: float | None = field(default=None, metadata={"example": 1.0})
    sync_batchnorm: bool = False
    log_every_n_steps: int = 50
    check_val_every_n_epoch: int | None = field(default=1, metadata={"example": 3})
    # Lightning's other numbers (``+trainer.<name>``), at Lightning's defaults: a fraction where
    # a whole count is meant would silently train otherwise (no step at all with
    # accumulate_grad_batches=1.5). val_check_interval also takes a duration, which Lightning
    # checks (multigpu.run.lightning_arguments).
    min_epochs: int | None = field(default=None, metadata={"example": 1})
    min_steps: int | None = field(default=None, metadata={"example": 100})
    fast_dev_run: bool | int = False
    limit_test_batches: float = field(default=1.0, metadata={"example": 0.5})
    limit_predict_batches: float = field(default=1.0, metadata={"example": 0.5})
    overfit_batches: float = field(default=0.0, metadata={"example": 10})
    accumulate_grad_batches: int = field(default=1, metadata={"example": 2})
    reload_dataloaders_every_n_epochs: int = 0
    val_check_interval: float | str | dict | None = field(default=None, metadata={"example": 0.5})


@dataclass
class Strategy:
    split_weights: list[float] | None = field(default=None, metadata={"example": "[0.6,0.4]"})
    trace_shapes: bool = False
    trace_steps: int = 2
    start_method: StartMethod = "auto"
    timeout_s: float = 300.0


@dataclass
class StepLR:
    step_size: int = 5
    gamma: float = 0.1


@dataclass
class CosineAnnealingLR:
    T_max: int = 10
    eta_min: float = 0.0


@dataclass
class Compile:  # model.compile as torch.compile's keyword arguments
    fullgraph: bool = False
    dynamic: bool | None = None
    backend: str = "inductor"
    mode: str | None = field(default=None, metadata={"example": "max-autotune"})
    options: dict | None = field(default=None, metadata={"example": "{}"})
    disable: bool = False


SCHEMAS: dict[str, type] = {
    "": Top,
    "data": Data,
    "model": Model,
    "model.net": Net,
    "model.optimizer": Optimizer,
    "model.lr_scaling": LrScaling,
    "trainer": Trainer,
    "strategy": Strategy,
}
# model.scheduler's keys depend on the scheduler it names.
SCHEDULERS: dict[str, type] = {STEP_LR: StepLR, COSINE: CosineAnnealingLR}
OPTIONAL_NODES = ("model.lr_scaling",)  # null means none of it
KINDS = {
    int: "an integer",
    float: "a number",
    bool: "true or false",
    str: "a string",
    dict: "a map",
}
ABSENT = object()  # a key the config does not have (unlike one set to null)


def choices() -> dict[str, tuple[str, ...]]:
    """The keys whose value names a choice (annotated with a ``Literal`` type), and the names
    each accepts."""
    found: dict[str, tuple[str, ...]] = {}
    for path, schema in SCHEMAS.items():
        for name, hint in typing.get_type_hints(schema).items():
            if typing.get_origin(hint) is typing.Literal:
                found[f"{path}.{name}" if path else name] = typing.get_args(hint)
    return found


# The config, resolved ----------------------------------------------------------------------------
def config_tree(cfg: DictConfig) -> dict[str, Any]:
    """The nodes the schemas describe as plain values, interpolations resolved: one that
    cannot be (``${nosuch}``, a missing environment variable) is one line naming its key."""
    top = {f.name for f in fields(Top)}
    roots = [key for key in cfg if key in top or key in {p.split(".")[0] for p in SCHEMAS}]
    tree: dict[str, Any] = {}
    for key in roots:
        try:
            node = cfg[key]
            tree[key] = (
                OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
            )
        except OmegaConfBaseException as err:
            name = err.full_key or key
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise UserError(f"{name} cannot be resolved: {reason}") from None
    return tree


def select(tree: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted ``path``, or ``ABSENT``."""
    node: Any = tree
    for part in path.split(".") if path else []:
        if not isinstance(node, Mapping) or part not in node:
            return ABSENT
        node = node[part]
    return node


def target_of(node: Any) -> str | None:
    """The ``_target_`` a node builds, if it names one."""
    target = node.get("_target_") if isinstance(node, Mapping) else None
    return target if isinstance(target, str) else None


def node_schemas(tree: Mapping[str, Any]) -> Iterator[tuple[str, type]]:
    """Every (node path, schema) that applies to this config."""
    yield from SCHEMAS.items()
    scheduler = select(tree, "model.scheduler")
    if target_of(scheduler) in SCHEDULERS:
        yield "model.scheduler", SCHEDULERS[target_of(scheduler)]
    if isinstance(select(tree, "model.compile"), Mapping):
        yield "model.compile", Compile


# Types -------------------------------------------------------------------------------------------
def fits(value: Any, annotation: Any) -> bool:
    """Whether ``value`` is of the type ``annotation`` names, strictly (a bool is no number)."""
    if annotation is Any:
        return True
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(fits(value, a) for a in args)
    if annotation is type(None):
        return value is None
    if typing.get_origin(annotation) is list:
        return isinstance(value, list) and all(fits(v, args[0]) for v in value)
    if typing.get_origin(annotation) is typing.Literal:  # a choice: which one, settings check
        return isinstance(value, str)
    if annotation in (int, float):
        numbers = (int,) if annotation is int else (int, float)
        return isinstance(value, numbers) and not isinstance(value, bool)
    return isinstance(value, annotation)


def kind(annotation: Any) -> str:
    """How a type reads in an error message."""
    if typing.get_origin(annotation) is typing.Literal:
        return "a name"
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is list:
        return f"a list of {kind(args[0]).removeprefix('a ').removeprefix('an ')}s"
    if args:  # X | None
        return f"{kind(args[0])} or null"
    return KINDS.get(annotation, getattr(annotation, "__name__", str(annotation)))


def check_types(cfg: DictConfig) -> None:
    """Every known key of every node has a value of its type, or one ``UserError`` says which."""
    tree = config_tree(cfg)
    for path, schema in node_schemas(tree):
        node = select(tree, path)
        if node is ABSENT or (node is None and path in OPTIONAL_NODES):
            continue
        if not isinstance(node, Mapping):
            first = fields(schema)[0]
            shown = "null" if node is None else repr(node)
            raise UserError(
                f"{path}={shown} must be a group of settings, e.g. "
                f"{path}.{first.name}={as_override(example_of(first))}"
            )
        try:
            check_node(path, node, schema)
        except UserError as err:
            raise UserError(str(err) + interpolation_note(cfg, str(err).split("=")[0])) from None


def check_node(path: str, node: Mapping[str, Any], schema: type) -> None:
    hints = typing.get_type_hints(schema)
    for found in fields(schema):
        value = node.get(found.name, ABSENT)
        if value is ABSENT or fits(value, hints[found.name]):
            continue
        key = f"{path}.{found.name}" if path else found.name
        example = f"{key}={as_override(example_of(found))}"
        if hints[found.name] in (str, str | None) and isinstance(value, (int, float)):
            example += f" (quote a name that looks like a number: {key}='{value}')"
        shown = "null" if value is None else repr(value)
        raise UserError(f"{key}={shown} must be {kind(hints[found.name])}, e.g. {example}")


def interpolation_note(cfg: DictConfig, key: str) -> str:
    """`` (it is ${seed}: ...)`` when ``key``'s value came from another key, which the user
    may have set without knowing this one follows it."""
    parent_key, _, name = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
    if not OmegaConf.is_config(parent) or name not in parent:
        return ""
    if not OmegaConf.is_interpolation(parent, name):
        return ""
    raw = parent._get_node(name)._value()  # noqa: SLF001 - the text before resolution
    return f" (it follows {raw}: set {key} itself as well)"


def example_of(found: Any) -> Any:
    return found.metadata.get("example", found.default)


def as_override(value: Any) -> str:
    """A value as it is written on the command line."""
    if isinstance(value, bool) or value is None:
        return {None: "null", True: "true", False: "false"}[value]
    return str(value)
