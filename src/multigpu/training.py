"""``train(cfg)``: the whole run as a plain function, callable from tests and from ``train.py``.

The config is resolved once into a ``Run`` (``multigpu.settings``); everything below is built
from it. ``train`` owns the run's record: whatever ends the run, ``metrics.json`` says how.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig
from pytorch_lightning.callbacks import Checkpoint
from pytorch_lightning.strategies import Strategy

from multigpu.build import build
from multigpu.callbacks import DivergenceGuard, EpochHistory, EpochTimer, HParamsSummary
from multigpu.checkpoint_io import AtomicCheckpointIO
from multigpu.cli import hydra_runtime
from multigpu.errors import Interrupted
from multigpu.module import ImageClassifier
from multigpu.outcome import COMPLETED, outcome_of
from multigpu.record import RunRecord
from multigpu.resume import check_fits, resolve_ckpt_path
from multigpu.settings import IN_PROCESS, ONE_DEVICE, Machine, Run, plain, resolve_run

log = logging.getLogger(__name__)


def resolve(cfg: DictConfig) -> Run:
    """The run's settings, on this machine."""
    choices, multirun = hydra_runtime(cfg)
    machine = Machine(
        cuda_devices=torch.cuda.device_count(),
        cpu_cores=os.cpu_count() or 1,
        environ=dict(os.environ),
        multirun=multirun,
    )
    return resolve_run(cfg, choices, machine)


def build_strategy(node: DictConfig, run: Run) -> Strategy:
    """The ``strategy`` group's class with the run's devices: Lightning's single-device
    strategy takes one, ours a list; for DDP, Lightning places one process per device."""
    devices = [torch.device(d) for d in run.torch_devices]
    if run.placement == ONE_DEVICE:
        return build(node, device=devices[0])
    if run.placement == IN_PROCESS:
        return build(node, parallel_devices=devices)
    return build(node, start_method=run.start_method)


def build_module(node: DictConfig, run: Run) -> ImageClassifier:
    """The model group as configured, with the learning rate the run resolved."""
    model = plain(node)
    model.pop("lr_scaling", None)  # already applied: run.lr
    model["optimizer"]["lr"] = run.lr
    return build(model, _recursive_=False)


def build_datamodule(node: DictConfig, run: Run) -> pl.LightningDataModule:
    """The data group as configured, loading the share of the global batch each process loads."""
    data = plain(node)
    data.pop("batch_size_per_device", None)  # already applied: run.batch_size
    data["batch_size"] = run.process_batch_size
    return build(data)


def resume_from(cfg: DictConfig, module: ImageClassifier) -> str | None:
    """Resolve ``ckpt_path`` (``latest`` included) and check it fits, before any training."""
    ckpt_path = resolve_ckpt_path(cfg.get("ckpt_path"), cfg.paths.runs_dir, cfg.paths.output_dir)
    if ckpt_path is not None:
        check_fits(ckpt_path, module.net, plain(cfg.model.net))
        log.info("resuming from %s", ckpt_path)
    return ckpt_path


def interrupted(signum: signal.Signals, output_dir: Path) -> Interrupted:
    last = output_dir / "checkpoints" / "last.ckpt"
    resume = (
        f"resume with ckpt_path={last} (or ckpt_path=latest)"
        if last.is_file()
        else "no epoch had finished, so there is no checkpoint to resume"
    )
    return Interrupted(f"interrupted by {signum.name}; {resume}", exit_code=128 + signum)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Train and evaluate as configured; return the final record (also in ``metrics.json``)."""
    output_dir = Path(cfg.paths.output_dir)
    choices, _ = hydra_runtime(cfg)
    record = RunRecord(output_dir / "metrics.json", {"strategy": choices.get("strategy")})
    try:
        run = resolve(cfg)
        log.info(run.describe())
        record.run = run.record()
        record.set_history([])
        fit(cfg, run, record, output_dir)
    except BaseException as error:
        record.finish(outcome_of(error))
        raise
    return record.finish(COMPLETED)


def fit(cfg: DictConfig, run: Run, record: RunRecord, output_dir: Path) -> None:
    if run.seed is not None:
        pl.seed_everything(run.seed, workers=True, verbose=False)
    strategy = build_strategy(cfg.strategy, run)
    datamodule = build_datamodule(cfg.data, run)
    module = build_module(cfg.model, run)
    ckpt_path = resume_from(cfg, module)
    callbacks = [build(c) for c in (cfg.get("callbacks") or {}).values() if c]
    trainer = build(
        cfg.trainer,
        accelerator=run.accelerator,
        devices=run.trainer_devices,
        num_nodes=run.num_nodes,
        strategy=strategy,
        callbacks=[
            EpochTimer(),
            EpochHistory(record),
            DivergenceGuard(cfg.check_finite_every_n_steps, output_dir / "checkpoints"),
            HParamsSummary(record),
            *callbacks,
        ],
        plugins=[AtomicCheckpointIO()],
        enable_checkpointing=any(isinstance(c, Checkpoint) for c in callbacks),
        use_distributed_sampler=False,  # the data modules shard for DDP themselves
        logger=build(cfg.logger) if cfg.get("logger") else False,
        _convert_="all",
    )
    sigint_handler = signal.getsignal(signal.SIGINT)  # Lightning ignores Ctrl-C after one
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    except SystemExit:  # Lightning's answer to Ctrl-C (exit 1) and to SIGTERM (SIGTERMException)
        if not trainer.interrupted:
            raise
        signum = signal.SIGTERM if trainer.received_sigterm else signal.SIGINT
        raise interrupted(signum, output_dir) from None
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, sigint_handler)
