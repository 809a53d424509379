"""Entry-point glue: a user's mistake or a stopped run ends as one line on stderr and the
exit status its outcome names (``multigpu.outcome``)."""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from multigpu.atomic import check_creatable
from multigpu.errors import RunStopped, UserError, WriteFailed, message
from multigpu.job_names import job_folder
from multigpu.launch import run_name
from multigpu.outcome import outcome_of
from multigpu.settings import slurm_gpus_per_node, slurm_tasks_per_node

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


class CheckRunFolder(Callback):
    """Hydra creates the run (or sweep) folder and writes its config there before the job
    starts; one that cannot be written is refused first, in one line, instead of a traceback."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.check(config.hydra.run.dir, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.check(config.hydra.sweep.dir, "hydra.sweep.dir")

    @staticmethod
    def check(folder: str, key: str) -> None:
        try:
            check_creatable(folder)
        except WriteFailed as err:
            print(f"error: {err}: pass a writable {key}", file=sys.stderr, flush=True)
            sys.exit(UserError.exit_code)


def report_user_errors(main: Callable[..., Any]) -> Callable[..., Any]:
    """Print a ``UserError`` (exit 2) or a stopped run (interrupted 130/143, diverged 3) as one
    ``error: <message>`` line instead of a traceback (``HYDRA_FULL_ERROR=1``: raise)."""

    @functools.wraps(main)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return main(*args, **kwargs)
        except (UserError, RunStopped) as err:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            logging.getLogger("multigpu").debug("stopped", exc_info=True)
            print(f"error: {message(err)}", file=sys.stderr, flush=True)
            sys.exit(outcome_of(err).exit_code)

    return wrapper
