"""The baseline of ratio 1: the same network, data, batch and optimizer in a bare PyTorch loop;
and that loop's step run beside our Lightning step in one run (``PlainStepsBeside``, for
``python -m multigpu.tools.bench.overhead``).

``python -m multigpu.tools.bench.plain_loop --width 8 --batch 256 --steps 30 --warmup 5
--out x.json``
"""

from __future__ import annotations

import copy
import statistics
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from pytorch_lightning import Callback, LightningModule, Trainer
from torch import Tensor, nn
from torch.optim import Optimizer
from typing_extensions import override

from multigpu.data import FashionMNISTDataModule
from multigpu.models import resnet18
from multigpu.models.phases import device_now
from multigpu.storage.atomic import write_json
from multigpu.tools.bench.step_timer import time_steps, timed_run_parser


def plain_step(net: nn.Module, optimizer: Optimizer, images: Tensor, labels: Tensor) -> None:
    """One training step with nothing around it: what every framework step is measured
    against (here, and beside our Lightning step in ``multigpu.tools.bench.overhead``)."""
    loss = F.cross_entropy(net(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def overhead_summary(lightning_ms: list[float], plain_ms: list[float], block: int) -> dict:
    """The paired rounds and their medians: the overhead is the median of the differences
    within rounds, not the difference of the medians."""
    differences = [a - b for a, b in zip(lightning_ms, plain_ms, strict=True)]
    ratios = [a / b for a, b in zip(lightning_ms, plain_ms, strict=True)]
    return {
        "rounds": len(differences),
        "block": block,
        "lightning_ms_per_step": round(statistics.median(lightning_ms), 4),
        "plain_ms_per_step": round(statistics.median(plain_ms), 4),
        "overhead_ms_per_step": round(statistics.median(differences), 4),
        "ratio": round(statistics.median(ratios), 4),
        "overhead_ms_each": [round(d, 4) for d in differences],
    }


class PlainStepsBeside(Callback):
    """After ``warmup`` steps, ``rounds`` times: ``block`` Lightning steps, then ``block``
    plain steps (``plain_loop.plain_step``) on the same batches, with a copy of the network
    and an optimizer of the run's kind and settings; then training stops, and rank 0 writes
    ``overhead_summary(...)`` to ``path`` (``python -m multigpu.tools.bench.overhead``).

    A Lightning block runs from the end of this hook to the same point ``block`` steps later:
    whole loop iterations, fetching the batch, every hook and callback and logging included.
    The clock is read (on CUDA, once the device is done) only at the ends of blocks."""

    def __init__(self, path: str, warmup: int = 50, block: int = 20, rounds: int = 20):
        self.path = Path(path)
        self.warmup, self.block, self.rounds = warmup, block, rounds
        self.lightning_ms: list[float] = []
        self.plain_ms: list[float] = []
        self._batches: list[Any] = []
        self._plain: tuple[torch.nn.Module, torch.optim.Optimizer] | None = None
        self._started = 0.0

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        net = copy.deepcopy(pl_module.net)
        used = trainer.optimizers[0]
        self._plain = (net, type(used)(net.parameters(), **used.defaults))

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:  # fmt: skip
        device = trainer.strategy.root_device
        self._batches = [*self._batches, batch][-self.block :]
        done = trainer.global_step - self.warmup
        if done < 0 or done % self.block:
            return
        if done == 0:
            self._plain_steps()  # the plain side's warm-up
        else:
            self.lightning_ms.append((device_now(device) - self._started) * 1000 / self.block)
            start = device_now(device)
            self._plain_steps()
            self.plain_ms.append((device_now(device) - start) * 1000 / self.block)
        trainer.should_stop = trainer.should_stop or len(self.plain_ms) == self.rounds
        self._started = device_now(device)

    def _plain_steps(self) -> None:
        net, optimizer = self._plain
        for images, labels in self._batches:
            plain_step(net, optimizer, images, labels)

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.is_global_zero and self.plain_ms:
            write_json(self.path, overhead_summary(self.lightning_ms, self.plain_ms, self.block))


def main() -> None:
    parser = timed_run_parser(__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    torch.manual_seed(42)
    device = torch.device(args.device)
    data = FashionMNISTDataModule(
        root=args.data_root, source=args.data_source, pipeline="memory", batch_size=args.batch
    )
    data.setup("fit")
    train = data.in_memory(data.train_set, device).to(device)
    net = resnet18(width=args.width).to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=args.lr)
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(42)).to(device)

    def step(i: int) -> None:
        first = i * args.batch % (len(train) - args.batch)
        images, labels = train[order[first : first + args.batch]]
        plain_step(net, optimizer, images, labels)

    time_steps(step, args, device)


if __name__ == "__main__":
    main()
