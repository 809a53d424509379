"""The config's values declared once, before torch is imported: one pydantic model per config
node, whose fields give each key's type, its default (the shipped one), the range it takes
(``Field(ge=..., gt=..., le=..., lt=...)``, or a named rule) in the words an error says it with
(``description``), and an example for the fix. The tools' command-line arguments have theirs in
``multigpu.tools.arguments``.

The models are strict (a quoted ``'5'`` is not an integer, ``1`` is not ``true``): the values go
to torch as they are, unconverted. Only the keys a node has are checked, so options of a group
may leave keys out; which keys a node may have at all, and the cross-checks between values, the
machine and the data, are ``multigpu.config.settings``'s. Two passes over the same models keep
the order the checks answer in: the types first (``check_types``), then, once the keys and
numbers have been checked, the ranges and names (``check_ranges_and_names``).
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar, Literal, get_args

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from multigpu.config.errors import Unresolved, UserError, as_override, either
from multigpu.config.names import (
    COSINE,
    CSV,
    DATA_PARALLEL,
    FASHION_MNIST,
    MODEL,
    NETWORK,
    SCATTER_ALLREDUCE,
    SGD,
    SINGLE_DEVICE,
    STEP_LR,
    SYNTHETIC,
    TENSORBOARD,
    ClipAlgorithm,
    CompileMode,
    Decayed,
    LrRule,
    MatmulPrecision,
    Norm,
    Pipeline,
    Profiler,
    SchedulerInterval,
    StartMethod,
)

MAX_SEED = 2**32 - 1  # what seed_everything accepts
MAX_WORKERS = 256  # data.num_workers: processes started per loader
MAX_WIDTH = 2048  # model.net.width: 46 billion parameters at 4096, more than any GPU holds
MAX_SYNTHETIC = 1_000_000  # data=synthetic images, held in memory (3 KB each)
MAX_CLASSES = 100_000
MAX_NAME_END = 128  # bytes: 255 a name, less the event file's own (its host's name up to 64)
MAX_TIMEOUT_S = 7 * 24 * 3600  # strategy.timeout_s: Python's timedelta overflows far beyond


# Rules beyond a bound --------------------------------------------------------------------------
def _whole_above_one(value: float) -> float:
    """Lightning's batch counts: a fraction of the batches up to 1.0, else a whole count."""
    if value > 1 and value % 1:
        raise ValueError("a fraction above 1")
    return value


def _not_zero(value: int) -> int:
    if value == 0:
        raise ValueError("zero")
    return value


def _none_or_all(value: Any) -> Any:
    """The test set is evaluated whole or not at all: part of it would be recorded as the
    run's test accuracy (``data.test_subset`` tests on fewer images, as eval.py can repeat).
    Lightning reads a whole number as batches: 1 is one batch, 1.0 the whole set."""
    if value != 0 and (value != 1 or isinstance(value, int)):
        raise ValueError("part of the test set")
    return value


def _below(value: Any) -> Any:
    """A logger's folders lie below its ``save_dir``: ``..`` or a path from ``/`` would put
    this run's logs beside other runs' (``logger.version=..``: in the date's folder); one
    from ``~``, meant as the home folder, would be a folder named ``~`` in the run's."""
    if isinstance(value, str) and (value.startswith(("/", "~")) or ".." in value.split("/")):
        raise ValueError("outside save_dir")
    return value


def _name_end(value: str) -> str:
    """The end of the event file's name, which the time, host and process id come before."""
    if "/" in value or len(os.fsencode(value)) > MAX_NAME_END:
        raise ValueError("no name's end")
    return value


Batches = Annotated[float, AfterValidator(_whole_above_one)]
Below = Annotated[str, AfterValidator(_below)]
AnyCase = BeforeValidator(lambda name: name.lower() if isinstance(name, str) else name)
NoLimit = Annotated[int, Field(ge=-1), AfterValidator(_not_zero)]  # -1: no limit
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
Accuracy = Annotated[float, Field(gt=0, le=1)]  # a fraction, not a percentage
POSITIVE = "a positive integer"
NO_LIMIT = "-1 (no limit) or more than 0"
SUBSET = "a positive integer (or null: every image)"
FRACTION_OR_COUNT = "a whole number of batches, or a fraction up to 1.0"
BELOW = "a folder below logger.save_dir (no .., not from / or ~)"
SYNTHETIC_COUNT = f"between 1 and {MAX_SYNTHETIC} (each image is held in memory)"


