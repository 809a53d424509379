"""Reading checkpoints safely: tensors and plain containers only, never pickled code; no
constructor named by the file (its network settings go to our own network); contents checked
against the digest recorded when the file was written; the whole structure checked against
what train.py writes and Lightning reads, before any field is used; and every way a file can
fail to be one of ours said in one line.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from packaging.version import InvalidVersion, Version
from torch import nn

from multigpu.config.errors import UserError
from multigpu.models import resnet18
from multigpu.storage.ckpt_path import PREVIOUS, SETTINGS, checkpoint_file
from multigpu.storage.outcome import summary_line

if TYPE_CHECKING:
    from multigpu.models.classifier import ImageClassifier

NET_PREFIX = "net."
NETWORK = "multigpu.models.resnet18"
DIGEST = "multigpu_digest"  # the key the digest of the rest of the checkpoint is stored under
VERSION = "pytorch-lightning_version"
HISTORY = "EpochHistory"  # the callback whose state holds the run's history
# What Lightning needs to continue training from a checkpoint, beyond the weights.
TRAINING_STATE = ("optimizer_states", "loops", "epoch", "global_step")
RESUME_STATE = (*TRAINING_STATE, "lr_schedulers", "callbacks", VERSION)
OLDEST_LIGHTNING = Version("2.4")  # the oldest this project wrote (pyproject: >=2.4)
MAX_DEPTH = 32  # containers inside containers; a checkpoint of train.py nests 7 deep
MAX_VALUES = 200_000  # values visited (shared ones each time); train.py's hold a few hundred
REASON_CHARS = 200  # of torch's own refusal


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
    if recorded is None:
        return
    try:
        actual = digest(checkpoint)
    except Exception as err:  # a value the digest cannot read (check_size refuses the known ones)
        raise UserError(
            f"ckpt_path={path} is not a readable checkpoint (its digest cannot be computed: "
            f"{refusal(err)}): pass a .ckpt file written by train.py"
        ) from None
    if recorded == actual:
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
    """``torch.load(weights_only=True)``: a checkpoint from an untrusted place cannot run code;
    then the whole structure is checked (``check_structure``) before any field is used."""
    path = checkpoint_file(path)  # a regular file: a FIFO would block the read
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # unpickling fails in many ways (RecursionError included)
        if not starts_like_a_checkpoint(path):  # pickle's own complaint would mean nothing
            raise UserError(
                f"ckpt_path={path} is not a checkpoint (train.py writes a zip archive of "
                "tensors; this file is something else): pass a .ckpt file written by train.py"
            ) from None
        code = re.search(r"GLOBAL (\S+)", str(err))
        if code:
            raise UserError(
                f"ckpt_path={path} refused: it contains code ({code[1]}); a checkpoint written "
                "by train.py holds only tensors and plain values"
            ) from None
        raise UserError(
            f"ckpt_path={path} is not a readable checkpoint ({refusal(err)}): "
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
    check_size(checkpoint, path)  # before the digest, which walks the whole structure
    check_intact(checkpoint, path)
    check_structure(checkpoint, path)
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
    """Why torch could not read the file, in a few words: the unpickler's own reason rather
    than the advice around it (which suggests ``weights_only=False``)."""
    text = str(err)
    found = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\n\s*\n|$)", text, re.DOTALL)
    reason = " ".join((found[1] if found else summary_line(text)).split())
    if " " not in reason:  # a bare key or number (KeyError: 1149) says little alone
        reason = f"{type(err).__name__}: {reason}" if reason else type(err).__name__
    return clip(reason)


def clip(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` whole if short, else cut at a word boundary with an ellipsis: a reason is read,
    so it never ends mid-word."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 3]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "..."


# Structure --------------------------------------------------------------------------------------
class Malformed(Exception):
    """A place where the checkpoint differs from what train.py writes; ``check_structure`` says
    it in one line that names the file."""


INT, BOOL, ANY_DICT = "int", "bool", "dict"  # leaves of the loop-state templates below
READY_COMPLETED = {"ready": INT, "completed": INT}
STARTED = {"ready": INT, "started": INT, "completed": INT}
PROCESSED = {"ready": INT, "started": INT, "processed": INT, "completed": INT}


def progress(tracker: dict[str, str]) -> dict[str, Any]:
    return {"total": tracker, "current": tracker}


BATCH_PROGRESS = {**progress(PROCESSED), "is_last_batch": BOOL}
# What Lightning restores of ``loops.fit_loop`` (pytorch_lightning.loops, 2.4 to 2.6): the
# epoch count, the step count, the restart stage; every key train.py writes is required.
FIT_LOOP = {
    "state_dict": ANY_DICT,
    "epoch_progress": progress(PROCESSED),
    "epoch_loop.state_dict": {"_batches_that_stepped": INT},
    "epoch_loop.batch_progress": BATCH_PROGRESS,
    "epoch_loop.scheduler_progress": progress(READY_COMPLETED),
    "epoch_loop.automatic_optimization.state_dict": ANY_DICT,
    "epoch_loop.automatic_optimization.optim_progress": {
        "optimizer": {"step": progress(READY_COMPLETED), "zero_grad": progress(STARTED)}
    },
    "epoch_loop.manual_optimization.state_dict": ANY_DICT,
    "epoch_loop.manual_optimization.optim_step_progress": progress(READY_COMPLETED),
    "epoch_loop.val_loop.state_dict": ANY_DICT,
    "epoch_loop.val_loop.batch_progress": BATCH_PROGRESS,
}
# The other loops, restored only by validate/test/predict from a checkpoint (never here).
OTHER_LOOPS = {
    "validate_loop": {"state_dict": ANY_DICT, "batch_progress": BATCH_PROGRESS},
    "test_loop": {"state_dict": ANY_DICT, "batch_progress": BATCH_PROGRESS},
    "predict_loop": {"state_dict": ANY_DICT, "batch_progress": progress(PROCESSED)},
}
AUTOMATIC_STEPS = "epoch_loop.automatic_optimization.optim_progress"
MANUAL_STEPS = "epoch_loop.manual_optimization.optim_step_progress"
# Optimizer hyperparameters torch reads as numbers or flags (others: any plain value).
GROUP_NUMBERS = {"lr", "initial_lr", "momentum", "dampening", "weight_decay", "eps", "alpha"}
GROUP_FLAGS = {"nesterov", "maximize", "differentiable", "amsgrad", "capturable", "centered"}
GROUP_OPTIONAL_FLAGS = {"foreach", "fused"}
# Per-parameter optimizer state of the parameter's own shape (torch.optim's optimizers).
PARAMETER_SHAPED = {
    "momentum_buffer",
    "exp_avg",
    "exp_avg_sq",
    "max_exp_avg_sq",
    "exp_inf",
    "square_avg",
    "acc_delta",
    "grad_avg",
    "sum",
    "ax",
    "prev",
    "step_size",
}


def where_of(where: str, key: Any) -> str:
    """``loops.fit_loop['epoch_loop.state_dict']``: a place in the checkpoint, as code reads it."""
    if isinstance(key, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f"{where}.{key}" if where else key
    return f"{where}[{clip(repr(key), 60)}]"


def describe(value: Any) -> str:
    """A value in a few words: its type, and its own text when short."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    if isinstance(value, Mapping):
        return f"a dict of {len(value)} key(s)"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    if value is None or isinstance(value, (bool, int, float, str)):
        return clip(repr(value), 60)
    return f"a {type(value).__name__}"


