"""``evaluate(cfg)``: test accuracy of a checkpoint, through the module's own test step.

The network is rebuilt from the checkpoint's stored settings (never from code in the file) and
evaluated by Lightning's test loop on one device, the first of ``trainer.devices``, so that
evaluation during training and here are the same computation.
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf

from multigpu.build import build
from multigpu.checkpoint import classifier, load_checkpoint
from multigpu.errors import UserError
from multigpu.settings import parse_accelerator, parse_devices, plain


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    if OmegaConf.is_missing(cfg, "ckpt_path"):
        raise UserError(
            "ckpt_path is required: python eval.py ckpt_path=<run>/checkpoints/last.ckpt"
        )
    checkpoint = load_checkpoint(cfg.ckpt_path)
    module = classifier(checkpoint)
    data = plain(cfg.data)
    data.pop("batch_size_per_device", None)  # a training-time scaling rule
    if data.get("normalize", "absent") is None:
        trained_with = checkpoint.get("datamodule_hyper_parameters") or {}
        data["normalize"] = trained_with.get("normalize", True)
    datamodule = build(data)

    cuda_devices = torch.cuda.device_count()
    accelerator = parse_accelerator(cfg.trainer.accelerator, cuda_devices)
    device = parse_devices(plain(cfg.trainer.devices), cuda_devices)[0]
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices=[device] if accelerator == "cuda" else 1,
        precision=cfg.trainer.precision,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
    )
    (result,) = trainer.test(module, datamodule=datamodule, verbose=False)
    return {
        "test_acc": result["test/acc"],
        "samples": len(datamodule.test_set),
        "epochs_trained": checkpoint.get("epoch"),
    }
