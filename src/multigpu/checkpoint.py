"""Reading checkpoints safely: tensors and plain containers only, never pickled code; no
constructor named by the file (its network settings go to our own network); contents checked
against the digest recorded when the file was written; and every way a file can fail to be
one of ours said in one line.
"""

from __future__ import annotations

import hashlib
import inspect
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from multigpu.ckpt_path import PREVIOUS, checkpoint_file
from multigpu.errors import UserError
from multigpu.models import resnet18
from multigpu.module import ImageClassifier
from multigpu.outcome import summary_line

NET_PREFIX = "net."
NETWORK = "multigpu.models.resnet18"
DIGEST = "multigpu_digest"  # the key the digest of the rest of the checkpoint is stored under
# What Lightning needs to continue training from a checkpoint, beyond the weights.
TRAINING_STATE = ("optimizer_states", "loops", "epoch", "global_step")


# Integrity --------------------------------------------------------------------------------------
def digest(checkpoint: Mapping[str, Any]) -> str:
    """BLAKE2b of every tensor's bytes, dtype and shape and every other value, in a fixed order:
    a flipped byte anywhere in the contents changes it. Computed when Lightning hands a
    checkpoint over for saving, and again when one is read."""
    hasher = hashlib.blake2b(digest_size=32)

    def add(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            flat = value.detach().reshape(-1).contiguous().cpu()
            hasher.update(f"tensor {flat.dtype} {tuple(value.shape)};".encode())
            hasher.update(flat.view(torch.uint8).numpy().data)
        elif isinstance(value, Mapping):
            keys = sorted((k for k in value if k != DIGEST), key=repr)
            hasher.update(f"map {len(keys)};".encode())
            for key in keys:
                hasher.update(f"{key!r}:".encode())
                add(value[key])
        elif isinstance(value, (list, tuple)):
            hasher.update(f"seq {len(value)};".encode())
            for item in value:
                add(item)
        else:
            hasher.update(f"{type(value).__name__} {value!r};".encode())

    add(checkpoint)
    return hasher.hexdigest()


def check_intact(checkpoint: Mapping[str, Any], path: Path) -> None:
    """A checkpoint that records a digest must still match it (older ones record none)."""
    recorded = checkpoint.get(DIGEST)
    if recorded is None or recorded == digest(checkpoint):
        return
    previous = path.with_name(PREVIOUS)
    older = (
        f"use the one before it, ckpt_path={previous}"
        if previous.is_file() and previous != path
        else "this run keeps no older checkpoint; train again"
    )
    raise UserError(
        f"ckpt_path={path} is damaged: its contents no longer match the digest written with "
        f"it (a disk or copy error, or an edit); {older}"
    )


# Reading ----------------------------------------------------------------------------------------
def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """``torch.load(weights_only=True)``: a checkpoint from an untrusted place cannot run code."""
    path = checkpoint_file(path)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # unpickling fails in many ways; every one means "not readable"
        code = re.search(r"GLOBAL (\S+)", str(err))
        if code:
            raise UserError(
                f"ckpt_path={path} refused: it contains code ({code[1]}); a checkpoint written "
                "by train.py holds only tensors and plain values"
            ) from None
        reason = summary_line(str(err))[:200] or type(err).__name__
        raise UserError(
            f"ckpt_path={path} is not a readable checkpoint ({reason}): "
            "pass a .ckpt file written by train.py"
        ) from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        bare = isinstance(checkpoint, dict) and all(
            isinstance(v, torch.Tensor) for v in checkpoint.values()
        )
        what = "a bare state_dict of tensors" if bare else f"a {type(checkpoint).__name__}"
        raise UserError(
            f"ckpt_path={path} is {what}, not a checkpoint written by train.py (no state_dict)"
        )
    check_intact(checkpoint, path)
    return checkpoint


def network_config(checkpoint: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """The ``model.net`` settings the checkpoint was trained with: plain values our network
    takes, nothing else, so nothing in the file chooses what gets built."""
    net = (checkpoint.get("hyper_parameters") or {}).get("net")
    if not isinstance(net, dict):
        raise UserError(
            f"ckpt_path={path} records no network settings (hyper_parameters.net): "
            "it was not written by train.py"
        )
    config = {k: v for k, v in net.items() if not k.startswith("_")}
    known = inspect.signature(resnet18).parameters
    unknown = [f"{k}={v!r}" for k, v in config.items() if k not in known]
    plain = (type(None), bool, int, float, str)
    unknown += [f"{k}={v!r}" for k, v in config.items() if not isinstance(v, plain)]
    if unknown:
        raise UserError(
            f"ckpt_path={path} has network settings this network does not take "
            f"({', '.join(unknown)}): it was not written by this version of train.py"
        )
    return config


def network_state(checkpoint: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The network's own weights: the same keys under every strategy, no ``module.`` prefix."""
    state = checkpoint["state_dict"]
    return {k[len(NET_PREFIX) :]: v for k, v in state.items() if k.startswith(NET_PREFIX)}


# Fitting ----------------------------------------------------------------------------------------
def _differences(trained: dict[str, Any], configured: dict[str, Any]) -> list[str]:
    keys = sorted(set(trained) & set(configured))
    text = {None: "null", True: "true", False: "false"}
    return [
        f"model.net.{k}={text.get(trained[k], trained[k])}"
        for k in keys
        if trained[k] != configured[k]
    ]


def check_fits(
    path: str | Path,
    checkpoint: dict[str, Any],
    net: nn.Module,
    configured: dict[str, Any],
    hint: str | None = None,
) -> None:
    """Raise a one-line ``UserError`` naming the first parameter whose name or shape differs
    between the checkpoint and ``net``, built from the ``configured`` settings."""
    saved = network_state(checkpoint)
    expected = net.state_dict()
    fix = _differences(network_config(checkpoint, path), configured)
    if hint is None:
        hint = f"it was trained with {' '.join(fix)}" if fix else "use its training settings"
    for name, tensor in expected.items():
        if name not in saved:
            raise UserError(
                f"ckpt_path={path} has no parameter {name!r}: it is not a checkpoint of "
                f"this network; {hint}"
            )
        if tuple(saved[name].shape) != tuple(tensor.shape):
            raise UserError(
                f"ckpt_path={path} does not fit this network: parameter {name!r} has "
                f"shape {list(saved[name].shape)} in the checkpoint and {list(tensor.shape)} "
                f"here; {hint}"
            )
    extra = sorted(set(saved) - set(expected))
    if extra:
        raise UserError(
            f"ckpt_path={path} has parameter {extra[0]!r} that this network lacks; {hint}"
        )


def check_resumable(path: str | Path, checkpoint: dict[str, Any]) -> None:
    """Training continues from a checkpoint only with its optimizer and loop state."""
    missing = [key for key in TRAINING_STATE if key not in checkpoint]
    if missing:
        raise UserError(
            f"ckpt_path={path} holds weights but no training state ({', '.join(missing)}): "
            "training cannot continue from it; eval.py can still evaluate it"
        )


# Building ---------------------------------------------------------------------------------------
def classifier(checkpoint: dict[str, Any], path: str | Path) -> ImageClassifier:
    """The checkpoint's network inside the module that trained it, ready to evaluate."""
    config = network_config(checkpoint, path)
    try:
        module = ImageClassifier(net={"_target_": NETWORK, **config})
    except Exception as err:  # the network refused a value: say which, in one line
        cause = err.__cause__ or err
        raise UserError(
            f"ckpt_path={path} has network settings that do not build: {cause}"
        ) from None
    own = "its weights do not match its own network settings: train.py did not write it"
    check_fits(path, checkpoint, module.net, config, hint=own)
    module.net.load_state_dict(network_state(checkpoint))
    return module


def load_network(path: str | Path) -> nn.Module:
    """A plain ``torch.nn.Module`` with the checkpoint's weights, ready for inference."""
    return classifier(load_checkpoint(path), path).net.eval()
