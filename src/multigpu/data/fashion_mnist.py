"""Fashion-MNIST through torchvision, from a local folder of ``.gz`` or IDX files or downloaded."""

from __future__ import annotations

from pathlib import Path

from torchvision import transforms
from torchvision.datasets import FashionMNIST
from typing_extensions import override

from multigpu.config.errors import UserError, WriteFailed
from multigpu.data.base import ImageDataModule
from multigpu.data.idx import prepare_raw_folder
from multigpu.data.locate import (
    check_source,
    missing_data_message,
    raw_folder,
    source_folder,
    unwritable_root_message,
)
from multigpu.storage.atomic import check_writable

MEAN, STD = 0.2860, 0.3530


class FashionMNISTDataModule(ImageDataModule):
    """The 60,000 / 10,000 Fashion-MNIST images as d2l uses them (28x28, one channel)."""

    def __init__(
        self,
        root: str = "data",
        source: str | None = None,
        download: bool = True,
        normalize: bool = True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        # Stored in checkpoints, so that eval.py reads images as training did.
        self.save_hyperparameters("normalize", logger=False)
        self.root = Path(root).expanduser()
        self.source = Path(source).expanduser() if source else None
        self.download = download
        self.normalize = normalize

    @property
    def class_names(self) -> list[str]:
        return list(FashionMNIST.classes)

    @property
    def raw_folder(self) -> Path:
        return raw_folder(self.root)

    @property
    def source_folder(self) -> Path | None:
        return source_folder(self.source)

    @override
    def prepare_data(self) -> None:
        """Make the four IDX files usable in ``root``: unpack ``.gz`` files found in ``root`` or
        ``source``, else download, else stop with a message saying where to get them."""
        check_source(self.source)
        try:
            if prepare_raw_folder(self.raw_folder, self.source_folder):
                return
            if self.download:
                check_writable(self.raw_folder)  # where the download goes
        except WriteFailed as err:
            raise UserError(unwritable_root_message(self.root, self.raw_folder, err)) from None
        missing = missing_data_message(self.raw_folder, self.source_folder)
        if not self.download:
            raise UserError(missing + " (data.download=false)")
        try:
            FashionMNIST(str(self.root), train=True, download=True)
            FashionMNIST(str(self.root), train=False, download=True)
        except Exception as err:  # network errors come in many types; all mean the same here
            reason = " ".join(str(err).split())[:300] or type(err).__name__
            raise UserError(f"{missing}; download failed: {reason}") from None
        if not prepare_raw_folder(self.raw_folder):
            raise UserError(missing_data_message(self.raw_folder))

    def transform(self) -> transforms.Compose:
        steps = [transforms.ToTensor()]
        if self.normalize:
            steps.append(transforms.Normalize((MEAN,), (STD,)))
        return transforms.Compose(steps)

    @override
    def normalization(self) -> tuple[float, float]:
        return (MEAN, STD) if self.normalize else (0.0, 1.0)

    @override
    def load_datasets(self):
        self.prepare_data()  # idempotent: cheap when files are in place (also for direct use)
        transform = self.transform()
        train = FashionMNIST(str(self.root), train=True, transform=transform, download=False)
        test = FashionMNIST(str(self.root), train=False, transform=transform, download=False)
        return train, test
