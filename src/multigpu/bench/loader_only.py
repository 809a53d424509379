"""The input pipelines alone: batches per second with no network, to show what each pipeline
costs when the step itself is not the bottleneck.

``python -m multigpu.bench.loader_only --pipeline memory --batch 256 --steps 30 --out x.json``
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from multigpu.bench.step_timer import peak_memory_mb, sync
from multigpu.data import FashionMNISTDataModule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", choices=("torchvision", "memory"), required=True)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--data-source", default=None)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", required=True)
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
    seconds = time.perf_counter() - start
    result = {
        "timed_steps": args.steps,
        "seconds": seconds,
        "images_per_s": args.steps * args.batch / seconds,
        **peak_memory_mb(device),
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
