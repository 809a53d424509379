"""``python -m multigpu.tools.bench.host_syncs [options] [overrides]``: how often a training run's
host waits for its device, counted over a window of steady-state steps; prints JSON
``{"steps", "syncs", "per_step", "method", "where", "overrides"}``.

The run is ``python train.py <overrides>`` (the config's own run, on its own device); the
count starts at step ``--first-step`` (after warm-up, allocation, compilation) and runs for
``--steps`` steps or to the first epoch's end, where training stops. On CUDA it is CUDA's own
(``torch.cuda.set_sync_debug_mode("warn")``); on a CPU, the reads that would wait on a GPU
(``multigpu.callbacks.host_syncs``). ``where`` names each by its line and Lightning hook: the
divergence check reads once per ``check_finite_every_n_steps`` steps and the progress bar
once per redraw (``callbacks.progress_bar.refresh_rate``), by design.

Example: ``python -m multigpu.tools.bench.host_syncs experiment=fast --first-step 20``.
"""

from __future__ import annotations

import json
import sys

from multigpu.tools.arguments import number
from multigpu.tools.bench.instrumented import measure, parse_measuring_args

STEPS = number(0, 2**31 - 1, integer=True)


def window(parser) -> None:
    parser.add_argument("--first-step", type=STEPS, default=5, help="first counted step")
    parser.add_argument(
        "--steps", type=number(1, 2**31 - 1, integer=True), help="default: to the epoch's end"
    )


def parse_args(argv: list[str] | None = None):
    return parse_measuring_args("python -m multigpu.tools.bench.host_syncs", __doc__, window, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    params = {"first_step": args.first_step, "steps": args.steps, "stop": True}
    result = measure("multigpu.callbacks.HostSyncCounter", params, args)
    if isinstance(result, int):
        return result
    print(json.dumps({**result, "overrides": args.overrides}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
