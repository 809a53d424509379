"""How long a mistake takes to be answered: every bad-input case of docs/troubleshooting.md,
run as a user would (``python train.py <overrides>``), timed from start to exit, with its exit
status and its last line on stderr.

``python -m multigpu.tools.bench.startup [--repeats 3] [--repo <checkout>] [--out outputs/startup]``

``--repo`` times another checkout's ``train.py`` and ``eval.py`` with this same list, so that
two versions are measured side by side on the same machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from multigpu.storage.atomic import write_atomically, write_json
from multigpu.tools.bench.mistakes import MISTAKES
from multigpu.tools.markdown import table

REPO = Path(__file__).resolve().parents[4]

# The mistakes timed, by the name the tables show, and their case in the one list of them
# (``multigpu.tools.bench.mistakes``), which gives the overrides.
TIMED = [
    ("devices zero", "devices_zero"),
    ("devices negative", "devices_negative"),
    ("device ids negative", "device_ids_negative"),
    ("gpu without CUDA", "device_ids_without_cuda"),
    ("DDP processes over cores", "devices_more_than_cpu_cores"),
    ("num_nodes zero", "num_nodes_zero"),
    ("batch zero", "batch_zero"),
    ("batch over DDP processes", "batch_smaller_than_ddp_processes"),
    ("batch per device zero", "batch_per_device_zero"),
    ("lr zero", "lr_zero"),
    ("lr not a number", "lr_not_a_number"),
    ("lr rule unknown", "lr_rule_unknown"),
    ("width zero", "width_zero"),
    ("norm unknown", "unknown_norm"),
    ("dp on several CPUs", "dp_several_devices_on_cpu"),
    ("split weights count", "split_weights_count"),
    ("seed not a number", "seed_not_a_number"),
    ("max_epochs negative", "max_epochs_negative"),
    ("precision unknown", "precision_unknown"),
    ("pipeline unknown", "pipeline_unknown"),
]
# (name, script, overrides): the mistakes above, then paths that are not config values.
CASES = [(name, "train.py", MISTAKES[case][0]) for name, case in TIMED] + [
    ("ckpt_path missing", "train.py", ["ckpt_path=nope.ckpt"]),
    ("eval without ckpt_path", "eval.py", []),
    ("eval ckpt_path missing", "eval.py", ["ckpt_path=nope.ckpt"]),
]


def run_case(repo: Path, script: str, overrides: list[str]) -> tuple[float, int, str, int]:
    """(seconds, exit status, last stderr line, stderr lines) of one run, in a fresh folder."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["PYTHONPATH"] = os.pathsep.join([str(repo / "src"), env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as cwd:
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, str(repo / script), *overrides],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        seconds = time.perf_counter() - started
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    return seconds, result.returncode, (lines[-1] if lines else "")[:160], len(lines)


def to_markdown(rows: list[dict]) -> str:
    lines = table(
        ["case", "exit", "seconds (median)", "lines on stderr", "last line"],
        (
            [
                row["case"],
                row["exit"],
                f"{row['seconds']:.2f}",
                row["stderr_lines"],
                row["last_line"],
            ]
            for row in rows
        ),
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m multigpu.tools.bench.startup", description=__doc__
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--repo", type=Path, default=REPO, help="checkout whose scripts to time")
    parser.add_argument("--out", type=Path, default=Path("outputs/startup"))
    parser.add_argument("--only", nargs="*", help="case names to run")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    rows = []
    for name, script, overrides in CASES:
        if args.only and name not in args.only:
            continue
        runs = [run_case(args.repo, script, overrides) for _ in range(args.repeats)]
        seconds = statistics.median(r[0] for r in runs)
        _, status, last, lines = runs[-1]
        rows.append({"case": name, "script": script, "overrides": " ".join(overrides),
                     "exit": status, "seconds": seconds, "runs": [round(r[0], 2) for r in runs],
                     "last_line": last, "stderr_lines": lines})  # fmt: skip
        print(f"{name}: exit {status}, {seconds:.2f} s: {last}", flush=True)
    write_json(args.out / "startup.json", {"repo": str(args.repo), "rows": rows})
    markdown = to_markdown(rows)
    write_atomically(args.out / "startup.md", markdown)
    print("\n" + markdown, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
