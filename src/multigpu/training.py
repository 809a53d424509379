"""``train(cfg)``: the whole run as a plain function, callable from tests and from ``train.py``.

Everything a mistake can be found from without torch is checked here first, before torch and
Lightning are imported (about a second from the command line): the config, resolved into a
``Run`` (``multigpu.settings``); ``ckpt_path``; the folders the run writes to. Then
``multigpu.fit`` trains. ``train`` owns the run's record: however the run ends,
``metrics.json`` says how, or the error line says that it could not.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from multigpu.atomic import check_writable
from multigpu.ckpt_path import resolve_ckpt_path
from multigpu.cli import hydra_runtime
from multigpu.errors import UserError, WriteFailed, add_note, message
from multigpu.outcome import COMPLETED, outcome_of
from multigpu.record import RunRecord
from multigpu.settings import Machine, Run, resolve_run

log = logging.getLogger(__name__)


def resolve(cfg: DictConfig) -> Run:
    """The run's settings, on this machine."""
    choices, multirun = hydra_runtime(cfg)
    return resolve_run(cfg, choices, Machine.this(multirun))


def output_folders(cfg: DictConfig, output_dir: Path) -> list[Path]:
    """The run's folder, and the checkpoints' folder when checkpoints are written."""
    checkpoint = (cfg.get("callbacks") or {}).get("checkpoint") or {}
    return [output_dir, *([Path(checkpoint["dirpath"])] if checkpoint.get("dirpath") else [])]


def start(record: RunRecord, cfg: DictConfig, output_dir: Path) -> None:
    """Write the record and check the checkpoints' folder: an unwritable folder is refused
    now, before any training."""
    try:
        record.set_history([])
        for folder in output_folders(cfg, output_dir)[1:]:
            check_writable(folder)
    except WriteFailed as err:
        raise UserError(f"{err}; nothing was trained: pass a writable hydra.run.dir") from None


def finish(record: RunRecord, error: BaseException) -> None:
    """Record how the run ended; if even that cannot be written, the error line says so."""
    try:
        record.finish(outcome_of(error))
    except WriteFailed as unwritten:
        if str(record.path) not in message(error):  # else the line already names it
            add_note(error, f"{record.path.name} could not be updated either ({unwritten})")


def train(cfg: DictConfig) -> dict[str, Any]:
    """Train and evaluate as configured; return the final record (also in ``metrics.json``)."""
    output_dir = Path(cfg.paths.output_dir)
    choices, _ = hydra_runtime(cfg)
    record = RunRecord(output_dir / "metrics.json", {"strategy": choices.get("strategy")})
    try:
        run = resolve(cfg)
        log.info(run.describe())
        record.run = run.record()
        ckpt_path = resolve_ckpt_path(cfg.get("ckpt_path"), cfg.paths.runs_dir, output_dir)
        start(record, cfg, output_dir)
        from multigpu.fit import fit  # torch and Lightning: only once the config is known good

        fit(cfg, run, record, output_dir, ckpt_path)
    except BaseException as error:
        finish(record, error)
        raise
    return record.finish(COMPLETED)
