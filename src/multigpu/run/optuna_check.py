"""An Optuna sweep checked whole before its first trial (``multigpu.run.preflight``): its
settings, the search space its sweeper builds, each searched key, and jobs that take every
value a key can be drawn at (each choice, each end of a range), which are then admitted as a
basic sweep's jobs are. Whatever the sweeper or Optuna would refuse mid-study (with a
traceback, and no report) is one ``error:`` line instead, before anything is written.
"""

from __future__ import annotations

import difflib
import functools
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from multigpu.config.errors import UserError
from multigpu.run.objective import DIRECTION, OBJECTIVE

HYDRA_OPTUNA = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
OPTUNA_TRIALS = "hydra_plugins.multigpu_sweeper.optuna_trials.OptunaTrials"
SAMPLERS = "hydra/sweeper/sampler=tpe, random or cmaes"
EXAMPLE_SPACE = (
    "model.optimizer.lr: tag(log, interval(0.01, 0.5)), data.batch_size: choice(64, 128)"
)


def is_optuna(config: DictConfig) -> bool:
    return config.hydra.sweeper.get("_target_") in (HYDRA_OPTUNA, OPTUNA_TRIALS)


def optuna_probe_jobs(config: DictConfig) -> list[list[str]]:
    """The sweep's settings checked (``UserError`` naming the first that cannot run); then the
    overrides of jobs that together take each searched key at each value it can be drawn at."""
    settings = config.hydra.sweeper
    if settings.get("_target_") == HYDRA_OPTUNA:
        raise UserError(
            "hydra/sweeper=optuna alone runs Hydra's own Optuna sweeper, which stops the study "
            "at the first trial that diverges or fails, without a report: use "
            "hparams_search=optuna (set its search space in hydra.sweeper.params)"
        )
    check_counts(settings)
    check_direction(settings.direction)
    check_storage(settings.storage)
    space, fixed = search_space(settings, list(config.hydra.overrides.task))
    if not space and not settings.get("custom_search_space"):
        raise UserError(
            "hydra.sweeper.params is empty: the study has nothing to search; give it keys "
            f"and their ranges, e.g. {{{EXAMPLE_SPACE}}}"
        )
    for key in space:
        check_key(config, key)
    values = {key: drawn_at(distribution) for key, distribution in space.items()}
    count = max(len(v) for v in values.values()) if values else 0
    fixed_part = [f"{key}={value}" for key, value in fixed.items()]
    return [
        [f"{key}={v[n % len(v)]}" for key, v in values.items()] + fixed_part for n in range(count)
    ]


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


def check_storage(storage: Any) -> None:
    """None (in memory), or a database URL, with Optuna's database storage working here: it
    is tried on a database in memory, so that nothing is written."""
    if storage is None:
        return
    import optuna
    import sqlalchemy
    from sqlalchemy.engine.url import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(str(storage))
    except ArgumentError:
        raise UserError(
            f"hydra.sweeper.storage={storage}: not a database URL; pass one, e.g. "
            "hydra.sweeper.storage=sqlite:///optuna.db, or null for a study in memory"
        ) from None
    try:
        optuna.storages.RDBStorage("sqlite://")
    except Exception as err:  # noqa: BLE001 - Optuna 2 with SQLAlchemy 2, say
        raise UserError(
            f"hydra.sweeper.storage={storage}: Optuna {optuna.__version__}'s database storage "
            f"fails with SQLAlchemy {sqlalchemy.__version__} ({one_line(err)}); install one it "
            "works with (Optuna 2: pip install 'sqlalchemy<2'), or pass "
            "hydra.sweeper.storage=null for a study in memory"
        ) from None


def search_space(settings: DictConfig, arguments: list[str]) -> tuple[dict, dict]:
    """The sweeper's own search space (``OptunaTrials.searched``), from its own sampler."""
    sweeper = made_sweeper(settings)
    try:
        return sweeper.searched(arguments)
    except Exception as err:  # noqa: BLE001 - whatever the sweeper would fail on mid-study
        raise UserError(
            f"{unusable(settings, arguments)}: {first_line(err)}; a searched key takes a "
            f"choice(...), an interval(low, high) or a tag(log, interval(low, high)) with "
            f"0 < low <= high, e.g. {{{EXAMPLE_SPACE}}}"
        ) from None


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


def made_sweeper(settings: DictConfig) -> Any:
    """The sweeper, as Hydra will make it from these settings."""
    from multigpu.run.optuna_trials import OptunaTrials

    keys = ("direction", "storage", "study_name", "n_trials", "n_jobs", "max_failure_rate")
    keys += ("search_space", "params")
    try:
        return OptunaTrials(
            sampler=made_sampler(settings.sampler),
            custom_search_space=settings.get("custom_search_space"),
            **{key: settings.get(key) for key in keys},
        )
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - a custom_search_space that cannot be found
        raise UserError(
            f"hydra.sweeper.custom_search_space={settings.get('custom_search_space')}: "
            f"{first_line(err)}; name a function (config, trial) that can be imported"
        ) from None


def made_sampler(sampler: DictConfig) -> Any:
    """An Optuna sampler other than the grid (a grid is a basic sweep: list the values)."""
    import optuna
    from hydra.utils import instantiate

    target = sampler.get("_target_")
    try:
        made = instantiate(sampler)
    except Exception as err:  # noqa: BLE001 - a sampler that does not exist or takes other arguments
        raise UserError(
            f"hydra.sweeper.sampler._target_={target}: cannot be made "
            f"({one_line(err.__cause__ or err)}); "
            f"pick one of {SAMPLERS}"
        ) from None
    if isinstance(made, functools.partial) or not isinstance(made, optuna.samplers.BaseSampler):
        why = "a grid is a basic sweep: drop hparams_search=optuna and list the values, e.g. "
        why += "-m model.optimizer.lr=0.05,0.1" if isinstance(made, functools.partial) else ""
        raise UserError(
            f"hydra.sweeper.sampler._target_={target}: not a sampler this sweeper runs "
            f"({why or 'not an Optuna sampler'}); pick one of {SAMPLERS}"
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
    close = difflib.get_close_matches(key, leaf_keys(tree), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise UserError(
        f"hydra.sweeper.params: {key} is not a key of the config{hint}; search an existing "
        f"key, or add one with +{key}"
    )


_ABSENT = object()


def leaf_keys(tree: Any, prefix: str = "") -> list[str]:
    """Every dotted key of a config's tree (``OmegaConf.to_container``)."""
    if not isinstance(tree, dict):
        return [prefix[:-1]] if prefix else []
    return [k for key, value in tree.items() for k in leaf_keys(value, f"{prefix}{key}.")]


def drawn_at(distribution: Any) -> list[Any]:
    """The values a key can be drawn at that a job might refuse: each choice, or both ends."""
    choices = getattr(distribution, "choices", None)
    return list(choices) if choices is not None else [distribution.low, distribution.high]


def first_line(err: BaseException) -> str:
    text = " ".join(str(err).strip().split("\n")[0].split()).rstrip(".")
    return text or type(err).__name__


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:300] or type(err).__name__
