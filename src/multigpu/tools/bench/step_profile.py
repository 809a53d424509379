"""``python -m multigpu.tools.bench.step_profile [options] [overrides]``: where a training run's
steady step spends its time, the host or the device; prints JSON (``ms_per_step``,
``device_busy_share``, kernels and host ops per step, the costliest of each, and the ops issued
one by one outside compiled graphs, ``eager_ops_per_step``) and a summary.

The run is ``python train.py <overrides>``; after ``--first-step`` steps (warm-up, allocation,
compilation) it times ``--steps`` steps, then profiles ``--steps`` more under
``torch.profiler`` and stops (``multigpu.callbacks.step_profile``). Both windows lie in one
epoch, before its evaluation (not a step's work), and count batches (with
``+trainer.accumulate_grad_batches=N``, N a step). A device busy for a small share of the step
waits on the host. Timings are of this machine as it is: other work on it shows in them.

Example: ``python -m multigpu.tools.bench.step_profile experiment=speedrun_gpu``.
"""

from __future__ import annotations

import json
import sys

from multigpu.tools.arguments import number
from multigpu.tools.bench.instrumented import measure, parse_measuring_args

STEPS = number(1, 2**31 - 1, integer=True)


def window(parser) -> None:
    parser.add_argument("--first-step", type=STEPS, default=30, help="first timed step")
    parser.add_argument("--steps", type=STEPS, default=20, help="steps timed, then profiled")
    parser.add_argument("--top", type=STEPS, default=12, help="kernels and host ops listed")


def parse_args(argv: list[str] | None = None):
    prog = "python -m multigpu.tools.bench.step_profile"
    return parse_measuring_args(prog, __doc__, window, argv)


def summary(result: dict) -> str:
    """The lines a person reads first."""
    lines = [f"{result['ms_per_step']:.2f} ms per step ({result['steps']} steps, plain); "
             f"{result['profiled_ms_per_step']:.2f} ms profiled"]  # fmt: skip
    if "summary_error" in result:
        return "\n".join([*lines, f"the profile could not be read: {result['summary_error']}"])
    busy, share = result.get("device_busy_ms_per_step"), result.get("device_busy_share")
    if busy is not None and share is not None:
        side = "the host" if share < 0.8 else "the device"
        lines.append(f"device busy {busy:.2f} ms a step ({share:.0%}): {side} limits the step")
    if busy is not None:
        lines.append(f"{result['kernels_per_step']:.0f} device events and "
                     f"{result['host_ops_per_step']:.0f} host ops a step")  # fmt: skip
    else:
        lines.append(f"{result['host_ops_per_step']:.0f} host ops a step (a CPU: no device "
                     "timeline)")  # fmt: skip
    if "eager_ops_per_step" in result:
        lines.append(f"{result['eager_ops_per_step']:.0f} ops a step issued one by one outside "
                     "compiled graphs")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    params = {"first_step": args.first_step, "steps": args.steps, "top": args.top, "stop": True}
    result = measure("multigpu.callbacks.StepProfile", params, args)
    if isinstance(result, int):
        return result
    if not result.get("complete"):
        last, ended = args.first_step + 2 * args.steps - 1, result.get("cut_by") or "its end"
        print(f"error: the run's steps {args.first_step}-{last} are not all in one epoch "
              f"({ended} came first): lower --first-step or --steps", file=sys.stderr)  # fmt: skip
        return 1
    print(json.dumps({**result, "overrides": args.overrides}, indent=2))
    print(summary(result), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
