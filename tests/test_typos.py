"""A misspelt key or option is answered in one line with the closest valid names, before torch
is imported (``multigpu.config.typos``): the named cases of the task, then generated ones (every key
of a composed config, Hydra's own included, misspelt by one character and set or deleted, is
found and its original suggested; every key set to its own value, or deleted, passes), the
keys judged against Hydra's composition, and a few real ``train.py`` runs."""

from __future__ import annotations

import functools
import inspect
import sys

import pytest
from conftest import CONF, examples, run_script
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hypothesis import assume, given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from multigpu.config import typo_hydra
from multigpu.config.launch import PARENT
from multigpu.config.names import TRAINER_ARGUMENTS
from multigpu.config.typo_hydra import dotted_keys
from multigpu.config.typos import (
    OUTPUT_DIR,
    PARAMS,
    RUNTIME,
    Composition,
    composing,
    find_typos,
    hydra_refusal,
    parse_overrides,
)
from multigpu.run.cli import register_resolvers
from multigpu.run.command_line import check_command_line, refusal, training_values

# (script's config, overrides, the error line's text, the suggestions it must make)
NAMED = {
    "a_runtime_choice": (  # Hydra's page, exit 1; the value check had judged the fake choice
        "config",
        ["trainer.devices=2", "hydra.runtime.choices.strategy=dp"],
        "hydra.runtime.choices.strategy=dp: Hydra sets hydra.runtime.* itself as the job starts; "
        "choose the option by its group, strategy=dp",
        [],
    ),
    "a_runtime_folder": (
        "config",
        ["hydra.runtime.cwd=/x"],
        "hydra.runtime.cwd=/x: Hydra sets hydra.runtime.* itself as the job starts; drop it",
        [],
    ),
    "an_override_after_a_flag_after_overrides": (  # Hydra: its usage page, exit 2
        "config",
        ["seed=1,2", "-m", "hydra.sweep.dir=S"],
        "hydra.sweep.dir=S: an override after -m is not read, where other overrides came before "
        "-m: give -m before every override (or after them all)",
        [],
    ),
    "an_override_after_a_flag_with_its_value": (
        "config",
        ["seed=1", "--cfg", "job", "trainer.max_epochs=2"],
        "trainer.max_epochs=2: an override after --cfg job is not read",
        [],
    ),
    "an_override_given_twice_after_a_flag": (  # found in review: a ValueError's traceback
        "config",
        ["seed=1", "-m", "seed=1"],
        "seed=1: an override after -m is not read",
        [],
    ),
    "a_key_below_a_value_hydra_resolves_at_the_start": (  # found in review: a traceback
        "config",
        ["~hydra.run.dir.x"],
        "hydra.run.dir.x is not a setting: did you mean",
        [],
    ),
    "a_flag_hydra_lacks": (
        "config",
        ["--foo", "seed=1"],
        "--foo is not a flag of this command",
        [],
    ),
    "two_things_to_do": (  # Hydra: a ValueError's traceback, exit 1
        "config",
        ["-m", "seed=1,2", "--cfg", "job"],
        "--multirun and --cfg given together: Hydra does one of --run, --multirun, --cfg, --info, "
        "--shell-completion at a time; give one",
        [],
    ),
    "unreadable_key": (  # Hydra's grammar: its page, exit 1
        "config",
        ["trainer..x=1"],
        "trainer..x=1: Hydra cannot read this override (LexerNoViableAltException: trainer..x=1)",
        [],
    ),
    "unreadable_value": (
        "config",
        ["seed=1)"],
        "seed=1): Hydra cannot read this override (extraneous input ')' expecting <EOF>); write "
        "key=value",
        [],
    ),
    "unreadable_home": (
        "config",
        ["paths.runs_dir=~/x"],
        "give a path from home as $HOME/... (Hydra does not expand ~)",
        [],
    ),
    "key_max_epoch": (
        "config",
        ["trainer.max_epoch=3"],
        "trainer.max_epoch is not a setting: did you mean trainer.max_epochs? "
        "(a new Trainer argument is added with +trainer.<name>)",
        ["trainer.max_epochs"],
    ),
    "key_lr": (
        "config",
        ["model.optimizer.lrr=0.1"],
        "model.optimizer.lrr is not a setting: did you mean model.optimizer.lr?",
        ["model.optimizer.lr"],
    ),
    "key_learning_rate": (  # Hydra's _target_ and _partial_ are as close, and never meant
        "config",
        ["model.optimizer.learning_rate=0.1"],
        "model.optimizer.learning_rate is not a setting: did you mean model.optimizer.dampening "
        "or model.optimizer.lr?",
        ["model.optimizer.dampening", "model.optimizer.lr"],
    ),
    "key_hydra_target": (
        "config",
        ["model.optimizer._targt_=x"],
        "model.optimizer._targt_ is not a setting: did you mean model.optimizer._target_?",
        ["model.optimizer._target_"],
    ),
    "key_hydra_target_without_its_dot": (  # found by the generated test below
        "config",
        ["data_target_=x"],
        "data_target_ is not a setting: did you mean data._target_?",
        ["data._target_"],
    ),
    "key_hydra_target_without_its_first_underscore": (
        "config",
        ["data.target_=x"],
        "data.target_ is not a setting: did you mean data._target_?",
        ["data._target_"],
    ),
    "sweeper_params_on_the_command_line": (  # Hydra's own answer is a traceback
        "config",
        ["-m", '+hydra.sweeper.params.seed="1,2"'],
        "the sweeper's params cannot be set on the command line; sweep a key directly",
        [],
    ),
    "group_null": (  # Hydra's own answer is a traceback
        "config",
        ["experiment=null"],
        "experiment=null: a config group takes one of its options (d2l, ",
        [],
    ),
    "group_null_in_a_sweep": (
        "config",
        ["-m", "experiment=quickstart,null"],
        "to leave it out, drop the override or write ~experiment",
        [],
    ),
    "key_batch_size": (
        "config",
        ["data.batchsize=64"],
        "data.batchsize is not a setting: did you mean data.batch_size?",
        ["data.batch_size"],
    ),
    "key_seed": ("config", ["sed=1"], "sed is not a setting: did you mean seed?", ["seed"]),
    "option_strategy": (
        "config",
        ["strategy=ddpp"],
        "strategy=ddpp is not an option of strategy: did you mean ddp? "
        "(options: auto, ddp, ddp_spawn, dp, scatter_allreduce, single)",
        ["ddp"],
    ),
    "option_data": (
        "config",
        ["data=fashion"],
        "data=fashion is not an option of data: did you mean fashion_mnist? "
        "(options: fashion_mnist, synthetic)",
        ["fashion_mnist"],
    ),
    "option_experiment": (
        "config",
        ["experiment=quickstrat"],
        "experiment=quickstrat is not an option of experiment: did you mean quickstart? "
        "(options: d2l, d2l_scaling, fast, quickstart, speedrun, speedrun_gpu, study_one_device",
        ["quickstart"],
    ),
    "option_model": (
        "config",
        ["model=resnet"],
        "model=resnet is not an option of model: did you mean resnet18? (options: resnet18)",
        ["resnet18"],
    ),
    "option_nested_group": (
        "config",
        ["+model/scheduler=cosin"],
        "+model/scheduler=cosin is not an option of model/scheduler: did you mean cosine?",
        ["cosine"],
    ),
    "group_misspelt": (
        "config",
        ["model/schedular=cosine"],
        "model/schedular is not a config group: did you mean model/scheduler?",
        ["model/scheduler"],
    ),
    "group_as_a_key": (
        "config",
        ["experimnt=quickstart"],
        "experimnt is not a setting: did you mean experiment?",
        ["experiment"],
    ),
    "trainer_added_max_epoch": (
        "config",
        ["+trainer.max_epoch=3"],
        "+trainer.max_epoch is not an argument of Lightning's Trainer: did you mean "
        "trainer.max_epochs?",
        ["trainer.max_epochs"],
    ),
    "trainer_added_fast_dev": (
        "config",
        ["+trainer.fast_dev=1"],
        "+trainer.fast_dev is not an argument of Lightning's Trainer: did you mean "
        "+trainer.fast_dev_run?",
        ["+trainer.fast_dev_run"],
    ),
    "trainer_key_without_plus": (
        "config",
        ["trainer.max_steps=100"],
        "trainer.max_steps is not a setting yet: add it with +trainer.max_steps=100",
        ["+trainer.max_steps"],
    ),
    "trainer_misspelt_argument": (
        "config",
        ["trainer.fast_dev=1"],
        "trainer.fast_dev is not a setting: did you mean +trainer.fast_dev_run?",
        ["+trainer.fast_dev_run"],
    ),
    "key_of_an_option_chosen": (
        "config",
        ["data=synthetic", "data.num_tset=3"],
        "data.num_tset is not a setting: did you mean data.num_test?",
        ["data.num_test"],
    ),
    "key_of_an_experiment": (
        "config",
        ["experiment=d2l_scaling", "data.batch_size_per_devise=128"],
        "did you mean data.batch_size_per_device?",
        ["data.batch_size_per_device"],
    ),
    "key_under_an_empty_group": (
        "config",
        ["model.scheduler.T_max=3"],
        "model.scheduler.T_max is not a setting until model.scheduler is chosen: add "
        "+model/scheduler=cosine",
        [],
    ),
    "key_under_compile_true_or_false": (  # not momentum, the closest name by spelling
        "config",
        ["model.compile.mode=max-autotune"],
        "model.compile.mode is not a setting: model.compile=false holds no keys; give them as "
        "a map, e.g. model.compile={mode:max-autotune}",
        [],
    ),
    "key_under_compile_set_true": (  # the command line's own value, not the config's
        "config",
        ["model.compile=true", "model.compile.mode=default"],
        "model.compile.mode is not a setting: model.compile=true holds no keys; give them as "
        "a map, e.g. model.compile={mode:default}",
        [],
    ),
    "hydra_launcher_option": (  # Hydra's own groups: its listing of them, plugins' included
        "config",
        ["hydra/launcher=slurmm"],
        "hydra/launcher=slurmm is not an option of hydra/launcher: did you mean slurm",
        ["slurm"],
    ),
    "hydra_sampler_option": (
        "config",
        ["-m", "hparams_search=optuna", "hydra/sweeper/sampler=randon"],
        "hydra/sweeper/sampler=randon is not an option of hydra/sweeper/sampler: did you mean "
        "random?",
        ["random"],
    ),
    "hydra_group": (
        "config",
        ["hydra/laucher=slurm"],
        "hydra/laucher is not a config group: did you mean hydra/launcher?",
        ["hydra/launcher"],
    ),
    "optuna_param_as_a_dotted_key": (
        "config",
        ["-m", "hparams_search=optuna", "hydra.sweeper.params.model.optimizer.lr=0.1"],
        "a searched key is not set through hydra.sweeper.params.<key>; give the key itself a "
        "range or choices (model.optimizer.lr='interval(0.01,0.1)')",
        [],
    ),
    "option_in_a_sweep": (
        "config",
        ["-m", "strategy=ddp,ddpp"],
        "strategy=ddpp is not an option of strategy: did you mean ddp?",
        ["ddp"],
    ),
    "delete_misspelt_key": (  # Hydra's own answer is a page: "Could not delete from config"
        "config",
        ["~model.net.widht"],
        "model.net.widht is not a setting: did you mean model.net.width?",
        ["model.net.width"],
    ),
    "delete_misspelt_group": (
        "config",
        ["~model/schedular"],
        "model/schedular is not a config group: did you mean model/scheduler?",
        ["model/scheduler"],
    ),
    "add_a_key_already_there": (  # Hydra's own answer is a page: "Could not append to config"
        "config",
        ["+trainer.max_epochs=3"],
        "trainer.max_epochs is already in the config, and + only adds a key: set it with "
        "trainer.max_epochs=3 (or ++trainer.max_epochs=3, which adds or sets)",
        [],
    ),
    "hydra_key": (  # Hydra's own answer is a page: "Could not override", "Key 'dri' not in"
        "config",
        ["hydra.run.dri=/tmp/x"],
        "hydra.run.dri is not a setting: did you mean hydra.run.dir?",
        ["hydra.run.dir"],
    ),
    "optuna_sweeper_key": (  # judged against the sweeper the command line chose
        "config",
        ["-m", "hparams_search=optuna", "hydra.sweeper.n_trial=3"],
        "hydra.sweeper.n_trial is not a setting: did you mean hydra.sweeper.n_trials?",
        ["hydra.sweeper.n_trials"],
    ),
    "hydra_key_of_the_launcher_chosen": (
        "config",
        ["hydra/launcher=slurm", "hydra.launcher.partitio=gpu"],
        "hydra.launcher.partitio is not a setting: did you mean hydra.launcher.partition?",
        ["hydra.launcher.partition"],
    ),
    "eval_key": (
        "eval",
        ["ckpt_path=x.ckpt", "trainer.devics=1"],
        "trainer.devics is not a setting: did you mean trainer.devices?",
        ["trainer.devices"],
    ),
    "eval_option": (
        "eval",
        ["data=synthetc"],
        "data=synthetc is not an option of data: did you mean synthetic?",
        ["synthetic"],
    ),
}

