"""The LightningModule: cross-entropy on a configurable network, accuracy, optimizer wiring."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning import LightningModule
from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy

from multigpu.errors import UserError


def plain(node: Any) -> Any:
    """OmegaConf nodes to plain containers, so checkpoints load with ``weights_only=True``."""
    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=True)
    return node


def check_optimizer(optimizer: dict) -> None:
    lr = optimizer.get("lr")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or lr <= 0:
        raise UserError(f"model.optimizer.lr={lr!r} must be a positive number, e.g. 0.1")


class ImageClassifier(LightningModule):
    """Logs per epoch ``train/loss``, ``train/acc`` and ``test/acc`` (and ``val/acc`` with a
    validation split). Loss, metrics and logging always run once, on full-batch outputs.

    ``net``, ``optimizer`` and ``scheduler`` are Hydra configs (``_partial_`` for the last two),
    kept as plain hyperparameters so that a checkpoint rebuilds its own network.
    ``channels_last`` and ``compile`` (``torch.compile``) change how the network runs, not what
    it computes or what a checkpoint holds.
    """

    def __init__(
        self,
        net: dict,
        optimizer: dict,
        scheduler: dict | None = None,
        channels_last: bool = False,
        compile: bool = False,
    ):
        super().__init__()
        self.channels_last = channels_last
        self.compile_network = compile
        net, optimizer, scheduler = plain(net), plain(optimizer), plain(scheduler)
        check_optimizer(optimizer)
        self.save_hyperparameters(
            {"net": net, "optimizer": optimizer, "scheduler": scheduler}, logger=False
        )
        try:
            self.net = instantiate(net)
        except Exception as err:  # Hydra wraps the network's own ValueError
            cause = err.__cause__ if isinstance(err.__cause__, ValueError) else err
            raise UserError(str(cause).splitlines()[0]) from None
        num_classes = net.get("num_classes", 10)
        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.__dict__["_network_runner"] = None
        self.__dict__["_compiled"] = None

    def configure_model(self) -> None:
        """Memory format and compilation, once the network is on its device. The compiled
        module is kept out of ``nn.Module`` registration, so checkpoint keys stay ``net.*``."""
        if self.channels_last:
            self.net.to(memory_format=torch.channels_last)
        if self.compile_network and self.__dict__["_compiled"] is None:
            self.__dict__["_compiled"] = torch.compile(self.net)

    @contextmanager
    def network_runner(self, runner: Callable[[Tensor], Tensor]) -> Iterator[None]:
        """Let a data-parallel strategy run the network (scatter, replicas, gather) for a step.

        Everything else in the step (loss, metrics, logging) stays on the root module.
        Kept out of ``nn.Module`` registration so that no ``module.`` keys enter checkpoints.
        """
        self.__dict__["_network_runner"] = runner
        try:
            yield
        finally:
            self.__dict__["_network_runner"] = None

    def forward(self, images: Tensor) -> Tensor:
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        runner = self.__dict__["_network_runner"]
        if runner is not None:
            return runner(images)
        return (self.__dict__["_compiled"] or self.net)(images)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        images, labels = batch
        logits = self(images)
        loss = F.cross_entropy(logits, labels)
        self.train_acc.update(logits.detach(), labels)  # computed once, at the epoch's end
        batch_size = labels.numel()
        self.log(
            "train/loss",
            loss.detach(),
            on_step=False,
            on_epoch=True,
            sync_dist=True,
            batch_size=batch_size,
        )
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True, batch_size=batch_size)
        return loss

    def _evaluate(self, batch: tuple[Tensor, Tensor], split: str, metric: MulticlassAccuracy):
        images, labels = batch
        logits = self(images)
        metric.update(logits, labels)
        batch_size = labels.numel()
        loss = F.cross_entropy(logits, labels)
        log = dict(on_epoch=True, add_dataloader_idx=False, batch_size=batch_size)
        self.log(f"{split}/loss", loss, sync_dist=True, **log)
        self.log(f"{split}/acc", metric, **log)

    def validation_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Loader 0 is the test set, evaluated after every epoch as d2l does; 1 is ``val``."""
        if dataloader_idx == 0:
            self._evaluate(batch, "test", self.test_acc)
        else:
            self._evaluate(batch, "val", self.val_acc)

    def test_step(self, batch, batch_idx: int) -> None:
        self._evaluate(batch, "test", self.test_acc)

    def configure_optimizers(self):
        optimizer = instantiate(self.hparams.optimizer)(self.net.parameters())
        if not self.hparams.scheduler:
            return optimizer
        scheduler = instantiate(self.hparams.scheduler)(optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"},
        }
