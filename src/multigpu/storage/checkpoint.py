"""Reading checkpoints safely: tensors and plain containers only, never pickled code; no
constructor named by the file (its network settings go to our own network); contents checked
against the digest recorded when the file was written; the whole structure checked against
what train.py writes and Lightning reads (declared in ``checkpoint_model``), before any field is
used; and every way a file can fail to be one of ours said in one line.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from pydantic import ValidationError
from torch import nn

from multigpu.config.errors import as_override, summary_line
from multigpu.config.names import NETWORK
from multigpu.models import resnet18
from multigpu.storage.checkpoint_errors import EDITED, explain
from multigpu.storage.checkpoint_model import READ, RESUME, Checkpoint
from multigpu.storage.ckpt_path import PREVIOUS, SETTINGS, BadCheckpoint, checkpoint_file

if TYPE_CHECKING:
    from multigpu.models.classifier import ImageClassifier

NET_PREFIX = "net."
DIGEST = "multigpu_digest"  # the key the digest of the rest of the checkpoint is stored under
MAX_DEPTH = 32  # containers inside containers; a checkpoint of train.py nests 7 deep
MAX_VALUES = 200_000  # values visited (shared ones each time); train.py's hold a few hundred


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


def check_intact(checkpoint: Any, path: Path) -> None:
    """A checkpoint that records a digest must still match it (older ones record none)."""
    recorded = checkpoint.get(DIGEST) if isinstance(checkpoint, Mapping) else None
    if recorded is None:
        return
    try:
        actual = digest(checkpoint)
    except Exception as err:  # a value the digest cannot read (check_size refuses the known ones)
        raise BadCheckpoint(
            path,
            f"is not a readable checkpoint (its digest cannot be computed: {refusal(err)}): pass "
            "a .ckpt file written by train.py",
        ) from None
    if recorded == actual:
        return
    previous = path.with_name(PREVIOUS)
    kept = previous.is_file() and previous != path
    raise BadCheckpoint(
        path,
        "is damaged: its contents no longer match the digest written with it (a disk or copy "
        "error, or an edit)",
        "" if kept else NO_OLDER,
        previous=previous if kept else None,
    )


NO_OLDER = "this run keeps no older checkpoint; train again"


def check_size(checkpoint: Any, path: Path) -> None:
    """Nesting depth and the number of values bounded, walked without recursion: a deep or
    self-containing structure is refused in one line before anything recursive (the digest,
    Lightning) walks it; a sparse tensor too (train.py writes dense ones only), and a meta one
    (no values: every check of them would raise)."""
    stack, seen = [(checkpoint, 0)], 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if depth > MAX_DEPTH or seen > MAX_VALUES:
            what = (
                f"nests deeper than {MAX_DEPTH}" if depth > MAX_DEPTH else "holds too many values"
            )
            raise BadCheckpoint(
                path,
                f"is malformed: it {what} (a checkpoint of train.py nests 7 deep and holds a few "
                f"hundred values); {EDITED}",
            )
        if isinstance(value, torch.Tensor) and (value.layout != torch.strided or value.is_meta):
            kind = "meta" if value.is_meta else value.layout
            raise BadCheckpoint(
                path,
                f"is malformed: it holds a {kind} tensor (train.py writes dense ones, with their "
                f"values); {EDITED}",
            )
        if isinstance(value, Mapping):
            stack.extend((item, depth + 1) for pair in value.items() for item in pair)
        elif isinstance(value, (list, tuple, set, frozenset)):
            stack.extend((item, depth + 1) for item in value)


# Reading ----------------------------------------------------------------------------------------
def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """``torch.load(weights_only=True)``: a checkpoint from an untrusted place cannot run code;
    then bounded, compared with its digest, and checked whole before any field is used."""
    path = checkpoint_file(path)  # a regular file: a FIFO would block the read
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # unpickling fails in many ways (RecursionError included)
        code = re.search(r"GLOBAL (\S+)", str(err))
        if not starts_like_a_checkpoint(path):  # pickle's own complaint would mean nothing
            said = "is not a checkpoint (train.py writes a zip archive of tensors; this file is "
            said += "something else): pass a .ckpt file written by train.py"
        elif code:
            said = f"refused: it contains code ({code[1]}); a checkpoint written by train.py "
            said += "holds only tensors and plain values"
        else:
            said = f"is not a readable checkpoint ({refusal(err)}): pass a .ckpt file written by "
            said += "train.py"
        raise BadCheckpoint(path, said) from None
    check_size(checkpoint, path)  # before the digest, which walks the whole structure
    check_intact(checkpoint, path)
    validated(checkpoint, path)  # all of it, the weights' values too
    return checkpoint


def starts_like_a_checkpoint(path: Path) -> bool:
    """A zip archive (torch.save's format) or a pickle (torch's legacy one), by its first
    bytes."""
    try:
        with open(path, "rb") as file:
            head = file.read(4)
    except OSError:
        return True  # let the reader's own error say why
    return head.startswith((b"PK\x03\x04", b"\x80"))


def refusal(err: BaseException) -> str:
    """Why torch could not read the file, in a few words cut at a word: the unpickler's own
    reason rather than the advice around it (which suggests ``weights_only=False``)."""
    text = str(err)
    found = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\n\s*\n|$)", text, re.DOTALL)
    reason = " ".join((found[1] if found else summary_line(text)).split())
    if " " not in reason:  # a bare key or number (KeyError: 1149) says little alone
        reason = f"{type(err).__name__}: {reason}" if reason else type(err).__name__
    return textwrap.shorten(reason, 200, placeholder="...")


def validated(checkpoint: Any, path: str | Path, purpose: str | None = None) -> Checkpoint:
    """The checkpoint through its declaration (``purpose``: its validation context), or one
    line naming the file and the first rule it breaks."""
    try:
        return Checkpoint.model_validate(checkpoint, context=purpose)
    except ValidationError as err:
        raise BadCheckpoint(path, explain(err)) from None


def read(checkpoint: dict[str, Any]) -> Checkpoint:
    """The values of a checkpoint ``load_checkpoint`` returned (the weights are not scanned
    again)."""
    return Checkpoint.model_validate(checkpoint, context=READ)


# What a resume reads (of a checkpoint load_checkpoint returned) ---------------------------------
def check_resumable(path: str | Path, checkpoint: dict[str, Any]) -> None:
    """Training continues from a checkpoint only with all of its training state."""
    validated(checkpoint, path, RESUME)


def epoch_history(checkpoint: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The run's history (one entry per finished epoch), if the checkpoint carries one."""
    history = read(checkpoint).history
    return None if history is None else [epoch.model_dump() for epoch in history]


