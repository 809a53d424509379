"""Entry-point glue: a user's mistake ends as one line on stderr and a non-zero exit."""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from multigpu.errors import RunStopped, UserError

EXIT_USER_ERROR = 2


def in_multirun() -> bool:
    """Whether this process runs a job of a Hydra multirun (``-m``)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def report_user_errors(main: Callable[..., Any]) -> Callable[..., Any]:
    """Print a ``UserError`` (exit 2) or a stopped run (interrupted 130, diverged 3) as one
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
            sys.exit(getattr(err, "exit_code", EXIT_USER_ERROR))

    return wrapper
