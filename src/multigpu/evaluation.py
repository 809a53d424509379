"""``evaluate(cfg)``: test accuracy of a checkpoint, with no Trainer and no pickled code."""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from multigpu.build import build
from multigpu.checkpoint import load_checkpoint, network_config, network_state
from multigpu.errors import UserError
from multigpu.models import resnet18
from multigpu.strategies.devices import resolve_accelerator


@torch.no_grad()
def accuracy(net: torch.nn.Module, loader, device: torch.device) -> tuple[float, int]:
    correct = total = 0
    for images, labels in loader:
        predicted = net(images.to(device)).argmax(dim=1).cpu()
        correct += int((predicted == labels).sum())
        total += labels.numel()
    return correct / max(total, 1), total


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    if OmegaConf.is_missing(cfg, "ckpt_path"):
        raise UserError(
            "ckpt_path is required: python eval.py ckpt_path=<run>/checkpoints/last.ckpt"
        )
    checkpoint = load_checkpoint(cfg.ckpt_path)
    data_cfg = OmegaConf.to_container(cfg.data, resolve=True)
    data_cfg.pop("batch_size_per_device", None)  # a training-time scaling rule
    if data_cfg.get("normalize", "absent") is None:
        trained_with = checkpoint.get("datamodule_hyper_parameters") or {}
        data_cfg["normalize"] = trained_with.get("normalize", True)
    datamodule = build(data_cfg)
    datamodule.setup("test")

    device = torch.device(resolve_accelerator(cfg.accelerator))
    net = resnet18(**network_config(checkpoint))
    net.load_state_dict(network_state(checkpoint))
    net.to(device).eval()
    test_acc, samples = accuracy(net, datamodule.test_dataloader(), device)
    return {"test_acc": test_acc, "samples": samples, "epochs_trained": checkpoint.get("epoch")}
