"""An Optuna sweep checked whole before its first trial (``multigpu.run.preflight``): its
settings, the search space its sweeper builds, each searched key, and jobs that take every
value a key can be drawn at (each choice, each end of a range), which are then admitted as a
basic sweep's jobs are. Whatever the sweeper or Optuna would refuse mid-study (with a
traceback, and no report) is one ``error:`` line instead, before anything is written.

In two steps: ``optuna_probe_jobs`` reads the settings and the search space without importing
Optuna (a second or two, with torch, on a small machine): Hydra's parser and Optuna's own
rules for a distribution (``drawn_at``), so that a mistake there is answered at once; once
every job passed the checks before torch, ``check_study`` makes the sampler, the sweeper's own
search space and the storage as the study will, importing Optuna.
"""

from __future__ import annotations

import contextlib
import decimal
import functools
import itertools
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from multigpu.config.errors import UserError, as_override, closest, did_you_mean, summary_line
from multigpu.config.job_names import task_overrides
from multigpu.run.objective import DIRECTION, OBJECTIVE
from multigpu.storage.paths import canonical

HYDRA_OPTUNA = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
OPTUNA_TRIALS = "hydra_plugins.multigpu_sweeper.optuna_trials.OptunaTrials"
SAMPLERS = "hydra/sweeper/sampler=tpe, random or cmaes"
GRID = "optuna.samplers.GridSampler"
SQLALCHEMY_FOR_OPTUNA_2 = "pip install 'sqlalchemy<2' 'alembic<1.14'"
EXAMPLE_SPACE = (
    "model.optimizer.lr: tag(log, interval(0.01, 0.5)), data.batch_size: choice(64, 128)"
)
HeldCheck = Callable[[Any], None]  # given Optuna's storage of a database, as opened


def is_optuna(config: DictConfig) -> bool:
    """Whether the sweep is Optuna's search (``config``: the sweep's, or Hydra's own node)."""
    hydra = config.hydra if "hydra" in config else config
    return hydra.sweeper.get("_target_") in (HYDRA_OPTUNA, OPTUNA_TRIALS)


def optuna_probe_jobs(config: DictConfig) -> list[list[str]]:
    """The sweep's settings checked (``UserError`` naming the first that cannot run); then the
    overrides of jobs that together take each searched key at each value it can be drawn at.
    Imports neither torch nor Optuna (but for the deprecated ``hydra.sweeper.search_space``)."""
    settings = config.hydra.sweeper
    if settings.get("_target_") == HYDRA_OPTUNA:
        raise UserError(
            "hydra/sweeper=optuna alone runs Hydra's own Optuna sweeper, which stops the study "
            "at the first trial that diverges or fails, without a report: use "
            "hparams_search=optuna (set its search space in hydra.sweeper.params)"
        )
    check_counts(settings)
    check_direction(settings.direction)
    check_not_grid(settings.sampler)
    arguments = task_overrides(config.hydra)
    if settings.get("params") is None and settings.get("search_space") is not None:
        space, fixed = search_space(made_sweeper(settings), settings, arguments)  # deprecated
        values = {key: ends(distribution) for key, distribution in space.items()}
    else:
        values, fixed = plain_search_space(settings, arguments)
    if not values and not settings.get("custom_search_space"):
        raise UserError(
            "hydra.sweeper.params is empty: the study has nothing to search; give it keys "
            f"and their ranges, e.g. {{{EXAMPLE_SPACE}}}"
        )
    for key in values:
        check_key(config, key)
    fixed_part = [f"{key}={value}" for key, value in fixed.items()]
    return [[f"{k}={values[k][n]}" for k, n in job.items()] + fixed_part for job in pairs(values)]


