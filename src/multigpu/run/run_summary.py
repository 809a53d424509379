"""The lines a run ends with in the terminal: how it did, where it is, how to look at it."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any


def shown_path(path: str | Path) -> str:
    """``path`` as the user would type it from here: relative when below the folder the
    command started in (Hydra's ``runtime.cwd``: under ``hydra.job.chdir`` the job runs in
    its own folder, which would show as ``.``); one starting with ``-`` with a ``./``, which
    a command does not read as an option."""
    from hydra.core.hydra_config import HydraConfig

    here = Path(HydraConfig.get().runtime.cwd) if HydraConfig.initialized() else Path.cwd()
    path = Path(path).absolute()
    try:
        shown = str(path.relative_to(here))
    except ValueError:
        return str(path)
    return f"./{shown}" if shown.startswith("-") else shown


def tensorboard_line(folder: str | Path) -> str:
    return f"look at it: tensorboard --logdir {shlex.quote(shown_path(folder))}"


def has_tensorboard_logs(folder: Path) -> bool:
    return any(folder.rglob("events.out.tfevents.*"))


def _accuracy(value: float | None) -> str:
    return "none" if value is None else f"{value:.4f}"


def closing_lines(record: dict[str, Any], output_dir: str | Path) -> list[str]:
    """A finished run's final and best test accuracy, speed (``multigpu.storage.record.speed``), its
    folder and, when it wrote TensorBoard logs, the command that shows them."""
    output_dir = Path(output_dir)
    epochs = record.get("epochs") or 0
    result = f"test accuracy {_accuracy(record.get('test_acc'))} after {epochs} epoch(s)"
    partial = (record.get("history") or [{}])[-1].get("partial_batches")
    if partial is not None:
        result += f", the last stopped after {partial} batch(es)"
    if record.get("best_test_acc") not in (None, record.get("test_acc")):
        result += f" (best {_accuracy(record['best_test_acc'])} at epoch {record['best_epoch']})"
    speed = [f"{record['epoch_s']:.1f} s/epoch"] if record.get("epoch_s") else []
    if record.get("samples_per_s"):
        speed.append(f"{record['samples_per_s']:,.0f} samples/s")
    if speed:
        result += "; " + ", ".join(speed)
    lines = [result, f"run folder: {shown_path(output_dir)}"]
    if has_tensorboard_logs(output_dir):
        lines.append(tensorboard_line(output_dir))
    return lines


def print_closing_lines(record: dict[str, Any], output_dir: str | Path) -> None:
    print("\n" + os.linesep.join(closing_lines(record, output_dir)), flush=True)