REQUIRED = PydanticUndefined  # a key without a default: the node must set it


def setting(default: Any, wanted: str | None = None, example: Any = None, **bounds: Any) -> Any:
    """A key's default, its bounds, the words that say its range (``wanted``) and the example
    an error gives when the default would not show the fix."""
    examples = None if example is None else [example]
    return Field(default, description=wanted, examples=examples, **bounds)


class Node(BaseModel):
    """A config node: strict types. Its fields are also the keys the node may have (with
    ``nodes``, the nodes inside it): ``settings.check_keys`` names any other, with ``what``."""

    model_config = ConfigDict(strict=True, extra="allow")
    what: ClassVar[str] = "the config"
    nodes: ClassVar[tuple[str, ...]] = ()


class Top(Node):
    nodes = ("data", "model", "trainer", "strategy", "logger", "callbacks", "paths", "hydra")
    seed: Seed | None = setting(42, f"between 0 and {MAX_SEED} (or null)")
    ckpt_path: str | None = setting(None, example="<run>/checkpoints/last.ckpt")
    resume_changes: list[str] = setting([], example="[model.scheduler.T_max]")
    init_from: str | None = setting(None, example="<run>/checkpoints/last.ckpt")
    check_finite_every_n_steps: int = setting(10, "1 or more", ge=1)
    phases: bool = False
    time_to_targets: list[Accuracy] = setting(
        [0.8, 0.85, 0.9, 0.92], "accuracies above 0 and at most 1", "[0.85,0.9]"
    )
    float32_matmul_precision: MatmulPrecision = "high"


class ImageData(Node):
    """``multigpu.data.ImageDataModule``'s arguments, and ``batch_size_per_device``, which the
    settings turn into the global batch the data module gets."""

    batch_size: int | None = setting(256, POSITIVE, ge=1)  # null: batch_size_per_device sets it
    num_workers: int | None = setting(None, f"between 0 and {MAX_WORKERS}", ge=0, le=MAX_WORKERS)
    seed: Seed = setting(42, f"between 0 and {MAX_SEED}")
    train_subset: int | None = setting(None, SUBSET, 20000, ge=1)
    test_subset: int | None = setting(None, SUBSET, 1000, ge=1)
    val_size: int = setting(0, "0 or more", ge=0)
    pin_memory: bool | None = None
    shuffle: bool = True
    pipeline: Pipeline = "torchvision"
    augment: bool = False
    crop_padding: int = setting(2, "between 0 and 28 (the images' size)", ge=0, le=28)
    flip: bool = True
    drop_last: bool = False
    batch_size_per_device: int | None = setting(
        None, "a positive integer (or null to use data.batch_size)", 256, ge=1
    )


class FashionMNIST(ImageData):
    root: str = "data"
    source: str | None = setting(None, example="../shared/data")
    download: bool = True
    normalize: bool | None = True


class Synthetic(ImageData):
    num_train: int = setting(1024, SYNTHETIC_COUNT, ge=1, le=MAX_SYNTHETIC)
    num_test: int = setting(256, SYNTHETIC_COUNT, ge=1, le=MAX_SYNTHETIC)
    num_classes: int = setting(10, f"between 2 and {MAX_CLASSES}", ge=2, le=MAX_CLASSES)


class Data(Synthetic, FashionMNIST):
    """Every data set's keys: a data set of another ``_target_`` is checked against these."""


class Model(Node):
    what = "the model"
    nodes = ("net", "optimizer", "scheduler", "lr_scaling")
    channels_last: bool = False
    compile: bool | dict | None = setting(False, example="{mode:max-autotune}")  # or ``Compile``
    label_smoothing: float = setting(0.0, "0 or more and less than 1", 0.1, ge=0, lt=1)
    tta_flip: bool = False
    scheduler_interval: SchedulerInterval = "epoch"
    weight_decay_on: Decayed = "all"


class Net(Node):  # multigpu.models.resnet18's arguments
    what = "the network"
    num_classes: int = setting(10, "2 or more", ge=2)
    in_channels: int = setting(1, "1 or more", ge=1)
    width: int = setting(
        64,
        f"a positive integer, at most {MAX_WIDTH} (already 11 billion parameters)",
        ge=1,
        le=MAX_WIDTH,
    )
    norm: Norm = "batch"
    init_std: float | None = setting(0.01, "positive, or null", gt=0)
    zero_init_residual: bool = False


