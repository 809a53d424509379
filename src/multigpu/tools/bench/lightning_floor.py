"""Lightning's own floor: the least a Lightning training step costs beyond a plain one.

``python -m multigpu.tools.bench.lightning_floor --out x.json [--width 1 --batch 8 ...]
[--profile x.prof]`` (``--profile``: cProfile's statistics of the fit alone, for ``pstats``)

The same network, loss, optimizer and in-memory batches as ``multigpu.tools.bench.overhead``
measures our step with, in a LightningModule with nothing else (a ``training_step`` that returns
the loss, ``configure_optimizers``) and a ``Trainer`` with nothing switched on (no logger, no
progress bar, no checkpoints, no callback but the measuring one, ``PlainStepsBeside``). What it
costs beyond the plain step is Lightning's loop itself: what no project built on it can save.
"""

from __future__ import annotations

import argparse
import cProfile

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor
from typing_extensions import override

from multigpu.data import SyntheticDataModule
from multigpu.models import resnet18
from multigpu.tools.bench.plain_loop import PlainStepsBeside


class BareClassifier(pl.LightningModule):
    def __init__(self, width: int, lr: float):
        super().__init__()
        self.net, self.lr = resnet18(width=width), lr

    @override
    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        images, labels = batch
        return F.cross_entropy(self.net(images), labels)

    @override
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.net.parameters(), lr=self.lr)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--width", type=int, default=1)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--num-train", type=int, default=8000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--profile", help="write cProfile's statistics of the fit here")
    args = parser.parse_args(argv)

    pl.seed_everything(42, verbose=False)
    data = SyntheticDataModule(num_train=args.num_train, batch_size=args.batch, pipeline="memory")
    measure = PlainStepsBeside(args.out, args.warmup, args.block, args.rounds)
    trainer = pl.Trainer(
        accelerator=args.accelerator,
        devices=1,
        max_epochs=1,
        callbacks=[measure],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    module = BareClassifier(args.width, lr=0.1)
    if not args.profile:
        trainer.fit(module, datamodule=data)
        return
    profile = cProfile.Profile()
    profile.runcall(trainer.fit, module, datamodule=data)
    profile.dump_stats(args.profile)


if __name__ == "__main__":
    main()