VALID = {
    "nothing": [],
    "help_beside_anything": ["--help", "-m", "--cfg", "job"],  # Hydra answers --help first
    "version_beside_anything": ["a=1", "-m", "b=2", "--version"],
    "multirun_at_the_end": ["seed=1,2", "trainer.max_epochs=1", "-m"],
    "keys_and_options": ["trainer.max_epochs=3", "model.optimizer.lr=0.05", "data=synthetic"],
    "experiment_keys": ["experiment=quickstart", "model.scheduler.T_max=4"],
    "sweep": ["-m", "trainer.max_epochs=1,2", "strategy=ddp,dp", "data.batch_size=range(8,9)"],
    "added": ["+trainer.max_steps=3", "+model/scheduler=cosine", "model.scheduler.T_max=2"],
    "forced": ["++trainer.max_epochs=3", "++trainer.benchmark=true", "++anything.else=1"],
    "deleted": ["~seed", "~callbacks.progress_bar", "~logger"],
    "hydra_own": ["hydra.run.dir=x", "hydra/launcher=slurm", "hydra.job.chdir=true"],
    "hydra_keys_of_the_options_chosen": [
        "-m",
        "hparams_search=optuna",
        "hydra.sweeper.n_trials=3",
        "hydra/launcher=slurm",
        "hydra.launcher.partition=gpu",
    ],
    "flags": ["--cfg", "job", "-p", "trainer", "trainer.max_epochs=1"],
    "new_key_left_to_hydra": ["+foo.bar=1"],
    "another_config": ["-cn", "eval", "whatever=1"],
    "ddp_worker": ["hydra.run.dir=/x", "hydra.job.name=train_ddp_process_1", "seed=1"],
}


