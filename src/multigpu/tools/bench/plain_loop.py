"""The baseline of ratio 1: the same network, data, batch and optimizer in a bare PyTorch loop.

``python -m multigpu.tools.bench.plain_loop --width 8 --batch 256 --steps 30 --warmup 5
--out x.json``
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from multigpu.data import FashionMNISTDataModule
from multigpu.models import resnet18
from multigpu.tools.bench.step_timer import time_steps, timed_run_parser


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
        loss = F.cross_entropy(net(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    time_steps(step, args, device)


if __name__ == "__main__":
    main()
