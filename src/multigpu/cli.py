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
from hydra.types import RunMode
from omegaconf import DictConfig

from multigpu.errors import RunStopped, UserError
from multigpu.outcome import outcome_of


def hydra_runtime(cfg: DictConfig) -> tuple[dict[str, str], bool]:
    """(the option chosen in each config group, whether this is a job of a multirun): from
    the config when composed with ``return_hydra_config=True``, else from the running app."""
    hydra = cfg.hydra if "hydra" in cfg else HydraConfig.get()
    return dict(hydra.runtime.choices), hydra.mode == RunMode.MULTIRUN


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
            print(f"error: {err}", file=sys.stderr, flush=True)
            sys.exit(outcome_of(err).exit_code)

    return wrapper