def pairs(values: dict[str, list[Any]]) -> list[dict[str, int]]:
    """Jobs (each key's index into its values) that together take every pair of two keys'
    values, and so each value: a combination the checks refuse (``model.net.width=4`` with
    ``model.channels_last=true``) is among them, where pairing the values index by index left
    it to a trial, refused after its folder was made. Greedy: each job starts from a pair not
    yet taken and gives every other key the value that takes the most new pairs."""
    keys = list(values)
    if len(keys) < 2:
        return [{key: n} for key in keys for n in range(len(values[key]))]
    choices = [range(len(values[key])) for key in keys]
    untaken = {
        ((x, i), (y, j))
        for x, y in itertools.combinations(range(len(keys)), 2)
        for i in choices[x]
        for j in choices[y]
    }
    jobs = []
    while untaken:
        job = dict(min(untaken))  # key -> value, both as indices
        for z in (z for z in range(len(keys)) if z not in job):
            new = [
                sum(tuple(sorted(((w, job[w]), (z, n)))) in untaken for w in job)
                for n in choices[z]
            ]
            job[z] = new.index(max(new))
        untaken -= set(itertools.combinations(sorted(job.items()), 2))
        jobs.append({keys[z]: n for z, n in sorted(job.items())})
    return jobs


def check_study(config: DictConfig) -> None:
    """What only Optuna can say, once every job passed the checks before it: the sampler as
    the sweeper will make it (seeded by the run's ``seed``), the search space as the sweeper
    reads it, the storage, and the study the storage already holds under the study's name.
    Imports Optuna."""
    from multigpu.run.optuna_trials import sampler_settings

    settings = config.hydra.sweeper
    sweeper = made_sweeper(settings, sampler_settings(config))
    space, _ = search_space(sweeper, settings, task_overrides(config.hydra))
    held = functools.partial(check_held_study, settings.storage, settings.study_name, space)
    check_storage(settings.storage, held)


def study_places(storage: Any) -> dict[str, Path]:
    """The folder a SQLite study's database is written in (none for a study in memory or on a
    server), for the rule that no run writes in another run's folder."""
    from sqlalchemy.engine.url import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(str(storage)) if storage is not None else None
    except ArgumentError:  # check_storage says it
        return {}
    database = url.database if url is not None and url.get_backend_name() == "sqlite" else None
    if not database or database == ":memory:" or database.startswith("file:"):
        return {}
    return {"hydra.sweeper.storage": canonical(Path(database)).parent}  # sqlite expands no ~


def check_not_grid(sampler: DictConfig) -> None:
    """Optuna's grid sampler takes no seed (``hparams_search=optuna`` seeds the sampler) and
    lists every value of every key: a basic sweep, which needs no study."""
    if (sampler or {}).get("_target_") == GRID:
        raise UserError(
            "hydra/sweeper/sampler=grid: a grid is a basic sweep, run without Optuna: drop "
            "hparams_search=optuna and list each key's values, e.g. -m "
            "model.optimizer.lr=0.05,0.1 data.batch_size=64,128; or search with "
            f"{SAMPLERS}"
        )


def check_counts(settings: DictConfig) -> None:
    """At least one trial, run at least one at a time; no failure rate to stop at."""
    for key in ("n_trials", "n_jobs"):
        if settings[key] < 1:
            raise UserError(
                f"hydra.sweeper.{key}={settings[key]}: the study needs at least 1; pass "
                f"hydra.sweeper.{key}=1 or more"
            )
    if settings.max_failure_rate != 0:
        raise UserError(
            f"hydra.sweeper.max_failure_rate={settings.max_failure_rate}: this sweeper tells "
            "Optuna each diverged or failed trial and goes on to the last one (the sweep then "
            "exits 1); drop hydra.sweeper.max_failure_rate"
        )


def check_direction(direction: Any) -> None:
    """One direction, the objective's: a trial returns one value, the final test accuracy."""
    given = list(direction) if isinstance(direction, (list, ListConfig)) else [direction]
    names = [getattr(d, "name", d) for d in given]  # Hydra's Direction enum, or its name
    if names != [DIRECTION]:
        shown = names[0] if len(names) == 1 else "[" + ",".join(map(str, names)) + "]"
        raise UserError(
            f"hydra.sweeper.direction={shown}: a trial's value is its final {OBJECTIVE}, one "
            f"value the study maximizes; pass hydra.sweeper.direction={DIRECTION} or drop it"
        )


