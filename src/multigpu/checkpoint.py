"""Reading checkpoints safely: tensors and plain containers only, never pickled code, and no
constructor named by the file (its network settings go to our own network)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from multigpu.errors import UserError
from multigpu.module import ImageClassifier
from multigpu.outcome import summary_line

NET_PREFIX = "net."
NETWORK = "multigpu.models.resnet18"


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
        reason = summary_line(str(err))[:200] or type(err).__name__
        raise UserError(
            f"ckpt_path={path} is not a readable checkpoint ({reason}): "
            "pass a .ckpt file written by train.py"
        ) from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise UserError(f"ckpt_path={path} is not a Lightning checkpoint (no state_dict)")
    return checkpoint


def network_config(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The ``model.net`` settings the checkpoint was trained with: plain values only, without
    Hydra's keys, so nothing in the file chooses what gets built."""
    net = dict((checkpoint.get("hyper_parameters") or {}).get("net") or {})
    scalar = (type(None), bool, int, float, str)
    return {k: v for k, v in net.items() if not k.startswith("_") and isinstance(v, scalar)}


def network_state(checkpoint: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The network's own weights: the same keys under every strategy, no ``module.`` prefix."""
    state = checkpoint["state_dict"]
    return {k[len(NET_PREFIX) :]: v for k, v in state.items() if k.startswith(NET_PREFIX)}


def classifier(checkpoint: dict[str, Any]) -> ImageClassifier:
    """The checkpoint's network inside the module that trained it, ready to evaluate."""
    module = ImageClassifier(net={"_target_": NETWORK, **network_config(checkpoint)})
    module.net.load_state_dict(network_state(checkpoint))
    return module


def load_network(path: str | Path) -> nn.Module:
    """A plain ``torch.nn.Module`` with the checkpoint's weights, ready for inference."""
    return classifier(load_checkpoint(path)).net.eval()