def typos(overrides: list[str], config: str = "config"):
    return find_typos(overrides, config, CONF)


@pytest.mark.parametrize("case", sorted(NAMED))
def test_a_named_typo_is_answered_with_its_fix(case):
    config, overrides, text, suggestions = NAMED[case]
    (typo,) = typos(overrides, config)
    assert text in typo.message and "\n" not in typo.message
    assert typo.suggestions[: len(suggestions)] == suggestions


@pytest.mark.slow
@examples(40)
@given(value=st.text(st.characters(codec="ascii", exclude_categories=["Cc"]), max_size=10))
def test_an_override_hydra_cannot_read_is_named_in_one_line(value):
    """Against Hydra's own parser: an override it cannot read is one line naming it (Hydra
    printed its page and exited 1); one it reads is never said to be unreadable."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    override = f"seed={value}"
    try:
        OverridesParser.create().parse_overrides([override])
        readable = True
    except HydraException:
        readable = False
    said = [typo.message for typo in typos([override])]
    unreadable = [m for m in said if "Hydra cannot read this override" in m]
    if readable:
        assert not unreadable
    else:
        assert len(said) == 1 and said[0].startswith(f"{override}: Hydra cannot read this override")
        assert "\n" not in said[0]


@examples(6)
@given(
    st.permutations(["-m", "seed=1,2", "trainer.max_epochs=1", "data.batch_size=8"]),
    st.sampled_from([[], ["--cfg", "job"], ["--nope"]]),
)
def test_a_command_line_hydras_parser_refuses_is_one_line(argv, more):
    """Against Hydra's own parser of its command line (``@hydra.main``'s): a line it refuses
    (an override after a flag that came after overrides, a flag it lacks) is one line naming
    what it does not read; one it reads is never said unreadable."""
    from hydra._internal.utils import get_args_parser

    line = [*argv, *more]
    parser = get_args_parser()
    parser.error = typo_hydra.raise_usage_error
    try:
        parser.parse_args(line)
        read = True
    except typo_hydra.UsageError:
        read = False
    said = [typo.message for typo in typos(line)]
    unread = [m for m in said if "is not read" in m or "is not a flag" in m]
    if read:
        assert not unread
    else:
        assert len(said) == 1 and said == unread, said


@pytest.mark.parametrize("case", sorted(VALID))
def test_a_valid_command_line_passes_silently(case):
    assert typos(VALID[case]) == []


def test_several_typos_are_said_together():
    found = typos(["sed=1", "data.batchsize=8", "trainer.max_epochs=2"])
    assert [t.suggestions for t in found] == [["seed"], ["data.batch_size"]]


def test_keys_wait_for_the_options_they_depend_on():
    """A misspelt option is said alone: the keys of the intended option are not known yet,
    and a key of the group left as it was is still one (not a second, false, typo)."""
    found = typos(["experiment=quickstrat", "model.scheduler.T_max=3", "sed=1"])
    assert [t.suggestions for t in found] == [["quickstart"]]
    (typo,) = typos(["data.num_workers=0", "data=cifar10"])
    assert (
        typo.message == "data=cifar10 is not an option of data (options: fashion_mnist, synthetic)"
    )


def test_the_trainer_arguments_are_lightnings():
    """The constant list is read from the installed Lightning: a new version that adds or
    renames an argument fails here (copy the list printed)."""
    import pytorch_lightning

    parameters = list(inspect.signature(pytorch_lightning.Trainer.__init__).parameters)
    assert tuple(parameters[1:]) == TRAINER_ARGUMENTS, parameters[1:]


# Each config group's option, as a command line picks it (None: left as the defaults list says).
GROUPS = {
    "config": {
        "data": ["fashion_mnist", "synthetic"],
        "strategy": ["single", "dp", "scatter_allreduce", "ddp", "ddp_spawn"],
        "logger": ["tensorboard", "csv"],
        "callbacks": ["default", "none"],
        "experiment": sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")),
        "hparams_search": ["optuna"],
        "+model/scheduler": ["cosine", "step"],
    },
    "eval": {"data": ["fashion_mnist", "synthetic"]},
}


@st.composite
def command_lines(draw, config: str) -> tuple[str, ...]:
    """Options of some groups, as ``group=option`` overrides."""
    chosen = []
    for group, options in GROUPS[config].items():
        option = draw(st.sampled_from([None, *options]))
        if option is not None and not (group.startswith("+") and "experiment=" in str(chosen)):
            chosen.append(f"{group}={option}")
    return tuple(chosen)


@functools.cache
def composed(config: str, overrides: tuple[str, ...]) -> dict:
    """The config Hydra composes, its own ``hydra`` node included."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config, overrides=list(overrides), return_hydra_config=True)
    return OmegaConf.to_container(cfg, resolve=False)


