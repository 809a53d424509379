"""The input pipelines alone: batches per second with no network, to show what each pipeline
costs when the step itself is not the bottleneck.

``python -m multigpu.tools.bench.loader_only --pipeline memory --batch 256 --steps 30 --out x.json``
"""

from __future__ import annotations

import os

import torch

from multigpu.config.settings import loader_defaults
from multigpu.data import FashionMNISTDataModule
from multigpu.tools.bench.step_timer import time_steps, timed_run_parser


def main() -> None:
    parser = timed_run_parser(__doc__.splitlines()[0])
    parser.add_argument("--pipeline", choices=("torchvision", "memory"), required=True)
    parser.add_argument("--num-workers", type=int, help="default: what a run here would use")
    args = parser.parse_args()

    device = torch.device(args.device)
    # What a training run on this machine would load with (data.num_workers/pin_memory null).
    chosen = {"pipeline": args.pipeline, "num_workers": args.num_workers}
    workers, pin = loader_defaults(chosen, device.type, os.cpu_count() or 1, processes=1)
    data = FashionMNISTDataModule(
        root=args.data_root,
        source=args.data_source,
        pipeline=args.pipeline,
        batch_size=args.batch,
        num_workers=workers,
        pin_memory=pin,
    )
    data.setup("fit")
    if args.pipeline == "memory":
        data.in_memory(data.train_set, device)  # held on the device before the clock starts
    batches = iter(data.train_dataloader())

    def step(i: int) -> None:
        images, _ = next(batches)
        images.to(device, non_blocking=True)  # as Lightning moves a batch to the device

    time_steps(step, args, device)


if __name__ == "__main__":
    main()
