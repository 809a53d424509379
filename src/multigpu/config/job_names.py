"""A sweep's job folders named by what differs between its jobs: ``devices_2-batch_size_512``
rather than ``1``, so TensorBoard, which names runs by folder, and the report show it. The
names hold only characters that a path on Hydra's command line takes unquoted, so the
``ckpt_path=...`` a run prints can be pasted as it is (a value's other characters are
written ``%XX``, one to one).

The swept keys are known only where the multirun starts (each job sees its own values), so
``SweepReport.on_multirun_start`` hands them to the jobs in ``MULTIGPU_SWEPT_KEYS``; the
``${job_folder:}`` resolver (``hydra.sweep.subdir``) and the SLURM launcher name folders
with them. Without swept keys (an Optuna study names none on the command line) a folder is
the job's number, as Hydra's default.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from typing import Any

from omegaconf import DictConfig, OmegaConf

SWEPT_KEYS_VARIABLE = "MULTIGPU_SWEPT_KEYS"
MAX_NAME = 200  # bytes of a job folder's name: under the usual 255, with room for a suffix
# What a value keeps as it is in a folder's name: what Hydra's grammar takes unquoted and no
# file system or shell treats specially.
SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-")


def task_overrides(hydra: Any) -> list[str]:
    """The command line's overrides (Hydra's ``overrides.task``) as given: unresolved, since
    ``${hydra:job.num}`` in one resolves only inside its job."""
    return [str(o) for o in OmegaConf.to_container(hydra.overrides.task) or []]


def swept_keys(task_overrides: Iterable[str], sweeper_params: dict | None) -> list[str]:
    """The keys that take several values: in the command line's overrides (``seed=1,2,3``)
    and in the sweeper's ``params``, in that order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(task_overrides))
    keys = [o.key_or_group for o in parsed if o.is_sweep_override()]
    searched = (str(k).lstrip("+") for k in sweeper_params or {})  # +key: one the config lacks
    return keys + [key for key in dict.fromkeys(searched) if key not in keys]


def share_swept_keys(config: DictConfig) -> None:
    """At the start of a multirun: tell its jobs (in this process, or launched from it with
    its environment) which keys are swept."""
    keys = swept_keys(task_overrides(config.hydra), config.hydra.sweeper.get("params"))
    os.environ[SWEPT_KEYS_VARIABLE] = ",".join(keys)


def short_names(keys: list[str]) -> dict[str, str]:
    """Each key by its last part (``trainer.devices`` -> ``devices``) unless two share it."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last, strict=True)}


def escape(value: str) -> str:
    """A value as a file name's part, one to one (``a/b`` and ``a_b`` stay apart): characters
    outside ``SAFE`` as ``%XX`` of their UTF-8 bytes."""
    return "".join(c if c in SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in value)


def bounded(name: str) -> str:
    """Names over ``MAX_NAME`` bytes (file systems refuse 256) keep their start and end a
    digest of the whole, so that they stay unique."""
    if len(name.encode()) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    return name.encode()[: MAX_NAME - 13].decode(errors="ignore") + "-" + digest


def job_folder_name(overrides: Iterable[str], keys: list[str], number: int) -> str:
    """``key_value`` of each swept key in this job's overrides, joined by ``-`` (where
    TensorBoard's run list may wrap a name)."""
    values = {}
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        values[key] = escape(value)
    names = short_names(keys)
    parts = [f"{names[k]}_{values[k]}" for k in keys if k in values]
    return bounded("-".join(parts)) if parts else str(number)


def sweep_job_folder(overrides: Iterable[str], number: int) -> str:
    keys = [k for k in os.environ.get(SWEPT_KEYS_VARIABLE, "").split(",") if k]
    return job_folder_name(overrides, keys, number)


def job_folder() -> str:
    """The ``${job_folder:}`` resolver: this job's folder within the sweep."""
    from hydra.core.hydra_config import HydraConfig

    job = HydraConfig.get()
    return sweep_job_folder(task_overrides(job), job.job.num)