def check_storage(storage: Any, held: HeldCheck | None = None) -> None:
    """None (in memory), or a database URL that Optuna's database storage can use here,
    tried without writing the user's database: on a database of its own in a temporary
    folder (Optuna 2 cannot record its schema under SQLAlchemy 2), then a SQLite file as a
    copy of it, or a server by connecting. ``held`` is then given the database as Optuna
    opens it (the copy, or the server's), where it holds studies."""
    if storage is None:
        return
    quiet_alembic()
    import optuna
    import sqlalchemy
    from sqlalchemy.engine.url import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(str(storage))
    except ArgumentError:
        raise UserError(
            f"hydra.sweeper.storage={storage}: not a database URL; pass one, e.g. "
            "hydra.sweeper.storage=sqlite:///optuna.db, or null for a study in memory"
        ) from None
    failure = database_storage_failure()
    if failure is not None:
        needs = ""
        if major(optuna.__version__) < 3 and major(sqlalchemy.__version__) >= 2:
            needs = f": Optuna 2 needs SQLAlchemy 1.4 ({SQLALCHEMY_FOR_OPTUNA_2})"
        raise UserError(
            f"hydra.sweeper.storage={storage}: Optuna {optuna.__version__}'s database storage "
            f"fails with SQLAlchemy {sqlalchemy.__version__} here ({failure}){needs}; or pass "
            "hydra.sweeper.storage=null for a study in memory"
        )
    if url.get_backend_name() == "sqlite":
        check_sqlite_file(storage, url.database, held)
    else:
        check_server(storage, url, held)


def major(version: str) -> int:
    return int(version.split(".")[0])


@functools.cache
def database_storage_failure() -> str | None:
    """Why Optuna's database storage fails in this environment (None: it works), found on a
    SQLite file in a temporary folder, removed after. In memory it works even where a file
    fails: Optuna 2's schema stamp is never committed under SQLAlchemy 2, and only the one
    connection of a database in memory sees it."""
    import optuna

    folder = tempfile.mkdtemp(prefix="optuna-check-")
    try:
        storage = optuna.storages.RDBStorage(f"sqlite:///{folder}/probe.db")
        storage.engine.dispose()
    except Exception as err:  # noqa: BLE001 - whatever it is, the study would fail on it
        return summary_line(err)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return None


def check_sqlite_file(storage: Any, database: str | None, held: HeldCheck | None = None) -> None:
    """A SQLite database file: one that exists must open as an Optuna study's (tried on a
    copy, which ``held`` then reads), one to be made needs a writable folder; in memory (no
    file) it is always there, and empty."""
    import optuna

    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database)  # as SQLite opens it: a ~ is a folder so named
    if path.is_dir():
        raise UserError(
            f"hydra.sweeper.storage={storage}: {path.resolve()} is a folder, not a database "
            "file; name a file in it, e.g. sqlite:///<folder>/optuna.db"
        )
    if not path.exists():
        folder = path.parent
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            why = "is not a writable folder" if folder.is_dir() else "does not exist"
            why = "is a file, not a folder" if folder.exists() and not folder.is_dir() else why
            raise UserError(
                f"hydra.sweeper.storage={storage}: {folder.resolve()} {why}, so the database "
                "cannot be made there; make the folder, or pass another path"
            )
        return
    folder = tempfile.mkdtemp(prefix="optuna-check-")
    try:
        copy = Path(folder) / "study.db"
        shutil.copyfile(path, copy)
        try:
            opened = optuna.storages.RDBStorage(f"sqlite:///{copy}")
        except Exception as err:  # noqa: BLE001 - a file that is not a study's database
            raise UserError(
                f"hydra.sweeper.storage={storage}: {path.resolve()} cannot be opened as an "
                f"Optuna database ({summary_line(err)}); pass another file, or null for a "
                "study in memory"
            ) from None
        try:
            if held is not None:
                held(opened)
        finally:
            opened.engine.dispose()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def check_server(storage: Any, url: Any, held: HeldCheck | None = None) -> None:
    """A database server's URL: its driver installed, and the server reached (connecting
    writes nothing); where it holds Optuna's tables, ``held`` reads them."""
    import sqlalchemy

    try:
        engine = sqlalchemy.create_engine(url)
    except Exception as err:  # noqa: BLE001 - its driver, most often
        raise UserError(
            f"hydra.sweeper.storage={storage}: {summary_line(err)}; install the database's "
            "driver, or pass hydra.sweeper.storage=null for a study in memory"
        ) from None
    try:
        with engine.connect():
            pass
        has_studies = held is not None and holds_optuna_schema(engine)
    except Exception as err:  # noqa: BLE001 - a server that cannot be reached
        raise UserError(
            f"hydra.sweeper.storage={storage}: the database cannot be reached "
            f"({summary_line(err)}); pass one this machine can reach, or null for a study in "
            "memory"
        ) from None
    finally:
        engine.dispose()
    if has_studies:
        check_server_studies(storage, held)