def composed_keys(config: str, overrides: tuple[str, ...]) -> frozenset[str]:
    """Every dotted key of the config Hydra composes, Hydra's own (``hydra.run.dir``) too."""
    return frozenset(dotted_keys(composed(config, overrides), ""))


def settable(keys, hydra: bool) -> list[str]:
    """The keys an override can name, Hydra's own or the project's: none of the runtime's
    ``hydra/env`` choices (a ``/`` makes a group), the sweeper's params (their own check), or
    what Hydra sets as the job starts (``set_by_hydra``), alone or in a map (``hydra``)."""
    hydras = [k for k in keys if set_by_hydra(k)]
    return sorted(
        k
        for k in keys
        if k.startswith("hydra") == hydra and "/" not in k and PARAMS not in k
        if not any(f"{h}.".startswith(f"{k}.") for h in hydras)  # nor a map that holds one
    )


def set_by_hydra(key: str) -> bool:
    return f"{key}.".startswith(RUNTIME) or key == OUTPUT_DIR


CONFIGS = st.sampled_from(["config", "eval"])
SLOW_HYPOTHESIS = examples(12)  # each case composes once: MULTIGPU_EXPLORE draws more


@pytest.mark.slow
@SLOW_HYPOTHESIS
@given(st.data())
def test_the_keys_judged_are_those_hydra_composes(data):
    """The keys the check judges against are exactly those Hydra composes for the command
    line's options, for any options of the groups."""
    config = data.draw(CONFIGS)
    overrides = data.draw(command_lines(config))
    keys = composed_keys(config, overrides)
    with composing(CONF):
        assert Composition(config, parse_overrides(list(overrides))).keys == keys


@functools.cache
def groups(config: str) -> frozenset[str]:
    """The config groups Hydra lists (Hydra's own aside)."""
    with composing(CONF):
        return frozenset(Composition(config, []).groups)


LETTERS = "abcdefghijklmnopqrstuvwxyz_"


