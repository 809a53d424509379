"""Entry-point glue: a user's mistake or a stopped run ends as one line on stderr and the
exit status its outcome names (``multigpu.storage.outcome``)."""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from multigpu.config.errors import RunStopped, UserError, message
from multigpu.config.job_names import job_folder
from multigpu.config.launch import run_name, started_by_rank_zero
from multigpu.config.settings import slurm_gpus_per_node, slurm_tasks_per_node
from multigpu.storage.outcome import outcome_of

# ${name:...} in the configs, and whether each is resolved once per process: the run's name
# must not change, but the SLURM resources differ from job to job of a sweep (and OmegaConf's
# cache, which Hydra copies from the sweep's config to each job's, keys on the arguments' text).
RESOLVERS = {
    "run_name": (run_name, True),  # hydra.run.dir
    "job_folder": (job_folder, False),  # hydra.sweep.subdir: one per job
    "slurm_tasks_per_node": (slurm_tasks_per_node, False),  # hydra/launcher/slurm.yaml
    "slurm_gpus_per_node": (slurm_gpus_per_node, False),
}


def register_resolvers() -> None:
    """Before Hydra composes the config."""
    for name, (function, once) in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function, use_cache=once)


def hydra_runtime(cfg: DictConfig) -> tuple[dict[str, str], bool]:
    """(the option chosen in each config group, whether this is a job of a multirun): from
    the config when composed with ``return_hydra_config=True``, else from the running app."""
    hydra = cfg.hydra if "hydra" in cfg else HydraConfig.get()
    return dict(hydra.runtime.choices), hydra.mode == RunMode.MULTIRUN


def report_user_errors(main: Callable[..., Any]) -> Callable[..., Any]:
    """Print a ``UserError`` (exit 2) or a stopped run (interrupted 130/143, diverged 3) as one
    ``error: <message>`` line instead of a traceback (``HYDRA_FULL_ERROR=1``: raise); a
    ``NothingToDo`` is its notice alone, exit 0."""

    @functools.wraps(main)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return main(*args, **kwargs)
        except KeyboardInterrupt:  # Ctrl-C before a run's own handling (imports, checks)
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            if not started_by_rank_zero():  # rank 0 says how the run ended, naming this one
                print("error: interrupted by SIGINT", file=sys.stderr, flush=True)
            sys.exit(128 + signal.SIGINT)
        except (UserError, RunStopped) as err:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            logging.getLogger("multigpu").debug("stopped", exc_info=True)
            outcome = outcome_of(err)
            if not (outcome.status == "interrupted" and started_by_rank_zero()):
                said = f"error: {message(err)}" if outcome.exit_code else message(err)
                print(said, file=sys.stderr, flush=True)
            sys.exit(outcome.exit_code)

    return wrapper
