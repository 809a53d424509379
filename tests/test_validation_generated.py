"""Generated configs against the validator's contract: overrides drawn from the schema's keys
(``multigpu.config.schema.SCHEMAS`` and the schedulers'), with values of their types, their edges
and wrong types, composed by Hydra and resolved in-process. ``resolve_run`` either returns a ``Run``
that can be trained, or raises ``UserError`` whose message is one line naming a drawn key; never any
other exception. A value Hydra itself cannot parse is skipped."""

from __future__ import annotations

import json
import math
import os
import re
import typing
from collections.abc import Mapping
from typing import Any

import hypothesis.strategies as st
import pytest
from conftest import CONF, TINY, compose_config, composed, examples, resolve_on
from hypothesis import assume, event, given
from omegaconf import OmegaConf

from multigpu.config.errors import UserError
from multigpu.config.names import CPU_PRECISIONS, DATA_SIZES, SYNTHETIC
from multigpu.config.schema import SCHEDULERS, SCHEMAS, config_tree
from multigpu.config.settings import MAX_SEED, MAX_WIDTH, SYNTHETIC_SIZES, Run

OUTPUT_DIR = "never-created"  # resolving writes nothing
OPTIONS = {
    group: sorted(p.stem for p in (CONF / group).glob("*.yaml"))
    for group in ("strategy", "data", "model/scheduler")
}
# Each scheduler schema's option of the model/scheduler group (by its _target_).
SCHEDULER_OPTIONS = {
    OmegaConf.load(CONF / "model" / "scheduler" / f"{option}.yaml")._target_: option
    for option in OPTIONS["model/scheduler"]
}


def catalog() -> list[tuple[str, Any, str | None]]:
    """(dotted key, its type, the scheduler option it needs) for every key of the schema."""
    keys = []
    for path, schema in SCHEMAS.items():
        hints = typing.get_type_hints(schema)
        keys += [(f"{path}.{name}".lstrip("."), hints[name], None) for name in schema.model_fields]
    for target, schema in SCHEDULERS.items():
        hints = typing.get_type_hints(schema)
        option = SCHEDULER_OPTIONS[target]
        keys += [(f"model.scheduler.{name}", hints[name], option) for name in schema.model_fields]
    nodes = ("model.net", "model.optimizer", "model.lr_scaling", "model.scheduler")
    return keys + [(node, "node", None) for node in nodes]


KEYS = catalog()
EDGE_INTS = [0, -1, 1, 2, 3, -2, 255, 256, 60_000, 60_001, 2**31, 2**32, 2**63, -(2**63), 10**30]
EDGE_FLOATS = [0.0, -0.0, 0.5, 1.0, -1.0, 1e-320, 1e300, -1e300, math.nan, math.inf, -math.inf]
WORDS = ["", "auto", "cpu", "gpu", "none", "batch", "linear", "memory", "16-mixed", "bf16", "ü"]
WORDS += ["step", "epoch", "weights", "all"]
WORDS += ["${nosuch}", "${trainer.max_epochs}", "a b", "1,2", "[0,1]", "-1", "x" * 300]
ints = st.one_of(st.sampled_from(EDGE_INTS), st.integers(-(10**6), 10**6), st.integers())
floats = st.one_of(st.sampled_from(EDGE_FLOATS), st.floats(), st.floats(-10, 10))
texts = st.one_of(st.sampled_from(WORDS), st.text(max_size=20), st.text(min_size=300, max_size=300))
scalars = st.one_of(st.none(), st.booleans(), ints, floats, texts)
anything = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["a", "mode", "width", "_target_"]), inner, max_size=2),
    ),
    max_leaves=4,
)