def holds_optuna_schema(engine: Any) -> bool:
    """Whether the server holds every table of Optuna's schema, its version row and alembic's
    revision: only then does opening it as Optuna's storage write nothing (``RDBStorage``
    creates the tables and version rows it misses as it opens)."""
    import sqlalchemy
    from optuna.storages._rdb import models

    tables = set(sqlalchemy.inspect(engine).get_table_names())
    if not {*models.BaseModel.metadata.tables, "alembic_version"} <= tables:
        return False
    with engine.connect() as connection:
        rows = [f"SELECT COUNT(*) FROM {table}" for table in ("version_info", "alembic_version")]
        return all(connection.execute(sqlalchemy.text(row)).scalar() for row in rows)


def check_server_studies(storage: Any, held: HeldCheck) -> None:
    """``held`` on a server's database that holds Optuna's whole schema
    (``holds_optuna_schema``): Optuna opens it as it is, writing nothing."""
    import optuna

    try:
        opened = optuna.storages.RDBStorage(str(storage))
    except Exception as err:  # noqa: BLE001 - tables of another Optuna's schema, say
        raise UserError(
            f"hydra.sweeper.storage={storage}: cannot be opened as an Optuna database "
            f"({summary_line(err)}); pass another database, or null for a study in memory"
        ) from None
    try:
        held(opened)
    finally:
        opened.engine.dispose()


def check_held_study(storage: Any, study_name: Any, space: dict[str, Any], opened: Any) -> None:
    """The study the database already holds under ``study_name``, which the sweep goes on
    with: Optuna refuses a trial that draws a key from a distribution of another kind than
    the study's earlier trials did (an interval where it was a log interval or a choice) or
    from other choices (``check_distribution_compatibility``), and a study made to
    minimize. It did so as the sweep's first trial was drawn: a traceback, a sweep folder
    left empty and a trial left RUNNING in the database. Other ranges, and other keys, it
    takes."""
    import optuna

    try:
        study_id = opened.get_study_id_from_name(str(study_name))
    except KeyError:  # no such study yet: the sweep makes it
        return
    study = f"hydra.sweeper.storage={storage}: its study {study_name}"
    directions = [d.name.lower() for d in opened.get_study_directions(study_id)]
    if directions and directions[0] != "not_set" and directions != [DIRECTION]:
        raise UserError(
            f"{study} was made to {','.join(directions)}, and this sweep's trials {DIRECTION} "
            f"their {OBJECTIVE}; pass a new hydra.sweeper.study_name (e.g. "
            f"hydra.sweeper.study_name={study_name}_{DIRECTION})"
        )
    held = held_distributions(opened.get_all_trials(study_id, deepcopy=False))
    changed = []
    for key, distribution in space.items():
        try:
            if key in held:
                optuna.distributions.check_distribution_compatibility(held[key], distribution)
        except ValueError:
            changed.append(
                f"{key} as {hydra_form(held[key])} (this sweep: {hydra_form(distribution)})"
            )
    if changed:
        raise UserError(
            f"{study} searched {', '.join(changed)}; Optuna cannot change a key's choices, "
            "or the kind of its range, within one study: pass a new hydra.sweeper.study_name "
            f"(e.g. hydra.sweeper.study_name={study_name}_2), or search these keys as the "
            "study did"
        )


