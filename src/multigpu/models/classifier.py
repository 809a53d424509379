"""The LightningModule: cross-entropy on a configurable network, accuracy, optimizer wiring."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from pytorch_lightning import LightningModule
from pytorch_lightning.strategies import SingleDeviceStrategy
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy
from typing_extensions import override

from multigpu.config.names import SCHEDULER_EPOCH_KEYS, Decayed, SchedulerInterval
from multigpu.config.schema import compile_options
from multigpu.config.settings import plain
from multigpu.models.compiled import compile_network, eager, warm_up
from multigpu.models.metrics import SampleMean
from multigpu.models.phases import phase

Network = Callable[[Tensor], Tensor]
log = logging.getLogger(__name__)


def parameter_groups(net: nn.Module, weight_decay_on: Decayed) -> list[dict[str, Any]]:
    """The optimizer's groups: one of every parameter, or (``weight_decay_on="weights"``) the
    weights of the convolutions and the linear layer, then the rest without weight decay. The
    optimizer numbers the parameters in this order (its state in a checkpoint too)."""
    if weight_decay_on == "all":
        return [{"params": list(net.parameters())}]
    weights = [p for p in net.parameters() if p.ndim > 1]
    others = [p for p in net.parameters() if p.ndim <= 1]
    return [{"params": weights}, {"params": others, "weight_decay": 0.0}]


class ImageClassifier(LightningModule):
    """Logs per epoch ``train/loss``, ``train/acc`` and ``test/acc`` (and ``val/acc`` with a
    validation split). Loss, metrics and logging always run once, on full-batch outputs.

    ``net``, ``optimizer`` and ``scheduler`` are Hydra configs (``_partial_`` for the last two),
    kept as plain hyperparameters so that a checkpoint rebuilds its own network; a module that
    only evaluates has no optimizer.
    ``channels_last`` and ``compile`` (true, or ``torch.compile``'s keyword arguments) change
    how the network runs, not what it computes or what a checkpoint holds. ``warmup``
    (``{epochs, start_factor}``) scales each step's lr from ``start_factor`` up to 1 over the
    first ``epochs``, on top of the scheduler. ``label_smoothing`` softens the training
    loss's targets (the test loss stays plain cross-entropy); ``tta_flip`` evaluates each image
    and its mirror image and averages their logits. ``scheduler_interval="step"`` steps the
    scheduler after every optimizer step instead of every epoch, its lengths (cosine's
    ``T_max``, ``step_size``) still counted in epochs: a smooth decay for runs of few epochs.
    ``weight_decay_on="weights"`` decays only the convolution and linear weights, not the
    BatchNorm scales and shifts or the biases (whose size does not make a network overfit).
    """

    def __init__(
        self,
        net: dict,
        optimizer: dict | None = None,
        scheduler: dict | None = None,
        channels_last: bool = False,
        compile: bool | dict = False,
        warmup: dict | None = None,
        label_smoothing: float = 0.0,
        tta_flip: bool = False,
        scheduler_interval: SchedulerInterval = "epoch",
        weight_decay_on: Decayed = "all",
    ):
        super().__init__()
        self.channels_last = channels_last
        self.label_smoothing, self.tta_flip = label_smoothing, tta_flip
        self.scheduler_interval = scheduler_interval
        self.weight_decay_on = weight_decay_on
        self.warmup = plain(warmup) or {}
        self.compile_options = compile_options(plain(compile))
        net, optimizer, scheduler = plain(net), plain(optimizer), plain(scheduler)
        self.save_hyperparameters(
            {"net": net, "optimizer": optimizer, "scheduler": scheduler}, logger=False
        )
        self.net = instantiate(net)
        num_classes = net.get("num_classes", 10)
        # Our own logits and labels: no checks on every update (validate_args), some of which
        # read values back to the host (torch.unique) and so wait for the device.
        self.train_acc = MulticlassAccuracy(num_classes, average="micro", validate_args=False)
        self.test_acc = MulticlassAccuracy(num_classes, average="micro", validate_args=False)
        self.val_acc = MulticlassAccuracy(num_classes, average="micro", validate_args=False)
        self.train_loss = SampleMean()
        self._metrics_logged = False  # train/loss and train/acc, once an epoch
        self.warmup_s = 0.0  # the compiled step's warm-up, until EpochTimer counts it

    def prepare_network(self, net: nn.Module) -> None:
        """Memory format and compilation, in place: for the module's network and for every
        replica a strategy makes of it. ``nn.Module.compile`` keeps the ``net.*`` keys."""
        if self.channels_last:
            net.to(memory_format=torch.channels_last)
        if self.compile_options is not None:
            compile_network(net, self.compile_options)

    @override
    def configure_model(self) -> None:
        self.prepare_network(self.net)

    def layout(self, images: Tensor) -> Tensor:
        """Images in the memory format the network's weights use."""
        if self.channels_last:
            return images.contiguous(memory_format=torch.channels_last)
        return images

    @override
    def forward(self, images: Tensor) -> Tensor:
        """Inference (evaluation, ``eval.py``): eagerly, also when training is compiled."""
        return eager(self.net, self.layout(images))

    @override
    def on_train_start(self) -> None:
        """A compiled network on one device is warmed up on zeros of the first training batch's
        shape before the first epoch (``compiled.warm_up``), as the loop will hand them over
        (``convert_input``: a ``bf16-true`` network's bf16). Not under DDP, whose compile must
        first see the network inside DDP's forward to split its graph at the gradient buckets
        (the exchange then overlaps the backward), nor over the replicas a strategy's
        ``run_network`` splits the batch over."""
        strategy, data = self.trainer.strategy, self.trainer.datamodule
        train_set = getattr(data, "train_set", None)
        one_device = isinstance(strategy, SingleDeviceStrategy)
        if self.compile_options is None or not one_device or hasattr(strategy, "run_network"):
            return
        if train_set is None:  # a data module of another kind: its batches' shape is unknown
            return
        size = (min(data.batch_size, len(train_set)), *train_set[0][0].shape)
        device, precision = strategy.root_device, self.trainer.precision_plugin
        images = self.layout(precision.convert_input(torch.zeros(size, device=device)))
        labels = torch.zeros(size[0], dtype=torch.long, device=device)
        autocast = precision.train_step_context  # the training step's, made for each pass
        self.warmup_s = warm_up(self.net, (images, labels), self.training_loss, autocast)

    def training_loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        return F.cross_entropy(logits, labels, label_smoothing=self.label_smoothing)

    @override
    def on_train_epoch_start(self) -> None:
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        self.log("train/lr", lr, on_step=False, on_epoch=True, sync_dist=True)  # same on all
        self._metrics_logged = False  # in this epoch, by this run

    @override
    def training_step(
        self, batch: tuple[Tensor, Tensor], batch_idx: int, network: Network | None = None
    ) -> Tensor:
        """``network`` runs the batch through the network and returns full-batch logits: this
        module's own network by default, or a data-parallel strategy's scatter, replicas and
        gather. Loss, metrics and logging stay here, once per step."""
        images, labels = batch
        with phase("forward"):
            logits = (network or self.net)(self.layout(images))
        loss = self.training_loss(logits, labels)
        self.train_loss.update(loss, labels.numel())  # on the device; computed at the epoch's end
        self.train_acc.update(logits.detach(), labels)
        if not self._metrics_logged:  # the metrics themselves: a log per step costs more
            self.log("train/loss", self.train_loss, on_step=False, on_epoch=True)
            self.log("train/acc", self.train_acc, on_step=False, on_epoch=True)
            self._metrics_logged = True
        return loss  # the progress bar's loss: read by multigpu.callbacks.BarLoss when it redraws

    def evaluate(self, batch: tuple[Tensor, Tensor], split: str) -> Tensor:
        """The one inference path over a test or validation batch (``eval.py`` and the test
        figures use it too); returns the predicted classes."""
        images, labels = batch
        logits = self(images)
        if self.tta_flip:  # the classes are mirror-symmetric: a shoe is a shoe either way
            logits = (logits + self(images.flip(-1))) / 2
        metric = self.val_acc if split == "val" else self.test_acc
        metric.update(logits, labels)
        batch_size = labels.numel()
        log: dict[str, Any] = dict(on_epoch=True, add_dataloader_idx=False, batch_size=batch_size)
        self.log(f"{split}/loss", F.cross_entropy(logits, labels), sync_dist=True, **log)
        self.log(f"{split}/acc", metric, prog_bar=split == "test", **log)
        return logits.argmax(dim=1)

    @override
    def validation_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> Tensor:
        """Loader 0 is the test set, evaluated after every epoch as d2l does; 1 is ``val``."""
        return self.evaluate(batch, "test" if dataloader_idx == 0 else "val")

    @override
    def test_step(self, batch, batch_idx: int) -> Tensor:
        return self.evaluate(batch, "test")

    def warmup_factor(self, step: int) -> float:
        """Goyal et al.'s gradual warm-up: linear in the optimizer step, from ``start_factor``
        at step 0 to 1 once ``epochs`` epochs of steps have been taken."""
        steps = self.warmup.get("epochs", 0) * self.optimizer_steps_per_epoch()
        if step >= steps:
            return 1.0
        start = self.warmup.get("start_factor", 0.0)
        return start + (1.0 - start) * step / steps

    @override
    def optimizer_step(self, epoch: int, batch_idx: int, optimizer, optimizer_closure=None):
        """The step with the warm-up's share of each group's lr; the scheduler's own lr is
        put back afterwards, so that schedules stepped per epoch compose with it."""
        factor = self.warmup_factor(self.trainer.global_step)
        if factor == 1.0:
            return super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        scheduled = [group["lr"] for group in optimizer.param_groups]
        for group in optimizer.param_groups:
            group["lr"] *= factor
        try:
            return super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        finally:
            for group, lr in zip(optimizer.param_groups, scheduled, strict=True):
                group["lr"] = lr

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """A resumed run trains with the optimizer as configured now: each restored group takes
        the configured group's settings (``lr``, ``momentum``, ``weight_decay``, ...; a change
        ``resume_changes`` allowed had been recorded and not applied), and the learning-rate
        schedule is replayed from the start to the resumed epoch (a run extended with a larger
        ``trainer.max_epochs`` decays over its new length, not the old one). The same values
        when nothing changed."""
        optimizers = checkpoint.get("optimizer_states")
        if not optimizers or not self.hparams.optimizer:  # a module that only evaluates
            return
        steps = self.schedule_position(checkpoint)
        optimizer, scheduler = self.configured_optimizer(steps)
        saved, configured = optimizers[0]["param_groups"], optimizer.param_groups
        if abs(saved[0]["lr"] - configured[0]["lr"]) > 1e-12 * max(abs(configured[0]["lr"]), 1):
            epochs = checkpoint.get("epoch", -1) + 1  # Lightning stores the last one's index
            log.info("resuming after %d epoch(s) with the optimizer as configured now: lr %g "
                     "(the checkpoint's had %g)", epochs, configured[0]["lr"],
                     saved[0]["lr"])  # fmt: skip
        if scheduler is not None:
            checkpoint["lr_schedulers"] = [scheduler.state_dict()]  # Lightning restores it
        for group, now in zip(saved, configured, strict=False):  # a count that differs is refused
            group.update({key: value for key, value in now.items() if key != "params"})

    def schedule_position(self, checkpoint: dict[str, Any]) -> int:
        """How far into its schedule the checkpoint's run is, counted as the schedule counts
        now: its epochs (one a limit stopped inside included, as in its history: Lightning had
        not stepped the schedule for it, and the saved count lagged), or those epochs' optimizer
        steps at this run's steps per epoch, a partial epoch's by its share (a resume may change
        the batch or the accumulation: the saved count was in the old steps)."""
        if not self.hparams.scheduler:
            return 0
        epochs = checkpoint.get("epoch", -1) + 1  # the index of the epoch it was saved at, + 1
        if self.scheduler_interval != "step":
            return epochs
        batches = checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_loop.batch_progress")
        steps = self.optimizer_steps_per_epoch()
        if not batches or batches.get("is_last_batch", True):
            return epochs * steps
        # An epoch a limit stopped inside: its share of the epoch (its batches over the earlier
        # epochs' each, all at the checkpoint's batch size) in this run's steps.
        stopped_after, before = batches["current"]["processed"], batches["total"]["processed"]
        if epochs == 1:  # no earlier epoch to size it by: the batches are this run's
            return stopped_after // self.trainer.accumulate_grad_batches
        share = stopped_after * (epochs - 1) / (before - stopped_after)
        return (epochs - 1) * steps + int(share * steps + 1e-9)

    def configured_optimizer(self, steps: int):
        """(optimizer, scheduler or None) as configured, on stand-ins of this module's parameter
        groups, the schedule ``steps`` in."""
        groups = [
            {**group, "params": [nn.Parameter(torch.zeros(1))]} for group in self.parameter_groups()
        ]
        optimizer = instantiate(self.hparams.optimizer)(groups)
        if not self.hparams.scheduler:
            return optimizer, None
        scheduler = self.build_scheduler(optimizer)
        for _ in range(steps):
            optimizer.step()  # no gradient: changes nothing, but schedulers expect a step first
            scheduler.step()
        return optimizer, scheduler

    def parameter_groups(self) -> list[dict[str, Any]]:
        return parameter_groups(self.net, self.weight_decay_on)

    def build_scheduler(self, optimizer):
        """The configured scheduler; stepped per optimizer step, its lengths in epochs become
        lengths in steps."""
        scheduler = dict(self.hparams.scheduler)
        steps = self.scheduler_steps_per_epoch()
        for key in SCHEDULER_EPOCH_KEYS.get(scheduler["_target_"], ()):
            if key in scheduler:
                scheduler[key] = scheduler[key] * steps
        return instantiate(scheduler)(optimizer)

    def scheduler_steps_per_epoch(self) -> int:
        """1, or the optimizer steps of an epoch when the scheduler steps with the optimizer."""
        return self.optimizer_steps_per_epoch() if self.scheduler_interval == "step" else 1

    def optimizer_steps_per_epoch(self) -> int:
        """An epoch's batches over ``accumulate_grad_batches``, a last short group included
        (asking Lightning for them sizes the training data, also before a resume's restore)."""
        self.trainer.estimated_stepping_batches  # noqa: B018
        return -(-self.trainer.num_training_batches // self.trainer.accumulate_grad_batches)

    @override
    def configure_optimizers(self):
        optimizer = instantiate(self.hparams.optimizer)(self.parameter_groups())
        if not self.hparams.scheduler:
            return optimizer
        scheduler = self.build_scheduler(optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": self.scheduler_interval},
        }
