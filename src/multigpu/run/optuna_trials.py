"""The Optuna sweeper of ``hparams_search=optuna``: Hydra's, with each trial told to the study
as its job ended (``multigpu.run.objective``): a diverged trial is pruned, a failed one failed,
and the study goes on to its last trial. Hydra's own tells Optuna a NaN or missing value as a
value, which Optuna refuses with a traceback that ends the study and skips the sweep's report.

Its settings were checked before the sweep's folder was made (``multigpu.run.optuna_check``),
with the search space this sweeper builds (``searched``) and the sampler it makes (seeded by
the run's ``seed``). Imports Optuna: only when chosen.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

logging.getLogger("alembic").setLevel(logging.WARNING)  # a line per plugin, on Optuna's import

import optuna  # noqa: E402
from hydra.core.utils import JobReturn, JobStatus  # noqa: E402
from hydra.types import HydraContext, TaskFunction  # noqa: E402
from hydra_plugins.hydra_optuna_sweeper._impl import (  # noqa: E402
    OptunaSweeperImpl,
    create_params_from_overrides,
)
from omegaconf import DictConfig, OmegaConf  # noqa: E402
from optuna.distributions import BaseDistribution  # noqa: E402
from optuna.trial import TrialState  # noqa: E402
from typing_extensions import override  # noqa: E402

from multigpu.callbacks.interrupts import signals_held  # noqa: E402
from multigpu.config.errors import UserError, summary_line  # noqa: E402
from multigpu.run.objective import JobEnding, returned_ending  # noqa: E402

log = logging.getLogger(__name__)


class OptunaTrials(OptunaSweeperImpl):
    """``OptunaSweeperImpl`` with its own trial loop (``sweep``); the search space, the
    trials' overrides and the sampler are Hydra's, the sampler seeded by the run's ``seed``."""

    @override
    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        from hydra.utils import instantiate

        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.sampler = instantiate(sampler_settings(config))  # as checked before the sweep

    def searched(self, arguments: list[str]) -> tuple[dict[str, BaseDistribution], dict[str, Any]]:
        """(the distribution of each searched key, the value of each fixed one): from
        ``hydra.sweeper.params`` (or the deprecated ``search_space``) and the command line's
        overrides, the command line's winning, as Hydra's sweeper builds them."""
        self._process_searchspace_config()
        overrides = self._parse_sweeper_params_config() + list(arguments)
        distributions, fixed = create_params_from_overrides(overrides)
        space = {**(self.search_space_distributions or {}), **distributions}
        return {k: v for k, v in space.items() if k not in fixed}, fixed

    @override
    def sweep(self, arguments: list[str]) -> None:
        from hydra.utils import instantiate

        space, fixed = self.searched(arguments)
        study = self.study()
        if study.trials:  # a held study: its sampler draws on, not its first trials again
            study.sampler = self.sampler = instantiate(sampler_settings(self.config, study))
        log.info("Study name: %s, sampler: %s", study.study_name, type(self.sampler).__name__)
        done = 0
        while done < self.n_trials:
            trials: list[optuna.Trial] = []
            with failed_if_stopped(study, trials):
                for _ in range(min(self.n_jobs, self.n_trials - done)):
                    trials.append(study.ask())  # each asked one is told, however the sweep ends
                overrides = self._configure_trials(trials, space, fixed)
                returns = self.launcher.launch(overrides, initial_job_idx=self.job_idx)
            self.job_idx += len(returns)
            with signals_held():  # a trial not told stays RUNNING in a database
                for trial, returned in zip(trials, returns, strict=True):
                    tell(study, trial, ending_of(returned))
            done += len(trials)
        save_best(study, f"{self.config.hydra.sweep.dir}/optimization_results.yaml")

    def study(self) -> optuna.Study:
        """The study, new or (a database's) continued; one that cannot be opened ends the
        sweep in one line, before its first trial."""
        try:
            return optuna.create_study(
                study_name=self.study_name,
                storage=self.storage,
                sampler=self.sampler,
                directions=self._get_directions(),
                load_if_exists=True,
            )
        except Exception as err:  # noqa: BLE001 - a database that cannot be reached, say
            print(
                f"error: hydra.sweeper.storage={self.storage}: the study could not be opened "
                f"({summary_line(err)}); pass a database this machine can reach, or null for a "
                "study in memory",
                file=sys.stderr,
                flush=True,
            )
            sys.exit(UserError.exit_code)


def sampler_settings(config: DictConfig, held: optuna.Study | None = None) -> dict[str, Any]:
    """``hydra.sweeper.sampler``, seeded by the run's ``seed`` where the sampler takes a seed
    and none was given (``hydra.sweeper.sampler.seed=...`` wins). Not seeded in the config
    (``hparams_search/optuna.yaml``): the grid's settings take no seed, and refused the key.
    For a ``held`` study (a database's, continued) the seed, either, moves on by the trials it
    holds: seeded as at first, the sampler drew the same first trials again, whose jobs were
    found finished and told again, and the sweep tried nothing new."""
    sampler = OmegaConf.to_container(config.hydra.sweeper.sampler, resolve=True) or {}
    if "seed" in sampler and sampler["seed"] is None:
        sampler["seed"] = config.get("seed")
    if held is not None and sampler.get("seed") is not None:
        sampler["seed"] = (sampler["seed"] + len(held.trials)) % 2**32  # numpy's seeds
    return sampler


def ending_of(returned: JobReturn) -> JobEnding:
    """The job's ending; a job whose task raised (the launcher's own failure) failed."""
    if returned.status != JobStatus.COMPLETED:
        log.error("job %s raised: %r", returned.overrides, returned._return_value)
        return JobEnding("failed")
    return returned_ending(returned.return_value)


@contextlib.contextmanager
def failed_if_stopped(study: optuna.Study, trials: list[optuna.Trial]) -> Iterator[None]:
    """A sweep stopped while ``trials`` are asked and run (a stop signal, a job's error that
    ends the sweep) tells Optuna each of them FAIL first, as the docs say of an interrupted
    trial: left untold, a trial stays RUNNING in a database for good."""
    try:
        yield
    except BaseException:
        with signals_held():
            for trial in trials:
                study.tell(trial, state=TrialState.FAIL)
        raise


def tell(study: optuna.Study, trial: optuna.Trial, ending: JobEnding) -> None:
    """The trial's state, and its value when it completed (Optuna takes none otherwise); a
    trial that did not complete is logged with the values it was drawn at."""
    values = None if ending.value is None else [ending.value]
    drawn = drawn_values(trial)
    study.tell(trial, values=values, state=TrialState[ending.trial_state])
    if ending.value is None:
        log.info(
            "trial %d %s (%s): told Optuna %s",
            trial.number,
            ending.status,
            drawn,
            ending.trial_state,
        )


def drawn_values(trial: optuna.Trial) -> str:
    """The trial's values as its job was given them: ``model.optimizer.lr=0.3``."""
    return ", ".join(f"{key}={value}" for key, value in trial.params.items()) or "no values"


def save_best(study: optuna.Study, path: str) -> None:
    """The best trial, as Hydra's Optuna sweeper saves it; none when no trial completed."""
    completed = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not completed:
        log.warning("no trial completed, so the study has no best value (%s not written)", path)
        return
    best = study.best_trial
    log.info("Best parameters: %s", best.params)
    log.info("Best value: %s", best.value)
    results = {"name": "optuna", "best_params": best.params, "best_value": best.value}
    OmegaConf.save(OmegaConf.create(results), path)
