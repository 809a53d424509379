"""``bench.json``, what ``python -m multigpu.tools.bench`` measured, declared once: the bench
builds it, the acceptance reads it (``read_bench_file``, checked whole, one line when it is
not to be trusted, as every file a run leaves)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from multigpu.storage.file_model import FileModel, checked
from multigpu.storage.json_file import read_json
from multigpu.storage.record_model import Count, Measured, about


class Machine(FileModel):
    cpu_cores: Count | None = Field(description="os.cpu_count()")
    gpu: str | None = Field(description="the first GPU's name, or null without one")
    torch: str = Field(description="torch's version")


class Settings(FileModel):
    """The command's arguments."""

    batch: int = Field(ge=1, description="global batch size")
    steps: int = Field(ge=1, description="timed steps per configuration")
    warmup: int = Field(ge=1, description="untimed steps before them")
    jobs: int = Field(1, ge=1, description="configurations run at once (for --tiny)")
    tiny: bool = Field(False, description="a smoke test, which judges no target")


class Configuration(Measured):
    """One configuration: the median over its rounds; or the error its last round ended in.
    Whole epochs: test_acc and epoch_s as its run's last epoch has them."""

    name: str = Field(description="the configuration")
    width: Count = Field(description="the network's width (0: no network)")
    error: str | None = about("what a failed run said last")
    images_per_s: float | None = about("training (or loading) images per second")
    epochs: Count | None = about("whole epochs: how many")
    tflops: float | None = about("achieved TFLOP/s (forward and backward)")
    mfu: float | None = about("tflops over the H100's dense bf16 peak")
    peak_rss_mb: float | None = about("the process's peak resident memory")

    @model_validator(mode="after")
    def measured_or_failed(self) -> Configuration:
        if self.error is None and self.images_per_s is None:
            raise ValueError("has neither images_per_s nor error")
        return self


class Ratio(FileModel):
    ratio: str = Field(description="its name, as docs/performance.md numbers it")
    value: float = Field(description="the median over the rounds of each round's ratio")
    rounds: list[float] = Field([], description="each round's ratio")
    target: str | None = Field(description="the target, or null")
    met: bool | None = Field(description="whether it met it; null: no target, or --tiny")
    meaning: str = Field(description="what it measures")


class Bench(FileModel):
    """``bench.json``."""

    machine: Machine
    settings: Settings
    configurations: list[Configuration]
    ratios: list[Ratio]


def built(**report: Any) -> dict[str, Any]:
    """``bench.json``'s content, checked as it is built."""
    return Bench(**report).model_dump(exclude_unset=True)


def read_bench_file(path: Path) -> dict[str, Any]:
    """``bench.json`` checked whole; a ``BadRecord`` naming it otherwise."""
    return checked(path, read_json(path), Bench)


BENCH_FILES = ("bench.json", "bench.md", "runs")  # what a bench writes into its --out


def keep_earlier(out: Path) -> Path | None:
    """An earlier bench in ``out`` (finished, or stopped: its runs alone) moved to
    ``out/earlier/<when it was written>``, where the new one leaves it (it had replaced the
    earlier figures); that folder, or None."""
    there = [out / name for name in BENCH_FILES if (out / name).exists()]
    if not (out / "bench.json").exists() and not any((out / "runs").glob("*.log")):
        return None  # no bench's: a bench leaves each run's log
    written = time.localtime(max(path.stat().st_mtime for path in there))
    kept = out / "earlier" / time.strftime("%Y-%m-%d_%H-%M-%S", written)
    for number in range(2, 10**6):  # two benches written within a second: one folder each
        try:
            kept.mkdir(parents=True)
            break
        except FileExistsError:
            kept = kept.with_name(f"{kept.name.split('+')[0]}+{number}")
    for path in there:
        path.rename(kept / path.name)
    return kept
