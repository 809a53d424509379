"""The types of the config's values, as structured-config dataclasses: OmegaConf checks a
config against them the way Hydra checks its own (``OmegaConf.structured`` and a merge), and a
mismatch becomes one line naming the key, the value and an example, before torch is imported.

One dataclass per config node; its defaults are the shipped ones (they serve as the examples).
Only the keys a node has are checked, so options of a group may leave keys out, and keys added
with ``+`` (any Lightning ``Trainer`` argument) pass through to the code that takes them.
Ranges and cross-checks come after the types, in ``multigpu.settings``.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ValidationError

from multigpu.errors import UserError


@dataclass
class Top:
    seed: int | None = 42
    ckpt_path: str | None = field(default=None, metadata={"example": "<run>/checkpoints/last.ckpt"})
    check_finite_every_n_steps: int = 10
    phases: bool = False


@dataclass
class Data:
    root: str = "data"
    source: str | None = field(default=None, metadata={"example": "../shared/data"})
    download: bool = True
    batch_size: int = 256
    batch_size_per_device: int | None = field(default=None, metadata={"example": 256})
    num_workers: int = 2
    pipeline: str = "torchvision"
    augment: bool = False
    crop_padding: int = 2
    flip: bool = True
    pin_memory: bool = False
    shuffle: bool = True
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
    compile: Any = False  # true, false, or torch.compile's keyword arguments


@dataclass
class Net:
    num_classes: int = 10
    in_channels: int = 1
    width: int = 64
    norm: str = "batch"
    init_std: float | None = 0.01
    zero_init_residual: bool = False


@dataclass
class Optimizer:
    lr: float = 0.1
    momentum: float = 0.0
    weight_decay: float = 0.0


@dataclass
class LrScaling:
    rule: str = "none"
    base_batch: int = 256
    warmup_epochs: float = 0


@dataclass
class Trainer:
    accelerator: str = "auto"
    devices: Any = 1  # a count, a list of ids, or "auto": settings.parse_devices reads it
    num_nodes: int = 1
    max_epochs: int | None = 10
    max_steps: int = -1
    precision: Any = "32-true"  # Lightning also takes 64, 32, 16
    num_sanity_val_steps: int = 0
    enable_model_summary: bool = False
    gradient_clip_val: float | None = field(default=None, metadata={"example": 1.0})
    sync_batchnorm: bool = False
    log_every_n_steps: int = 50


@dataclass
class Strategy:
    split_weights: list[float] | None = field(default=None, metadata={"example": "[0.6,0.4]"})
    trace_shapes: bool = False
    start_method: str = "auto"
    timeout_s: float = 300.0


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
KINDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def kind(annotation: Any) -> str:
    """How a type reads in an error message."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is list:
        return f"a list of {kind(args[0]).removeprefix('a ').removeprefix('an ')}s"
    if args:  # X | None
        return f"{kind(args[0])} or null"
    return KINDS.get(annotation, annotation.__name__)


def check_types(cfg: DictConfig) -> None:
    """Every known key of every node has a value of its type, or one ``UserError`` says which."""
    for path, schema in SCHEMAS.items():
        node = OmegaConf.select(cfg, path) if path else cfg
        if not isinstance(node, DictConfig):
            continue
        types = typing.get_type_hints(schema)
        values = {f.name: node[f.name] for f in fields(schema) if f.name in node}
        try:
            OmegaConf.merge(OmegaConf.structured(schema), values)
        except ValidationError as err:
            name = str(err.full_key).split("[")[0].split(".")[0]
            key = f"{path}.{name}" if path else name
            value = values[name]
            if isinstance(value, (DictConfig, ListConfig)):
                value = OmegaConf.to_container(value)
            found = next(f for f in fields(schema) if f.name == name)
            example = found.metadata.get("example", found.default)
            raise UserError(
                f"{key}={value!r} must be {kind(types[name])}, e.g. {key}={as_override(example)}"
            ) from None


def as_override(value: Any) -> str:
    """A value as it is written on the command line."""
    return {None: "null", True: "true", False: "false"}.get(value, str(value))