class Optimizer(Node):
    """SGD's arguments: those that change what is trained, and ``fused``, which runs the same
    update as one operation per parameter group (on a GPU one kernel launch instead of several
    per parameter; on this CPU the speedrun's optimizer step took 0.56 ms against 1.89 at width
    16); null: fused where Lightning can step it (``settings.fused_update``). The other
    implementation switches (foreach, differentiable: fused takes neither) and maximize (it
    would climb the loss) are left out."""

    what = "the optimizer"
    lr: float = setting(0.1, "a positive number", gt=0)
    momentum: float = setting(0.0, "0 or more and less than 1", ge=0, lt=1)
    dampening: float = setting(0.0, "between 0 and 1", ge=0, le=1)
    weight_decay: float = setting(0.0, "0 or more", ge=0)
    nesterov: bool = False
    fused: bool | None = None


class LrScaling(Node):
    rule: LrRule = "none"
    base_batch: int = setting(256, POSITIVE, ge=1)
    warmup_epochs: float = setting(0, "0 or more", ge=0)


class Trainer(Node):
    """Every argument of Lightning's ``Trainer``, in its signature's order (a test compares
    them), so that a wrong one is answered before Lightning loads. A fraction where a whole
    count is meant would silently train otherwise (no step at all with
    accumulate_grad_batches=1.5). What the run sets itself (strategy, logger, callbacks,
    plugins) and what Lightning reads further (a duration in val_check_interval) are
    Lightning's to check (``multigpu.run.lightning_arguments``)."""

    what = "Lightning's Trainer"
    accelerator: str = "auto"
    strategy: Any = "auto"
    devices: Any = 1  # a count, a list of ids, or "auto": settings.parse_devices reads it
    num_nodes: int = setting(1, POSITIVE, ge=1)
    precision: Any = "32-true"  # Lightning also takes 64, 32, 16: settings.parse_precision
    logger: Any = None
    callbacks: Any = None
    fast_dev_run: bool | Annotated[int, Field(ge=0)] = setting(
        False, "true, false or a number of batches (0 or more)"
    )
    max_epochs: NoLimit | None = setting(10, NO_LIMIT)
    min_epochs: int | None = setting(None, "0 or more, or null", 1, ge=0)
    max_steps: NoLimit = setting(-1, NO_LIMIT)
    min_steps: int | None = setting(None, "0 or more, or null", 100, ge=0)
    max_time: str | dict | None = None  # settings.check_max_time reads it as Lightning does
    limit_train_batches: Batches = setting(
        1.0,
        f"more than 0 ({FRACTION_OR_COUNT.replace('batches', 'batches per epoch', 1)}): at 0 "
        "nothing trains",
        0.5,
        gt=0,
    )
    limit_val_batches: Annotated[float, BeforeValidator(_none_or_all)] = setting(
        1.0,  # 0: no test set at all (the benchmark's steps)
        "0 (no evaluation: no test accuracy) or 1.0 (the whole test set; to test on fewer "
        "images, data.test_subset=<images>)",
    )
    limit_test_batches: Batches = setting(1.0, f"0 or more ({FRACTION_OR_COUNT})", 0.5, ge=0)
    limit_predict_batches: Batches = setting(1.0, f"0 or more ({FRACTION_OR_COUNT})", 0.5, ge=0)
    overfit_batches: float = setting(
        0.0,  # Lightning tests on the same share, and replaces the data's samplers (a process's
        # share under DDP, the memory pipeline's whole batches) with one that loads one by one
        "0: Lightning would test on the same share of the test set (recorded as the test "
        "accuracy) and load the data its own way; to train on a few batches, "
        "data.train_subset=<images> data.shuffle=false",
        ge=0,
        le=0,
    )
    val_check_interval: Annotated[Batches, Field(gt=0)] | str | dict | None = setting(
        None,
        "more than 0 (a whole number of batches, or a fraction of an epoch up to 1.0), or a "
        "duration DD:HH:MM:SS",
        0.5,
    )
    check_val_every_n_epoch: int | None = setting(1, "1 or more", 3, ge=1)
    num_sanity_val_steps: int = setting(0, "-1 (all) or more", ge=-1)
    log_every_n_steps: int = setting(50, "1 or more", ge=1)
    enable_checkpointing: bool | None = None
    enable_progress_bar: bool | None = None
    enable_model_summary: bool = False
    accumulate_grad_batches: int = setting(
        1,
        "1 or more (the batches whose gradients each optimizer step sums; 1: every batch)",
        2,
        ge=1,
    )
    gradient_clip_val: float | None = setting(
        None, "0 or more (0: no clipping), or null", 1.0, ge=0
    )
    gradient_clip_algorithm: ClipAlgorithm | None = None
    deterministic: bool | Literal["warn"] | None = None
    benchmark: bool | None = None
    inference_mode: bool = True
    use_distributed_sampler: bool = True
    profiler: Annotated[Profiler, AnyCase] | None = None
    detect_anomaly: bool = False
    barebones: Literal[False] = setting(
        False,
        "false: barebones mode turns off self.log, which every figure of the run's record and "
        "TensorBoard comes from",
    )
    plugins: Any = None
    sync_batchnorm: bool = False
    reload_dataloaders_every_n_epochs: int = setting(0, "0 (never) or more", ge=0)
    default_root_dir: str | None = None
    enable_autolog_hparams: bool = True
    model_registry: str | None = None