@st.composite
def one_edit(draw, word: str) -> str:
    """``word`` with one character deleted, inserted, replaced, or two swapped."""
    kind = draw(st.sampled_from(["delete", "insert", "replace", "transpose"]))
    at = draw(st.integers(0, len(word) - (kind != "insert")))
    letter = draw(st.sampled_from(LETTERS))
    if kind == "delete":
        return word[:at] + word[at + 1 :]
    if kind == "insert":
        return word[:at] + letter + word[at:]
    if kind == "replace":
        return word[:at] + letter + word[at + 1 :]
    at = min(at, len(word) - 2)
    return word[:at] + word[at + 1] + word[at] + word[at + 2 :]


def hydra_accepts(call, *args) -> bool:
    """Whether Hydra's ``call(*args)`` goes through, not refusing with its exception."""
    try:
        call(*args)
    except HydraException:  # its composition's ConfigCompositionException too
        return False
    return True


def parses(override: str) -> bool:
    return hydra_accepts(OverridesParser.create().parse_override, override)


@pytest.mark.slow
@SLOW_HYPOTHESIS
@given(st.data())
def test_a_misspelt_key_is_found_and_its_original_suggested(data):
    """Any key, the project's or Hydra's own, set or deleted (``~key``) under any options."""
    config = data.draw(CONFIGS)
    overrides = data.draw(command_lines(config))
    keys = composed_keys(config, overrides)
    original = data.draw(st.sampled_from(settable(keys, hydra=data.draw(st.booleans()))))
    misspelt = data.draw(one_edit(original))
    override = data.draw(st.sampled_from([f"{misspelt}=1", f"~{misspelt}"]))
    assume(misspelt not in keys and misspelt not in groups(config) and parses(override))
    assume(not misspelt.startswith(PARAMS))
    (typo,) = typos([*overrides, override], config)
    assert "\n" not in typo.message and typo.message.startswith(f"{misspelt} is not a setting")
    assert original in typo.suggestions or f"+{original}" in typo.suggestions, typo


