"""Every GPU command is admitted on the CPU: the commands of tests/test_gpu.py, of the GPU
acceptance and of the docs (``tests/gpu_commands.py``) on simulated machines of 1, 2 and 8
GPUs (those that tell something apart for each command: one too small, the exact fit, the
largest), up to the point where CUDA would be touched: the config's checks, the strategy chosen,
the device ids, the precision, the compile options, and the strategy, data module and module
built from them. A command that names more GPUs than the machine has is refused by the one
check that says so; any other refusal fails here, before a GPU machine finds it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import compose_config, composed_command
from gpu_commands import acceptance_commands, documented_commands, gpu_test_commands
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import ListConfig, OmegaConf

from multigpu.config import settings
from multigpu.config.errors import UserError, message
from multigpu.config.settings import Machine, parse_devices
from multigpu.run.admission import admit
from multigpu.run.cli import hydra_runtime

MACHINES = (1, 2, 8)
CORES = 16  # the CPU cores of a GPU machine
TOO_FEW = "asks for CUDA device(s)"  # the one refusal a command naming more GPUs may get


def jobs_of(arguments: list[str]) -> tuple[list[list[str]], bool]:
    """A sweep's jobs as Hydra's basic sweeper splits them (one for a single run), and whether
    it is a sweep."""
    multirun = "-m" in arguments or "--multirun" in arguments
    overrides = [a for a in arguments if a not in ("-m", "--multirun")]
    if not multirun:
        return [overrides], False
    parsed = OverridesParser.create().parse_overrides(overrides)
    return [list(job) for job in BasicSweeper.split_arguments(parsed, None)[0]], True


def job_config(job: list[str], output_dir: Path | None = None):
    """A job's config as Hydra composes it: once per set of group options in this process
    (``conftest.composed_command``), else composed whole."""
    cfg = composed_command(job)
    if cfg is None:
        return compose_config(job, output_dir)
    if output_dir is not None:
        cfg.paths.output_dir = str(output_dir)
    return cfg


def gpus_needed(trainer) -> int:
    """The GPUs a run's config asks for (0: a CPU run), whatever the machine."""
    if trainer.get("accelerator") == "cpu":
        return 0
    devices = trainer.get("devices", 1)
    devices = OmegaConf.to_container(devices) if isinstance(devices, ListConfig) else devices
    return max(parse_devices(devices, cuda_devices=1)) + 1


def build_until_cuda(cfg, run) -> None:
    """What ``multigpu.run.fit.fit`` builds before Lightning's Trainer asks CUDA for devices; the
    network's tensors on torch's meta device, as a sweep's check builds it (no initialisation)."""
    from multigpu.run.fit import build_datamodule, build_module, build_strategy
    from multigpu.run.parts_check import on_meta_device

    build_strategy(cfg.strategy, run)
    build_datamodule(cfg.data, run)
    on_meta_device(cfg.model, lambda: build_module(cfg.model, run))


def telling_machines(needed: int) -> list[int]:
    """The simulated machines that can tell a command apart: the largest one too small for it,
    the one it fits exactly, and the largest (a 1-GPU command on 2 GPUs repeats it on 8)."""
    fit = max(needed, 1)
    too_small = [gpus for gpus in MACHINES if gpus < fit][-1:]
    return sorted({*too_small, fit, max(MACHINES)})


def admission_problems(
    arguments: list[str], machines: tuple[int, ...] | None, folder: Path
) -> list[str]:
    """What goes wrong admitting each job of ``arguments`` on machines of these GPU counts (each
    job's config composed once, admitted on every machine; None: ``telling_machines``)."""
    jobs, multirun = jobs_of(arguments)
    problems = []
    for number, job in enumerate(jobs):
        cfg = job_config(job, folder / f"job_{number}")
        needed, shown = gpus_needed(cfg.trainer), " ".join(job)
        for gpus in machines or telling_machines(needed):
            machine = Machine(gpus, CORES, {}, multirun)
            try:
                admission = admit(cfg, hydra_runtime(cfg)[0], machine, folder / f"job_{number}")
                build_until_cuda(cfg, admission.run)
            except UserError as err:
                if not (needed > gpus and TOO_FEW in message(err)):
                    problems.append(f"{shown} on {gpus} GPU(s): refused: {message(err)}")
                continue
            if needed > gpus:
                problems.append(f"{shown} on {gpus} GPU(s): admitted, but it names {needed}")
            elif needed and admission.run.accelerator != "cuda":
                problems.append(f"{shown} on {gpus} GPU(s): runs on {admission.run.accelerator}")
    return problems


def gpu_commands() -> dict[str, list[str]]:
    """Every command run or documented on GPUs: the docs' commands that are not CPU runs."""
    found = {f"tests/test_gpu.py {k}": v for k, v in gpu_test_commands().items()}
    found.update({f"acceptance {k}": v for k, v in acceptance_commands().items()})
    for where, arguments in documented_commands().items():
        jobs, _ = jobs_of(arguments)
        if gpus_needed(job_config(jobs[0]).trainer) and arguments not in found.values():
            found[where] = arguments  # a command documented twice is admitted once
    return found


COMMANDS = gpu_commands()


@pytest.fixture(autouse=True)
def data_here(monkeypatch, data_root):
    """The real data's folder, as a GPU machine's run would find it."""
    monkeypatch.setenv("MULTIGPU_DATA", str(data_root))


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_gpu_command_is_admitted_on_simulated_gpu_machines(name, tmp_path):
    assert admission_problems(COMMANDS[name], None, tmp_path) == []


def test_the_simulated_machine_is_the_one_the_run_asks(monkeypatch):
    """``settings.cuda_device_count`` is the one place the GPU count is learnt: what the run,
    the sweep check and the benchmark see."""
    monkeypatch.setattr(settings, "cuda_device_count", lambda: 8)
    assert Machine.this(False).cuda_devices == 8


def test_a_check_refusing_a_documented_gpu_command_fails_the_suite(monkeypatch, tmp_path):
    """The refusal the first GPU run met (device 0 listed twice, for every strategy) is found
    here: the two-replica GPU tests would not be admitted."""

    def refuse_any_repeat(strategy, ids):
        if len(set(ids)) < len(ids):
            raise UserError(f"trainer.devices={ids} names a device twice")

    monkeypatch.setattr(settings, "check_replicas", refuse_any_repeat)
    command = COMMANDS["tests/test_gpu.py trains[scatter_allreduce-32-true]"]
    problems = admission_problems(command, (1,), tmp_path)
    assert problems and "names a device twice" in problems[0]


@pytest.mark.parametrize("strategy", ["dp", "ddp", "auto"])
def test_replicas_on_one_device_are_refused_where_they_are_a_mistake(strategy, tmp_path):
    cfg = compose_config([f"strategy={strategy}", "trainer.devices=[0,0]"], tmp_path)
    with pytest.raises(UserError, match="names device 0 twice.*strategy=scatter_allreduce"):
        admit(cfg, hydra_runtime(cfg)[0], Machine(1, CORES, {}, False), tmp_path)
