"""Callbacks that tests attach through the config (``+callbacks.probe._target_=probes...``)."""

from __future__ import annotations

import torch
from pytorch_lightning import Callback


class GradientProbe(Callback):
    """Saves the root network's gradients as ``on_after_backward`` sees them, first step only."""

    def __init__(self, path: str):
        self.path = path

    def on_after_backward(self, trainer, pl_module) -> None:
        if trainer.global_step == 0:
            grads = {n: p.grad.detach().clone() for n, p in pl_module.net.named_parameters()}
            torch.save(grads, self.path)
