"""``train(cfg)``: the whole run as a plain function, callable from tests and from ``train.py``."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import Checkpoint
from pytorch_lightning.strategies import DDPStrategy

from multigpu.build import build
from multigpu.callbacks import DivergenceGuard, EpochTimer, HParamsSummary, MetricsFile
from multigpu.checkpoint_io import AtomicCheckpointIO
from multigpu.data.base import check_batch_divides
from multigpu.errors import Interrupted
from multigpu.resume import check_fits, resolve_ckpt_path
from multigpu.scaling import apply_scaling_rules, device_count
from multigpu.strategies import trainer_devices

log = logging.getLogger(__name__)


def run_settings(cfg: DictConfig, strategy_name: str) -> dict[str, Any]:
    """The settings a report compares runs by; stored in ``metrics.json`` under ``run``."""
    devices = OmegaConf.to_container(cfg.trainer, resolve=True)["devices"]
    return {
        "strategy": strategy_name,
        "devices": devices,
        "accelerator": cfg.trainer.accelerator,
        "num_nodes": cfg.trainer.get("num_nodes", 1),
        "batch_size": cfg.data.batch_size,
        "lr": cfg.model.optimizer.lr,
        "precision": str(cfg.trainer.get("precision", "32-true")),
        "width": cfg.model.net.get("width"),
        "norm": cfg.model.net.get("norm"),
        "max_epochs": cfg.trainer.get("max_epochs"),
        "seed": cfg.get("seed"),
        "data": cfg.data._target_.rsplit(".", 1)[-1],
    }


def build_strategy(cfg: DictConfig) -> tuple[str, Any]:
    """The ``strategy`` group holds a ``name`` and the ``_target_`` that builds it."""
    node = OmegaConf.to_container(cfg.strategy, resolve=True)
    name = node.pop("name")
    return name, build(node)


def resume_from(cfg: DictConfig, module: pl.LightningModule) -> str | None:
    """Resolve ``ckpt_path`` (``latest`` included) and check it fits, before any training."""
    ckpt_path = resolve_ckpt_path(cfg.get("ckpt_path"), cfg.paths.runs_dir, cfg.paths.output_dir)
    if ckpt_path is not None:
        net_config = OmegaConf.to_container(cfg.model.net, resolve=True)
        check_fits(ckpt_path, module.net, net_config)
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
    """Train and evaluate as configured; return the final metrics (also in ``metrics.json``)."""
    apply_scaling_rules(cfg)
    if cfg.get("seed") is not None:
        pl.seed_everything(cfg.seed, workers=True, verbose=False)
    output_dir = Path(cfg.paths.output_dir)

    strategy_name, strategy = build_strategy(cfg)
    if isinstance(strategy, DDPStrategy):
        check_batch_divides(cfg.data.batch_size, device_count(cfg))
    datamodule = build(cfg.data)
    module = build(cfg.model, _recursive_=False)
    ckpt_path = resume_from(cfg, module)
    if ckpt_path is not None:
        log.info("resuming from %s", ckpt_path)
    timer = EpochTimer()
    metrics = MetricsFile(output_dir / "metrics.json", run_settings(cfg, strategy_name))
    guard = DivergenceGuard(cfg.get("check_finite_every_n_steps", 10), output_dir / "checkpoints")
    callbacks = [build(c) for c in (cfg.get("callbacks") or {}).values() if c]
    logger = build(cfg.logger) if cfg.get("logger") else False

    trainer = build(
        cfg.trainer,
        strategy=strategy,
        devices=trainer_devices(strategy, cfg.trainer.accelerator, cfg.trainer.devices),
        callbacks=[timer, metrics, guard, HParamsSummary(metrics), *callbacks],
        plugins=[AtomicCheckpointIO()],
        enable_checkpointing=any(isinstance(c, Checkpoint) for c in callbacks),
        use_distributed_sampler=False,  # the data modules shard for DDP themselves
        logger=logger,
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
    return metrics.summary if trainer.is_global_zero else {}