class ScatterAllreduce(Node):
    split_weights: list[float] | None = setting(None, example="[0.6,0.4]")
    trace_shapes: bool = False
    trace_steps: int = setting(2, "0 or more", ge=0)


class DDP(Node):  # keys beyond these go on to Lightning's DDPStrategy, which answers them
    start_method: StartMethod = "auto"
    timeout_s: float = setting(
        300.0, f"positive, at most {MAX_TIMEOUT_S} (a week)", gt=0, le=MAX_TIMEOUT_S
    )


class Strategy(ScatterAllreduce, DDP):
    """Every strategy's keys: the types and ranges of whichever the config names."""


class StepLR(Node):  # the lengths (step_size, T_max) have no default in torch
    what = "the scheduler"
    step_size: int = setting(REQUIRED, "1 or more (epochs between two decays)", 5, ge=1)
    gamma: float = setting(0.1, "positive", gt=0)


class CosineAnnealingLR(Node):
    what = "the scheduler"
    T_max: int = setting(REQUIRED, "1 or more (the epochs the cosine decays over)", 10, ge=1)
    eta_min: float = setting(0.0, "0 or more", ge=0)


class Logger(Node):  # Lightning's CSVLogger and TensorBoardLogger both take these
    what = "the logger"
    save_dir: str = setting(REQUIRED, example="${paths.output_dir}")
    name: Below | None = setting("", BELOW, "tb")
    version: int | Below | None = setting("", BELOW, "v1")
    prefix: str = ""


class CsvLogger(Logger):
    flush_logs_every_n_steps: int = setting(100, "1 or more", ge=1)


class TensorBoard(Logger):
    """With ``runs_dir`` (``EpochTensorBoardLogger``'s) and what its writer takes
    (``SummaryWriter``'s keyword arguments: its log_dir is the logger's to set)."""

    log_graph: bool = False
    default_hp_metric: bool = True
    sub_dir: Below | None = setting(None, BELOW, "tb")
    runs_dir: str | None = None
    comment: str = ""
    purge_step: int | None = setting(None, "0 or more, or null", ge=0)
    max_queue: int = setting(10, "1 or more", ge=1)
    flush_secs: int | float = setting(120, "more than 0", gt=0)
    filename_suffix: Annotated[str, AfterValidator(_name_end)] = setting(
        "", f"a file name's end: no /, at most {MAX_NAME_END} bytes", ".v2"
    )


class Compile(Node):  # model.compile as torch.compile's keyword arguments
    what = "torch.compile"
    fullgraph: bool = False
    dynamic: bool | None = None
    backend: str = "inductor"
    mode: CompileMode | None = setting(None, f"one of {', '.join(get_args(CompileMode))}")
    options: dict | None = setting(None, example="{}")
    disable: bool = False


def compile_options(value: Any) -> dict[str, Any] | None:
    """``model.compile`` as torch.compile's keyword arguments, or None: not compiled. A map,
    even an empty one, compiles with its arguments, as ``true`` compiles with none."""
    if value is True:
        return {}
    return dict(value) if isinstance(value, Mapping) else None