def values_of(annotation: Any) -> st.SearchStrategy:
    """Mostly values of the key's own type and its edges; wrong types the rest of the time."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is list:
        own = st.lists(st.one_of(floats, ints), max_size=4)
    elif args:  # X | None
        own = st.one_of(st.none(), values_of(args[0]))
    else:
        own = {int: ints, float: st.one_of(floats, ints), bool: st.booleans(), str: texts}.get(
            annotation, anything
        )
    return st.one_of(own, own, anything)


def render(value: Any) -> str:
    """A value as a command-line override writes it."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)  # inf, -inf, 1e+300 as Hydra reads
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list):
        return "[" + ",".join(render(v) for v in value) + "]"
    return "{" + ",".join(f"{k}:{render(v)}" for k, v in value.items()) + "}"


@st.composite
def drawn_configs(draw) -> tuple[list[str], list[str]]:
    """(overrides, the keys they name): group options, then a few values."""
    overrides, named = [], []
    for group, default in (("strategy", "single"), ("data", "fashion_mnist")):
        option = draw(st.sampled_from([default, *OPTIONS[group]]))
        if option != default:
            overrides.append(f"{group}={option}")
            named.append(group)
    scheduler = draw(st.sampled_from([None, *OPTIONS["model/scheduler"]]))
    for _ in range(draw(st.integers(1, 3))):
        key, annotation, needs = draw(st.sampled_from(KEYS))
        if needs is not None:
            scheduler = needs
        value = draw(values_of(annotation) if annotation != "node" else anything)
        overrides.append(f"++{key}={render(value)}")
        named.append(key)
    if scheduler is not None:
        overrides.insert(0, f"+model/scheduler={scheduler}")
        named.append("model.scheduler")
    return overrides, named


def check_contract(overrides: list[str], named: list[str]) -> None:
    try:
        cfg = compose_config([*TINY, *overrides], output_dir=OUTPUT_DIR)
    except Exception:  # Hydra's own answer to what its grammar cannot parse
        assume(False)
    try:
        run = resolve_on(cfg)
    except UserError as err:
        message = str(err)
        event("refused")
        assert len(message.splitlines()) == 1, message
        assert any(key in message for key in named), (message, overrides)
        return
    event("resolved")
    check_runnable(run, config_tree(cfg))


def check_runnable(run: Run, tree: Mapping[str, Any]) -> None:
    """What a config that resolved must satisfy to be trained."""
    assert isinstance(run, Run) and run.accelerator == "cpu" and run.num_nodes == 1
    assert 1 <= run.processes <= run.batch_size and run.batch_size % run.processes == 0
    assert run.process_batch_size * run.processes == run.batch_size
    ids = run.device_ids
    assert ids and len(set(ids)) == len(ids) and min(ids) >= 0
    assert math.isfinite(run.lr) and run.lr > 0
    assert math.isfinite(run.warmup_from) and run.warmup_from >= 0
    assert math.isfinite(run.warmup_epochs) and run.warmup_epochs >= 0
    assert run.max_epochs is None or run.max_epochs == -1 or run.max_epochs >= 1
    assert run.seed is None or 0 <= run.seed <= MAX_SEED
    assert run.precision in CPU_PRECISIONS and run.launcher in ("none", "popen", "spawn")
    assert run.width is None or 1 <= run.width <= MAX_WIDTH
    json.dumps(run.record(), allow_nan=False)  # records are strict JSON
    assert all_finite(tree)
    check_data_fits(tree["data"], tree["model"]["net"])
    check_scheduler(tree["model"].get("scheduler"), run)


def all_finite(node: Any) -> bool:
    if isinstance(node, Mapping):
        return all(all_finite(v) for v in node.values())
    if isinstance(node, list):
        return all(all_finite(v) for v in node)
    return not isinstance(node, float) or math.isfinite(node)


def check_data_fits(data: Mapping[str, Any], net: Mapping[str, Any]) -> None:
    if data["_target_"] == SYNTHETIC:
        train, test, classes = (data.get(k, v) for k, v in SYNTHETIC_SIZES.items())
    else:
        train, test, classes = DATA_SIZES[data["_target_"]]
    images = min(train, data.get("train_subset") or train)
    assert 1 <= images and (data.get("val_size") or 0) < images
    assert 1 <= (data.get("test_subset") or test) <= test
    assert net.get("num_classes", 10) == classes and net.get("in_channels", 1) == 1


