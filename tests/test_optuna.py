"""Optuna sweeps (``hparams_search=optuna``): each trial is told to Optuna as its run ended (a
diverged one pruned, a failed one failed) and the study goes on to its last trial and the
sweep's report; whatever Optuna or its sweeper would refuse mid-study is refused before the
first trial, in one line, with nothing written."""

from __future__ import annotations

import contextlib
import csv
import itertools
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import CONF, TINY, examples, run_script
from hydra import initialize_config_dir
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import DictConfig

from multigpu.config.errors import UserError
from multigpu.run.cli import register_resolvers
from multigpu.run.objective import TRIAL_STATES, JobEnding, job_ending, returned_ending


def params(space: dict[str, str]) -> str:
    """``hydra.sweeper.params`` given these entries on the command line (the others stay)."""
    entries = ", ".join(f'{key}: "{value}"' for key, value in space.items())
    return f"hydra.sweeper.params={{{entries}}}"


STUDY = ["hparams_search=optuna", *TINY, "data=synthetic", "data.num_train=64"]
STUDY += ["data.num_test=32", "check_finite_every_n_steps=1"]
STUDY += [params({"data.batch_size": "choice(16, 32)"})]  # batches the 64 samples hold


@contextlib.contextmanager
def composed(overrides: list[str], tmp_path: Path) -> Iterator[DictConfig]:
    """The config ``train.py -m`` composes for a study, inside Hydra's context."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    register_resolvers()
    sweep = [*STUDY, *overrides, f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        yield loader.load_configuration("config", sweep, run_mode=RunMode.MULTIRUN)


def checked(overrides: list[str], tmp_path: Path) -> int:
    """The exit status of the checks a sweep passes before its folder is made
    (``Preflight.on_multirun_start``'s ``check_sweep``), in this process."""
    from multigpu.run.preflight import check_sweep

    with composed(overrides, tmp_path) as config:
        try:
            check_sweep(config)
        except SystemExit as stop:
            return stop.code
    return 0


def refused(overrides: list[str], tmp_path: Path, capsys) -> str:
    """The one ``error:`` line a sweep is refused with (exit 2), nothing written."""
    code = checked(overrides, tmp_path)
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert list(tmp_path.iterdir()) == []
    return lines[0]


# --- what a job returns: one ending per status, Optuna's state declared once -----------------


def test_every_status_a_run_ends_with_has_a_declared_trial_state():
    from multigpu.storage.record_file import STATUSES

    assert set(TRIAL_STATES) == set(STATUSES) - {"running"}
    assert TRIAL_STATES["completed"] == "COMPLETE" and TRIAL_STATES["diverged"] == "PRUNED"


@examples(60)
@given(
    status=st.sampled_from(sorted(TRIAL_STATES)),
    test_acc=st.none() | st.floats(allow_nan=True, allow_infinity=True) | st.integers(0, 1),
)
def test_a_trial_has_a_value_exactly_when_its_run_completed_with_one(status, test_acc):
    ending = job_ending({"status": status, "test_acc": test_acc})
    finite = test_acc is not None and math.isfinite(test_acc)
    assert (ending.value is not None) == (status == "completed" and finite)
    assert ending.status == (status if status != "completed" or finite else "failed")
    assert (ending.trial_state == "COMPLETE") == (ending.value is not None)
    assert returned_ending(ending) == ending


def test_a_job_that_raised_ends_with_its_status_and_no_value():
    assert job_ending(None, "diverged") == JobEnding("diverged")
    assert job_ending(None, "interrupted").trial_state == "FAIL"
    assert returned_ending(float("nan")) == returned_ending(None) == JobEnding("failed")
    assert returned_ending(0.5) == JobEnding("completed", 0.5)
    with pytest.raises(ValueError, match="objective"):
        JobEnding("diverged", 0.5)


# --- refused before the first trial --------------------------------------------------------

# Each setting Optuna or Hydra's Optuna sweeper fails on mid-study (before: a traceback, exit
# 1, or a study that runs and says nothing), and what the one line names.
REFUSED = {
    "no_trials": (["hydra.sweeper.n_trials=0"], "hydra.sweeper.n_trials=0"),
    "no_jobs": (["hydra.sweeper.n_jobs=0"], "hydra.sweeper.n_jobs=0"),
    "direction_misspelt": (["hydra.sweeper.direction=maximise"], "direction=maximise"),
    "direction_minimize": (["hydra.sweeper.direction=minimize"], "direction=minimize"),
    "two_objectives": (["hydra.sweeper.direction=[maximize,minimize]"], "[maximize,minimize]"),
    "unknown_sampler": (
        ["hydra.sweeper.sampler._target_=optuna.samplers.NopeSampler"],
        "_target_=optuna.samplers.NopeSampler",
    ),
    "log_range_from_zero": (
        [params({"model.optimizer.lr": "tag(log, interval(0, 0.5))"})],
        "model.optimizer.lr=tag(log, interval(0, 0.5))",
    ),
    "range_reversed": (["model.optimizer.lr=interval(0.5,0.01)"], "interval(0.5,0.01)"),
    "unparsable_range": (
        [params({"model.optimizer.lr": "interval(0.5)"})],
        "model.optimizer.lr=interval(0.5)",
    ),
    "no_such_key": (
        ["++" + params({"model.optimizer.lrr": "interval(0.01, 0.5)"})],
        "model.optimizer.lrr is not a key of the config: did you mean model.optimizer.lr?",
    ),
    "a_choice_no_job_takes": (
        [params({"data.batch_size": "choice(16, -4)"})],
        "data.batch_size=-4 must be a positive integer",
    ),
    "a_pair_no_job_takes": (  # each value taken alone, refused together (64 images)
        [
            "++"
            + params(
                {"data.batch_size": "choice(16, 128)", "data.drop_last": "choice(true, false)"}
            )
        ],
        "data.drop_last=true with a global batch of 128 leaves no training batch",
    ),
    "nothing_to_search": (["hydra.sweeper.params=null"], "hydra.sweeper.params is empty"),
    "max_failure_rate": (["hydra.sweeper.max_failure_rate=0.5"], "max_failure_rate=0.5"),
    "storage_not_a_url": (["hydra.sweeper.storage=not-a-url"], "storage=not-a-url"),
    "custom_search_space_not_found": (
        ["hydra.sweeper.custom_search_space=nope.extend"],
        "custom_search_space=nope.extend",
    ),
    # The grid's settings take no seed: composing hparams_search=optuna with it failed with
    # Hydra's page (exit 1) while the sampler was seeded in hparams_search/optuna.yaml.
    "grid": (["hydra/sweeper/sampler=grid"], "drop hparams_search=optuna and list each key's"),
    "storage_in_no_folder": (
        ["hydra.sweeper.storage=sqlite:////no/such/folder/optuna.db"],
        "storage=sqlite:////no/such/folder/optuna.db",
    ),
    # Taken by the sampler's constructor: a traceback once the startup trials are done, or a
    # search that stays at one point (CMA-ES's every trial at the range's middle).
    "cmaes_without_spread": (
        ["hydra/sweeper/sampler=cmaes", "hydra.sweeper.sampler.sigma0=-1"],
        "hydra.sweeper.sampler.sigma0=-1.0 must be above 0: Optuna takes it",
    ),
    "tpe_without_candidates": (
        ["hydra.sweeper.sampler.n_ei_candidates=0"],
        "hydra.sweeper.sampler.n_ei_candidates=0 must be at least 1: Optuna takes it",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_setting_optuna_would_fail_on_is_refused_before_any_trial(case, tmp_path, capsys):
    overrides, named = REFUSED[case]
    assert named in refused(overrides, tmp_path, capsys)


@examples(40)
@given(st.sampled_from(["n_ei_candidates", "prior_weight"]), st.integers(-3, 3))
def test_a_tpe_setting_is_refused_exactly_where_optunas_search_fails_on_it(key, value):
    """Against Optuna itself (the second computation): a TPE sampler with the value asks ten
    trials of a study; refused before the study exactly where that fails."""
    import optuna
    from hydra.utils import instantiate
    from optuna.distributions import UniformDistribution

    from multigpu.run.optuna_check import check_sampler_settings

    settings = {"_target_": "optuna.samplers.TPESampler", "seed": 1, "n_startup_trials": 2}
    settings[key] = value
    try:
        study = optuna.create_study(sampler=instantiate(settings))
        for _ in range(10):
            trial = study.ask({"x": UniformDistribution(0, 1)})
            study.tell(trial, trial.params["x"])
        fails = False
    except ValueError:
        fails = True
    try:
        check_sampler_settings(settings)
        refused = False
    except UserError:
        refused = True
    assert refused == fails


# A value Hydra's own typed node refuses (before: Hydra's page, "Error merging override
# hydra.sweeper.n_trials=abc ... Set the environment variable HYDRA_FULL_ERROR=1", exit 1).
HYDRA_TYPED = {
    "n_trials_not_a_number": (
        "hydra.sweeper.n_trials=abc",
        "hydra.sweeper.n_trials=abc: hydra.sweeper.n_trials takes an integer (Hydra: Value "
        "'abc' of type 'str' could not be converted to Integer); pass one, e.g. "
        "hydra.sweeper.n_trials=12",
    ),
    "seed_not_a_number": (
        "hydra.sweeper.sampler.seed=abc",
        "hydra.sweeper.sampler.seed=abc: hydra.sweeper.sampler.seed takes an integer or null "
        "(Hydra: Value 'abc' of type 'str' could not be converted to Integer); pass one, e.g. "
        "hydra.sweeper.sampler.seed=1",
    ),
    "n_jobs_a_fraction": ("hydra.sweeper.n_jobs=1.5", "n_jobs takes an integer (Hydra: Value "),
    "n_trials_null": ("hydra.sweeper.n_trials=null", "n_trials takes an integer (Hydra: field"),
    "params_not_a_map": ("hydra.sweeper.params=3", "params takes a mapping ({key: value}) or"),
}


def hydra_refusal(argv: list[str]) -> str | None:
    """What ``typo_hydra.Offer`` says of the values Hydra's own node refuses on ``argv``."""
    from multigpu.config.typo_hydra import Offer, composing, parse_overrides

    register_resolvers()
    with composing(CONF):
        return Offer("config", parse_overrides(argv)).refused_value()


@pytest.mark.parametrize("case", sorted(HYDRA_TYPED))
def test_a_value_hydras_sweeper_settings_refuse_is_one_line_naming_the_key(case):
    override, said = HYDRA_TYPED[case]
    line = hydra_refusal(["-m", "hparams_search=optuna", override])
    assert line is not None and "\n" not in line
    assert line.startswith(f"{override}: ") and said in line


def test_values_hydras_sweeper_settings_take_are_not_refused():
    taken = ["hydra.sweeper.n_trials=3", "hydra.sweeper.sampler.seed=null", "seed=abc"]
    assert hydra_refusal(["-m", "hparams_search=optuna", *taken]) is None


def test_the_command_line_check_says_the_value_hydras_node_refuses():
    """train.py's check before Hydra (``command_line.check_command_line``) answers it: exit 2, one
    line, nothing written, before torch."""
    from multigpu.config.typos import find_typos

    override, said = HYDRA_TYPED["n_trials_not_a_number"]
    typos = find_typos(["-m", "hparams_search=optuna", override], "config", CONF)
    assert [typo.message for typo in typos] == [said]


def test_a_search_space_entry_given_as_a_nested_key_is_one_line(tmp_path):
    """``hydra.sweeper.params.<key>=...`` (with or without a ``+``): Hydra reads the dots as
    nested keys; the command line's check says how to add the entry."""
    from multigpu.config.typos import find_typos

    entry = "hydra.sweeper.params.model.optimizer.momentum=interval(0.5,0.9)"
    for line in (entry, f"+{entry}"):
        (typo,) = find_typos(["-m", "hparams_search=optuna", line], "config", CONF)
        assert typo.message.startswith(f"{line}: a searched key is not set through ")
        suggested = typo.message.split("or add an entry: ", 1)[1]
        assert suggested.startswith("'++hydra.sweeper.params={model.optimizer.momentum: ")
    # The entry it suggests composes (without ``++``, Hydra refuses a new key of the map).
    with composed([suggested.strip("'")], tmp_path) as cfg:
        assert "model.optimizer.momentum" in cfg.hydra.sweeper.params


def draws(sampler) -> list[float]:
    """The first values a study with ``sampler`` draws."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=sampler)
    return [study.ask().suggest_float("x", 0.0, 1.0) for _ in range(3)]


@pytest.mark.parametrize("option", ["tpe", "random", "cmaes"])
def test_the_sampler_chosen_is_the_one_the_study_runs_seeded_by_the_run(option, tmp_path):
    """``hparams_search=optuna`` seeds the sampler by the run's ``seed`` and leaves the choice
    of it to ``hydra/sweeper/sampler`` (it had named TPE, which silently replaced the choice);
    ``hydra.sweeper.sampler.seed`` wins."""
    import optuna

    from multigpu.run.optuna_check import made_sampler
    from multigpu.run.optuna_trials import sampler_settings

    names = {"tpe": "TPESampler", "random": "RandomSampler", "cmaes": "CmaEsSampler"}
    kind = getattr(optuna.samplers, names[option])
    with composed([f"hydra/sweeper/sampler={option}", "seed=7"], tmp_path) as config:
        sampler = made_sampler(sampler_settings(config))
    assert type(sampler) is kind
    assert draws(sampler) == draws(kind(seed=7)) != draws(kind(seed=8))
    given = [f"hydra/sweeper/sampler={option}", "seed=7", "hydra.sweeper.sampler.seed=8"]
    with composed(given, tmp_path) as config:
        assert draws(made_sampler(sampler_settings(config))) == draws(kind(seed=8))


def test_the_study_runs_the_sampler_it_was_checked_with(tmp_path):
    """The sweeper Hydra makes (``instantiate_sweeper``) seeds its sampler as the check did."""
    from hydra._internal.callbacks import Callbacks
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.plugins import Plugins
    from hydra.types import HydraContext

    from multigpu.run.optuna_check import made_sampler
    from multigpu.run.optuna_trials import sampler_settings

    with composed(["hydra/sweeper/sampler=random", "seed=3"], tmp_path) as config:
        loader = GlobalHydra.instance().config_loader()
        context = HydraContext(config_loader=loader, callbacks=Callbacks())
        sweeper = Plugins.instance().instantiate_sweeper(
            hydra_context=context, task_function=lambda cfg: None, config=config
        )
        checked_with = made_sampler(sampler_settings(config))
    assert draws(sweeper.sweeper.sampler) == draws(checked_with)
    assert not (tmp_path / "sweep").exists()


def test_a_database_storage_is_checked_without_being_written(tmp_path, capsys):
    """Optuna 2's database storage fails under SQLAlchemy 2 (this environment's pair) on a
    file, though it works in memory: such a study is refused saying so, before anything is
    written (the study's own open had left an empty sweep folder and the .db file); where it
    works, the check leaves the database unmade."""
    from multigpu.run.optuna_check import database_storage_failure

    storage = [f"hydra.sweeper.storage=sqlite:///{tmp_path}/optuna.db"]
    if database_storage_failure() is not None:
        line = refused(storage, tmp_path, capsys)
        assert "Optuna 2 needs SQLAlchemy 1.4 (pip install 'sqlalchemy<2' 'alembic<1.14')" in line
    else:
        assert checked(storage, tmp_path) == 0
        assert not (tmp_path / "optuna.db").exists()


def test_a_sqlite_file_is_tried_on_a_copy(tmp_path, capsys, monkeypatch):
    """Where Optuna's database storage works: a file that is no study's database is refused
    and left as it was; a folder that cannot hold the database is refused."""
    from multigpu.run import optuna_check

    monkeypatch.setattr(optuna_check, "database_storage_failure", lambda: None)
    folder = tmp_path / "kept"
    folder.mkdir()
    (folder / "notes.db").write_text("not a database")
    with pytest.raises(UserError, match="cannot be opened as an Optuna database"):
        optuna_check.check_storage(f"sqlite:///{folder}/notes.db")
    assert [p.name for p in folder.iterdir()] == ["notes.db"]
    assert (folder / "notes.db").read_text() == "not a database"
    with pytest.raises(UserError, match="does not exist"):
        optuna_check.check_storage(f"sqlite:///{tmp_path}/nope/optuna.db")
    with pytest.raises(UserError, match=r"kept is a folder, not a database file; name a file"):
        optuna_check.check_storage(f"sqlite:///{folder}")  # was: IsADirectoryError, unnamed
    with pytest.raises(UserError, match=r"notes.db is a file, not a folder, so the database"):
        optuna_check.check_storage(f"sqlite:///{folder}/notes.db/optuna.db")
    optuna_check.check_storage(f"sqlite:///{tmp_path}/optuna.db")  # to be made: fine
    optuna_check.check_storage("sqlite://")  # in memory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]


@pytest.mark.parametrize(
    "mark",
    [
        "metrics.json",
        pytest.param(".hydra", marks=pytest.mark.slow),  # the default suite's budget
        pytest.param("multirun.yaml", marks=pytest.mark.slow),
    ],
)
def test_a_sqlite_study_in_another_runs_folder_is_refused(mark, tmp_path, tmp_path_factory, capsys):
    """A study's database is a file the sweep writes: inside another run's or sweep's folder
    it would join that folder's files (it was accepted). Its own sweep's folder may hold it."""
    other = tmp_path_factory.mktemp("others") / "run"
    other.mkdir()
    if mark == ".hydra":
        (other / mark).mkdir()
    else:
        (other / mark).write_text("{}")
    before = sorted(other.iterdir())
    line = refused([f"hydra.sweeper.storage=sqlite:///{other}/study.db"], tmp_path, capsys)
    assert line.startswith(f"error: {other} (hydra.sweeper.storage) is another ")
    assert f"it holds that {'sweep' if mark == 'multirun.yaml' else 'run'}'s {mark}" in line
    assert sorted(other.iterdir()) == before


def test_a_sqlite_study_in_its_own_sweeps_folder_is_taken(tmp_path):
    """The sweep's own folder may hold its study, when it is run again in that folder."""
    from multigpu.run.admission import check_places_apart
    from multigpu.run.optuna_check import study_places

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("{}")
    own = study_places(f"sqlite:///{sweep}/study.db")
    assert own == {"hydra.sweeper.storage": sweep}
    check_places_apart(own, sweep)
    with pytest.raises(UserError, match="is another sweep's folder"):
        check_places_apart(own, tmp_path / "another")


@pytest.mark.slow
def test_a_refused_storage_writes_nothing_from_the_command_line(tmp_path):
    """The tester's case: a sqlite URL Optuna could not use left an empty sweep folder and a
    .db file behind. Here the URL's folder does not exist (refused wherever the storage works;
    where it does not, refused saying why)."""
    url = f"sqlite:///{tmp_path}/nope/optuna.db"
    sweep = [f"hydra.sweeper.storage={url}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    result = run_script("train.py", "-m", *STUDY, *sweep, cwd=tmp_path)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: hydra.sweeper.storage={url}: ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_sqlite_study_runs_and_runs_on_from_its_file(tmp_path):
    """With the pinned SQLAlchemy 1.4 a study kept in a file runs, and run again (in the same
    sweep folder) goes on from its trials (Optuna counts them from the file, not from the
    command line) with new ones: the seeded sampler had drawn its first trials again, whose
    jobs were found finished, and nothing new was tried."""
    import optuna

    from multigpu.run.optuna_check import database_storage_failure

    assert database_storage_failure() is None, "pyproject pins sqlalchemy<2 for Optuna 2"
    url = f"sqlite:///{tmp_path}/optuna.db"
    study = [f"hydra.sweeper.storage={url}", "hydra.sweeper.study_name=kept"]
    study += ["hydra.sweeper.n_trials=1", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    space = {"data.batch_size": "choice(16, 32)", "model.optimizer.lr": "interval(0.01, 0.1)"}
    study += [params(space)]
    for _ in ("first", "again"):
        result = run_script("train.py", "-m", *STUDY, *study, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
    trials = optuna.load_study(study_name="kept", storage=url).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert trials[0].params != trials[1].params
    assert len([p for p in (tmp_path / "sweep").iterdir() if (p / "metrics.json").exists()]) == 2


def held_study(folder: Path, space: dict[str, str], direction: str = "maximize") -> list[str]:
    """The settings of a sweep going on with the study ``kept`` in a SQLite file in
    ``folder``, which holds one completed trial drawn from ``space`` as the sweeper draws."""
    import optuna
    from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides

    from multigpu.run.optuna_check import database_storage_failure

    if database_storage_failure() is not None:
        pytest.skip("Optuna's database storage does not work here (pyproject pins sqlalchemy<2)")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{folder}/optuna.db"
    distributions, _ = create_params_from_overrides([f"{k}={v}" for k, v in space.items()])
    study = optuna.create_study(study_name="kept", storage=url, direction=direction)
    study.tell(study.ask(distributions), 0.5)
    return [f"hydra.sweeper.storage={url}", "hydra.sweeper.study_name=kept"]


HELD = {"model.optimizer.lr": "tag(log, interval(0.01, 0.5))", "data.batch_size": "choice(16, 32)"}
# What Optuna refuses of a study the database holds (before: a traceback as the first trial
# was drawn, an empty sweep folder, and that trial left RUNNING in the database).
HELD_REFUSED = {
    "other_choices": (
        [params({"data.batch_size": "choice(16, 64)"})],
        "its study kept searched data.batch_size as choice(16, 32) (this sweep: choice(16, 64))",
    ),
    "range_of_another_kind": (
        ["model.optimizer.lr=interval(0.01,0.5)"],
        "model.optimizer.lr as tag(log, interval(0.01, 0.5)) (this sweep: interval(0.01, 0.5))",
    ),
    "choices_made_a_range": (
        ["data.batch_size=range(16,64,16)"],
        "data.batch_size as choice(16, 32) (this sweep: range(16, 64, 16))",
    ),
}


@pytest.mark.parametrize("case", sorted(HELD_REFUSED))
def test_a_held_study_of_another_search_space_is_refused_naming_the_key(
    case, tmp_path, tmp_path_factory, capsys
):
    folder = tmp_path_factory.mktemp("db")
    storage = held_study(folder, HELD)
    before = (folder / "optuna.db").read_bytes()
    overrides, named = HELD_REFUSED[case]
    line = refused([*storage, *overrides], tmp_path, capsys)
    assert line.startswith(f"error: {storage[0]}: its study kept searched ")
    assert named in line
    assert "pass a new hydra.sweeper.study_name (e.g. hydra.sweeper.study_name=kept_2)" in line
    assert (folder / "optuna.db").read_bytes() == before
    assert [p.name for p in folder.iterdir()] == ["optuna.db"]


def test_a_held_study_made_to_minimize_is_refused(tmp_path, tmp_path_factory, capsys):
    storage = held_study(tmp_path_factory.mktemp("db"), HELD, direction="minimize")
    line = refused(storage, tmp_path, capsys)
    assert "its study kept was made to minimize, and this sweep's trials maximize" in line


@pytest.mark.parametrize(
    "overrides",
    [
        [],  # the same search space
        pytest.param(  # another range, of its kind
            ["model.optimizer.lr=tag(log,interval(0.001,0.01))"], marks=pytest.mark.slow
        ),
        pytest.param(  # a key more
            ["++" + params({"model.optimizer.momentum": "interval(0.5, 0.9)"})],
            marks=pytest.mark.slow,
        ),
        [params({"data.batch_size": "choice(16, 64)"}), "hydra.sweeper.study_name=other"],
    ],
)
def test_a_held_study_goes_on_with_what_optuna_takes(overrides, tmp_path, tmp_path_factory):
    """Optuna takes another range of a key's kind, and keys the study never searched."""
    storage = held_study(tmp_path_factory.mktemp("db"), HELD)
    assert checked([*storage, *overrides], tmp_path) == 0


def test_a_server_holding_the_study_is_read_without_being_written(tmp_path):
    """A server's database is read through Optuna where it holds Optuna's tables (here a
    SQLite file, reached as a server is); one without them holds no study to go on with."""
    import functools

    from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides
    from sqlalchemy.engine.url import make_url

    from multigpu.run.optuna_check import check_held_study, check_server

    url = held_study(tmp_path, HELD)[0].split("=", 1)[1]
    before = (tmp_path / "optuna.db").read_bytes()
    space, _ = create_params_from_overrides(["data.batch_size=choice(16,64)"])
    held = functools.partial(check_held_study, url, "kept", space)
    with pytest.raises(UserError, match=r"searched data.batch_size as choice\(16, 32\)"):
        check_server(url, make_url(url), held)
    assert (tmp_path / "optuna.db").read_bytes() == before
    empty = f"sqlite:///{tmp_path}/empty.db"
    check_server(empty, make_url(empty), held)
    assert (tmp_path / "empty.db").stat().st_size == 0  # no table made
    import sqlite3  # another application's database, one of its tables named as Optuna's

    with sqlite3.connect(tmp_path / "app.db") as app:
        app.execute("CREATE TABLE studies (id INTEGER)")
    before = (tmp_path / "app.db").read_bytes()
    other = f"sqlite:///{tmp_path}/app.db"
    check_server(other, make_url(other), held)
    assert (tmp_path / "app.db").read_bytes() == before  # Optuna's tables not made there


@pytest.mark.slow
def test_a_held_study_of_other_choices_from_the_command_line(tmp_path):
    """The tester's case, run twice: the second sweep's choices differ from the study's."""
    import optuna

    url = f"sqlite:///{tmp_path}/optuna.db"
    study = [f"hydra.sweeper.storage={url}", "hydra.sweeper.study_name=kept"]
    study += ["hydra.sweeper.n_trials=1"]
    sweep = f"hydra.sweep.dir={tmp_path / 'first'}"
    first = run_script("train.py", "-m", *STUDY, *study, sweep, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    other = [params({"data.batch_size": "choice(16, 64)"}), f"hydra.sweep.dir={tmp_path / 'two'}"]
    second = run_script("train.py", "-m", *STUDY, *study, *other, cwd=tmp_path)
    assert second.returncode == 2
    (line,) = second.stderr.strip().splitlines()
    assert line.startswith(f"error: hydra.sweeper.storage={url}: its study kept searched ")
    assert not (tmp_path / "two").exists()
    trials = optuna.load_study(study_name="kept", storage=url).trials
    assert [t.state.name for t in trials] == ["COMPLETE"]


def test_hydras_own_optuna_sweeper_is_refused_for_the_projects(tmp_path, capsys):
    line = refused(["hydra.sweeper._target_=" + HYDRA_OPTUNA], tmp_path, capsys)
    assert "use hparams_search=optuna" in line


HYDRA_OPTUNA = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
# Names Hydra reads as themselves (not null, true, nan: values of other types).
NAME = st.from_regex(r"[a-z][a-z_]{0,10}", fullmatch=True).filter(
    lambda name: name not in ("null", "true", "false", "nan", "inf")
)
POSITIVE = st.floats(1e-6, 10.0)


@st.composite
def bad_settings(draw) -> tuple[list[str], str]:
    """(overrides, what the refusal names): one drawn setting no study can run with."""
    kind = draw(st.sampled_from(["count", "direction", "range", "log", "key", "sampler"]))
    if kind == "count":
        key = draw(st.sampled_from(["n_trials", "n_jobs"]))
        setting = f"hydra.sweeper.{key}={draw(st.integers(-1000, 0))}"
        return [setting], setting
    if kind == "direction":
        direction = draw(NAME.filter(lambda d: d != "maximize"))
        return [f"hydra.sweeper.direction={direction}"], f"direction={direction}"
    if kind == "range":
        low, high = sorted(draw(st.lists(POSITIVE, min_size=2, max_size=2, unique=True)))
        entry = f"interval({high}, {low})"
    elif kind == "log":
        entry = f"tag(log, interval({draw(st.floats(-10.0, 0.0))}, 1.0))"
    if kind in ("range", "log"):
        return [params({"model.optimizer.lr": entry})], f"model.optimizer.lr={entry}"
    if kind == "key":
        key = f"model.optimizer.{draw(NAME.filter(lambda k: k not in OPTIMIZER_KEYS))}"
        return ["++" + params({key: "interval(0.01, 0.5)"})], key
    target = f"optuna.samplers.{draw(NAME).title().replace('_', '')}Nope"
    return [f"hydra.sweeper.sampler._target_={target}"], target


OPTIMIZER_KEYS = {"_target_", "_partial_", "lr", "momentum", "weight_decay"}


@pytest.mark.slow
@examples(12)
@given(setting=bad_settings())
def test_any_bad_study_setting_is_one_line_naming_it_and_nothing_is_written(
    setting, tmp_path_factory, capsys
):
    overrides, named = setting
    assert named in refused(overrides, tmp_path_factory.mktemp("sweep"), capsys)


@pytest.mark.slow
@examples(5)
@given(
    low=POSITIVE,
    factor=st.floats(1.0, 100.0),
    batches=st.lists(st.integers(1, 64), min_size=1, max_size=4, unique=True),
)
def test_any_search_space_of_values_a_run_takes_passes(low, factor, batches, tmp_path_factory):
    space = {"model.optimizer.lr": f"tag(log, interval({low}, {low * factor}))"}
    space["data.batch_size"] = f"choice({', '.join(map(str, batches))})"
    assert checked([params(space)], tmp_path_factory.mktemp("sweep")) == 0


# --- trials that diverge: told to Optuna, the study goes on, the report lists them ----------


def read_summary(sweep: Path) -> list[dict[str, str]]:
    with open(sweep / "summary.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_a_diverged_trial_is_pruned_and_the_study_goes_on(tmp_path):
    """The user's case: a drawn lr so large that the loss goes NaN. Before, Optuna's "Values
    were told" traceback ended the study there, with no report. TPE's seed 0 draws the
    diverging lr first, then the good one."""
    space = params({"model.optimizer.lr": "choice(0.1, 1e12)"})
    result = run_script(
        "train.py",
        "-m",
        *STUDY,
        space,
        "data.batch_size=16",  # on the command line: not searched
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.sampler.seed=0",
        f"hydra.sweep.dir={tmp_path}",
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr[-3000:]  # a trial did not complete
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "error: 1 of 2 jobs did not complete"
    told = "trial 0 diverged (model.optimizer.lr=1000000000000.0): told Optuna PRUNED"
    assert told in result.stdout + result.stderr  # with the values the trial was drawn at
    rows = {float(row["lr"]): row for row in read_summary(tmp_path)}
    assert rows[1e12]["status"] == "diverged" and "diverged" in rows[1e12]["reason"]
    said = [line for line in result.stderr.splitlines() if line.startswith("error: job 0 ")]
    name = "lr_1000000000000.0-batch_size_16"  # its folder's
    assert said == [f"error: job 0 ({name}) diverged: {rows[1e12]['reason']}"]  # as recorded
    assert rows[0.1]["status"] == "completed"
    best = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())
    assert best["best_params"] == {"model.optimizer.lr": 0.1}
    assert best["best_value"] == pytest.approx(float(rows[0.1]["test_acc"]))


@pytest.mark.slow  # a study of train.py: the default suite keeps the one with a diverged trial
def test_a_study_whose_every_trial_diverges_still_ends_with_its_report(tmp_path):
    space = params({"model.optimizer.lr": "interval(1e11, 1e12)"})
    result = run_script(
        "train.py",
        "-m",
        *STUDY,
        space,
        "data.batch_size=16",  # on the command line: not searched
        "hydra.sweeper.n_trials=2",
        f"hydra.sweep.dir={tmp_path}",
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "error: 2 of 2 jobs did not complete"
    assert [row["status"] for row in read_summary(tmp_path)] == ["diverged", "diverged"]
    assert not (tmp_path / "optimization_results.yaml").exists()  # no best value to save


@pytest.mark.slow  # the default suite's budget: REFUSED checks the same gate in-process
def test_a_refused_study_writes_nothing_from_the_command_line(tmp_path):
    """The checks run where Hydra starts the sweep, before its sweeper is made."""
    result = run_script(
        "train.py",
        "-m",
        *STUDY,
        "model.optimizer.lr=interval(0.5,0.01)",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        cwd=tmp_path,
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: model.optimizer.lr=interval(0.5,0.01): The `low` value")
    assert list(tmp_path.iterdir()) == []


def test_an_exception_and_a_text_are_summarised_by_one_rule():
    """``summary_line`` gives the line an error is told in: an exception's first line goes
    inside a sentence of ours (no full stop; its type's name when it says nothing), a text's
    stays as it was (a run's reason)."""
    from multigpu.config.errors import summary_line

    database = "(sqlite3.OperationalError) unable to open database file\n(Background on ...)"
    assert summary_line(RuntimeError(database)) == database.splitlines()[0]
    assert summary_line(ValueError("The `low` value must be <= high (low=1, high=0).")) == (
        "The `low` value must be <= high (low=1, high=0)"
    )
    assert summary_line(AssertionError()) == "AssertionError"
    traceback = "Traceback (most recent call last):\n  File x\nKeyError: 'lr'"
    assert summary_line(RuntimeError(traceback)) == "KeyError: 'lr'"
    assert summary_line("diverged at step 3.\nmore") == "diverged at step 3."
    assert summary_line("") == ""


# --- the search space read without Optuna, as Optuna reads it --------------------------------

BOUND = st.one_of(
    st.integers(-3, 12),
    st.sampled_from([0.0, 0.01, 0.5, 1.0, -0.25, 1e-6, 2.5, 10.0]),
)


@st.composite
def search_entries(draw) -> str:
    """One entry of a search space: a range Optuna may refuse, a choice, a numeric range."""
    kind = draw(st.sampled_from(["interval", "log", "choice", "range", "shuffle", "fixed"]))
    low, high = draw(BOUND), draw(BOUND)
    if kind == "interval":
        return f"model.optimizer.lr=interval({low}, {high})"
    if kind == "log":
        return f"model.optimizer.lr=tag(log, interval({low}, {high}))"
    if kind == "choice":
        items = draw(st.lists(st.one_of(BOUND, NAME), min_size=1, max_size=4))
        return f"data.batch_size=choice({', '.join(map(str, items))})"
    if kind in ("range", "shuffle"):
        step = draw(st.sampled_from([1, 2, 3, -1, 0.5, 0.25]))
        entry = f"range({low}, {high}, {step})"
        return f"data.batch_size={'shuffle(' + entry + ')' if kind == 'shuffle' else entry}"
    return f"data.batch_size={low}"


def optuna_reading(entries: list[str]) -> tuple:
    """What Hydra's Optuna sweeper makes of the entries (its own function, with Optuna)."""
    from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides

    from multigpu.config.errors import summary_line
    from multigpu.run.optuna_check import ends

    try:
        space, fixed = create_params_from_overrides(entries)
    except Exception as err:  # noqa: BLE001
        return ("refused", summary_line(err))
    return ("read", {k: ends(d) for k, d in space.items() if k not in fixed}, fixed)


def plain_reading(entries: list[str]) -> tuple:
    from omegaconf import OmegaConf

    from multigpu.run.optuna_check import plain_search_space

    try:
        space, fixed = plain_search_space(OmegaConf.create({"params": None}), entries)
    except UserError as err:
        return ("refused", str(err).split(": ", 1)[1].split("; a searched key takes")[0])
    return ("read", space, fixed)


@examples(200)
@given(entries=st.lists(search_entries(), min_size=1, max_size=3))
def test_the_search_space_read_without_optuna_is_optunas(entries):
    """The quick check (no Optuna import) refuses exactly what Optuna refuses, with Optuna's
    words, and finds the values a trial can be drawn at that Optuna's distributions have."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna's note on a range its step does not end
        plain, optunas = plain_reading(entries), optuna_reading(entries)
    if any("shuffle(" in entry for entry in entries) and plain[0] == optunas[0] == "read":
        plain, optunas = (  # a shuffled range's choices come in a drawn order
            (kind, {k: sorted(v, key=repr) for k, v in space.items()}, fixed)
            for kind, space, fixed in (plain, optunas)
        )
    assert plain == optunas


@pytest.mark.parametrize(
    "setting",
    [
        # a real process each (2-4 s); the default suite keeps two, the in-process test of each
        # refusal is test_a_setting_optuna_would_fail_on_is_refused_before_any_trial
        "model.optimizer.lr=interval(0.5,0.01)",
        pytest.param(
            params({"model.optimizer.lr": "tag(log, interval(0, 0.5))"}), marks=pytest.mark.slow
        ),
        pytest.param(params({"data.batch_size": "choice(16, -4)"}), marks=pytest.mark.slow),
        "++" + params({"model.optimizer.lrr": "interval(0.01, 0.5)"}),
        pytest.param("hydra/sweeper/sampler=grid", marks=pytest.mark.slow),
    ],
)
def test_a_search_space_refusal_imports_neither_optuna_nor_torch(setting, tmp_path):
    """Refused in about a second: Optuna's import alone took 2-3 s, torch's several."""
    result = run_script(
        "train.py",
        "-m",
        *STUDY,
        setting,
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        cwd=tmp_path,
        env={"PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    imported = {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import")}
    assert "optuna" not in imported and "torch" not in imported
    (line,) = [line for line in lines if not line.startswith("import")]
    assert line.startswith("error: ")
    assert list(tmp_path.iterdir()) == []


def test_a_trial_that_did_not_complete_is_logged_with_the_values_it_was_drawn_at(caplog):
    """The diverged trial's line had only its number; its run's own line said the lr its
    schedule had reached (lr 0 after a cosine decay), not the one drawn."""
    import logging

    import optuna

    from multigpu.run.optuna_trials import tell

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    trial.suggest_float("model.optimizer.lr", 0.3, 0.3)
    trial.suggest_categorical("data.batch_size", [128])
    with caplog.at_level(logging.INFO, logger="multigpu.run.optuna_trials"):
        tell(study, trial, JobEnding("diverged"))
    line = "trial 0 diverged (model.optimizer.lr=0.3, data.batch_size=128): told Optuna PRUNED"
    assert line in caplog.text
    assert study.trials[0].state.name == "PRUNED"


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_trials_of_a_stopped_sweep_are_told_failed(stop):
    """Ctrl-C in a trial, or a SIGTERM between trials (the sweep's exit): each trial asked is
    told FAIL before the sweep ends, as docs/sweeps.md says, not left RUNNING in the study's
    database for good."""
    import optuna

    from multigpu.run.optuna_trials import failed_if_stopped

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    trials: list = []
    with pytest.raises(stop), failed_if_stopped(study, trials):
        trials.append(study.ask())
        raise stop()
    assert [t.state.name for t in study.get_trials()] == ["FAIL"]


@pytest.mark.subprocess
def test_trials_sharing_one_checkpoint_folder_are_refused_before_the_first(tmp_path):
    """``callbacks.checkpoint.dirpath=<one folder>`` for a study of 2 trials: the second trial
    had been refused after the first had run, leaving its folder without a record."""
    folder = f"callbacks.checkpoint.dirpath={tmp_path / 'ck'}"
    sweep = f"hydra.sweep.dir={tmp_path / 'sw'}"
    refused = run_script("train.py", "-m", *STUDY, "hydra.sweeper.n_trials=2", folder, sweep,
                         cwd=tmp_path)  # fmt: skip
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()
    assert f"would share the folder {tmp_path / 'ck'} (callbacks.checkpoint.dirpath)" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@examples(60)
@given(sizes=st.lists(st.integers(1, 4), max_size=6))
def test_the_jobs_checked_before_a_study_take_every_pair_of_values(sizes):
    """The jobs checked before the first trial take every pair of two searched keys' values
    (and so every value): a pair the checks refuse together is refused before any folder."""
    from multigpu.run.optuna_check import pairs

    values = {f"key{n}": list(range(size)) for n, size in enumerate(sizes)}
    jobs = pairs(values)
    assert all(job.keys() == values.keys() for job in jobs)
    for a, b in itertools.combinations(values, 2):
        taken = {(job[a], job[b]) for job in jobs}
        assert taken == set(itertools.product(values[a], values[b]))
    for key, taken in values.items():
        assert {job[key] for job in jobs} == set(taken)


def test_a_sampler_that_cannot_be_made_names_what_to_change(caplog):
    """A sampler that exists but refuses its settings (``seed=-5``) is told to change them, not
    to pick another sampler; one that does not exist (or a module) is told the samplers there
    are; and nothing is logged beside the one line."""
    from multigpu.run.optuna_check import made_sampler

    with pytest.raises(UserError) as refused:
        made_sampler({"_target_": "optuna.samplers.RandomSampler", "seed": -5})
    said = str(refused.value)
    assert said.startswith("hydra.sweeper.sampler._target_=optuna.samplers.RandomSampler: ")
    assert said.endswith("; change the hydra.sweeper.sampler.<setting> it names")
    for target in ("optuna.samplers.NoSuchSampler", "optuna.samplers"):
        with pytest.raises(UserError, match=r"cannot be made \(.*\); pick one of "):
            made_sampler({"_target_": target})
    assert caplog.records == []
