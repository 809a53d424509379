"""``train(cfg)``: the whole run as a plain function, callable from tests and from ``train.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf

from multigpu.build import build
from multigpu.callbacks import EpochTimer, HParamsSummary, MetricsFile
from multigpu.scaling import apply_scaling_rules
from multigpu.strategies import trainer_devices


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


def train(cfg: DictConfig) -> dict[str, Any]:
    """Train and evaluate as configured; return the final metrics (also in ``metrics.json``)."""
    apply_scaling_rules(cfg)
    if cfg.get("seed") is not None:
        pl.seed_everything(cfg.seed, workers=True, verbose=False)
    output_dir = Path(cfg.paths.output_dir)

    strategy_name, strategy = build_strategy(cfg)
    datamodule = build(cfg.data)
    module = build(cfg.model, _recursive_=False)
    timer = EpochTimer()
    metrics = MetricsFile(output_dir / "metrics.json", run_settings(cfg, strategy_name))
    callbacks = [build(c) for c in (cfg.get("callbacks") or {}).values() if c]
    logger = build(cfg.logger) if cfg.get("logger") else False

    trainer = build(
        cfg.trainer,
        strategy=strategy,
        devices=trainer_devices(strategy, cfg.trainer.accelerator, cfg.trainer.devices),
        callbacks=[timer, metrics, HParamsSummary(metrics), *callbacks],
        logger=logger,
        _convert_="all",
    )
    trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
    return metrics.summary if trainer.is_global_zero else {}
