"""``python -m multigpu.tools.bench.overhead [options] [overrides]``: what our Lightning training
step costs beyond a plain PyTorch step, in milliseconds per step, and how much of that is
Lightning's own floor; prints JSON.

Two runs, one after the other, each measuring itself against a plain loop inside it
(``plain_loop.PlainStepsBeside``): after ``--warmup`` steps, blocks of ``--block`` Lightning
steps alternate with blocks of as many plain steps (``plain_loop.plain_step``: forward, loss,
zero_grad, backward, optimizer step, nothing else) on the same batches. Blocks a few
milliseconds long see the same machine on both sides, however busy it is; each round's
difference is one sample, and the median over ``--rounds`` rounds is the overhead.

- ``ours``: ``python train.py`` with the project's module, callbacks and loop, on a network so
  small its arithmetic hardly counts (``--width``, ``--batch``), in-memory synthetic data, no
  logger, no per-epoch evaluation, no optional callbacks (``overrides`` change any of it).
- ``lightning_floor``: the same network, batches and optimizer in a bare LightningModule and
  ``Trainer`` (``multigpu.tools.bench.lightning_floor``): what Lightning's loop costs itself.

``ours_beyond_floor_ms`` is the difference of the two overheads: what this project adds.
Both runs use ``--threads`` threads (1: the step's arithmetic is negligible, and on a busy
machine one thread does not wait for the others).

Example: ``python -m multigpu.tools.bench.overhead --rounds 40`` (docs/performance.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from multigpu.config.errors import UserError
from multigpu.tools.arguments import DefaultsHelp, OneLineParser, number, output_folder
from multigpu.tools.bench.__main__ import WIDTH, last_line
from multigpu.tools.bench.instrumented import run_measured, with_defaults

COUNT = number(1, 100_000, integer=True)
TARGET = "multigpu.tools.bench.plain_loop.PlainStepsBeside"


def parse_args(argv: list[str] | None = None):
    parser = OneLineParser(
        prog="python -m multigpu.tools.bench.overhead",
        description=__doc__,
        formatter_class=DefaultsHelp,
    )
    add = parser.add_argument
    add("--width", type=WIDTH, default=1, help="network width")
    add("--batch", type=COUNT, default=8, help="batch size")
    add("--warmup", type=COUNT, default=50, help="untimed steps first")
    add("--block", type=COUNT, default=20, help="steps per block")
    add("--rounds", type=COUNT, default=20, help="pairs of blocks")
    add("--threads", type=number(1, 1024, integer=True), default=1, help="torch threads")
    add("--out", type=output_folder, help="keep the runs here (default: not kept)")
    add("overrides", nargs="*", help="train.py's, for our run")
    return parser.parse_args(argv)


def our_overrides(args) -> list[str]:
    """The run of our step: nothing but training steps, ``--rounds`` blocks' worth in one epoch
    (an epoch's end inside a block would be timed as part of a step)."""
    steps = args.warmup + args.block * (args.rounds + 1)
    defaults = [
        f"model.net.width={args.width}",
        f"data.batch_size={args.batch}",
        "data=synthetic",
        "data.pipeline=memory",
        f"data.num_train={steps * args.batch}",
        "+trainer.limit_val_batches=0",
        "callbacks=none",
        "~logger",
        "trainer.max_epochs=1",
    ]
    return with_defaults(args.overrides, defaults)


def floor_command(args, result: Path) -> list[str]:
    steps = args.warmup + args.block * (args.rounds + 1)
    return [
        *(sys.executable, "-m", "multigpu.tools.bench.lightning_floor", "--out", str(result)),
        *("--width", str(args.width), "--batch", str(args.batch)),
        *("--num-train", str(steps * args.batch), "--warmup", str(args.warmup)),
        *("--block", str(args.block), "--rounds", str(args.rounds)),
    ]


def run_floor(args, env: dict[str, str], out: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="floor-") as temporary:
        folder = Path(out or temporary)
        folder.mkdir(parents=True, exist_ok=True)
        result, log = folder / "floor.json", folder / "floor.out"
        with log.open("w") as sink:
            done = subprocess.run(floor_command(args, result), env=env, stdout=sink, stderr=sink)
        if done.returncode != 0 or not result.is_file():
            raise RuntimeError(last_line(log, done.returncode))
        return json.loads(result.read_text())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    threads = str(args.threads)
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    params = {"warmup": args.warmup, "block": args.block, "rounds": args.rounds}
    overrides = our_overrides(args)
    ours_out = args.out / "ours" if args.out else None
    try:
        ours = run_measured(TARGET, params, overrides, ours_out, env=env)
        floor = run_floor(args, env, args.out)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RuntimeError as err:
        print(f"error: a run failed: {err}", file=sys.stderr)
        return 1
    beyond = ours["overhead_ms_per_step"] - floor["overhead_ms_per_step"]
    report = {
        "ours": {**ours, "overrides": overrides},
        "lightning_floor": floor,
        "ours_beyond_floor_ms": round(beyond, 4),
        "threads": args.threads,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
