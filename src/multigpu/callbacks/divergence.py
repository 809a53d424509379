"""Stop a run whose loss is NaN or infinite, before a bad epoch overwrites the good checkpoint.

The losses of the last ``check_every_n_steps`` steps stay on the device and are read in one
go, so the check costs one host synchronisation per window instead of one per step, and still
names the exact step (and batch, under gradient accumulation), with the lr it was taken at
(read then: a schedule may have moved it by the time the window is checked, a cosine to 0 at
its end). The window is always closed at the end of an epoch, before Lightning's checkpoint
callback (which runs after all others) saves ``last.ckpt``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning import Callback, LightningModule, Trainer
from torch import Tensor
from typing_extensions import override

from multigpu.config.errors import Diverged


class DivergenceGuard(Callback):
    def __init__(self, check_every_n_steps: int, checkpoint_dir: str | Path | None = None):
        if not isinstance(check_every_n_steps, int) or check_every_n_steps < 1:
            raise ValueError(f"check_every_n_steps={check_every_n_steps!r} must be >= 1")
        self.every = check_every_n_steps
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self._losses: list[Tensor] = []
        self._lrs: list[float] = []  # each step's lr, a Python float: no host synchronisation
        self._places: list[tuple[int, int]] = []  # each batch's (optimizer step, batch index)
        self._lr = math.nan  # the lr of the latest optimizer step (``on_before_optimizer_step``)
        self._step = 0  # the optimizer step the current batch is part of
        self._stepped = False  # whether the current batch closed its step (its lr is known)
        self._last: tuple[tuple[int, int], float] = ((0, 0), math.nan)  # latest (place, lr)
        self._evaluated = False  # whether the epoch evaluated (its logged losses are its own)

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch, batch_idx: int
    ) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is None:
            return
        self._losses.append(loss.detach().reshape(()))
        self._places.append((self._step, batch_idx))
        # A batch that closed its step: that step's lr; one whose step is still to come (under
        # accumulation): the lr it will start from.
        self._lrs.append(self._lr if self._stepped else current_lr(trainer))
        self._last = (self._places[-1], self._lrs[-1])
        if len(self._losses) >= self.every:
            self.check(trainer)

    @override
    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # Under gradient accumulation several batches make one step: the steps done, plus this.
        self._step, self._stepped = trainer.global_step + 1, False

    @override
    def on_before_optimizer_step(
        self, trainer: Trainer, pl_module: LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        # The step's own lr: warm-up applied, not yet moved on by a scheduler stepped per step
        # (which Lightning steps before on_train_batch_end).
        self._lr, self._stepped = optimizer.param_groups[0]["lr"], True

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._evaluated = False

    @override
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._evaluated = self._evaluated or not trainer.sanity_checking

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # The epoch's last update is in no training loss: the weights it left, and the
        # evaluation just run with them, are checked too (with what is left of the window, one
        # synchronisation); else weights that overflow only in the forward pass were evaluated
        # and recorded.
        self.check(trainer, after_epoch(trainer, pl_module, self._evaluated))

    def check(self, trainer: Trainer, after: dict[str, Tensor] | None = None) -> None:
        if not self._losses and not after:
            return
        losses = torch.stack(self._losses).float() if self._losses else None
        lrs, places = self._lrs, self._places
        self._losses, self._lrs, self._places = [], [], []
        finite = torch.isfinite(losses) if losses is not None else None
        parts = ([finite.all()] if finite is not None else []) + list((after or {}).values())
        bad_here = not bool(torch.stack(parts).all())
        if not trainer.strategy.reduce_boolean_decision(bad_here, all=False):
            return
        if bad_here and finite is not None and not bool(finite.all()):
            index = int((~finite).nonzero()[0])
            value, place, lr = losses[index].item(), places[index], lrs[index]
            raise Diverged(self.message(trainer, f"loss is {value} at", place, lr))
        # What the epoch's last step left here, or what another DDP process saw first.
        bad = [name for name, ok in (after or {}).items() if not bool(ok)] if bad_here else []
        said = f"{bad[0]} NaN or infinite after" if bad else "loss is nan at"
        raise Diverged(self.message(trainer, said, *self._last))

    def message(self, trainer: Trainer, what: str, place: tuple[int, int], lr: float) -> str:
        """``what`` went wrong (``loss is nan at``), where, and how to go on."""
        last = self.checkpoint_dir / "last.ckpt" if self.checkpoint_dir else None
        if last is not None and last.is_file():
            kept = f"kept the last good checkpoint {last} (after epoch {trainer.current_epoch})"
        else:
            kept = "this run saved no checkpoint before it"
        (step, batch), epoch = place, trainer.current_epoch + 1
        batch = f", batch {batch + 1}" if trainer.accumulate_grad_batches > 1 else ""
        return (
            f"training diverged: {what} step {step} (epoch {epoch}{batch}) with lr "
            f"{lr:g}; {kept}: lower model.optimizer.lr and train again"
        )


def current_lr(trainer: Trainer) -> float:
    return trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else math.nan


def after_epoch(trainer: Trainer, module: LightningModule, evaluated: bool) -> dict[str, Tensor]:
    """Whether the weights and (``evaluated`` this epoch: else they are an earlier epoch's) the
    losses the evaluation logged are finite, each a tensor on its device (no host
    synchronisation here). Parameters only: a buffer may hold infinities by design (a mask)."""
    params = [p for p in module.parameters() if p.is_floating_point()]
    if not params:
        return {}
    checks = {"the weights are": torch.stack([torch.isfinite(p).all() for p in params]).all()}
    device = checks["the weights are"].device
    for name, value in trainer.callback_metrics.items() if evaluated else ():
        if name.endswith("/loss") and not name.startswith("train/"):
            finite = torch.isfinite(torch.as_tensor(value)).all()
            checks[f"the {name.replace('/', ' ')} is"] = finite.to(device)
    return checks