def check_scheduler(scheduler: Mapping[str, Any] | None, run: Run) -> None:
    if not scheduler:
        return
    if "step_size" in scheduler:
        assert scheduler["step_size"] >= 1 and scheduler.get("gamma", 0.1) > 0
    if "T_max" in scheduler:
        assert scheduler["T_max"] >= 1 and 0 <= scheduler.get("eta_min", 0.0) <= run.lr
        assert run.max_epochs in (None, -1) or scheduler["T_max"] >= run.max_epochs


@pytest.mark.slow
@examples(18)  # each case composes: MULTIGPU_EXPLORE draws more
@given(drawn_configs())
def test_generated_configs_resolve_or_are_refused_in_one_line(case):
    check_contract(*case)


DURATION_KEYS = ("days", "hours", "minutes", "seconds", "weeks", "milliseconds", "bogus")
DURATIONS = st.one_of(
    st.from_regex(r"\A\s?\d{1,3}:\d{1,3}:\d{1,3}:\d{1,3}\s?\Z"),
    st.text(alphabet="0123456789: -x", max_size=14),
    st.dictionaries(
        st.sampled_from(DURATION_KEYS),
        st.one_of(st.integers(-3, 90), st.floats(-1, 90), st.text(max_size=2)),
        max_size=3,
    ),
    st.integers(-5, 5),
    st.none(),
)


@examples(300)
@given(DURATIONS)
def test_max_time_passes_exactly_when_lightnings_timer_takes_a_duration_above_zero(value):
    """The check before the run and Lightning's Timer, which reads the value once the run has
    started, agree on every value; a refusal is one line naming the key."""
    from pytorch_lightning.callbacks import Timer

    from multigpu.config.errors import message
    from multigpu.config.settings import check_max_time

    try:
        remaining = Timer(duration=value).time_remaining()
        lightning_runs = remaining is None or remaining > 0
    except Exception:
        lightning_runs = False
    try:
        check_max_time(value)
        passed = True
    except UserError as refused:
        passed = False
        said = message(refused)  # as the error line shows it
        assert said.startswith("trainer.max_time=") and "\n" not in said
    event("passed" if passed else "refused")
    assert passed == lightning_runs


@st.composite
def unknown_keys(draw) -> tuple[str, str]:
    """(node, key): a key the node does not take, often a near miss of one it does."""
    from multigpu.config.names import TRAINER_ARGUMENTS
    from multigpu.config.settings import TOP_KEYS

    node, known = draw(st.sampled_from([("", TOP_KEYS), ("trainer", TRAINER_ARGUMENTS)]))
    word = draw(st.sampled_from(known))
    at = draw(st.integers(0, len(word) - 1))
    near = word[:at] + word[at + 1 :]  # one letter dropped
    free = draw(st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True))
    key = draw(st.sampled_from([near, free]))
    assume(key not in known and not key.startswith("_"))
    return node, key


@pytest.mark.slow
@examples(25)
@given(unknown_keys())
def test_a_key_nothing_reads_is_refused_in_one_line_wherever_the_config_got_it(case):
    """Added on the command line here; a config file of the user's gives the validator the same
    composed config (tests/test_typos.py runs those through train.py)."""
    node, key = case
    name = f"{node}.{key}" if node else key
    cfg = compose_config([*TINY, f"++{name}=1"], output_dir=OUTPUT_DIR)
    try:
        resolve_on(cfg)
    except UserError as refused:
        said = str(refused)
        assert said.startswith(f"{name} is not a setting of ") and "\n" not in said
        return
    raise AssertionError(f"{name}=1 was accepted")


