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
from multigpu.callbacks.interrupts import skipped_on_signal  # noqa: E402

TEST_LOADER = 0  # the module evaluates the test set as loader 0 (and a validation split as 1)
GRID_BATCHES = 2  # batches kept for the grid of misclassified images


def confusion_matrix(labels: Tensor, predicted: Tensor, classes: int) -> Tensor:
    return torch.bincount(labels * classes + predicted, minlength=classes**2).view(classes, classes)


# TensorBoard's Images tab shows an image 350 pixels wide, nearest-neighbour scaled, so a figure
# is drawn at that width: readable where it is shown, and the same with "actual size". Time
# Series fits it into about 380 x 210 pixels, so it is drawn no taller than it needs.
SHOWN_WIDTH = 350
DPI = 100


def row_percent(matrix: Tensor) -> Tensor:
    """Each true class's row as percentages of that class's images."""
    matrix = matrix.double()
    return 100 * matrix / matrix.sum(dim=1, keepdim=True).clamp(min=1)


def cell_text(count: int, percent: float) -> str:
    """A cell's percentage, rounded, but never to 0 or 100 when it is not: blank for no image,
    ``<1`` for a few, ``>99`` for all but a few."""
    if count == 0:
        return ""
    if percent < 1:
        return "<1"
    return ">99" if 99 < percent < 100 else f"{percent:.0f}"


def confusion_figure(matrix: Tensor, names: list[str]):
    """The confusion matrix at ``SHOWN_WIDTH``: each cell the percentage of its true class's
    images predicted as its column (the diagonal: each class's accuracy), blank where none."""
    percent = row_percent(matrix)
    size = SHOWN_WIDTH / DPI
    fig, ax = plt.subplots(figsize=(size, size * 0.8), dpi=DPI)
    ax.imshow(percent.numpy(), cmap="Blues", vmin=0, vmax=100)  # numpy: not via __array__
    classes = len(names)
    for i in range(classes):
        for j in range(classes):
            value = float(percent[i, j])
            ax.text(
                j,
                i,
                cell_text(int(matrix[i, j]), value),
                ha="center",
                va="center",
                fontsize=7,
                color="white" if value > 50 else "black",
            )
    ax.set_xticks(range(classes), names, rotation=50, ha="right", rotation_mode="anchor")
    ax.set_yticks(range(classes), names)
    ax.tick_params(labelsize=7.5, length=2, pad=2)
    ax.set_xlabel("predicted", fontsize=8, labelpad=2)
    ax.set_ylabel("true", fontsize=8, labelpad=2)
    total = int(matrix.sum())
    accuracy = float(matrix.diag().sum()) / max(total, 1)
    fig.suptitle(
        f"test accuracy {accuracy:.3f} ({total:,} images): % of each true class", fontsize=7.5
    )
    fig.tight_layout(pad=0.3)
    return fig


def misclassified_figure(images, labels, predicted, names: list[str], count: int = 15):
    """Up to ``count`` misclassified images, 5 a row, at ``SHOWN_WIDTH``: each titled with
    what it was predicted as, and what it is."""
    wrong = (labels != predicted).nonzero().flatten()[:count]
    columns = 5
    rows = max(1, -(-len(wrong) // columns))
    width = SHOWN_WIDTH / DPI
    fig, axes = plt.subplots(
        rows,
        columns,
        figsize=(width, 0.2 + rows * 0.8),
        dpi=DPI,
        squeeze=False,
        layout="constrained",
    )
    for ax in axes.flat:
        ax.axis("off")
    for ax, index in zip(axes.flat, wrong.tolist(), strict=False):
        ax.imshow(images[index, 0].numpy(), cmap="gray")
        ax.set_title(
            f"{names[predicted[index]]}\n(is {names[labels[index]]})", fontsize=6.5, pad=1.5
        )
    fig.suptitle("misclassified test images: predicted (is)", fontsize=8)
    fig.get_layout_engine().set(w_pad=0.02, h_pad=0.02, hspace=0.02, wspace=0.02)
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