def held_distributions(trials: list[Any]) -> dict[str, Any]:
    """The distribution each key was drawn from by the study's trials (all alike: Optuna
    checked each against the first)."""
    held: dict[str, Any] = {}
    for trial in trials:
        for key, distribution in trial.distributions.items():
            held.setdefault(key, distribution)
    return held


def hydra_form(distribution: Any) -> str:
    """An Optuna distribution as ``hydra.sweeper.params`` gives it (Hydra's Optuna sweeper,
    ``create_optuna_distribution_from_override``): ``choice(16, 32)``, ``tag(log,
    interval(0.01, 0.5))``, ``interval(0.1, 0.9)``, ``range(16, 64, 16)``."""
    choices = getattr(distribution, "choices", None)
    if choices is not None:
        return f"choice({', '.join(as_override(c) for c in choices)})"
    low, high = distribution.low, distribution.high
    log = getattr(distribution, "log", False) or "Log" in type(distribution).__name__
    if log:
        return f"tag(log, interval({low}, {high}))"
    step = getattr(distribution, "q", None) or getattr(distribution, "step", None)
    if step is not None and step != 1:
        return f"range({low}, {high}, {step})"
    return f"interval({low}, {high})"


def quiet_alembic() -> None:
    """Optuna's database storage imports alembic, which logs a line per plugin it sets up."""
    logging.getLogger("alembic").setLevel(logging.WARNING)


def search_space(sweeper: Any, settings: DictConfig, arguments: list[str]) -> tuple[dict, dict]:
    """The sweeper's own search space (``OptunaTrials.searched``), from its own sampler."""
    try:
        return sweeper.searched(arguments)
    except Exception as err:  # noqa: BLE001 - whatever the sweeper would fail on mid-study
        raise UserError(
            f"{unusable(settings, arguments)}: {summary_line(err)}; {SPACE_FIX}"
        ) from None


SPACE_FIX = (
    "a searched key takes a choice(...), an interval(low, high) or a tag(log, interval(low, "
    f"high)) with 0 < low <= high, e.g. {{{EXAMPLE_SPACE}}}"
)


