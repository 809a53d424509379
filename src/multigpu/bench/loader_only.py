"""The input pipelines alone: batches per second with no network, to show what each pipeline
costs when the step itself is not the bottleneck.

``python -m multigpu.bench.loader_only --pipeline memory --batch 256 --steps 30 --out x.json``
"""

from __future__ import annotations

import time

import torch

from multigpu.bench.step_timer import sync, timed_run_parser, write_result
from multigpu.data import FashionMNISTDataModule


def main() -> None:
    parser = timed_run_parser(__doc__.splitlines()[0])
    parser.add_argument("--pipeline", choices=("torchvision", "memory"), required=True)
    parser.add_argument("--num-workers", type=int, default=2)
    args = parser.parse_args()

    device = torch.device(args.device)
    data = FashionMNISTDataModule(
        root=args.data_root,
        source=args.data_source,
        pipeline=args.pipeline,
        batch_size=args.batch,
        num_workers=args.num_workers,
    )
    data.setup("fit")
    if args.pipeline == "memory":
        data.in_memory(data.train_set, device)  # held on the device before the clock starts
    batches = iter(data.train_dataloader())
    start = None
    for step in range(args.warmup + args.steps):
        images, labels = next(batches)
        images = images.to(device, non_blocking=True)
        if step + 1 == args.warmup:
            sync(device)
            start = time.perf_counter()
    sync(device)
    write_result(args.out, args.steps, args.batch, time.perf_counter() - start, device)


if __name__ == "__main__":
    main()
