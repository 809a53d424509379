"""How long a mistake takes to be answered: every bad-input case of docs/troubleshooting.md,
run as a user would (``python train.py <overrides>``), timed from start to exit, with its exit
status and its last line on stderr.

``python -m multigpu.bench.startup [--repeats 3] [--repo <checkout>] [--out outputs/startup]``

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

from multigpu.atomic import write_atomically, write_json

REPO = Path(__file__).resolve().parents[3]
CORES = os.cpu_count() or 1

# (name, script, overrides separated by spaces)
CASES = [
    ("devices zero", "train.py", "trainer.devices=0"),
    ("devices negative", "train.py", "trainer.devices=-3"),
    ("device ids negative", "train.py", "strategy=scatter_allreduce trainer.devices=[0,-1]"),
    ("gpu without CUDA", "train.py", "trainer.accelerator=gpu"),
    ("DDP processes over cores", "train.py", f"strategy=ddp trainer.devices={CORES + 1}"),
    ("num_nodes zero", "train.py", "trainer.num_nodes=0"),
    ("batch zero", "train.py", "data.batch_size=0"),
    ("batch over DDP processes", "train.py", "strategy=ddp trainer.devices=2 data.batch_size=1"),
    ("batch per device zero", "train.py", "data.batch_size_per_device=0"),
    ("lr zero", "train.py", "model.optimizer.lr=0"),
    ("lr not a number", "train.py", "model.optimizer.lr=fast"),
    ("lr rule unknown", "train.py", "model.lr_scaling.rule=sqrt"),
    ("width zero", "train.py", "model.net.width=0"),
    ("norm unknown", "train.py", "model.net.norm=group"),
    ("dp on several CPUs", "train.py", "strategy=dp trainer.devices=2"),
    ("split weights count", "train.py",
     "strategy=scatter_allreduce trainer.devices=2 strategy.split_weights=[1]"),
    ("seed not a number", "train.py", "seed=abc"),
    ("max_epochs negative", "train.py", "trainer.max_epochs=-5"),
    ("precision unknown", "train.py", "trainer.precision=8-true"),
    ("pipeline unknown", "train.py", "data.pipeline=fast"),
    ("ckpt_path missing", "train.py", "ckpt_path=nope.ckpt"),
    ("eval without ckpt_path", "eval.py", ""),
    ("eval ckpt_path missing", "eval.py", "ckpt_path=nope.ckpt"),
]  # fmt: skip


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
    lines = [
        "| case | exit | seconds (median) | lines on stderr | last line |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        last = row["last_line"].replace("|", "\\|")
        lines.append(
            f"| {row['case']} | {row['exit']} | {row['seconds']:.2f} | {row['stderr_lines']} "
            f"| {last} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m multigpu.bench.startup", description=__doc__)
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
        runs = [run_case(args.repo, script, overrides.split()) for _ in range(args.repeats)]
        seconds = statistics.median(r[0] for r in runs)
        _, status, last, lines = runs[-1]
        rows.append({"case": name, "script": script, "overrides": overrides, "exit": status,
                     "seconds": seconds, "runs": [round(r[0], 2) for r in runs],
                     "last_line": last, "stderr_lines": lines})  # fmt: skip
        print(f"{name}: exit {status}, {seconds:.2f} s: {last}", flush=True)
    write_json(args.out / "startup.json", {"repo": str(args.repo), "rows": rows})
    markdown = to_markdown(rows)
    write_atomically(args.out / "startup.md", markdown)
    print("\n" + markdown, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