def finished_epochs(checkpoint: dict[str, Any]) -> int:
    """Epochs the checkpoint's run had finished (``Checkpoint.finished_epochs``)."""
    return read(checkpoint).finished_epochs


def stored_settings(checkpoint: dict[str, Any]) -> dict[str, Any] | None:
    """The settings the checkpoint's run was trained with (``None``: written by a version
    that did not record them), as ``load_checkpoint`` checked them: one value, read without
    validating the whole checkpoint again."""
    return checkpoint.get(SETTINGS)


def network_config(checkpoint: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """The ``model.net`` settings the checkpoint was trained with: plain values our network
    takes, nothing else, so nothing in the file chooses what gets built."""
    net = read(checkpoint).hyper_parameters.net
    config = {k: v for k, v in net.items() if not k.startswith("_")}
    known = inspect.signature(resnet18).parameters
    unknown = [f"{k}={v!r}" for k, v in config.items() if k not in known]
    if unknown:
        raise BadCheckpoint(
            path,
            f"has network settings this network does not take ({', '.join(unknown)}): it was "
            "not written by this version of train.py",
        )
    return config


def network_state(checkpoint: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The network's own weights: the same keys under every strategy, no ``module.`` prefix."""
    state = read(checkpoint).state_dict
    return {k[len(NET_PREFIX) :]: v for k, v in state.items() if k.startswith(NET_PREFIX)}


# Fitting a built network ------------------------------------------------------------------------
def check_fits(
    path: str | Path,
    checkpoint: dict[str, Any],
    net: nn.Module,
    configured: dict[str, Any],
    hint: str | None = None,
) -> None:
    """Raise a one-line ``BadCheckpoint`` naming the first parameter whose name or shape differs
    between the checkpoint and ``net``, built from the ``configured`` settings."""
    saved, expected = network_state(checkpoint), net.state_dict()
    trained = network_config(checkpoint, path)
    fix = [
        f"model.net.{k}={as_override(trained[k])}"
        for k in sorted(set(trained) & set(configured))
        if trained[k] != configured[k]
    ]
    if hint is None:
        hint = f"it was trained with {' '.join(fix)}" if fix else "use its training settings"
    for name, tensor in expected.items():
        if name not in saved:
            said = f"has no parameter {name!r}: it is not a checkpoint of this network"
        elif tuple(saved[name].shape) != tuple(tensor.shape):
            said = (
                f"does not fit this network: parameter {name!r} has shape "
                f"{list(saved[name].shape)} in the checkpoint and {list(tensor.shape)} here"
            )
        else:
            continue
        raise BadCheckpoint(path, said, hint)
    extra = sorted(set(saved) - set(expected))
    if extra:
        raise BadCheckpoint(path, f"has parameter {extra[0]!r} that this network lacks", hint)
    check_optimizer_fits(path, checkpoint, net)


def check_optimizer_fits(path: str | Path, checkpoint: dict[str, Any], net: nn.Module) -> None:
    """The optimizer state is for this network's parameters, in the order the module gives
    them to its optimizer: as many, momentum and moments of each one's shape (else torch
    fails at the first step). Called once the weights fit, so a mismatch means an edit."""
    from multigpu.models.classifier import parameter_groups  # Lightning: once the file passed

    grouped = (stored_settings(checkpoint) or {}).get("model.weight_decay_on", "all")
    groups = parameter_groups(net, grouped)
    shapes = [list(p.shape) for group in groups for p in group["params"]]
    for i, state in enumerate(read(checkpoint).optimizer_states or []):
        count = sum(len(group.params) for group in state.param_groups)
        if count != len(shapes):
            said = f"holds optimizer state for {count} parameters and its network has {len(shapes)}"
            raise BadCheckpoint(path, f"{said}; {EDITED}")
        for number, values in state.state.items():
            for name, value in values.shaped().items():
                if list(value.shape) != shapes[number]:
                    raise BadCheckpoint(
                        path,
                        f"has optimizer_states[{i}].state[{number}].{name} of shape "
                        f"{list(value.shape)} for a parameter of shape {shapes[number]}; {EDITED}",
                    )


# Building ---------------------------------------------------------------------------------------
def network(checkpoint: dict[str, Any], path: str | Path) -> nn.Module:
    """The checkpoint's network with its weights, built from its stored settings and checked
    against them; torch alone, so that a file refused here is refused before Lightning loads."""
    config = network_config(checkpoint, path)
    try:
        net = resnet18(**config)
    except Exception as err:  # the network refused a value: say which, in one line
        cause = err.__cause__ or err
        raise BadCheckpoint(path, f"has network settings that do not build: {cause}") from None
    own = "its weights do not match its own network settings: train.py did not write it"
    check_fits(path, checkpoint, net, config, hint=own)
    net.load_state_dict(network_state(checkpoint))
    return net


def classifier(
    checkpoint: dict[str, Any], path: str | Path, net: nn.Module | None = None
) -> ImageClassifier:
    """The checkpoint's network inside the module that trained it, ready to evaluate the way
    training did (with the mirror images too, if its run set ``model.tta_flip``); ``net``: its
    ``network()``, when that was already built and checked."""
    net = net if net is not None else network(checkpoint, path)
    from multigpu.models.classifier import ImageClassifier  # Lightning: once the file passed

    tta_flip = (stored_settings(checkpoint) or {}).get("model.tta_flip") is True
    config = network_config(checkpoint, path)
    module = ImageClassifier(net={"_target_": NETWORK, **config}, tta_flip=tta_flip)
    module.net.load_state_dict(net.state_dict())
    return module


def load_network(path: str | Path) -> nn.Module:
    """A plain ``torch.nn.Module`` with the checkpoint's weights, ready for inference."""
    return network(load_checkpoint(path), path).eval()