# Lightning's Trainer: every number it takes is checked before torch --------------------------
def lightnings_numbers() -> dict[str, Any]:
    """Trainer's arguments whose type takes a number, from its signature (``devices``,
    ``precision`` and ``max_time`` have checks of their own: a count or ids, names, a duration)."""
    import inspect

    from pytorch_lightning import Trainer

    own_checks = {"devices", "precision", "max_time"}
    found = {}
    for name, parameter in inspect.signature(Trainer.__init__).parameters.items():
        annotation = str(parameter.annotation)  # its text: Lightning's module has no types
        if name not in own_checks and re.search(r"\b(int|float)\b", annotation):
            found[name] = parameter.annotation
    return found


def test_every_number_lightnings_trainer_takes_has_a_range():
    """``trainer.accumulate_grad_batches=0`` had no range: a ZeroDivisionError mid-epoch, after
    the run's folder and record were written. Every such argument is in the one table now."""
    from multigpu.config.schema import ranges

    keys = [f"trainer.{name}" for name in lightnings_numbers()]
    assert [key for key in keys if key not in ranges()] == []


NEUTRAL = {"accelerator": "cpu", "devices": 1, "logger": False, "enable_checkpointing": False}
NEUTRAL |= {"enable_progress_bar": False, "enable_model_summary": False}


@pytest.mark.slow
@examples(20)
@given(
    st.sampled_from(sorted(lightnings_numbers())),
    st.one_of(st.sampled_from(EDGE_INTS), st.integers(-3, 300), floats, st.booleans()),
)
def test_a_trainer_number_checked_before_torch_is_one_lightning_takes(name, value):
    """Refused in one line naming the key, before torch; or taken by Lightning's Trainer as
    well (which then refuses nothing only once the run's folder exists)."""
    import pytorch_lightning as pl

    try:
        cfg = compose_config([*TINY, f"++trainer.{name}={render(value)}"], output_dir=OUTPUT_DIR)
    except Exception:  # Hydra's own answer to what its grammar cannot parse
        assume(False)
    try:
        resolve_on(cfg)
    except UserError as refused:
        event("refused")
        assert f"trainer.{name}=" in str(refused) and "\n" not in str(refused), str(refused)
        return
    event("accepted")
    taken = OmegaConf.to_container(cfg.trainer)[name]
    pl.Trainer(**{name: taken, **NEUTRAL})  # raises if Lightning refuses what passed


# Cross-checks with many inputs: devices listed twice, whole batches ----------------------------
@pytest.mark.slow
@examples(40)
@given(
    st.sampled_from(["auto", "single", "dp", "scatter_allreduce", "ddp", "ddp_spawn"]),
    st.lists(st.integers(0, 3), min_size=1, max_size=4),
)
def test_a_device_listed_twice_is_a_replica_of_scatter_allreduce_and_refused_elsewhere(
    strategy, ids
):
    """On a 4-GPU machine: the ids resolve as given, repeats included, exactly where the
    strategy runs several replicas on one device; else one line naming the repeated device."""
    from multigpu.config.settings import REPLICAS_ON_ONE_DEVICE

    cfg = composed([*TINY, f"strategy={strategy}", "trainer.accelerator=gpu"])
    cfg.trainer.devices = ids
    repeated = len(set(ids)) < len(ids)
    try:
        run = resolve_on(cfg, cuda_devices=4, cpu_cores=16)
    except UserError as refused:
        said = str(refused)
        assert "\n" not in said and said.startswith(("trainer.devices=", "strategy=")), said
        event("refused")
        if repeated and strategy not in REPLICAS_ON_ONE_DEVICE:
            assert "twice" in said, said
        return
    event("resolved")
    assert list(run.device_ids) == ids
    assert not repeated or run.strategy in REPLICAS_ON_ONE_DEVICE