def override_value(value) -> str:
    """A value as Hydra's override grammar writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(map(override_value, value)) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{override_value(v)}" for k, v in value.items()) + "}"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


@pytest.mark.slow
@SLOW_HYPOTHESIS
@given(st.data())
def test_a_key_set_to_its_own_value_passes(data):
    """Any key, the project's or Hydra's own, set to its value or deleted."""
    config = data.draw(CONFIGS)
    overrides = data.draw(command_lines(config))
    keys = settable(composed_keys(config, overrides), hydra=data.draw(st.booleans()))
    key = data.draw(st.sampled_from(keys))
    value = functools.reduce(
        lambda node, name: node[name], key.split("."), composed(config, overrides)
    )
    override = data.draw(st.sampled_from([f"{key}={override_value(value)}", f"~{key}"]))
    assume(not (override.startswith("~") and hydra_refuses_dropping(config, overrides, key)))
    assert typos([*overrides, override], config) == []


def hydra_refuses_dropping(config: str, overrides: tuple[str, ...], key: str) -> bool:
    """Whether Hydra's composition refuses ``~key`` (with its page): a structured node's
    field, or a key whose value is null, which Hydra takes for one that is not there."""
    register_resolvers()
    return not hydra_accepts(composed, config, (*overrides, f"~{key}"))


@pytest.mark.slow
@SLOW_HYPOTHESIS
@given(st.data())
def test_a_key_set_with_a_drop_of_it_or_its_node_is_one_line_where_hydra_refuses_it(data):
    """``~data data.batch_size=16``, ``~seed seed=3``: Hydra refused to set a key it had
    dropped (a key's drop before it; a group's anywhere) with its page, exit 1, and the check
    suggested an unrelated key. One line naming the drop exactly where Hydra's own composition
    refuses the line, in either order."""
    config = data.draw(CONFIGS)
    overrides = data.draw(command_lines(config))
    keys = composed_keys(config, overrides)
    key = data.draw(st.sampled_from([k for k in settable(keys, hydra=False) if "." in k]))
    parts = key.split(".")
    node = ".".join(parts[: data.draw(st.integers(1, len(parts)))])
    assume(not hydra_refuses_dropping(config, overrides, node))
    value = override_value(
        functools.reduce(lambda held, name: held[name], parts, composed(config, overrides))
    )
    pair = [f"~{node}", f"{key}={value}"]
    line = (*overrides, *(pair if data.draw(st.booleans()) else pair[::-1]))
    said = [typo.message for typo in typos(list(line), config)]
    if hydra_accepts(composed, config, line):
        assert not any("drops it" in message for message in said), said
    else:
        assert said == [f"{key} is not a setting: ~{node} drops it; give one or the other"]


def test_a_key_set_after_its_drop_is_named_in_one_line():
    said = "data.batch_size is not a setting: ~data drops it; give one or the other"
    assert [t.message for t in typos(["~data", "data.batch_size=16"])] == [said]
    assert [t.message for t in typos(["data.batch_size=16", "~data"])] == [said]
    assert [t.message for t in typos(["~seed", "seed=3"])] == [
        "seed is not a setting: ~seed drops it; give one or the other"
    ]
    assert typos(["seed=3", "~seed"]) == []  # set, then dropped: Hydra takes it


@pytest.mark.slow
@SLOW_HYPOTHESIS
@given(st.data())
def test_a_setting_of_hydras_own_config_dropped_is_one_line_where_hydra_refuses_it(data):
    """``~hydra.run.dir``: Hydra refuses to drop a field of its structured config with its page
    (exit 1): one line naming the fix where Hydra's own composition refuses it, and never
    where Hydra drops the key."""
    config = data.draw(CONFIGS)
    overrides = data.draw(command_lines(config))
    key = data.draw(st.sampled_from(settable(composed_keys(config, overrides), hydra=True)))
    said = refusal([*overrides, f"~{key}"], config)
    if hydra_refuses_dropping(config, overrides, key):
        assert said is not None and "\n" not in said, said
    else:
        assert said is None or "dropped" not in said and "to drop it" not in said, said


def test_a_setting_of_hydras_own_config_dropped_is_named_with_its_fix():
    for key in ("hydra.run.dir", "hydra.job.chdir", "hydra.output_subdir"):
        (typo,) = typos([f"~{key}"])
        assert typo.message == (
            f"~{key}: {key} is a setting of Hydra's own config, which can be set but not "
            f"dropped; set it instead, {key}=<value>"
        )
    assert typos(["~hydra.job_logging.root"]) == []  # a plain map's key: Hydra drops it


@examples(5)
@given(st.data())
def test_what_hydra_sets_as_the_job_starts_is_refused_in_one_line_whatever_the_override(data):
    """Any key Hydra sets as the job starts (``hydra.runtime.*``, and the job's folder
    ``paths.output_dir``, which is ``${hydra:runtime.output_dir}``), set, added, forced or
    deleted, with any value: one line naming what sets it instead, nothing else said. Hydra
    refused some with its page (exit 1); others trained in a folder Hydra never made."""
    config = data.draw(CONFIGS)
    keys = [k for k in composed_keys(config, ()) if set_by_hydra(k) and "/" not in k]
    key = data.draw(st.sampled_from(sorted(keys)))
    value = data.draw(st.sampled_from(["x", "/", "1", "null", "dp", "'a b'"]))
    node, _, name = key.rpartition(".")
    forms = [f"{key}={value}", f"++{key}={value}", f"~{key}", f"{node}={{{name}: {value}}}"]
    override = data.draw(st.sampled_from(forms))
    (typo,) = typos([override], config)
    assert typo.message.startswith(f"{override}: ") and "\n" not in typo.message
    fix = "choose it with hydra.run.dir=" if key == OUTPUT_DIR else "Hydra sets hydra.runtime.*"
    assert fix in typo.message


def test_a_valid_command_line_costs_one_composition(monkeypatch, capsys):
    """The whole check of a typical valid command line (``check_command_line``: typos, then
    what Hydra alone would refuse, then the values) costs one Hydra composition of it, not one
    per key or option nor a second for Hydra's refusals or the values, which that composition
    rules out or holds: counted, not timed. Another line of the same group choices costs none
    (``typo_hydra.COMPOSED``). A line Hydra may refuse (a + append) is composed whole, and
    refused."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    compositions = []
    load = ConfigLoaderImpl.load_configuration

    def counted(self, *args, **kwargs):
        compositions.append(args)
        return load(self, *args, **kwargs)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counted)
    monkeypatch.setattr(typo_hydra, "COMPOSED", {})  # none composed before in this process
    monkeypatch.setenv(PARENT, "0")  # the values' check marks this process (Machine.this)
    line = ["experiment=quickstart", "trainer.max_epochs=3", "model.optimizer.lr=0.05"]
    line += ["hydra.run.dir=outputs/run"]  # its default, ${run_name:}, resolves once Hydra runs
    monkeypatch.setattr(sys, "argv", ["train.py", *line])
    check_command_line("config", training_values)  # its values too, on that composition
    assert len(compositions) == 1 and capsys.readouterr().err == ""
    monkeypatch.setattr(sys, "argv", ["train.py", *line, "data.batch_size=-1"])
    with pytest.raises(SystemExit):
        check_command_line("config", training_values)
    assert len(compositions) == 1 and "data.batch_size=-1 must be" in capsys.readouterr().err
    monkeypatch.setattr(typo_hydra, "COMPOSED", {})
    compositions.clear()
    monkeypatch.setattr(sys, "argv", ["train.py", *line, "+model.net.x=1", "+model.net.x=2"])
    with pytest.raises(SystemExit):
        check_command_line("config")
    assert len(compositions) == 2
    assert "An item is already at 'model.net.x'" in capsys.readouterr().err


# (script, overrides, text of the one error line) through a real ``python <script>``
SUBPROCESS = {
    "key": ("train.py", ["trainer.max_epoch=3"], "did you mean trainer.max_epochs?"),
    "option": ("train.py", ["strategy=ddpp"], "strategy=ddpp is not an option of strategy: did"),
    "trainer_argument": ("train.py", ["+trainer.max_epoch=3"], "did you mean trainer.max_epochs"),
    "eval_key": ("eval.py", ["ckpt_path=x.ckpt", "trainer.devics=1"], "mean trainer.devices?"),
    "delete": ("train.py", ["~model.net.widht"], "did you mean model.net.width?"),
    "hydra_key": ("train.py", ["hydra.run.dri=out"], "did you mean hydra.run.dir?"),
    "add_existing": ("train.py", ["+model.net.width=8"], "set it with model.net.width=8"),
}


@pytest.mark.subprocess
@pytest.mark.parametrize("case", sorted(SUBPROCESS))
def test_a_typo_is_answered_before_torch_in_one_line(case, tmp_path):
    script, overrides, text = SUBPROCESS[case]
    env = {"PYTHONPROFILEIMPORTTIME": "1"}
    result = run_script(script, *overrides, cwd=tmp_path, timeout=60, env=env)
    said = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert result.returncode == 2, said
    assert len(said) == 1 and said[0].startswith("error: ") and text in said[0], said
    assert "hydra" in imported and "torch" not in imported and "pytorch_lightning" not in imported
    assert list(tmp_path.iterdir()) == []  # no outputs/ folder, nothing written


