"""Hydra instantiation that surfaces a user's mistake (``UserError``) or a stopped run
(``RunStopped``: a signal while a constructor ran) as itself, not wrapped in Hydra's error."""

from __future__ import annotations

from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate

from multigpu.config.errors import RunStopped, UserError


def build(node: Any, **kwargs: Any) -> Any:
    """``instantiate`` that re-raises the project's own error a constructor raised inside
    Hydra."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__
        while cause is not None and not isinstance(cause, (UserError, RunStopped)):
            cause = cause.__cause__
        if cause is not None:
            raise cause from None
        raise