SCHEMAS: dict[str, type[Node]] = {
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
SCHEDULERS: dict[str, type[Node]] = {STEP_LR: StepLR, COSINE: CosineAnnealingLR}
# What each node's ``_target_`` builds, with the model of the keys it takes. Another target is
# refused under model (``settings.MUST_BUILD``); a data set or strategy of another target (a
# user's own, Lightning's DDPStrategy) answers its keys itself.
BUILDS: dict[str, dict[str, type[Node]]] = {
    "model.net": {NETWORK: Net},
    "model.optimizer": {SGD: Optimizer},
    "model.scheduler": SCHEDULERS,
    "model": {MODEL: Model},
    "data": {FASHION_MNIST: FashionMNIST, SYNTHETIC: Synthetic},
    "strategy": {SINGLE_DEVICE: Node, DATA_PARALLEL: Node, SCATTER_ALLREDUCE: ScatterAllreduce},
    "logger": {TENSORBOARD: TensorBoard, CSV: CsvLogger},
}
OPTIONAL_NODES = ("model.lr_scaling",)  # null means none of it
KINDS = {
    int: "an integer",
    float: "a number",
    bool: "true or false",
    str: "a string",
    dict: "a map",
}
ABSENT = object()  # a key the config does not have (unlike one set to null)
# What pydantic reports when a value of the right type is outside what its key takes.
OUT_OF_RANGE = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "value_error"}


def default_of(schema: type[Node], name: str) -> Any:
    return schema.model_fields[name].get_default(call_default_factory=True)


def defaults() -> dict[str, Any]:
    """Every key the schema declares (the schedulers' aside), with its shipped default."""
    return {
        f"{path}.{name}".lstrip("."): default_of(schema, name)
        for path, schema in SCHEMAS.items()
        for name in schema.model_fields
    }


def choices() -> dict[str, tuple[str, ...]]:
    """The keys whose value names a choice (annotated with a ``Literal`` type), and the names
    each accepts."""
    return {
        f"{path}.{name}".lstrip("."): names_of(info.annotation)
        for path, schema in SCHEMAS.items()
        for name, info in schema.model_fields.items()
        if names_of(info.annotation)
    }


def ranges() -> dict[str, str]:
    """Every key with a declared range, and the words that say it."""
    nodes = [*SCHEMAS.items(), *(("model.scheduler", s) for s in SCHEDULERS.values())]
    return {
        f"{path}.{name}".lstrip("."): info.description
        for path, schema in nodes
        for name, info in schema.model_fields.items()
        if info.description
    }


# The config, resolved ----------------------------------------------------------------------------
def config_tree(cfg: DictConfig) -> dict[str, Any]:
    """The nodes the schemas describe as plain values, interpolations resolved: one that
    cannot be (``${nosuch}``, a missing environment variable) is one line naming its key."""
    nodes = {path.split(".")[0] for path in (*SCHEMAS, *BUILDS)}
    roots = [key for key in cfg if key in Top.model_fields or key in nodes]
    tree: dict[str, Any] = {}
    for key in roots:
        try:
            tree[key] = plain(cfg[key])
        except OmegaConfBaseException as err:
            name = err.full_key or key
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise Unresolved(f"{name} cannot be resolved: {reason}") from None
    return tree


def plain(node: Any) -> Any:
    """A config's node (a map or a list) as plain values, interpolations resolved; any other
    value as it is."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


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


def node_schemas(tree: Mapping[str, Any]) -> Iterator[tuple[str, type[Node]]]:
    """Every (node path, schema) that applies to this config."""
    yield from SCHEMAS.items()
    for path in ("model.scheduler", "logger"):  # keys that depend on what the node builds
        if (schema := BUILDS[path].get(target_of(select(tree, path)))) is not None:
            yield path, schema
    if isinstance(select(tree, "model.compile"), Mapping):
        yield "model.compile", Compile


# The two passes --------------------------------------------------------------------------------
def refusals(
    tree: Mapping[str, Any], nodes: tuple[str, ...] = ()
) -> Iterator[tuple[str, str, Any, FieldInfo, bool]]:
    """(node path, key, value, field, whether its type is wrong) of every value its model
    refuses, node by node in the schema's order (of ``nodes`` only, if given)."""
    for path, schema in node_schemas(tree):
        node = select(tree, path)
        if not isinstance(node, Mapping) or nodes and not f"{path}.".startswith(nodes):
            continue
        try:
            schema.model_validate(dict(node))
        except ValidationError as refused:
            by_key: dict[str, list[dict]] = {}
            for error in refused.errors():
                if error["type"] == "missing":  # settings.check_keys names it
                    continue
                by_key.setdefault(str(error["loc"][0]), []).append(error)
            for name, errors in by_key.items():
                wrong_type = not any(is_out_of_range(e, node[name]) for e in errors)
                yield path, name, node[name], schema.model_fields[name], wrong_type