@pytest.mark.parametrize(
    "argv,said",
    [
        (["model.optimizer.lr=${oc.env:NOPE_NOT_SET}"], "Environment variable 'NOPE_NOT_SET'"),
        (["-m", "model.optimizer.lr=0.1,${oc.env:NOPE_NOT_SET}"], "NOPE_NOT_SET"),
        (["hydra.run.dir=${oc.env:NOPE_NOT_SET}/x"], "hydra.run.dir=${oc.env:NOPE_NOT_SET}/x"),
        (["seed=${seed}"], "Recursive interpolation detected"),
        (["model.optimizer.lr=${no.such.key}"], "Interpolation key 'no.such.key' not found"),
        (["data.root=${oc.env:HOME}/data"], None),
        (["hydra.run.dir=${hydra:runtime.cwd}/x"], None),  # known once Hydra runs
        (["hydra.job_logging.handlers.file.filename=${hydra.runtime.output_dir}/j.log"], None),
        (["model.net.width=${model.net.num_classes}"], None),
        (["model.optimizer.lr=0.2"], None),  # no interpolation: nothing composed
    ],
)
def test_an_interpolation_that_cannot_be_resolved_is_one_line_before_hydra(argv, said):
    """Hydra would print pages of traceback for it (or, in a sweep, run the other jobs)."""
    from multigpu.config.typos import check_interpolations

    found = check_interpolations(argv, "config", CONF)
    if said is None:
        assert found is None
    else:
        assert found is not None and said in found and "cannot be resolved" in found, found


@pytest.mark.slow
@examples(15)
@given(
    name=st.from_regex(r"NOPE_[A-Z]{3,12}", fullmatch=True),
    key=st.sampled_from(
        ["model.optimizer.lr", "seed", "data.root", "hydra.run.dir", "trainer.max_epochs"]
    ),
    sweep=st.booleans(),
)
def test_generated_unset_variables_are_refused_by_name(name, key, sweep):
    """Any key, an unset variable, alone or as one value of a sweep: one line naming both."""
    import os

    from multigpu.config.typos import check_interpolations

    assume(name not in os.environ)
    value = f"${{oc.env:{name}}}"
    argv = ["-m", f"{key}=1,{value}"] if sweep else [f"{key}={value}"]
    found = check_interpolations(argv, "config", CONF)
    assert found is not None and found.startswith(f"{key}={value} cannot be resolved"), found
    assert name in found and "\n" not in found


SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        # One train.py each, 2-5 s: the default suite keeps the top level's.
        pytest.param(["trainer:", "  max_epoch: 3"], "trainer.max_epoch is not a setting of "
                     "Lightning's Trainer: did you mean trainer.max_epochs?", marks=SLOW),
        pytest.param(["data:", "  batchsize: 64"], "data.batchsize is not a setting of "
                     "data=fashion_mnist: did you mean data.batch_size?", marks=SLOW),
        (["sed: 1"], "sed is not a setting of the config: did you mean seed?"),
    ],
    ids=["trainer", "data", "top_level"],
)  # fmt: skip
def test_a_misspelt_key_in_a_users_own_config_file_is_refused_with_the_closest(
    lines, said, tmp_path
):
    """A config of the user's (``--config-dir``) that extends the shipped one: its keys are
    checked where every key of the composed config is, with the names it could have meant."""
    (tmp_path / "mine").mkdir()
    text = ["defaults:", "  - config", "  - _self_", *lines]
    (tmp_path / "mine" / "mine.yaml").write_text("\n".join(text) + "\n")
    result = run_script("train.py", "--config-dir", "mine", "--config-name", "mine", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip() == f"error: {said}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # nothing written


def composed_nodes() -> list[str]:
    """Every mapping of the composed config, by its dotted key ("" for the top)."""
    with composing(CONF):
        cfg = OmegaConf.to_container(compose("config", ["model.net.width=4"]))

    def mappings(node: dict, prefix: str) -> list[str]:
        found = []
        for name, value in node.items():
            if isinstance(value, dict):
                key = f"{prefix}.{name}" if prefix else str(name)
                found += [key, *mappings(value, key)]
        return found

    return ["", *mappings(cfg, "")]


@examples(4)  # each composes the command three times, 1.2 s an example here
@given(data=st.data())
def test_a_key_appended_twice_is_refused_in_one_line_with_hydras_fix(data):
    """``+key=value`` appends a key the config lacks; given twice, Hydra refuses the second
    (a page, exit 1): here one line naming ``++key`` (add or override). Once, or then ``++``,
    passes."""
    node = data.draw(st.sampled_from(composed_nodes()), label="node")
    name = data.draw(st.from_regex(r"[a-z][a-z_]{0,8}x", fullmatch=True), label="name")
    key = f"{node}.{name}" if node else name
    said = hydra_refusal([f"+{key}=1", f"+{key}=2"], "config", CONF)
    assert said is not None and "\n" not in said
    assert f"An item is already at '{key}'" in said and f"'++{key}=2'" in said
    assert hydra_refusal([f"+{key}=1", f"++{key}=2"], "config", CONF) is None
    assert hydra_refusal([f"+{key}=1"], "config", CONF) is None


@pytest.mark.parametrize("option", ["cosine", pytest.param("step", marks=pytest.mark.slow)])
def test_a_scheduler_chosen_without_its_plus_is_answered_with_it(option, tmp_path):
    """The named case: ``model/scheduler`` is no choice of the defaults, so one is added with
    ``+model/scheduler=<option>``; without the ``+`` Hydra printed a page and exited 1. One
    line, exit 2, nothing written."""
    said = hydra_refusal([f"model/scheduler={option}"], "config", CONF)
    assert said and f"use +model/scheduler={option}" in said and "\n" not in said
    assert hydra_refusal([f"+model/scheduler={option}"], "config", CONF) is None
    done = run_script("train.py", f"model/scheduler={option}", cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: Could not")
    assert list(tmp_path.iterdir()) == []


def test_a_group_the_defaults_choose_given_with_a_plus_is_answered_in_command_line_words():
    """``+experiment=fast`` where the defaults already choose an experiment: Hydra's fix is the
    defaults list's ``override experiment: fast``, which no command line takes."""
    said = hydra_refusal(["+experiment=fast"], "config", CONF)
    assert said == (
        "Multiple values for experiment. To choose another, write experiment=fast (without +)"
    )
    assert hydra_refusal(["experiment=fast"], "config", CONF) is None


def test_a_map_given_keys_its_key_lacks_is_refused_in_one_line_with_the_fix():
    """``hydra.sweeper.params={...}`` over the Optuna search's own map: Hydra merges the map
    into the key's and refuses the keys it lacks (a page, exit 1). One line naming ``++``,
    which adds them; that line passes."""
    line = 'hydra.sweeper.params={model.net.width: "choice(4, 8)"}'
    said = hydra_refusal(["hparams_search=optuna", line], "config", CONF)
    assert said == (
        f"{line}: Key 'model.net.width' is not in struct (a map sets only the keys "
        f"hydra.sweeper.params has); to add keys to it, write ++{line}"
    )
    assert hydra_refusal(["hparams_search=optuna", f"++{line}"], "config", CONF) is None
    judged = []
    assert find_typos(["hparams_search=optuna", line], "config", CONF, judged) == []
    assert judged and not judged[0].cannot_refuse(parse_overrides([line]))


@pytest.mark.parametrize(
    "line,said",
    [
        (
            ["experiment=[study_one_device_cosine,study_two_devices_recipe]", "seed=1"],
            "model/scheduler appears more than once in the final defaults list",
        ),
        (["hydra=config", "seed=1"], "hydra/output appears more than once"),
        (["experiment=${seed}", "seed=1"], "Error resolving interpolation '${seed}'"),
    ],
    ids=["two_experiments", "hydras_own_node", "an_interpolated_option"],
)
def test_a_line_hydra_may_refuse_is_composed_whole_though_its_keys_were_composed(line, said):
    """The typo check composed the line's keys (``seed=1``), and a line it composed that way
    is not composed again: but a list of options, Hydra's own node and an interpolated option
    are not what it composed, and Hydra refuses these (a page, exit 1). One line."""
    judged = []
    assert find_typos(line, "config", CONF, judged) == []
    assert judged and not judged[0].cannot_refuse(parse_overrides(line))
    refused = hydra_refusal(line, "config", CONF, *judged)
    assert refused is not None and said in refused and "\n" not in refused


def leaf_keys_of_nodes() -> list[tuple[str, str]]:
    """(node, key) for every plain value of the project's composed config in a mapping node."""
    with composing(CONF):
        cfg = OmegaConf.to_container(compose("config", ["model.net.width=4"]))
    found = []
    for node in composed_nodes():
        held = (
            functools.reduce(lambda held, name: held[name], node.split("."), cfg) if node else cfg
        )
        found += [(node, k) for k, v in held.items() if node and not isinstance(v, (dict, list))]
    return sorted(found)


@examples(6)  # each composes the command whole, about 0.4 s an example here
@given(data=st.data())
def test_a_misspelt_key_in_any_map_is_answered_in_one_line_with_its_closest(data):
    """``node={misspelt: value}`` for any mapping of the config and any of its keys misspelt by
    one letter: one line naming the node's closest key, never ``++`` (which would add it)."""
    node, key = data.draw(st.sampled_from(leaf_keys_of_nodes()), label="node, key")
    at = data.draw(st.integers(0, len(key) - 1), label="letter dropped")
    misspelt = key[:at] + key[at + 1 :]
    assume(misspelt and misspelt.isidentifier() and not node.startswith("hydra"))
    judged = []
    assert find_typos([f"{node}={{{misspelt}: 1}}"], "config", CONF, judged) == []
    said = hydra_refusal([f"{node}={{{misspelt}: 1}}"], "config", CONF, *judged)
    if said is None:  # the misspelling is another key of the node's: Hydra takes it
        assert misspelt in composed_keys_of(node)
        return
    assert "\n" not in said and "++" not in said and f"{node}.{key}" in said


def composed_keys_of(node: str) -> set[str]:
    return {k for n, k in leaf_keys_of_nodes() if n == node}


def test_a_misspelt_key_in_a_map_is_answered_with_its_closest_not_with_plus_plus():
    """``++`` would add the misspelt key (hydra#1912's trap): outside a search space, the map's
    unknown key is answered with the node's closest key."""
    line = ["trainer={max_epoch:3}", "seed=2"]
    judged = []
    assert find_typos(line, "config", CONF, judged) == []
    said = hydra_refusal(line, "config", CONF, *judged)
    assert said is not None and said.endswith("did you mean trainer.max_epochs?")
    assert "++" not in said
