"""What every data module shares: the global batch size and the loaders built from it."""

from __future__ import annotations

import os
from typing import Any

import torch
from pytorch_lightning import LightningDataModule
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset
from typing_extensions import override

from multigpu.config.errors import UserError
from multigpu.config.names import Pipeline
from multigpu.config.settings import loader_defaults
from multigpu.data.augment import augment
from multigpu.data.memory import IndexBatches, TensorImages, to_tensor_images


class EpochSampler(DistributedSampler):
    """A ``DistributedSampler`` that takes its epoch from the trainer when iteration starts.

    Lightning calls ``set_epoch`` only after a resumed run has already opened its first
    iterator, so a run resumed at epoch k would replay epoch 0's order without this.

    ``every_sample_once`` (evaluation): the processes' shards hold each sample once, some one
    sample more than others, where ``DistributedSampler`` repeats samples to even them out:
    a test set of 33 on 2 processes was scored over 34, one image counted twice. Uneven
    shards (one batch more on some processes) need no collective per batch: DDP's forward
    under ``no_grad`` broadcasts the buffers at the first batch only, which every process has
    (``settings.check_evaluation_shares``), and the metrics are summed at the epoch's end.
    """

    trainer = None

    def __init__(self, *args: Any, every_sample_once: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if every_sample_once:  # no padding: this rank's share of range(len(dataset))
            self.total_size = len(self.dataset)
            self.num_samples = len(range(self.rank, self.total_size, self.num_replicas))

    @override
    def __iter__(self):
        if self.trainer is not None:
            # What Lightning passes to set_epoch; already restored when a resumed run starts.
            self.set_epoch(self.trainer.fit_loop.epoch_progress.current.processed)
        return super().__iter__()


def seeded_subset(dataset: Dataset, size: int | None, seed: int) -> Dataset:
    """A random, reproducible subset of ``size`` samples (all of them when ``size`` is null)."""
    if size is None or size >= len(dataset):
        return dataset
    indices = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:size]
    return Subset(dataset, indices.tolist())


def split_off(dataset: Dataset, size: int, seed: int) -> tuple[Dataset, Dataset]:
    """Carve a seeded hold-out of ``size`` samples from ``dataset``: (rest, hold-out). How many
    samples there are is known only now, so this one check stays here."""
    total = len(dataset)
    if size >= total:
        raise UserError(
            f"data.val_size={size!r} must be between 0 and {total - 1} (the training samples)"
        )
    order = torch.randperm(total, generator=torch.Generator().manual_seed(seed + 1)).tolist()
    return Subset(dataset, order[size:]), Subset(dataset, order[:size])


