"""Turning ``trainer.accelerator`` / ``trainer.devices`` into torch devices, with clear errors."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from multigpu.errors import UserError


def resolve_accelerator(accelerator: str) -> str:
    """``auto`` falls back to the CPU; asking for ``gpu``/``cuda`` on a machine without one
    is an error rather than a silently slow run."""
    if accelerator == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if accelerator not in ("cpu", "cuda", "gpu"):
        raise UserError(
            f"trainer.accelerator={accelerator!r} is not supported: use auto, cpu or gpu"
        )
    if accelerator != "cpu" and not torch.cuda.is_available():
        raise UserError(
            f"trainer.accelerator={accelerator} but this machine has no CUDA device: "
            "use trainer.accelerator=cpu (or auto)"
        )
    return "cpu" if accelerator == "cpu" else "cuda"


def device_ids(devices: int | str | Sequence[int]) -> list[int]:
    """``2`` -> [0, 1]; ``[2, 3]`` or ``"2,3"`` -> [2, 3]; ``-1`` or ``auto`` -> every device."""
    if isinstance(devices, str):
        text = devices.strip()
        if text in ("auto", "-1"):
            return list(range(max(torch.cuda.device_count(), 1)))
        try:
            parts = [int(p) for p in text.strip("[]").split(",") if p.strip()]
        except ValueError:
            raise UserError(
                f"trainer.devices={devices!r} is not a count or a list of ids: "
                "use e.g. trainer.devices=2 or trainer.devices=[2,3]"
            ) from None
        if text.startswith("[") or "," in text:
            return device_ids(parts)
        return device_ids(parts[0] if parts else 0)
    if isinstance(devices, bool):
        raise UserError(f"trainer.devices={devices!r} must be a count or a list of ids")
    if isinstance(devices, int):
        if devices == -1:
            return list(range(max(torch.cuda.device_count(), 1)))
        if devices <= 0:
            raise UserError(
                f"trainer.devices={devices} must be at least 1 (or a list of ids, e.g. [0,1])"
            )
        return list(range(devices))
    ids = list(devices)
    if not ids or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in ids):
        raise UserError(f"trainer.devices={ids} must list device ids >= 0, e.g. [0,1]")
    return ids


def check_available(accelerator: str, ids: list[int]) -> None:
    """CUDA ids must exist; CPU "devices" are logical replicas, any count runs."""
    if accelerator != "cuda":
        return
    have = torch.cuda.device_count()
    missing = [i for i in ids if i >= have]
    if missing:
        raise UserError(
            f"trainer.devices asks for CUDA device(s) {missing}, but this machine has {have} "
            f"(ids 0-{have - 1}): use fewer devices, or trainer.accelerator=cpu"
        )


def trainer_devices(strategy: object, accelerator: str, devices: int | str | Sequence[int]):
    """The ``devices`` argument for Lightning's ``Trainer``.

    Strategies that carry their own device list (single, dp, scatter_allreduce) need nothing
    from it; for DDP, Lightning wants a count on the CPU and ids on CUDA.
    """
    if getattr(strategy, "parallel_devices", None) or not hasattr(strategy, "parallel_devices"):
        return 1
    ids = device_ids(devices)
    return ids if resolve_accelerator(accelerator) == "cuda" else len(ids)