def is_out_of_range(error: Mapping[str, Any], value: Any) -> bool:
    """A value of the key's type that its range or its names refuse."""
    if error["type"] == "literal_error":  # a name, or a value of the one allowed's type
        expected = error.get("ctx", {}).get("expected", "")
        return isinstance(value, str) or (isinstance(value, bool) and expected in ("True", "False"))
    return error["type"] in OUT_OF_RANGE


def check_types(cfg: DictConfig) -> None:
    """Every known key of every node has a value of its type, or one ``UserError`` says which."""
    tree = config_tree(cfg)
    for path, schema in node_schemas(tree):
        node = select(tree, path)
        if node is ABSENT or (node is None and path in OPTIONAL_NODES) or isinstance(node, Mapping):
            continue
        first, info = next(iter(schema.model_fields.items()))
        raise UserError(
            f"{path}={shown(node)} must be a group of settings, e.g. "
            f"{path}.{first}={as_override(example_of(info))}"
        )
    for path, name, value, info, wrong_type in refusals(tree):
        if wrong_type:
            key = f"{path}.{name}".lstrip(".")
            example = f"{key}={as_override(example_of(info))}"
            if info.annotation in (str, str | None) and isinstance(value, (int, float)):
                example += f" (quote a name that looks like a number: {key}='{value}')"
            message = f"{key}={shown(value)} must be {kind(info.annotation)}, e.g. {example}"
            raise UserError(message + interpolation_note(cfg, key))


def check_ranges_and_names(tree: Mapping[str, Any], nodes: tuple[str, ...] = ()) -> None:
    """Each number in its range and each choice one of its names (of ``nodes`` only, if
    given); the types are right by now."""
    for path, name, value, info, _ in refusals(tree, nodes):
        key = f"{path}.{name}".lstrip(".")
        if names := ", ".join(names_of(info.annotation)):
            raise UserError(f"{key}={value!r} is not known: use one of {names}")
        example = f", e.g. {key}={as_override(example_of(info))}" if example_of(info) else ""
        if isinstance(value, list):  # time_to_targets
            raise UserError(f"{key}={value} must hold {info.description}{example}")
        wanted = info.description or kind(info.annotation)
        raise UserError(f"{key}={as_override(value)} must be {wanted}{example}")


def names_of(annotation: Any) -> tuple[str, ...]:
    """The names a key of a ``Literal`` type of names (or null) takes; none for another type
    (``Literal[False]``: a value allowed alone, whose range its description says)."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is Annotated:
        return names_of(args[0])
    if typing.get_origin(annotation) is Literal:
        names = get_args(annotation)
    elif len(args) == 1:
        return names_of(args[0])
    else:
        return ()
    return names if all(isinstance(name, str) for name in names) else ()


# Words ------------------------------------------------------------------------------------------
def kind(annotation: Any) -> str:
    """How a type reads in an error message."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return kind(typing.get_args(annotation)[0])
    if origin is typing.Literal:  # names, or a value allowed alone (false)
        return " or ".join(as_override(a) for a in typing.get_args(annotation))
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin is list:
        return f"a list of {kind(args[0]).removeprefix('a ').removeprefix('an ')}s"
    if origin in (typing.Union, types.UnionType):
        kinds = [
            *(kind(a) for a in args),
            *(["null"] if len(args) < len(get_args(annotation)) else []),
        ]
        return either([alone for alternatives in kinds for alone in alternatives.split(" or ")])
    return KINDS.get(annotation, getattr(annotation, "__name__", str(annotation)))


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


def example(key: str) -> str:
    """``, e.g. key=<its example>`` for a key of the schema's own nodes."""
    path, _, name = key.rpartition(".")
    info = SCHEMAS[path].model_fields[name]
    return f", e.g. {key}={as_override(example_of(info))}" if example_of(info) else ""


def example_of(info: FieldInfo) -> Any:
    return info.examples[0] if info.examples else info.get_default(call_default_factory=True)


def shown(value: Any) -> str:
    return "null" if value is None else repr(value)
