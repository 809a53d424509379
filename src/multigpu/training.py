"""``train(cfg)``: the whole run as a plain function, callable from tests and from ``train.py``.

Everything a mistake can be found from without torch is checked here first, before torch and
Lightning are imported (about a second from the command line): the config, resolved into a
``Run`` (``multigpu.settings``); ``ckpt_path``; the folders the run writes to. Then
``multigpu.fit`` trains. ``train`` owns the run's record: however the run ends,
``metrics.json`` says how, or the error line says that it could not.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from multigpu.atomic import check_writable
from multigpu.ckpt_path import LAST, resolve_ckpt_path
from multigpu.cli import hydra_runtime
from multigpu.errors import OccupiedFolder, UserError, WriteFailed, add_note, message
from multigpu.launch import restart_count
from multigpu.outcome import COMPLETED, outcome_of
from multigpu.record import RunRecord
from multigpu.settings import Machine, Run, plain, resolve_run

log = logging.getLogger(__name__)
# Where the run reads and writes and what it records besides, not what it computes: left out of
# the config's digest.
PLACES = ("hydra", "paths", "ckpt_path", "logger", "callbacks", "phases")
PLACES_IN = {
    "data": ("root", "source", "download", "num_workers"),
    "trainer": ("default_root_dir",),
}
FINISHED = ("completed", "diverged")  # running them again would give the same


def resolve(cfg: DictConfig) -> Run:
    """The run's settings, on this machine."""
    choices, multirun = hydra_runtime(cfg)
    return resolve_run(cfg, choices, Machine.this(multirun))


def output_folders(cfg: DictConfig, output_dir: Path) -> list[Path]:
    """The run's folder, and the checkpoints' folder when checkpoints are written."""
    checkpoint = (cfg.get("callbacks") or {}).get("checkpoint") or {}
    return [output_dir, *([Path(checkpoint["dirpath"])] if checkpoint.get("dirpath") else [])]


def config_digest(cfg: DictConfig) -> str:
    """What makes two runs in one folder the same job: the resolved config, without where it
    reads and writes."""
    node = {key: plain(cfg[key]) for key in cfg if key not in PLACES}
    for group, keys in PLACES_IN.items():
        node[group] = {k: v for k, v in node.get(group, {}).items() if k not in keys}
    return hashlib.sha256(json.dumps(node, sort_keys=True, default=str).encode()).hexdigest()[:16]


def continuation(record: RunRecord, multirun: bool) -> dict | Path | None:
    """A job run again in its own folder (a sweep re-run over the same ``hydra.sweep.dir``, a
    launcher's restart: torchrun's elastic restart, a SLURM requeue) continues: the earlier
    record when that job had finished (the job is skipped), else its last checkpoint, if any."""
    previous = record.read()
    restarted = restart_count(os.environ) > 0
    if previous is None or previous.get("config") is None or not (multirun or restarted):
        return None  # nothing ran here, or it stopped before its settings were known
    if previous.get("config") != record.config:
        if restarted:
            return None
        raise OccupiedFolder(
            f"{record.path.parent} holds a job with other settings (metrics.json): re-run a "
            "sweep with the overrides it was started with, or pass another hydra.sweep.dir"
        )
    if previous.get("status") in FINISHED:
        return previous
    last = record.path.parent / "checkpoints" / LAST
    if last.is_file():
        record.history = previous.get("history", [])
        return last
    return None


def start(record: RunRecord, cfg: DictConfig, output_dir: Path) -> None:
    """Write the record and check the checkpoints' folder: an unwritable folder is refused
    now, before any training."""
    try:
        record.set_history(record.history)
        for folder in output_folders(cfg, output_dir)[1:]:
            check_writable(folder)
    except WriteFailed as err:
        raise UserError(f"{err}; nothing was trained: pass a writable hydra.run.dir") from None


def finish(record: RunRecord, error: BaseException) -> None:
    """Record how the run ended; if even that cannot be written, the error line says so."""
    if isinstance(error, OccupiedFolder):
        return  # the record there is another job's
    try:
        record.finish(outcome_of(error))
    except WriteFailed as unwritten:
        if str(record.path) not in message(error):  # else the line already names it
            add_note(error, f"{record.path.name} could not be updated either ({unwritten})")


def train(cfg: DictConfig) -> dict[str, Any]:
    """Train and evaluate as configured; return the final record (also in ``metrics.json``)."""
    output_dir = Path(cfg.paths.output_dir)
    choices, multirun = hydra_runtime(cfg)
    record = RunRecord(output_dir / "metrics.json", {"strategy": choices.get("strategy")})
    try:
        run = resolve(cfg)
        log.info(run.describe())
        record.run, record.config = run.record(), config_digest(cfg)
        ckpt_path = resolve_ckpt_path(cfg.get("ckpt_path"), cfg.paths.runs_dir)
        earlier = continuation(record, multirun) if ckpt_path is None else None
        if isinstance(earlier, dict):
            log.info("this job already ran to the end in %s (%s): skipped", output_dir,
                     earlier["status"])  # fmt: skip
            return earlier
        if earlier is not None:
            log.info("continuing this job from its own checkpoint %s", earlier)
            ckpt_path = earlier
        start(record, cfg, output_dir)
        from multigpu.fit import fit  # torch and Lightning: only once the config is known good

        fit(cfg, run, record, output_dir, ckpt_path)
    except BaseException as error:
        finish(record, error)
        raise
    return record.finish(COMPLETED)
