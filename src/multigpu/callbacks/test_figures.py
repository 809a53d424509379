"""The test set's confusion matrix and a grid of misclassified images, as TensorBoard images,
from the last evaluation of the test set during training: the module's own evaluation step,
under the run's precision and strategy, with no second pass over the data.

Every evaluation adds its predictions to a confusion matrix on the device (no host
synchronisation) and keeps its first batches for the grid; the matrix is summed over DDP
processes when the evaluation ends, and drawn by rank zero when training ends.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from pytorch_lightning import Callback, LightningModule, Trainer  # noqa: E402
from torch import Tensor  # noqa: E402
from typing_extensions import override  # noqa: E402

from multigpu.callbacks.hparams import tensorboard_loggers  # noqa: E402
from multigpu.interrupts import skipped_on_signal  # noqa: E402

TEST_LOADER = 0  # the module evaluates the test set as loader 0 (and a validation split as 1)
GRID_BATCHES = 2  # batches kept for the grid of misclassified images


def confusion_matrix(labels: Tensor, predicted: Tensor, classes: int) -> Tensor:
    return torch.bincount(labels * classes + predicted, minlength=classes**2).view(classes, classes)


def confusion_figure(matrix: Tensor, names: list[str]):
    fig, ax = plt.subplots(figsize=(7, 6))
    ax.imshow(matrix, cmap="Blues")
    for (i, j), count in zip(
        torch.cartesian_prod(*(torch.arange(len(names)),) * 2).tolist(),
        matrix.flatten().tolist(),
        strict=True,
    ):
        ax.text(
            j,
            i,
            count,
            ha="center",
            va="center",
            fontsize=7,
            color="white" if count > matrix.max() / 2 else "black",
        )
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(f"Test set confusion matrix (accuracy {matrix.diag().sum() / matrix.sum():.3f})")
    fig.tight_layout()
    return fig


def misclassified_figure(images, labels, predicted, names: list[str], count: int = 24):
    wrong = (labels != predicted).nonzero().flatten()[:count]
    columns = 8
    rows = max(1, -(-len(wrong) // columns))
    fig, axes = plt.subplots(rows, columns, figsize=(columns * 1.5, rows * 1.8), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, index in zip(axes.flat, wrong.tolist(), strict=False):
        ax.imshow(images[index, 0], cmap="gray")
        ax.set_title(f"{names[predicted[index]]}\n(true: {names[labels[index]]})", fontsize=7)
    fig.suptitle("Misclassified test images: predicted (true)")
    fig.tight_layout()
    return fig


class TestSetFigures(Callback):
    def __init__(self) -> None:
        self.matrix: Tensor | None = None
        self.examples: list[tuple[Tensor, Tensor, Tensor]] = []

    def _wanted(self, trainer: Trainer) -> bool:
        return bool(tensorboard_loggers(trainer)) and not trainer.sanity_checking

    @override
    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.matrix, self.examples = None, []

    @override
    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if dataloader_idx != TEST_LOADER or outputs is None or not self._wanted(trainer):
            return
        images, labels = batch
        classes = len(trainer.datamodule.class_names)
        counts = confusion_matrix(labels, outputs, classes)
        self.matrix = counts if self.matrix is None else self.matrix + counts
        if len(self.examples) < GRID_BATCHES:
            self.examples.append((images, labels, outputs))

    @override
    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.matrix is not None:  # every process evaluated its own shard of the test set
            self.matrix = trainer.strategy.reduce(self.matrix, reduce_op="sum")

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.is_global_zero or self.matrix is None:
            return
        with skipped_on_signal("the test figures"):
            self.draw(trainer)

    def draw(self, trainer: Trainer) -> None:
        names = trainer.datamodule.class_names
        matrix = self.matrix.cpu()
        images, labels, predicted = (torch.cat(t).cpu() for t in zip(*self.examples, strict=True))
        step = trainer.current_epoch
        for logger in tensorboard_loggers(trainer):
            confusion = confusion_figure(matrix, names)
            logger.experiment.add_figure("test/confusion_matrix", confusion, step)
            grid = misclassified_figure(images.float(), labels, predicted, names)
            logger.experiment.add_figure("test/misclassified", grid, step)
            logger.experiment.flush()