@examples(40)
@given(
    batch=st.integers(1, 96),
    train=st.integers(2, 64),
    val_size=st.integers(0, 8),
    drop_last=st.booleans(),
)
def test_drop_last_resolves_exactly_when_the_loader_has_a_whole_batch(
    batch, train, val_size, drop_last
):
    """Against the data module's own loader (the second computation): a config that resolves
    trains at least one batch per epoch; one refused would have trained none."""
    from multigpu.run.fit import build_datamodule

    cfg = composed([*TINY, "data=synthetic"])
    cfg.data.merge_with({"num_train": train, "val_size": val_size, "batch_size": batch})
    cfg.data.drop_last = drop_last
    try:
        run = resolve_on(cfg)
    except UserError as refused:
        event("refused")
        said = str(refused)
        assert "\n" not in said and said.startswith(("data.drop_last=", "data.val_size=")), said
        if said.startswith("data.drop_last="):
            assert drop_last and train - val_size < batch
        return
    event("resolved")
    data = build_datamodule(cfg.data, run)
    data.setup("fit")
    assert len(data.train_dataloader()) >= 1


@pytest.mark.slow
@examples(30)
@given(
    batch=st.integers(1, 64),
    train=st.integers(2, 256),
    drop_last=st.booleans(),
    fraction=st.floats(0.001, 0.999),
)
def test_a_fraction_of_the_epoch_is_refused_exactly_where_lightning_finds_no_batch(
    batch, train, drop_last, fraction
):
    """Against the data module's own loader and Lightning's own count of the batches a fraction
    keeps (the second computation, which Lightning refuses once the data is loaded, after the
    run's folder was made): refused before anything starts exactly where it keeps none."""
    from lightning_fabric.utilities.exceptions import MisconfigurationException
    from pytorch_lightning.trainer.connectors.data_connector import _parse_num_batches
    from pytorch_lightning.trainer.states import RunningStage

    from multigpu.run.fit import build_datamodule

    assume(not drop_last or train >= batch)  # else refused for that (the test above)
    sizes = {"num_train": train, "batch_size": batch, "drop_last": drop_last}
    whole = composed([*TINY, "data=synthetic"])
    whole.data.merge_with(sizes)
    data = build_datamodule(whole.data, resolve_on(whole))
    data.setup("fit")
    try:
        _parse_num_batches(RunningStage.TRAINING, len(data.train_dataloader()), fraction)
        kept = True
    except MisconfigurationException:
        kept = False
    cfg = composed([*TINY, "data=synthetic", f"+trainer.limit_train_batches={fraction}"])
    cfg.data.merge_with(sizes)
    try:
        resolve_on(cfg)
    except UserError as refused:
        event("refused")
        said = f"trainer.limit_train_batches={fraction} of the "
        assert str(refused).startswith(said) and not kept
        return
    event("resolved")
    assert kept


LAUNCH_VARIABLES = ["TORCHELASTIC_RUN_ID", "RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_NTASKS"]
LAUNCH_VARIABLES += ["SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_JOB_NAME"]


@examples(60)
@given(st.sets(st.sampled_from(LAUNCH_VARIABLES)))
def test_a_launchers_mark_is_refused_exactly_where_lightning_could_not_read_its_launch(given_):
    """Against Lightning's own environments (the second computation): one that takes the
    environment for its launch (torchrun's, srun's) and then cannot read a process number of
    it had failed with a KeyError after the folder was made; that is refused first, in one
    line naming the mark, and only that."""
    from unittest import mock

    from lightning_fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

    from multigpu.config.launch import check_promised

    environ = {name: "train" if name == "SLURM_JOB_NAME" else "0" for name in given_}
    unreadable = False
    with mock.patch.dict(os.environ, environ, clear=True):
        for kind in (TorchElasticEnvironment, SLURMEnvironment):
            if kind.detect():
                try:
                    found = kind()
                    found.world_size(), found.global_rank(), found.local_rank(), found.node_rank()
                except KeyError:
                    unreadable = True
    try:
        check_promised(environ)
    except UserError as refused:
        event("refused")
        assert unreadable and "\n" not in str(refused)
        assert str(refused).split("=", 1)[0] in ("TORCHELASTIC_RUN_ID", "SLURM_NTASKS")
        return
    event("passed")
    assert not unreadable
