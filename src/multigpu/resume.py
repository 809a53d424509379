"""Resuming: ``ckpt_path=latest`` finds the newest run's checkpoint, and a checkpoint is
checked against this run's network before any training starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from multigpu.checkpoint import load_checkpoint, network_config, network_state
from multigpu.errors import UserError

LATEST = "latest"


def latest_checkpoint(runs_dir: str | Path, exclude: str | Path | None = None) -> Path:
    """The most recently written ``checkpoints/last.ckpt`` under ``runs_dir`` (sweeps included)."""
    runs_dir = Path(runs_dir)
    found = [p for p in runs_dir.glob("**/checkpoints/last.ckpt") if p.is_file()]
    if exclude is not None:
        found = [p for p in found if Path(exclude).resolve() not in p.resolve().parents]
    if not found:
        raise UserError(
            f"ckpt_path=latest found no checkpoints/last.ckpt under {runs_dir}/: "
            "train a run first, or pass ckpt_path=<run>/checkpoints/last.ckpt"
        )
    return max(found, key=lambda p: p.stat().st_mtime)


def resolve_ckpt_path(ckpt_path: str | None, runs_dir: str | Path, output_dir: str | Path):
    """``latest`` becomes a path; anything else is returned as given."""
    if ckpt_path is None or str(ckpt_path) != LATEST:
        return ckpt_path
    return str(latest_checkpoint(runs_dir, exclude=output_dir))


def _differences(trained: dict[str, Any], configured: dict[str, Any]) -> list[str]:
    keys = sorted(set(trained) & set(configured))
    text = {None: "null", True: "true", False: "false"}
    return [
        f"model.net.{k}={text.get(trained[k], trained[k])}"
        for k in keys
        if trained[k] != configured[k]
    ]


def check_fits(ckpt_path: str | Path, net: nn.Module, net_config: dict[str, Any]) -> None:
    """Raise a one-line ``UserError`` naming the first parameter whose shape differs.

    Loading with ``weights_only=True`` here also means a checkpoint that carries pickled
    code is refused before Lightning opens it.
    """
    checkpoint = load_checkpoint(ckpt_path)
    saved = network_state(checkpoint)
    expected = net.state_dict()
    fix = _differences(network_config(checkpoint), net_config)
    hint = f"it was trained with {' '.join(fix)}" if fix else "use the settings it was trained with"
    for name, tensor in expected.items():
        if name not in saved:
            raise UserError(
                f"ckpt_path={ckpt_path} has no parameter {name!r}: it is not a checkpoint of "
                f"this network; {hint}"
            )
        if tuple(saved[name].shape) != tuple(tensor.shape):
            raise UserError(
                f"ckpt_path={ckpt_path} does not fit this network: parameter {name!r} has "
                f"shape {list(saved[name].shape)} in the checkpoint and {list(tensor.shape)} "
                f"here; {hint}"
            )
    extra = sorted(set(saved) - set(expected))
    if extra:
        raise UserError(
            f"ckpt_path={ckpt_path} has parameter {extra[0]!r} that this network lacks; {hint}"
        )
