"""Lightning's and torch's own answers to the run's config, before anything is written.

The checks before torch (``multigpu.config.schema``'s ``Trainer``) know the type of every
argument Lightning's ``Trainer`` takes, the range of each number and the names of each choice;
Lightning refuses more once it builds one (a duration it cannot read in
``+trainer.val_check_interval``). ``multigpu.run.fit`` builds
the Trainer only after the run's folder and record exist, so its refusal came after a folder was
made. Admission builds one first, with what the run sets itself (devices, strategy, callbacks,
logger, plugins) left neutral: building a Trainer reads no file and writes none, and its refusal
is one line.

Torch and Lightning refuse more only when the run builds its other parts or takes its first
step (``model.compile={backend: nonsense}``, a callback's argument):
``multigpu.run.parts_check.check_run_objects`` builds each of them first, as ``fit`` does,
without reading or writing a file; a sweep does so for every job before its first starts,
after admitting them all as far as the checks before torch go (``torch_checks_later``).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from multigpu.config.errors import UserError, summary_line
from multigpu.config.settings import plain

# What multigpu.run.fit passes to the Trainer itself, in place of the node's values: neutral here
# (the run's own choices are checked by multigpu.config.settings, before torch); what it turns on
# (a logger, checkpoints, a progress bar) is passed as the run will have it (``turned_on``).
SET_BY_THE_RUN = {
    "accelerator": "cpu",
    "devices": 1,
    "num_nodes": 1,
    "precision": None,
    "strategy": "auto",
    "callbacks": None,
    "plugins": None,
    "use_distributed_sampler": False,
}
LIGHTNING_LOGGERS = ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning")


def lightning_refusal(error: BaseException) -> UserError | None:
    """Lightning's refusal of a Trainer argument (Hydra wraps it) as the one line a user
    sees; None for an error that is not one."""
    from pytorch_lightning.utilities.exceptions import MisconfigurationException

    cause = error.__cause__ or error
    if isinstance(cause, (MisconfigurationException, TypeError, ValueError)):
        return UserError(f"trainer: {summary_line(str(cause))}")
    return None


@contextlib.contextmanager
def silenced() -> Iterator[None]:
    """No lines from a Trainer built only to be checked (the devices it found, its mode)."""
    loggers = [logging.getLogger(name) for name in LIGHTNING_LOGGERS]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def turned_on(cfg: Mapping[str, Any]) -> dict[str, bool]:
    """What the run's Trainer will have on besides the node's arguments, as ``fit`` decides it:
    ``+trainer.barebones=true`` refuses each of them."""
    callbacks = cfg.get("callbacks") or {}
    bar = cfg["trainer"].get("enable_progress_bar", bool(callbacks.get("progress_bar")))
    return {
        "logger": bool(cfg.get("logger")),
        "enable_checkpointing": bool(callbacks.get("checkpoint")),
        "enable_progress_bar": bool(bar),
    }


def check_trainer_arguments(cfg: Mapping[str, Any], now: bool = False) -> None:
    """Build Lightning's Trainer from the ``trainer`` node's arguments: what it refuses is a
    ``UserError``. Imports Lightning (the run is about to, to train). Put off inside
    ``torch_checks_later`` unless ``now``."""
    if _later and not now:
        return
    import pytorch_lightning as pl

    arguments = {k: v for k, v in plain(cfg["trainer"]).items() if not str(k).startswith("_")}
    with silenced():
        try:
            pl.Trainer(**{**arguments, **turned_on(cfg), **SET_BY_THE_RUN})
        except Exception as err:
            refusal = lightning_refusal(err)
            if refusal is None:
                raise
            raise refusal from None


# Admission's Trainer check, put off while a sweep's jobs are admitted torch-free first.
_later: list[bool] = []


@contextlib.contextmanager
def torch_checks_later() -> Iterator[None]:
    """Admission's Lightning check (``check_trainer_arguments``) skipped inside: a sweep admits
    every job as far as the checks before torch go, so that a value refused there is answered
    without importing torch; it then runs the torch checks itself (``check_run_objects``)."""
    _later.append(True)
    try:
        yield
    finally:
        _later.pop()
