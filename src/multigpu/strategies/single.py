"""One device: Lightning's own single-device strategy, built from the trainer's settings."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from pytorch_lightning.strategies import SingleDeviceStrategy

from multigpu.errors import UserError
from multigpu.strategies.devices import check_available, device_ids, resolve_accelerator


def single_device(accelerator: str, devices: int | str | Sequence[int]) -> SingleDeviceStrategy:
    kind = resolve_accelerator(accelerator)
    ids = device_ids(devices)
    if len(ids) != 1:
        raise UserError(
            f"strategy=single runs on one device, but trainer.devices={devices}: "
            "use strategy=dp, scatter_allreduce or ddp for several"
        )
    check_available(kind, ids)
    return SingleDeviceStrategy(torch.device(kind, ids[0]) if kind == "cuda" else "cpu")