class ImageDataModule(LightningDataModule):
    """Base for the data modules. ``batch_size`` is what this process loads per step:
    ``train()`` passes the global ``data.batch_size`` divided by the DDP processes (single-
    process strategies load the whole global batch and split it themselves).

    ``pipeline``: ``torchvision`` (a ``DataLoader`` over per-sample transforms, the reference)
    or ``memory`` (each split one tensor on the training device, batches cut by index); both
    give the same batches. ``augment`` adds a random crop after ``crop_padding`` pixels of
    padding and a horizontal flip, applied to whole training batches on their device.
    ``drop_last`` trains on whole batches only (one shape for a compiled network).
    """

    def __init__(
        self,
        batch_size: int = 256,
        num_workers: int | None = None,
        seed: int = 42,
        train_subset: int | None = None,
        test_subset: int | None = None,
        val_size: int = 0,
        pin_memory: bool | None = None,
        shuffle: bool = True,
        pipeline: Pipeline = "torchvision",
        augment: bool = False,
        crop_padding: int = 2,
        flip: bool = True,
        drop_last: bool = False,
    ):
        super().__init__()
        self.batch_size = batch_size
        # Unset (a module built outside a run): what a run on this machine would choose.
        self.num_workers, self.pin_memory = loader_defaults(
            {"pipeline": pipeline, "num_workers": num_workers, "pin_memory": pin_memory},
            "cuda" if torch.cuda.is_available() else "cpu",
            os.cpu_count() or 1,
            processes=1,
        )
        self.seed = seed
        self.train_subset = train_subset
        self.test_subset = test_subset
        self.val_size = val_size
        self.shuffle = shuffle
        self.pipeline = pipeline
        self.augment = augment
        self.crop_padding = crop_padding
        self.flip = flip
        self.drop_last = drop_last
        self._in_memory: dict[int, TensorImages] = {}
        self._augment_generator: tuple[int, torch.Generator] | None = None
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None

    def load_datasets(self) -> tuple[Dataset, Dataset]:
        """Return the full (train, test) datasets."""
        raise NotImplementedError

    def normalization(self) -> tuple[float, float]:
        """(mean, std) the images are normalised with; the in-memory pipeline applies it."""
        return 0.0, 1.0

    @override
    def setup(self, stage: str | None = None) -> None:
        if self.test_set is not None:
            return
        train, test = self.load_datasets()
        train = seeded_subset(train, self.train_subset, self.seed)
        if self.val_size:
            train, self.val_set = split_off(train, self.val_size, self.seed)
        self.train_set = train
        self.test_set = seeded_subset(test, self.test_subset, self.seed)

    def _loader(
        self, dataset: Dataset, shuffle: bool, drop_last: bool = False, train: bool = False
    ) -> DataLoader:
        """Every loader reads through a ``DistributedSampler`` made here, one process or many.

        Its order is a function of ``data.seed`` and the epoch, so ``data.shuffle`` and
        ``data.seed`` mean the same under every strategy, and a run resumed at epoch k sees the
        batches an uninterrupted run sees. Under DDP each process reads its own shard
        (Lightning's injected sampler would always shuffle the training set): in training
        evened out by repeating samples, as every process takes the same steps; in evaluation
        each sample once.
        """
        trainer = self.trainer
        processes = trainer.world_size if trainer is not None else 1
        rank = trainer.global_rank if trainer is not None else 0
        sampler = EpochSampler(
            dataset, processes, rank, shuffle=shuffle, seed=self.seed, every_sample_once=not train
        )
        sampler.trainer = trainer
        if self.pipeline == "memory":
            held = self.in_memory(dataset)
            batches = IndexBatches(sampler, self.batch_size, held.images.device, drop_last)
            return DataLoader(held, batch_size=None, sampler=batches)
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            sampler=sampler,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            pin_memory=self.pin_memory,
            drop_last=drop_last,
        )

    def in_memory(self, dataset: Dataset, device: torch.device | None = None) -> TensorImages:
        """The split as one tensor, built once, on ``device`` or else the training GPU when
        there is one (the CPU otherwise)."""
        key = id(dataset)
        if key not in self._in_memory:
            held = to_tensor_images(dataset, *self.normalization())
            if device is None and self.trainer is not None:
                device = self.trainer.strategy.root_device
            self._in_memory[key] = held.to(device) if device and device.type == "cuda" else held
        return self._in_memory[key]

    @override
    def on_after_batch_transfer(self, batch: tuple[Tensor, Tensor], dataloader_idx: int):
        """Augment training batches where they are (the GPU, after the transfer)."""
        if not self.augment or self.trainer is None or not self.trainer.training:
            return batch
        images, labels = batch
        mean, std = self.normalization()
        fill = (0.0 - mean) / std  # a black pixel, normalised
        generator = self.augment_generator(images.device)
        return augment(images, self.crop_padding, self.flip, fill, generator), labels

    def augment_generator(self, device: torch.device) -> torch.Generator:
        """Seeded by (seed, epoch, rank): the same crops and flips in a resumed run."""
        epoch = self.trainer.current_epoch
        if self._augment_generator is None or self._augment_generator[0] != epoch:
            seed = (self.seed * 1_000_003 + epoch) * 1009 + self.trainer.global_rank
            self._augment_generator = (epoch, torch.Generator(device).manual_seed(seed))
        return self._augment_generator[1]

    @override
    def train_dataloader(self) -> DataLoader:
        return self._loader(
            self.train_set, shuffle=self.shuffle, drop_last=self.drop_last, train=True
        )

    @override
    def val_dataloader(self) -> list[DataLoader]:
        """The test set after every epoch (as d2l does), then the validation split if any."""
        loaders = [self._loader(self.test_set, shuffle=False)]
        if self.val_set is not None:
            loaders.append(self._loader(self.val_set, shuffle=False))
        return loaders

    @override
    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)
