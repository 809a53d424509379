"""Reading checkpoints safely: tensors and plain containers only, never pickled code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from multigpu.errors import UserError
from multigpu.models import resnet18

NET_PREFIX = "net."


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """``torch.load(weights_only=True)``: a checkpoint from an untrusted place cannot run code."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise UserError(
            f"ckpt_path={path} does not exist: pass a .ckpt file, "
            "e.g. outputs/<date>/<time>/checkpoints/last.ckpt"
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # unpickling fails in many ways; every one means "not readable"
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(
            f"ckpt_path={path} is not a readable checkpoint ({reason[:200]}): "
            "pass a .ckpt file written by train.py"
        ) from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise UserError(f"ckpt_path={path} is not a Lightning checkpoint (no state_dict)")
    return checkpoint


def network_config(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The ``model.net`` settings the checkpoint was trained with, without Hydra's keys."""
    net = dict((checkpoint.get("hyper_parameters") or {}).get("net") or {})
    return {k: v for k, v in net.items() if not k.startswith("_")}


def network_state(checkpoint: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The network's own weights: the same keys under every strategy, no ``module.`` prefix."""
    state = checkpoint["state_dict"]
    return {k[len(NET_PREFIX) :]: v for k, v in state.items() if k.startswith(NET_PREFIX)}


def load_network(path: str | Path) -> nn.Module:
    """A plain ``torch.nn.Module`` with the checkpoint's weights, ready for inference."""
    checkpoint = load_checkpoint(path)
    net = resnet18(**network_config(checkpoint))
    net.load_state_dict(network_state(checkpoint))
    return net.eval()
