"""Scaling rules: the global batch from a per-device batch, and the linear learning-rate rule.

With both, one sweep over ``trainer.devices`` alone reproduces the usual paired comparison
(1 device: batch 256, lr 0.1; 2 devices: batch 512, lr 0.2).
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf, open_dict

from multigpu.errors import UserError
from multigpu.strategies.devices import device_ids

LR_RULES = ("none", "linear")


def device_count(cfg: DictConfig) -> int:
    """Devices per node times nodes: the factor the global batch grows with."""
    devices = OmegaConf.to_container(cfg.trainer, resolve=True)["devices"]
    return len(device_ids(devices)) * int(cfg.trainer.get("num_nodes", 1) or 1)


def apply_scaling_rules(cfg: DictConfig) -> None:
    """Rewrite ``data.batch_size`` and ``model.optimizer.lr`` in place where a rule asks."""
    per_device = cfg.data.get("batch_size_per_device")
    rule = cfg.model.get("lr_scaling", {}).get("rule", "none") or "none"
    if rule not in LR_RULES:
        raise UserError(f"model.lr_scaling.rule={rule!r} is not known: use none or linear")
    with open_dict(cfg):
        if per_device is not None:
            if isinstance(per_device, bool) or not isinstance(per_device, int) or per_device <= 0:
                raise UserError(
                    f"data.batch_size_per_device={per_device!r} must be a positive integer "
                    "(or null to use data.batch_size)"
                )
            cfg.data.batch_size = per_device * device_count(cfg)
        cfg.data.pop("batch_size_per_device", None)
        if rule == "linear":
            base_batch = cfg.model.lr_scaling.base_batch
            scaled = cfg.model.optimizer.lr * cfg.data.batch_size / base_batch
            cfg.model.optimizer.lr = round(scaled, 12)  # 0.1 * 3 is 0.3, not 0.30000000000000004
        cfg.model.pop("lr_scaling", None)
