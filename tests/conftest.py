"""Shared helpers: the offline Fashion-MNIST copy, Hydra composition, real ``train.py`` runs."""

from __future__ import annotations

import copy
import functools
import gzip
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hypothesis import HealthCheck, settings
from omegaconf import DictConfig

# One thread per process: the suite runs two workers (pytest -n 2) on two cores, and many tests
# start processes of their own (train.py, DDP ranks). torch's default of one thread per core in
# each of them makes the threads wait on each other; measured on this 2-core machine, the
# default suite took 692 s with it and 485 s with one thread. Set before torch is imported.
for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

# Generated inputs: the suite draws the same examples on every run (derandomize), so a suite
# that passes on main passes on a clone. MULTIGPU_EXPLORE=N draws fresh examples, N times as
# many, to look for failures the fixed draws miss: a failure found so is kept as a named case.
_explore = os.environ.get("MULTIGPU_EXPLORE") or "0"
if not _explore.isdigit():
    raise pytest.UsageError(f"MULTIGPU_EXPLORE={_explore!r}: give a whole number (10: ten times)")
EXPLORE = int(_explore)
settings.register_profile("suite", derandomize=True, database=None)
settings.register_profile("explore", max_examples=100 * max(EXPLORE, 1), derandomize=False)
settings.load_profile("explore" if EXPLORE else "suite")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Exploring multiplies the examples, and with them a test's time: no per-test limit."""
    if EXPLORE:
        for item in items:
            item.add_marker(pytest.mark.timeout(0), append=False)


def examples(count: int) -> settings:
    """Hypothesis settings for ``count`` examples (times MULTIGPU_EXPLORE when exploring), with
    no deadline: these tests build configs and write files, whose time varies."""
    return settings(
        max_examples=count * max(EXPLORE, 1),
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


REPO = Path(__file__).resolve().parents[1]
# The processes the tests start take the signals' defaults, whatever this one inherited: under
# `nohup` (SIGHUP ignored) a run leaves SIGHUP ignored, as a user's nohup asks, and the tests
# of what a hang-up does would see nothing happen; a shell's background job (`cmd &`, no job
# control) starts with SIGQUIT ignored, alike.
signal.signal(signal.SIGHUP, signal.SIG_DFL)
signal.signal(signal.SIGQUIT, signal.SIG_DFL)
# A run's environment that finds tests/probes.py (callbacks a test adds with +callbacks.x=...).
PROBES_ENV = {
    "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])
}
CONF = REPO / "conf"
SHARED_DATA = Path(os.environ.get("MULTIGPU_DATA", REPO.parent / "shared" / "data")).resolve()

# A narrow network on a few samples: whole runs in seconds on two CPU cores.
TINY = [
    "model.net.width=4",
    "trainer.accelerator=cpu",
    "trainer.max_epochs=1",
    "data.num_workers=0",
    "callbacks.progress_bar=null",
]


def compose_config(overrides: list[str], output_dir: Path | None = None) -> DictConfig:
    """The config ``train.py`` would see, with Hydra's choices but without its runtime (so
    ``output_dir`` is given)."""
    from multigpu.run.cli import register_resolvers

    register_resolvers()
    extra = [f"paths.output_dir={output_dir}"] if output_dir is not None else []
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=[*overrides, *extra], return_hydra_config=True)


@functools.cache
def _composed_once(overrides: tuple[str, ...]) -> DictConfig:
    return compose_config(list(overrides), Path("/never-created"))


def composed(overrides: list[str], output_dir: Path | None = None) -> DictConfig:
    """``compose_config``'s config, composed once per list of overrides and copied (Hydra's
    composition takes most of a generated case's time); ``paths.output_dir`` is set after, as
    the override would."""
    cfg = copy.deepcopy(_composed_once(tuple(overrides)))
    if output_dir is not None:
        cfg.paths.output_dir = str(output_dir)
    return cfg


def composed_command(argv: list[str], config_name: str = "config") -> Any | None:
    """The config the command line's check builds for ``argv`` (``command_line.job_config``),
    its names unchecked: once per set of group options (``typo_hydra.COMPOSED``), as a tool
    reading many commands' configs would."""
    from multigpu.config.typo_hydra import UsageError, composing, conf_dir, parse_overrides
    from multigpu.config.typos import Composition
    from multigpu.run.command_line import job_config

    try:
        overrides = parse_overrides(argv)
    except UsageError:
        return None
    with composing(conf_dir()):
        judged = Composition(config_name, overrides)
        return job_config(argv, judged) if judged.config is not None else None


def resolve_on(cfg: DictConfig, cuda_devices: int = 0, cpu_cores: int = 2, **machine):
    """The run ``cfg`` resolves to on a machine described here (a GPU machine, a cluster job),
    whatever this one is."""
    from multigpu.config.settings import Machine, resolve_run
    from multigpu.run.cli import hydra_runtime

    choices, multirun = hydra_runtime(cfg)
    machine = {"environ": {}, "multirun": multirun, **machine}
    return resolve_run(cfg, choices, Machine(cuda_devices, cpu_cores, **machine))


