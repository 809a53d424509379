"""The Optuna sweeper of ``hparams_search=optuna``: Hydra's, with each trial told to the study
as its job ended (``multigpu.run.objective``): a diverged trial is pruned, a failed one failed,
and the study goes on to its last trial. Hydra's own tells Optuna a NaN or missing value as a
value, which Optuna refuses with a traceback that ends the study and skips the sweep's report.

Its settings were checked before the sweep's folder was made (``multigpu.run.optuna_check``),
with the search space this sweeper builds (``searched``). Imports Optuna: only when chosen.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import optuna
from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_optuna_sweeper._impl import (
    OptunaSweeperImpl,
    create_params_from_overrides,
)
from omegaconf import OmegaConf
from optuna.distributions import BaseDistribution
from optuna.trial import TrialState
from typing_extensions import override

from multigpu.config.errors import UserError
from multigpu.run.objective import JobEnding, returned_ending

log = logging.getLogger(__name__)


class OptunaTrials(OptunaSweeperImpl):
    """``OptunaSweeperImpl`` with its own trial loop (``sweep``); the search space, the
    trials' overrides and the sampler are Hydra's."""

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
        space, fixed = self.searched(arguments)
        study = self.study()
        log.info("Study name: %s, sampler: %s", study.study_name, type(self.sampler).__name__)
        done = 0
        while done < self.n_trials:
            trials = [study.ask() for _ in range(min(self.n_jobs, self.n_trials - done))]
            overrides = self._configure_trials(trials, space, fixed)
            returns = self.launcher.launch(overrides, initial_job_idx=self.job_idx)
            self.job_idx += len(returns)
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
            reason = " ".join(str(err).split())[:300] or type(err).__name__
            print(
                f"error: hydra.sweeper.storage={self.storage}: the study could not be opened "
                f"({reason}); pass a database this machine can reach, or null for a study in "
                "memory",
                file=sys.stderr,
                flush=True,
            )
            sys.exit(UserError.exit_code)


def ending_of(returned: JobReturn) -> JobEnding:
    """The job's ending; a job whose task raised (the launcher's own failure) failed."""
    if returned.status != JobStatus.COMPLETED:
        log.error("job %s raised: %r", returned.overrides, returned._return_value)
        return JobEnding("failed")
    return returned_ending(returned.return_value)


def tell(study: optuna.Study, trial: optuna.Trial, ending: JobEnding) -> None:
    """The trial's state, and its value when it completed (Optuna takes none otherwise)."""
    values = None if ending.value is None else [ending.value]
    study.tell(trial, values=values, state=TrialState[ending.trial_state])
    if ending.value is None:
        log.info("trial %d %s: told Optuna %s", trial.number, ending.status, ending.trial_state)


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
