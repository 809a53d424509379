"""At the end of training: the test set's confusion matrix and a grid of misclassified images,
as TensorBoard images (rank zero, on the root device, one pass over the test set)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from pytorch_lightning import Callback, LightningModule, Trainer  # noqa: E402
from pytorch_lightning.loggers import TensorBoardLogger  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402


@torch.no_grad()
def predict(net: torch.nn.Module, loader: DataLoader, device: torch.device):
    """Images, labels and predictions of the whole loader, on the CPU."""
    was_training = net.training
    net.eval()
    images, labels, predicted = [], [], []
    for x, y in loader:
        images.append(x)
        labels.append(y)
        predicted.append(net(x.to(device)).argmax(1).cpu())
    net.train(was_training)
    return torch.cat(images), torch.cat(labels), torch.cat(predicted)


def confusion_matrix(labels: torch.Tensor, predicted: torch.Tensor, classes: int) -> torch.Tensor:
    return torch.bincount(labels * classes + predicted, minlength=classes**2).view(classes, classes)


def confusion_figure(matrix: torch.Tensor, names: list[str]):
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
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        loggers = [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]
        datamodule = trainer.datamodule
        if not loggers or not trainer.is_global_zero or datamodule is None:
            return
        loader = DataLoader(datamodule.test_set, batch_size=512)
        images, labels, predicted = predict(pl_module.net, loader, pl_module.device)
        names = datamodule.class_names
        matrix = confusion_matrix(labels, predicted, len(names))
        step = trainer.current_epoch
        for logger in loggers:
            confusion = confusion_figure(matrix, names)
            logger.experiment.add_figure("test/confusion_matrix", confusion, step)
            grid = misclassified_figure(images, labels, predicted, names)
            logger.experiment.add_figure("test/misclassified", grid, step)
            logger.experiment.flush()