def plain_search_space(
    settings: DictConfig, arguments: list[str]
) -> tuple[dict[str, list[Any]], dict[str, str]]:
    """(the values each searched key can be drawn at that a job might refuse, the value of
    each fixed key), read as the sweeper reads ``hydra.sweeper.params`` and the command line
    (``create_params_from_overrides``: a key fixed anywhere is not searched), with Optuna's
    rules for each distribution, without importing it. An entry it would refuse is a
    ``UserError`` naming it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    params = [f"{k!s}={v}" for k, v in (settings.get("params") or {}).items()]
    given = [(p, "hydra.sweeper.params: ") for p in params] + [(a, "") for a in arguments]
    space: dict[str, list[Any]] = {}
    fixed: dict[str, str] = {}
    for entry, where in given:
        try:
            (override,) = parser.parse_overrides([entry])
            key = override.get_key_element()
            if override.is_sweep_override():
                space[key] = drawn_at(override)
            else:
                fixed[key] = override.get_value_element_as_str()
        except Exception as err:  # noqa: BLE001 - as the sweeper would fail mid-study
            raise UserError(f"{where}{entry}: {summary_line(err)}; {SPACE_FIX}") from None
    return {k: v for k, v in space.items() if k not in fixed}, fixed


def drawn_at(override: Any) -> list[Any]:
    """The values a trial can be drawn at that a job might refuse (each choice, or both ends)
    of the distribution Hydra's Optuna sweeper makes of a sweep override
    (``create_optuna_distribution_from_override``); what Optuna's distribution refuses, with
    its words (``optuna.distributions``)."""
    from hydra.core.override_parser.types import Transformer

    value = override.value()
    if override.is_choice_sweep() or (override.is_range_sweep() and value.shuffle):
        choices = list(override.sweep_iterator(transformer=Transformer.encode))
        for choice in choices:
            if not isinstance(choice, (str, int, float, bool, type(None))):
                raise ValueError(
                    "A choice sweep expects str, int, float, bool, or None type. "
                    f"Got {type(choice)}."
                )
        if not choices:
            raise ValueError("The `choices` must contain one or more elements.")
        return choices
    if override.is_range_sweep():
        low, high, step = value.start, value.stop, value.step
        if any(isinstance(x, float) for x in (low, high, step)):
            check_order(low, high, f", q={step}")
            return [float(low), discrete_high(low, high, step)]
        low, high, step = int(low), int(high), int(step)
        check_order(low, high)
        if step <= 0:
            raise ValueError(f"The `step` value must be non-zero positive value, but step={step}.")
        return [low, (high - low) // step * step + low]
    if override.is_interval_sweep():
        low, high = value.start, value.end
        integer = isinstance(low, int) and isinstance(high, int)
        check_order(low, high)
        if "log" in value.tags and (low < 1 if integer else low <= 0):
            bound = "equal to or greater than 1" if integer else "larger than 0"
            raise ValueError(
                f"The `low` value must be {bound} for a log distribution (low={low}, high={high})."
            )
        return [low, high] if integer else [float(low), float(high)]
    raise NotImplementedError(f"{override} is not supported by Optuna sweeper.")


def check_order(low: Any, high: Any, more: str = "") -> None:
    if not low <= high:  # NaN included
        raise ValueError(
            "The `low` value must be smaller than or equal to the `high` value "
            f"(low={low}, high={high}{more})."
        )


def discrete_high(low: float, high: float, q: float) -> float:
    """The highest value of a discrete uniform range, as Optuna adjusts it to its step."""
    d_low, d_high, d_q = (decimal.Decimal(str(x)) for x in (low, high, q))
    span = d_high - d_low
    if d_q and span % d_q != 0:
        return float((span // d_q) * d_q + d_low)
    return float(high)


def unusable(settings: DictConfig, arguments: list[str]) -> str:
    """The first search-space entry the sweeper cannot build a distribution from, and where
    it was given."""
    from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides

    params = [f"{k}={v}" for k, v in (settings.get("params") or {}).items()]
    given = [(p, "hydra.sweeper.params: ") for p in params] + [(a, "") for a in arguments]
    for entry, where in given:
        try:
            create_params_from_overrides([entry])
        except Exception:  # noqa: BLE001
            return where + entry
    return "hydra.sweeper.search_space"  # the deprecated form, the only one left


def made_sweeper(settings: DictConfig, sampler: dict[str, Any] | None = None) -> Any:
    """The sweeper, as Hydra will make it from these settings (``sampler``: its settings,
    seeded; else as given)."""
    from multigpu.run.optuna_trials import OptunaTrials

    keys = ("direction", "storage", "study_name", "n_trials", "n_jobs", "max_failure_rate")
    keys += ("search_space", "params")
    try:
        return OptunaTrials(
            sampler=made_sampler(settings.sampler if sampler is None else sampler),
            custom_search_space=settings.get("custom_search_space"),
            **{key: settings.get(key) for key in keys},
        )
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - a custom_search_space that cannot be found
        raise UserError(
            f"hydra.sweeper.custom_search_space={settings.get('custom_search_space')}: "
            f"{summary_line(err)}; name a function (config, trial) that can be imported"
        ) from None


class SamplerSettings(BaseModel):
    """What a sampler's constructor takes without a word, and its search then misuses: a
    traceback once the startup trials are done (TPE's ``n_ei_candidates=0``, a negative
    ``prior_weight``), or a search that collapses to one point (CMA-ES's ``sigma0=0``)."""

    model_config = ConfigDict(extra="allow")


class TpeSettings(SamplerSettings):
    n_ei_candidates: int = Field(24, ge=1)
    prior_weight: float | None = Field(1.0, ge=0)


class CmaEsSettings(SamplerSettings):
    sigma0: float | None = Field(None, gt=0)


SAMPLER_SETTINGS = {
    "optuna.samplers.TPESampler": TpeSettings,
    "optuna.samplers.CmaEsSampler": CmaEsSettings,
}


def check_sampler_settings(sampler: DictConfig | dict[str, Any]) -> None:
    settings = SAMPLER_SETTINGS.get(sampler.get("_target_"))
    values = OmegaConf.to_container(sampler) if OmegaConf.is_config(sampler) else dict(sampler)
    try:
        if settings is not None:
            settings.model_validate(values)
    except ValidationError as refused:
        error = refused.errors()[0]
        key, bound = error["loc"][0], error.get("ctx", {})
        wanted = error["msg"].lower().removeprefix("input should be ")  # a wrong type
        if "gt" in bound or "ge" in bound:
            wanted = f"above {bound['gt']:g}" if "gt" in bound else f"at least {bound['ge']:g}"
        raise UserError(
            f"hydra.sweeper.sampler.{key}={values.get(key)} must be {wanted}: Optuna takes it, "
            "and its search then fails once the startup trials are done, or stays at one point"
        ) from None


def made_sampler(sampler: DictConfig | dict[str, Any]) -> Any:
    """An Optuna sampler other than the grid (a grid is a basic sweep: list the values)."""
    quiet_alembic()
    import optuna
    from hydra._internal.utils import _locate
    from hydra.utils import instantiate

    target = sampler.get("_target_")
    check_not_grid(sampler)
    check_sampler_settings(sampler)
    try:
        made = instantiate(sampler)
    except Exception as err:  # noqa: BLE001 - a sampler that does not exist or takes other arguments
        fix = f"pick one of {SAMPLERS}"
        with contextlib.suppress(Exception):  # a class: its settings are what it refuses
            if isinstance(_locate(str(target)), type):  # Hydra's lookup, without its log line
                fix = "change the hydra.sweeper.sampler.<setting> it names"
        raise UserError(
            f"hydra.sweeper.sampler._target_={target}: cannot be made "
            f"({summary_line(err.__cause__ or err)}); {fix}"
        ) from None
    if isinstance(made, functools.partial) or not isinstance(made, optuna.samplers.BaseSampler):
        what = "made only in part (_partial_)" if isinstance(made, functools.partial) else None
        raise UserError(
            f"hydra.sweeper.sampler._target_={target}: not a sampler this sweeper runs "
            f"({what or 'not an Optuna sampler'}); pick one of {SAMPLERS}"
        )
    return made


def check_key(config: DictConfig, key: str) -> None:
    """A searched key is one of the config's keys or groups (``+key`` adds one)."""
    if key.startswith(("+", "~")) or key in config.hydra.runtime.choices:
        return
    found = OmegaConf.select(config, key, default=_ABSENT, throw_on_resolution_failure=False)
    if found is not _ABSENT:
        return
    tree = OmegaConf.to_container(config, resolve=False)
    tree.pop("hydra", None)
    close = did_you_mean(closest(key, leaf_keys(tree)))
    raise UserError(
        f"hydra.sweeper.params: {key} is not a key of the config{close}; search an existing "
        f"key, or add one with +{key}"
    )


_ABSENT = object()


def leaf_keys(tree: Any, prefix: str = "") -> list[str]:
    """Every dotted key of a config's tree (``OmegaConf.to_container``)."""
    if not isinstance(tree, dict):
        return [prefix[:-1]] if prefix else []
    return [k for key, value in tree.items() for k in leaf_keys(value, f"{prefix}{key}.")]


def ends(distribution: Any) -> list[Any]:
    """The values an Optuna distribution can be drawn at that a job might refuse: each
    choice, or both ends."""
    choices = getattr(distribution, "choices", None)
    return list(choices) if choices is not None else [distribution.low, distribution.high]