def wrong(where: str, value: Any, expected: str) -> Malformed:
    return Malformed(f"{where} is {describe(value)}, expected {expected}")


def entry(mapping: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in mapping:
        raise Malformed(f"{where_of(where, key)} is missing")
    return mapping[key]


def a_dict(value: Any, where: str, expected: str = "a dict") -> dict[Any, Any]:
    """A dict whose keys are names, as every dict Lightning and train.py write (but one)."""
    if not isinstance(value, dict):
        raise wrong(where, value, expected)
    for key in value:
        if not isinstance(key, str):
            raise Malformed(f"{where} has the key {describe(key)}, expected names (str)")
    return value


def a_list(value: Any, where: str, expected: str = "a list") -> list[Any]:
    if not isinstance(value, list):
        raise wrong(where, value, expected)
    return value


def integer(value: Any, where: str) -> int:
    """A count: Lightning does arithmetic and comparisons on these."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise wrong(where, value, "an integer >= 0")
    return value


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_scalar(value: Any) -> bool:
    """A number, or a tensor holding one (torch keeps some hyperparameters as tensors)."""
    if isinstance(value, torch.Tensor):
        return value.dim() == 0 and not value.is_complex()
    return is_number(value)


def is_non_negative(value: Any) -> bool:
    """A finite number >= 0 (NaN is not), as torch's optimizers require their settings."""
    if not is_scalar(value):
        return False
    number = value.item() if isinstance(value, torch.Tensor) else value
    return 0 <= number < math.inf


def is_plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def is_json(value: Any) -> bool:
    """Plain values, and lists and dicts of them (the nesting is bounded by ``check_size``)."""
    if isinstance(value, list):
        return all(is_json(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_json(v) for k, v in value.items())
    return is_plain(value)


def check_size(checkpoint: Any, path: Path) -> None:
    """Nesting depth and the number of values bounded, walked without recursion: a deep or
    self-containing structure is refused in one line before anything recursive (the digest,
    Lightning) walks it; a sparse tensor too (train.py writes dense ones only)."""
    stack, seen = [(checkpoint, 0)], 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if depth > MAX_DEPTH or seen > MAX_VALUES:
            deep = depth > MAX_DEPTH
            what = f"nests deeper than {MAX_DEPTH}" if deep else "holds too many values"
            raise UserError(
                f"ckpt_path={path} is malformed: it {what} (a checkpoint of train.py nests 7 "
                "deep and holds a few hundred values); it was edited, or not written by train.py"
            )
        if isinstance(value, Mapping):
            stack.extend((item, depth + 1) for pair in value.items() for item in pair)
        elif isinstance(value, (list, tuple, set, frozenset)):
            stack.extend((item, depth + 1) for item in value)
        elif isinstance(value, torch.Tensor) and value.layout != torch.strided:
            raise UserError(
                f"ckpt_path={path} is malformed: it holds a {value.layout} tensor (train.py "
                "writes dense ones); it was edited, or not written by train.py"
            )


def check_version(checkpoint: dict[str, Any], path: Path) -> None:
    """Lightning migrates a checkpoint by its version tag before reading it: a tag it cannot
    parse, or older than any this project wrote, ends in a traceback there; a newer one may
    hold state this Lightning does not know."""
    if VERSION not in checkpoint:
        return  # weights only: check_resumable refuses it for training
    tag = checkpoint[VERSION]
    try:
        version = Version(tag) if isinstance(tag, str) else None
    except InvalidVersion:
        version = None
    if version is None:
        raise UserError(
            f"ckpt_path={path} records {VERSION}={describe(tag)}, not a version number: it was "
            "edited, or not written by train.py"
        )
    if version < OLDEST_LIGHTNING:
        raise UserError(
            f"ckpt_path={path} was written by Lightning {version}, older than {OLDEST_LIGHTNING} "
            "(the oldest this project wrote with): it was edited, or not written by train.py"
        )
    installed = importlib.metadata.version("pytorch-lightning")  # not imported: a refusal is fast
    if version > Version(installed):
        raise UserError(
            f"ckpt_path={path} was written by Lightning {version}, newer than the installed "
            f"{installed}: install pytorch-lightning=={version} to read it, or train again"
        )


def check_network_settings(checkpoint: dict[str, Any], path: Path) -> None:
    """``hyper_parameters.net``: what eval.py builds and a resume is compared with."""
    hparams = checkpoint.get("hyper_parameters")
    if hparams is None or isinstance(hparams, dict) and "net" not in hparams:
        raise UserError(
            f"ckpt_path={path} records no network settings (hyper_parameters.net): "
            "it was not written by train.py"
        )


def check_weights(checkpoint: dict[str, Any]) -> None:
    """The weights, the settings they were trained with, and the data's settings."""
    state = a_dict(checkpoint["state_dict"], "state_dict", "a dict of tensors")
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise wrong(where_of("state_dict", key), value, "a tensor")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            # never saved by train.py (its divergence guard stops before the checkpoint):
            # resumed, such weights "diverge" at once; evaluated, they score chance
            raise Malformed(f"{where_of('state_dict', key)} holds NaN or infinite values")
    hparams = a_dict(checkpoint["hyper_parameters"], "hyper_parameters")
    net = a_dict(hparams["net"], "hyper_parameters.net")
    for key, value in net.items():
        if not is_plain(value):
            raise wrong(where_of("hyper_parameters.net", key), value, "a plain value")
    for key in ("optimizer", "scheduler"):
        if hparams.get(key) is not None:
            a_dict(hparams[key], where_of("hyper_parameters", key), "a dict or null")
    data = checkpoint.get("datamodule_hyper_parameters")
    if data is not None:
        for key, value in a_dict(data, "datamodule_hyper_parameters").items():
            inner = where_of("datamodule_hyper_parameters", key)
            if key == "normalize" and not isinstance(value, bool):  # eval.py reads it
                raise wrong(inner, value, "true or false")
            if not (is_plain(value) or isinstance(value, list) and all(map(is_plain, value))):
                raise wrong(inner, value, "a plain value")
    for key in ("hparams_name", "datamodule_hparams_name", f"legacy_{VERSION}"):
        if checkpoint.get(key) is not None and not isinstance(checkpoint[key], str):
            raise wrong(where_of("", key), checkpoint[key], "a name or null")


def check_settings(checkpoint: dict[str, Any]) -> None:
    """``settings``: the run's settings, dotted config key -> plain value (or null)."""
    settings = checkpoint.get(SETTINGS)
    if settings is None:
        return
    for key, value in a_dict(settings, SETTINGS, "a dict of dotted keys or null").items():
        if not key:
            raise Malformed(f"{SETTINGS} has an empty key, expected dotted config keys")
        if not is_json(value):
            raise wrong(where_of(SETTINGS, key), value, "a plain value or a list of them")


def check_template(value: Any, template: Any, where: str) -> None:
    """``value`` has every key of ``template``, with counts, flags and dicts where it says."""
    if template == INT:
        integer(value, where)
    elif template == BOOL:
        if not isinstance(value, bool):
            raise wrong(where, value, "true or false")
    elif template == ANY_DICT:
        a_dict(value, where)
    else:
        a_dict(value, where)
        for key, inner in template.items():
            check_template(entry(value, key, where), inner, where_of(where, key))


def check_epoch_progress(fit_loop: dict[str, Any]) -> dict[str, int]:
    """Finished epochs as Lightning counts them: ``processed`` when an epoch's end was reached
    (the checkpoint is written then), ``completed`` one less until Lightning resumes it. Any
    other combination restarts an epoch, and the history would repeat it."""
    where = "loops.fit_loop.epoch_progress"
    current, total = fit_loop["epoch_progress"]["current"], fit_loop["epoch_progress"]["total"]
    if current != total:
        raise Malformed(f"{where} counts {current} this run and {total} in all, expected the same")
    ready, started, processed, completed = (current[k] for k in PROCESSED)
    if not ready == started == processed or completed not in (processed - 1, processed):
        raise Malformed(
            f"{where} counts {current}, expected ready = started = processed and completed = "
            "processed - 1 (an epoch's end)"
        )
    return current


def check_loops(loops: Any) -> dict[str, Any]:
    """``loops``: the fit loop's state as Lightning restores it; the others where present."""
    for key, value in a_dict(loops, "loops").items():
        check_template(value, OTHER_LOOPS.get(key, ANY_DICT), where_of("loops", key))
    fit_loop = entry(loops, "fit_loop", "loops")
    check_template(fit_loop, FIT_LOOP, "loops.fit_loop")
    loaders = fit_loop["state_dict"].get("combined_loader", [])
    for i, item in enumerate(a_list(loaders, "loops.fit_loop.state_dict.combined_loader")):
        a_dict(item, f"loops.fit_loop.state_dict.combined_loader[{i}]")
    return fit_loop


def optimizer_class(hparams: dict[str, Any]) -> type | None:
    """The torch optimizer ``hyper_parameters.optimizer`` names, looked up (never built) to
    learn which hyperparameters its groups must hold."""
    target = (hparams.get("optimizer") or {}).get("_target_")
    prefix = "torch.optim."
    if not isinstance(target, str) or not target.startswith(prefix):
        return None
    found: Any = torch.optim
    for part in target[len(prefix) :].split("."):
        found = getattr(found, part, None)
    is_optimizer = isinstance(found, type) and issubclass(found, torch.optim.Optimizer)
    return found if is_optimizer else None


def group_keys(hparams: dict[str, Any]) -> list[str]:
    """The hyperparameters every group of the checkpoint's optimizer must hold: torch puts a
    loaded group in place of its own, and its step reads them. The positional arguments of
    the constructor, which every torch version writes (newer keyword-only ones are given
    defaults when a group lacks them)."""
    found = optimizer_class(hparams)
    if found is None:
        return ["lr"]
    arguments = inspect.signature(found.__init__).parameters.values()
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return [a.name for a in arguments if a.kind == positional and a.name not in ("self", "params")]


def check_group_value(key: str, value: Any, where: str) -> None:
    """Numbers where torch computes with them (non-negative and finite, as its optimizers
    require), flags where it branches on them, plain values elsewhere."""
    if key in GROUP_NUMBERS:
        if not is_non_negative(value):
            raise wrong(where, value, "a number >= 0")
    elif key in GROUP_FLAGS:
        if not isinstance(value, bool):
            raise wrong(where, value, "true or false")
    elif key in GROUP_OPTIONAL_FLAGS:
        if not (value is None or isinstance(value, bool)):
            raise wrong(where, value, "true, false or null")
    elif key == "betas":
        if not (isinstance(value, (list, tuple)) and len(value) == 2):
            raise wrong(where, value, "two numbers")
        for beta in value:
            check_group_value("lr", beta, where)
    elif not (is_plain(value) or is_scalar(value) or isinstance(value, (list, tuple))):
        raise wrong(where, value, "a plain value")


def check_param_group(group: Any, where: str, keys: list[str]) -> list[int]:
    """One optimizer parameter group: its parameters' numbers and its hyperparameters."""
    group = a_dict(group, where)
    params = a_list(entry(group, "params", where), f"{where}.params")
    numbers = [integer(p, f"{where}.params[{i}]") for i, p in enumerate(params)]
    for key in keys:
        entry(group, key, where)
    for key, value in group.items():
        if key != "params":
            check_group_value(key, value, where_of(where, key))
    return numbers


def check_parameter_state(values: Any, where: str) -> None:
    """Per-parameter state (momentum, moments): tensors, or nothing yet; ``step`` may be a
    number (torch makes it a tensor when it loads)."""
    for name, value in a_dict(values, where).items():
        ok = value is None or isinstance(value, torch.Tensor) or name == "step" and is_number(value)
        if not ok:
            raise wrong(where_of(where, name), value, "a tensor or null")


def check_optimizer(state: Any, where: str, keys: list[str]) -> None:
    """One optimizer's state as ``torch.optim.Optimizer.load_state_dict`` reads it: groups
    numbering the parameters 0..n-1 in order, per-parameter state only for those."""
    state = a_dict(state, where)
    groups = a_list(entry(state, "param_groups", where), f"{where}.param_groups")
    if not groups:
        raise Malformed(f"{where}.param_groups is empty, expected at least one group")
    numbers = [
        n
        for i, group in enumerate(groups)
        for n in check_param_group(group, f"{where}.param_groups[{i}]", keys)
    ]
    if numbers != list(range(len(numbers))):
        raise Malformed(
            f"{where}.param_groups number the parameters {clip(str(numbers), 60)}, expected "
            f"0..{len(numbers) - 1} in order"
        )
    per_parameter = entry(state, "state", where)
    if not isinstance(per_parameter, dict):
        raise wrong(f"{where}.state", per_parameter, "a dict")
    for key, values in per_parameter.items():
        inner = f"{where}.state[{clip(repr(key), 40)}]"
        if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < len(numbers):
            raise Malformed(f"{inner} names no parameter of its param_groups")
        check_parameter_state(values, inner)


def check_optimizers(states: Any, hparams: dict[str, Any]) -> None:
    keys = group_keys(hparams)
    for i, state in enumerate(a_list(states, "optimizer_states")):
        check_optimizer(state, f"optimizer_states[{i}]", keys)
    if not states:
        raise Malformed("optimizer_states is empty, expected the optimizer's state")


def check_schedulers(schedulers: Any, hparams: dict[str, Any]) -> list[dict[str, Any]]:
    """One scheduler state when the module had a scheduler (``hyper_parameters.scheduler``),
    none otherwise: Lightning pairs them by position and drops what does not pair. Of each,
    the module reads ``last_epoch`` (and replays the schedule as configured up to it)."""
    for i, state in enumerate(a_list(schedulers, "lr_schedulers")):
        where = f"lr_schedulers[{i}]"
        integer(entry(a_dict(state, where), "last_epoch", where), f"{where}.last_epoch")
    expected = 1 if hparams.get("scheduler") else 0
    if len(schedulers) != expected:
        says = "names one" if expected else "is null"
        raise Malformed(
            f"lr_schedulers holds {len(schedulers)} state(s) but hyper_parameters.scheduler "
            f"{says}: the two disagree"
        )
    return schedulers


def check_history(callbacks: Any) -> list[dict[str, Any]]:
    """``callbacks``: each callback's state; ``EpochHistory``'s is the run's history, one
    entry per finished epoch, numbered 1..n (0..n-1 by versions before record schema 3)."""
    for key, state in a_dict(callbacks, "callbacks").items():
        a_dict(state, where_of("callbacks", key))
    where = where_of("callbacks", HISTORY)
    state = entry(callbacks, HISTORY, "callbacks")
    history = a_list(entry(state, "history", where), f"{where}.history")
    for i, item in enumerate(history):
        inner = f"{where}.history[{i}]"
        integer(entry(a_dict(item, inner), "epoch", inner), f"{inner}.epoch")
        for key, value in item.items():
            if key != "epoch" and not (value is None or is_number(value)):
                raise wrong(where_of(inner, key), value, "a number or null")
    epochs = [item["epoch"] for item in history]
    first = epochs[0] if epochs else 1
    if first not in (0, 1) or epochs != list(range(first, first + len(epochs))):
        raise Malformed(
            f"{where}.history numbers its epochs {clip(str(epochs), 60)}, expected 1 to "
            f"{len(epochs)}"
        )
    return history


def check_loop_agreement(checkpoint: dict[str, Any]) -> None:
    """The ``epoch`` and ``global_step`` Lightning wrote beside its loop state are the loop
    state's own counts."""
    fit_loop = checkpoint["loops"]["fit_loop"]
    completed = check_epoch_progress(fit_loop)["completed"]
    if "epoch" in checkpoint and checkpoint["epoch"] != completed:
        raise Malformed(
            f"epoch is {checkpoint['epoch']} but loops.fit_loop.epoch_progress has "
            f"{completed} completed: the two disagree"
        )
    steps = {
        fit_loop[AUTOMATIC_STEPS]["optimizer"]["step"]["total"]["completed"],
        fit_loop[MANUAL_STEPS]["total"]["completed"],
    }
    if "global_step" in checkpoint and checkpoint["global_step"] not in steps:
        raise Malformed(
            f"global_step is {checkpoint['global_step']} but the loop state counts "
            f"{max(steps)} optimizer steps: the two disagree"
        )


def check_agreement(checkpoint: dict[str, Any]) -> None:
    """The counts Lightning resumes from (loop state, ``epoch``), the history the record
    resumes from and the scheduler's epoch say the same thing; else a resumed run repeats or
    skips epochs (e.g. a history 1, 1, 2)."""
    if "loops" in checkpoint:
        check_loop_agreement(checkpoint)
    finished = finished_epochs(checkpoint)
    history = epoch_history(checkpoint)
    if "loops" in checkpoint or "epoch" not in checkpoint:
        counted, source = {finished}, "the loop state counts"
    else:  # Lightning's epoch: the index of the epoch it was in, or the next one
        counted, source = {checkpoint["epoch"], checkpoint["epoch"] + 1}, "epoch says"
    if history is not None and len(history) not in counted:
        raise Malformed(
            f"the history holds {len(history)} epoch(s) but {source} {max(counted)} finished: "
            "the two disagree"
        )
    # A scheduler stepped with the optimizer (model.scheduler_interval=step) counts steps.
    per_step = (checkpoint.get(SETTINGS) or {}).get("model.scheduler_interval") == "step"
    if per_step and "global_step" not in checkpoint:
        return
    limit, unit = (
        (checkpoint["global_step"], "optimizer step(s)")
        if per_step
        else (finished, "finished epoch(s)")
    )
    for i, state in enumerate(checkpoint.get("lr_schedulers") or []):
        if state["last_epoch"] > limit:
            raise Malformed(
                f"lr_schedulers[{i}].last_epoch is {state['last_epoch']} after {limit} "
                f"{unit}: the two disagree"
            )


def check_training_state(checkpoint: dict[str, Any]) -> None:
    """What a resume reads, each part checked where present (a part missing is for
    ``check_resumable`` to refuse: eval.py does not need it)."""
    for key in ("epoch", "global_step"):
        if key in checkpoint:
            integer(checkpoint[key], key)
    if "optimizer_states" in checkpoint:
        check_optimizers(checkpoint["optimizer_states"], checkpoint["hyper_parameters"])
    if "lr_schedulers" in checkpoint:
        check_schedulers(checkpoint["lr_schedulers"], checkpoint["hyper_parameters"])
    if "loops" in checkpoint:
        check_loops(checkpoint["loops"])
    if "callbacks" in checkpoint:
        check_history(checkpoint["callbacks"])
    state = checkpoint.get("MixedPrecision")  # fp16's loss scaler (GradScaler.load_state_dict)
    if state:
        for key in ("scale", "growth_factor", "backoff_factor", "growth_interval"):
            if not is_scalar(entry(a_dict(state, "MixedPrecision"), key, "MixedPrecision")):
                raise wrong(f"MixedPrecision.{key}", state[key], "a number")
    check_agreement(checkpoint)


def check_structure(checkpoint: dict[str, Any], path: str | Path) -> None:
    """Everything train.py, eval.py and Lightning read, checked before any of it is used, so
    that a file that is not what train.py writes ends in one line naming the file and the
    place, never in a traceback mid-resume."""
    check_version(checkpoint, Path(path))
    check_network_settings(checkpoint, Path(path))
    try:
        check_weights(checkpoint)
        check_settings(checkpoint)
        check_training_state(checkpoint)
    except Malformed as bad:
        raise UserError(
            f"ckpt_path={path} is malformed: {bad}; it was edited, or not written by train.py"
        ) from None


# What a resume reads (of a checkpoint load_checkpoint returned) ---------------------------------
def epoch_history(checkpoint: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The run's history (one entry per finished epoch), if the checkpoint carries one."""
    state = (checkpoint.get("callbacks") or {}).get(HISTORY)
    return None if state is None else state["history"]


def finished_epochs(checkpoint: dict[str, Any]) -> int:
    """Epochs the checkpoint's run had finished: the loop state's count (Lightning's ``epoch``
    is the index of the epoch it was in, so one less), else the history's, else ``epoch + 1``."""
    if "loops" in checkpoint:
        return checkpoint["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"]
    history = epoch_history(checkpoint)
    if history is not None:
        return len(history)
    return checkpoint["epoch"] + 1 if "epoch" in checkpoint else 0


def stored_settings(checkpoint: dict[str, Any]) -> dict[str, Any] | None:
    """The settings the checkpoint's run was trained with (``None``: written by a version
    that did not record them)."""
    return checkpoint.get(SETTINGS)


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
    check_optimizer_fits(path, checkpoint, net)


def check_optimizer_fits(path: str | Path, checkpoint: dict[str, Any], net: nn.Module) -> None:
    """The optimizer state is for this network's parameters, in the order the module gives
    them to its optimizer: as many, momentum and moments of each one's shape (else torch
    fails at the first step). Called once the weights fit, so a mismatch means an edit."""
    shapes = [tuple(p.shape) for p in net.parameters()]
    edited = "it was edited, or not written by train.py"
    for i, state in enumerate(checkpoint.get("optimizer_states") or []):
        count = sum(len(group["params"]) for group in state["param_groups"])
        if count != len(shapes):
            raise UserError(
                f"ckpt_path={path} holds optimizer state for {count} parameters and its "
                f"network has {len(shapes)}; {edited}"
            )
        for number, values in state["state"].items():
            for name, value in values.items():
                shaped = name in PARAMETER_SHAPED and isinstance(value, torch.Tensor)
                if shaped and tuple(value.shape) != shapes[number]:
                    raise UserError(
                        f"ckpt_path={path} has optimizer_states[{i}].state[{number}].{name} "
                        f"of shape {list(value.shape)} for a parameter of shape "
                        f"{list(shapes[number])}; {edited}"
                    )


def check_resumable(path: str | Path, checkpoint: dict[str, Any]) -> None:
    """Training continues from a checkpoint only with all of its training state (optimizer,
    schedulers, loops, callbacks, the Lightning version that wrote it)."""
    missing = [key for key in TRAINING_STATE if key not in checkpoint] or [
        key for key in RESUME_STATE if key not in checkpoint
    ]
    if missing:
        raise UserError(
            f"ckpt_path={path} holds weights but no training state ({', '.join(missing)}): "
            "training cannot continue from it; eval.py can still evaluate it"
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
        raise UserError(
            f"ckpt_path={path} has network settings that do not build: {cause}"
        ) from None
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

    tta_flip = (checkpoint.get(SETTINGS) or {}).get("model.tta_flip") is True
    config = network_config(checkpoint, path)
    module = ImageClassifier(net={"_target_": NETWORK, **config}, tta_flip=tta_flip)
    module.net.load_state_dict(net.state_dict())
    return module


def load_network(path: str | Path) -> nn.Module:
    """A plain ``torch.nn.Module`` with the checkpoint's weights, ready for inference."""
    return network(load_checkpoint(path), path).eval()
