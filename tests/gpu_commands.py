"""Every command this project runs or documents on GPUs, in one place: ``tests/test_gpu.py`` runs
the GPU tests' commands on a real GPU, and ``tests/test_gpu_admission.py`` admits all of them
(the GPU tests', the acceptance's, and every ``python train.py`` line of the README and docs/)
on simulated machines of 1, 2 and 8 GPUs, so that a check which would refuse one fails the CPU
suite before any GPU runs it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The GPU tests' building blocks (tests/test_gpu.py).
STRATEGIES = {
    "single": ["strategy=single"],
    "dp": ["strategy=dp", "trainer.devices=1"],
    "scatter_allreduce": ["strategy=scatter_allreduce", "trainer.devices=[0,0]"],
    "ddp": ["strategy=ddp", "trainer.devices=1"],
}
ON_GPU = [
    "model.net.width=8",
    "trainer.max_epochs=1",
    "trainer.accelerator=gpu",
    "data.batch_size=64",
    "callbacks.progress_bar=null",
]
SMALL = [*ON_GPU, "data=synthetic", "data.num_train=256", "data.num_test=64"]
# The same optimisation, step for step, on the full batch or split (test_strategies' recipe).
SYNTHETIC = ["data=synthetic", "data.num_train=80", "data.num_test=32"]
EXACT = [
    "data.batch_size=32",
    "data.shuffle=false",
    "data.num_workers=0",
    "model.net.width=4",
    "model.net.norm=none",
    "model.net.init_std=null",
    "model.optimizer.lr=0.05",
    "model.optimizer.momentum=0.9",
    "trainer.accelerator=gpu",
    "trainer.max_epochs=1",
    "+trainer.deterministic=true",
    "callbacks.progress_bar=null",
    "float32_matmul_precision=highest",  # exact float32 matmuls: no TF32
]
TWO_REPLICAS = ["strategy=scatter_allreduce", "trainer.devices=[0,0]"]
SPEED = ["model.channels_last=true", "model.compile=true", "trainer.precision=bf16-mixed"]
# The same with CUDA graphs (experiment=speedrun_gpu's compile).
CUDA_GRAPHS = [*SPEED[:1], "model.compile={mode:reduce-overhead}", *SPEED[2:]]


def gpu_test_commands() -> dict[str, list[str]]:
    """The overrides of every ``train.py`` run of tests/test_gpu.py, by a readable name."""
    found: dict[str, list[str]] = {}
    for name, strategy in STRATEGIES.items():
        for precision in ("32-true", "bf16-mixed"):
            found[f"trains[{name}-{precision}]"] = [
                *SMALL, *strategy, f"trainer.precision={precision}"
            ]  # fmt: skip
        found[f"speed[{name}]"] = [*SMALL, *strategy, *SPEED]
        found[f"cuda_graphs[{name}]"] = [*SMALL, *strategy, *CUDA_GRAPHS]
        found[f"phases[{name}]"] = [*SMALL, *strategy, "trainer.max_epochs=2", "phases=true"]
    found["replicas_equal_one_device[single]"] = [*EXACT, *SYNTHETIC, "strategy=single"]
    found["replicas_equal_one_device[split]"] = [*EXACT, *SYNTHETIC, *TWO_REPLICAS]
    real = ["data.train_subset=512", "data.test_subset=128"]
    for pipeline in ("memory", "torchvision"):
        found[f"pipeline[{pipeline}]"] = [*EXACT, *real, f"data.pipeline={pipeline}"]
    found["cuda_checkpoint"] = [*ON_GPU, "data.test_subset=512", "data.train_subset=1024"]
    return found


# Documented commands that cannot be admitted as written: placeholders, shell variables, a
# folder of the user's own (--config-dir), a run to resume (ckpt_path=latest).
PLACEHOLDER = re.compile(r"[<$]|\.\.\.|--config|ckpt_path=")
# Where the GPU commands are documented; docs/troubleshooting.md shows mistakes on purpose.
DOCUMENTS = ("README.md", "docs/*.md")
MISTAKES_SHOWN = ("docs/troubleshooting.md",)


def documented_commands() -> dict[str, list[str]]:
    """Every ``python train.py ...`` of the README and docs/, in a code block (lines continued
    with a backslash joined, comments dropped; not a ``$ `` transcript) or inline (a table's
    `` `python train.py ...` ``), as its arguments, by ``file:line``."""
    found: dict[str, list[str]] = {}
    for pattern in DOCUMENTS:
        for path in sorted(REPO.glob(pattern)):
            if str(path.relative_to(REPO)) not in MISTAKES_SHOWN:
                found.update(commands_in(path))
    return found


TRAIN = re.compile(r"python train\.py\b([^`]*)")
INLINE = re.compile(r"`python train\.py\b([^`]*)`")


def commands_in(path: Path) -> dict[str, list[str]]:
    found, fenced, joined, start = {}, False, "", 0
    name = path.relative_to(REPO)
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            for inline in INLINE.finditer(line):
                add(found, f"{name}:{number}", inline[1])
            continue
        if line.lstrip().startswith("$ ") and not joined:
            continue  # a transcript, shown with its output (a mistake and its answer)
        text = line.split(" #")[0].rstrip()
        start = start if joined else number
        joined += " " + text.rstrip("\\")
        if text.endswith("\\"):
            continue
        command, joined = TRAIN.search(joined), ""
        if command:
            add(found, f"{name}:{start}", command[1])
    return found


def add(found: dict[str, list[str]], where: str, arguments: str) -> None:
    if not PLACEHOLDER.search(arguments):
        key = where if where not in found else f"{where}+{len(found)}"
        found[key] = shlex.split(arguments)


def acceptance_commands() -> dict[str, list[str]]:
    """The ``train.py`` runs of the GPU acceptance (``multigpu.tools.acceptance``): its speedrun
    seeds and variants, its step profiles, and the benchmark's whole-epoch recipes as the
    benchmark starts them where there is a GPU."""
    from multigpu.config import settings
    from multigpu.tools import acceptance
    from multigpu.tools.bench import __main__ as bench

    found = {
        f"speedrun seed {seed}": acceptance.speedrun_overrides(seed, Path("speedrun"), False)
        for seed in acceptance.SPEEDRUN["seeds"]
    }
    speedrun = acceptance.speedrun_overrides(0, Path("speedrun"), False)
    found |= {f"speedrun {name}": [*speedrun, *changes]
              for name, changes in acceptance.SPEEDRUN_VARIANTS.items()}  # fmt: skip
    found |= {f"profile {name}": list(runs) for name, runs in acceptance.PROFILES.items()}
    counted, settings.cuda_device_count = settings.cuda_device_count, lambda: 1
    bench.has_cuda.cache_clear()
    try:
        args = bench.parse_args(["--only", *acceptance.EPOCH_TARGETS, "--data-root", "data"])
        for config in bench.configurations(args):
            if config["name"] in acceptance.EPOCH_TARGETS:
                command = bench.command(config, args, Path("bench") / f"{config['name']}.json")
                found[config["name"]] = command[command.index(str(bench.REPO / "train.py")) + 1 :]
    finally:
        settings.cuda_device_count = counted
        bench.has_cuda.cache_clear()
    return found