def run_script(
    script: str,
    *args: str,
    cwd: Path,
    timeout: float = 300,
    env: dict | None = None,
    cold: bool = False,
):
    """Run ``python <script> args`` as a user would, in ``cwd``; return the CompletedProcess.
    A real process, forked warm (tests/warm.py) unless ``cold`` or its imports are watched."""
    full_env = process_env(env)
    if cold or "PYTHONPROFILEIMPORTTIME" in full_env:
        return run_python(str(REPO / script), *args, cwd=cwd, timeout=timeout, env=env)
    from warm import run_warm

    return run_warm(str(REPO / script), list(args), cwd, full_env, timeout)


def start_script(
    script: str,
    *args: str,
    cwd: Path,
    env: dict | None = None,
    lines: tuple[int | None, int | None] = (None, None),
):
    """``python <script> args`` started in ``cwd``, forked warm (tests/warm.py): a process to
    signal, with what ``subprocess.Popen(..., stdout=PIPE, stderr=PIPE, text=True)`` offers.
    ``lines``: after how many lines of stdout and of stderr their reader goes away, as with
    ``| head -n N`` (``None``: read to the end); ``close_outputs()`` makes both go away."""
    from warm import WarmProcess

    return WarmProcess(str(REPO / script), list(args), cwd, process_env(env), lines)


def run_module(module: str, *args: str, cwd: Path, timeout: float = 300):
    """Run ``python -m <module> args`` as a user would, in ``cwd``."""
    return run_python("-m", module, *args, cwd=cwd, timeout=timeout)


def process_env(env: dict | None = None) -> dict[str, str]:
    """A run's environment: this one's, the shared data, no full Hydra tracebacks."""
    full_env = {**os.environ, "MULTIGPU_DATA": str(SHARED_DATA), **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None)
    return full_env


def run_python(*args: str, cwd: Path, timeout: float, env: dict | None = None):
    """A cold ``python``: its own interpreter start-up and imports."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=process_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar TensorBoard reads from the event files in ``folder``: tag -> (step, value)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {t: [(e.step, e.value) for e in events.Scalars(t)] for t in events.Tags()["scalars"]}


def copy_raw(shared_data: Path, root: Path) -> Path:
    """The four shared ``.gz`` files copied into ``<root>/FashionMNIST/raw`` (to corrupt one)."""
    from multigpu.data.idx import ALL_RAW_FILES

    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for name in ALL_RAW_FILES:
        shutil.copyfile(shared_data / "FashionMNIST" / "raw" / f"{name}.gz", raw / f"{name}.gz")
    return raw


def write_gz(path: Path, payload: bytes) -> None:
    with gzip.open(path, "wb") as f:
        f.write(payload)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    raw = SHARED_DATA / "FashionMNIST" / "raw"
    if not raw.is_dir():
        pytest.fail(f"offline Fashion-MNIST not found at {raw}: set MULTIGPU_DATA")
    return SHARED_DATA


@pytest.fixture(scope="session")
def data_root(tmp_path_factory, shared_data) -> Path:
    """One unpacked copy of the data for the whole session (the shared folder stays untouched)."""
    from multigpu.data import FashionMNISTDataModule

    root = tmp_path_factory.mktemp("data")
    FashionMNISTDataModule(root=str(root), source=str(shared_data), download=False).prepare_data()
    return root


def flip_byte_in_a_tensor(path: Path) -> None:
    """Damage a checkpoint as a bad disk or copy would: one byte flipped in the middle of its
    largest tensor's data (stored uncompressed in torch's zip), the archive still readable."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        member = max(archive.infolist(), key=lambda info: info.file_size)
    with open(path, "r+b") as file:
        file.seek(member.header_offset + 26)  # the local header's name and extra lengths
        name_length, extra_length = (int.from_bytes(file.read(2), "little") for _ in range(2))
        middle = member.header_offset + 30 + name_length + extra_length + member.file_size // 2
        file.seek(middle)
        byte = file.read(1)[0]
        file.seek(middle)
        file.write(bytes([byte ^ 0x10]))


def refusal_of(parse_args, args: list[str], capsys) -> str:
    """What a tool's argument parser says of ``args``: one ``error:`` line and exit 2."""
    with pytest.raises(SystemExit) as exit:
        parse_args(args)
    said = capsys.readouterr().err
    assert exit.value.code == 2 and said.startswith("error: ") and said.count("\n") == 1
    return said


def refusal_in(folder: Path, parse_args, args: list[str], monkeypatch, capsys) -> str:
    """``refusal_of``, run from ``folder`` beside a file named ``a-file`` (a folder argument
    that is a file); ``$MULTIGPU_DATA`` unset (CI gives it relative, which the chdir breaks)."""
    monkeypatch.delenv("MULTIGPU_DATA", raising=False)
    monkeypatch.chdir(folder)
    (folder / "a-file").write_text("")
    return refusal_of(parse_args, args, capsys)


def help_of(parse_args, capsys) -> str:
    """A tool's ``--help``, its whitespace folded to single spaces."""
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    return " ".join(capsys.readouterr().out.split())
