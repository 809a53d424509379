"""What every data module shares: the global batch size and the loaders built from it."""

from __future__ import annotations

import torch
from pytorch_lightning import LightningDataModule
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

from multigpu.errors import UserError


def seeded_subset(dataset: Dataset, size: int | None, seed: int, name: str) -> Dataset:
    """A random, reproducible subset of ``size`` samples (all of them when ``size`` is null)."""
    if size is None:
        return dataset
    total = len(dataset)
    if not isinstance(size, int) or size <= 0:
        raise UserError(f"{name}={size!r} must be a positive number of samples, or null for all")
    if size >= total:
        return dataset
    indices = torch.randperm(total, generator=torch.Generator().manual_seed(seed))[:size]
    return Subset(dataset, indices.tolist())


def split_off(dataset: Dataset, size: int, seed: int) -> tuple[Dataset, Dataset]:
    """Carve a seeded hold-out of ``size`` samples from ``dataset``: (rest, hold-out)."""
    total = len(dataset)
    if not isinstance(size, int) or size < 0 or size >= total:
        raise UserError(
            f"data.val_size={size!r} must be between 0 and {total - 1} (the training samples)"
        )
    order = torch.randperm(total, generator=torch.Generator().manual_seed(seed + 1)).tolist()
    return Subset(dataset, order[size:]), Subset(dataset, order[:size])


class ImageDataModule(LightningDataModule):
    """Base for the data modules: ``batch_size`` is global, whatever the strategy.

    Single-process strategies (one device, dp, scatter_allreduce) load the whole global batch
    and split it themselves; under DDP each of the N processes loads ``batch_size / N``.
    """

    def __init__(
        self,
        batch_size: int = 256,
        num_workers: int = 0,
        seed: int = 0,
        train_subset: int | None = None,
        test_subset: int | None = None,
        val_size: int = 0,
        pin_memory: bool = False,
        shuffle: bool = True,
    ):
        super().__init__()
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise UserError(f"data.batch_size={batch_size!r} must be a positive integer, e.g. 256")
        if not isinstance(num_workers, int) or num_workers < 0:
            raise UserError(f"data.num_workers={num_workers!r} must be 0 or more")
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed
        self.train_subset = train_subset
        self.test_subset = test_subset
        self.val_size = val_size
        self.pin_memory = pin_memory
        self.shuffle = shuffle
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None

    def load_datasets(self) -> tuple[Dataset, Dataset]:
        """Return the full (train, test) datasets."""
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.test_set is not None:
            return
        train, test = self.load_datasets()
        train = seeded_subset(train, self.train_subset, self.seed, "data.train_subset")
        if self.val_size:
            train, self.val_set = split_off(train, self.val_size, self.seed)
        self.train_set = train
        self.test_set = seeded_subset(test, self.test_subset, self.seed, "data.test_subset")

    @property
    def processes(self) -> int:
        trainer = self.trainer
        return trainer.world_size if trainer is not None else 1

    @property
    def per_process_batch_size(self) -> int:
        processes = self.processes
        if self.batch_size % processes:
            multiple = (self.batch_size // processes + 1) * processes
            raise UserError(
                f"data.batch_size={self.batch_size} (global) does not divide over {processes} "
                f"processes: use a multiple of {processes}, e.g. data.batch_size={multiple}"
            )
        return self.batch_size // processes

    def _loader(self, dataset: Dataset, shuffle: bool) -> DataLoader:
        """Under DDP each process reads its own shard through a ``DistributedSampler`` made
        here, so that ``data.shuffle`` and ``data.seed`` mean the same under every strategy
        (Lightning's own sampler would always shuffle the training set)."""
        trainer = self.trainer
        sampler, generator = None, None
        if trainer is not None and trainer.world_size > 1:
            sampler = DistributedSampler(
                dataset, trainer.world_size, trainer.global_rank, shuffle=shuffle, seed=self.seed
            )
        elif shuffle:
            generator = torch.Generator().manual_seed(self.seed)
        return DataLoader(
            dataset,
            batch_size=self.per_process_batch_size,
            shuffle=shuffle if sampler is None else None,
            sampler=sampler,
            generator=generator,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            pin_memory=self.pin_memory,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=self.shuffle)

    def val_dataloader(self) -> list[DataLoader]:
        """The test set after every epoch (as d2l does), then the validation split if any."""
        loaders = [self._loader(self.test_set, shuffle=False)]
        if self.val_set is not None:
            loaders.append(self._loader(self.val_set, shuffle=False))
        return loaders

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)
