"""What a run computes: the settings that change its math, as one flat mapping of dotted keys.

Two runs with equal settings compute the same thing, whichever strategy, devices, pipeline or
folder they use. A checkpoint and a run's ``metrics.json`` both carry the settings; a resume is
checked against them key by key (not against a digest of the whole config, so a key added to
the config later, absent from an older record, is simply not compared).

Everything in the config counts, except what only says where a run reads and writes, how it
places its work, and what it records besides. The batch and learning rate count as resolved
(``multigpu.config.settings.Run``): global batch and lr after any scaling rule.
``trainer.max_epochs`` does not count: training longer continues the same computation, and a
schedule that depends on the length (cosine's ``T_max``) counts through its own keys.
Torch-free.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig

from multigpu.config.errors import as_override
from multigpu.config.names import MODEL
from multigpu.config.schema import defaults, plain
from multigpu.config.settings import Run

# Whole nodes that do not change what is computed.
IGNORED_NODES = ("hydra", "paths", "logger", "callbacks", "strategy")
# Single keys that do not: where, how fast, how it is shown, and the options of a start.
IGNORED_KEYS = {
    "ckpt_path",
    "resume_changes",
    "phases",
    "check_finite_every_n_steps",
    "time_to_targets",  # what the record reports, not what the run computes
    "data.root",
    "data.source",
    "data.download",
    "data.num_workers",
    "data.pipeline",  # both pipelines give the same batches in the same order
    "data.pin_memory",
    "data.batch_size_per_device",  # counted in the global batch (RESOLVED)
    "model.lr_scaling.rule",  # counted in the lr and warm-up (RESOLVED)
    "model.lr_scaling.base_batch",
    "model.channels_last",
    "model.compile",
    "model.optimizer.fused",  # the same update, in fewer kernels
    "trainer.accelerator",
    "trainer.devices",
    "trainer.num_nodes",
    "trainer.max_epochs",
    "trainer.default_root_dir",
    "trainer.enable_model_summary",
    "trainer.enable_progress_bar",
    "trainer.log_every_n_steps",
    "trainer.check_val_every_n_epoch",  # when the test set is evaluated, not what is trained
    "trainer.num_sanity_val_steps",
    "trainer.benchmark",
    "trainer.profiler",
    "trainer.enable_checkpointing",
    "trainer._target_",
}

# Keys whose value counts as ``Run`` resolved it: the global batch, the lr after scaling, the
# warm-up's start, Lightning's name for the precision (``bf16`` is ``bf16-mixed``).
RESOLVED = {
    "data.batch_size": "batch_size",
    "model.optimizer.lr": "lr",
    "model.lr_scaling.warmup_epochs": "warmup_epochs",
    "model.lr_scaling.warmup_from": "warmup_from",
    "trainer.precision": "precision",
}

# Former names of a ``_target_``, as records and checkpoints written before its module moved
# still carry them: the same class, so the same computation. Compared by the current name.
FORMER_TARGETS = {
    "multigpu.module.ImageClassifier": MODEL,  # multigpu/module.py is multigpu/models/classifier.py
}

# Keys a resume keeps, even named in resume_changes: the checkpoint's state is shaped by them.
KEPT_ON_RESUME = {"model.weight_decay_on": "its optimizer state is grouped by it"}

NODE = object()  # where one side has a node of several keys and the other a single value
UNSET = object()  # a key one side does not have, and the schema gives no default for
DEFAULTS: dict[str, Any] = {}  # filled from the schema on first use


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists stay values."""
    if not isinstance(node, Mapping):
        return {prefix: node}
    if not node and prefix:
        return {prefix: None}
    flat: dict[str, Any] = {}
    for key, value in node.items():
        flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def computation(cfg: DictConfig, run: Run) -> dict[str, Any]:
    """The settings of ``cfg`` that change what it computes, with the batch, lr, warm-up and
    precision as ``run`` resolved them."""
    config = {key: plain(cfg[key]) for key in cfg if key not in IGNORED_NODES}
    flat = {k: v for k, v in flatten(config).items() if k not in IGNORED_KEYS}
    flat.update({key: getattr(run, field) for key, field in RESOLVED.items()})
    flat["defaults.data"] = run.data  # the data group's option
    return dict(sorted(flat.items()))


def same(a: Any, b: Any, rel_tol: float = 0.0) -> bool:
    """Equal as JSON keeps them: 1 and 1.0 alike, but not true and 1; numbers within
    ``rel_tol`` (a figure recomputed from others, to rounding)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if rel_tol and isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=rel_tol)
    return a == b


def differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, tuple]:
    """Keys whose values differ, as (saved, current). A key only one side has counts as its
    schema default there (``multigpu.config.schema``: a key added to the config later, with a
    default, changes nothing), or as unset (``+trainer.gradient_clip_val=1`` changes the
    math); where the other side has a value in place of the key's node
    (``model.scheduler=null`` against ``model.scheduler.T_max=5``), the node differs."""
    changed: dict[str, tuple] = {}
    for key in sorted(set(saved) | set(current)):
        other = current if key in saved else saved
        parent = next((p for p in parents(key) if p in other), None)
        if parent is not None and not (key in saved and key in current):
            changed[parent] = (saved.get(parent, NODE), current.get(parent, NODE))
            continue
        old, new = saved.get(key, default(key)), current.get(key, default(key))
        if not same(current_name(key, old), current_name(key, new)):
            changed[key] = (old, new)
    return changed


def current_name(key: str, value: Any) -> Any:
    """A ``_target_``'s value under its current name (``FORMER_TARGETS``); others unchanged."""
    if key.rsplit(".", 1)[-1] == "_target_" and isinstance(value, str):
        return FORMER_TARGETS.get(value, value)
    return value


def default(key: str) -> Any:
    """The schema's default for ``key``, or ``UNSET``."""
    if not DEFAULTS:
        DEFAULTS.update(defaults())
    return DEFAULTS.get(key, UNSET)


def parents(key: str) -> list[str]:
    """``a.b.c`` -> ``a``, ``a.b``."""
    parts = key.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def as_recorded(value: Any) -> Any:
    """A value of ``differences`` as a record keeps it: ``NODE`` and ``UNSET`` as their text
    (the node's own keys are in the record's settings)."""
    return as_text(value) if value is NODE or value is UNSET else value


def as_text(value: Any) -> str:
    """A value as it is written on the command line."""
    if value is NODE:
        return "{...}"
    if value is UNSET:
        return "(unset)"
    if isinstance(value, bool) or value is None:
        return as_override(value)
    if isinstance(value, float):
        return f"{value:g}"
    text = str(value) if str(value).isprintable() else json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def describe(changed: Mapping[str, tuple], limit: int = 4) -> str:
    """``lr=0.1 there, 0.2 here; ...``: the first few differences, in one line."""
    parts = [f"{k}={as_text(old)} there, {as_text(new)} here" for k, (old, new) in changed.items()]
    more = f" and {len(parts) - limit} more" if len(parts) > limit else ""
    return "; ".join(parts[:limit]) + more
