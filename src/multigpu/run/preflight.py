"""Hydra's callbacks before anything is written: a run, or every job of a sweep, is admitted
(``multigpu.run.admission``) before Hydra creates its folder and writes its config there, so a
refused run or sweep leaves nothing on disk and touches no existing folder. An admitted single
run owns the folders it writes in from here on; a sweep owns its sweep folder.
"""

from __future__ import annotations

import copy
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from multigpu.config.errors import UserError, WriteFailed, message
from multigpu.config.job_names import job_folder_name, swept_keys
from multigpu.config.settings import Machine
from multigpu.run.admission import RUN_FOLDER, admit, finished_notice, written_folders
from multigpu.run.cli import hydra_runtime
from multigpu.run.optuna_check import is_optuna, optuna_probe_jobs
from multigpu.run.training import remember
from multigpu.storage.atomic import check_creatable
from multigpu.storage.ownership import acquire_all
from multigpu.storage.paths import canonical
from multigpu.storage.record import is_rank_zero

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def refuse(text: str, exit_code: int) -> None:
    """One line, then exit: ``error: ...`` for a mistake, the notice alone for exit 0."""
    print(f"error: {text}" if exit_code else text, file=sys.stderr, flush=True)
    sys.exit(exit_code)


def with_output_dir(config: DictConfig, folder: Path) -> DictConfig:
    """The job's config as its run will see it: ``paths.output_dir`` is Hydra's runtime
    folder, which Hydra sets only once it creates it."""
    config = copy.deepcopy(config)
    with open_dict(config):
        OmegaConf.update(config, "paths.output_dir", str(folder), force_add=True)
    return config


def check_creatable_folder(folder: str, key: str) -> None:
    """A folder the run can make its own: named, not one above the folder the command runs
    in (``/`` would spread a run's files among the system's), and writable."""
    empty = not str(folder).strip()
    if empty or canonical(folder) in canonical(Path.cwd()).parents:
        what = "empty" if empty else "a folder above the one this command runs in"
        refuse(
            f"{key}={folder!s} is {what}: a run writes a folder of its own; pass a new one, "
            f"e.g. {key}=outputs/my_run",
            UserError.exit_code,
        )
    try:
        check_creatable(folder)
    except WriteFailed as err:
        refuse(f"{err}: pass a writable {key}", UserError.exit_code)


def sweep_jobs(config: DictConfig) -> list[list[str]] | None:
    """Each job's overrides, as Hydra's basic sweeper will launch them; for an Optuna study,
    whose sweeper draws its jobs as it goes, jobs that take every value a searched key can be
    drawn at (``multigpu.run.optuna_check``); None for another sweeper."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if is_optuna(config):
        return optuna_probe_jobs(config)
    if config.hydra.sweeper.get("_target_") != BASIC_SWEEPER:
        return None
    params = config.hydra.sweeper.get("params") or {}
    arguments = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
    parsed = OverridesParser.create().parse_overrides(arguments)
    return [list(job) for job in BasicSweeper.split_arguments(parsed, None)[0]]


def check_sweep(config: DictConfig) -> None:
    """Every job's config and folder, before the first job starts: a sweep with jobs that
    cannot run is refused in one line that lists them. An Optuna study's trials are not
    known yet: its settings, and every value it can draw, are checked instead."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    try:
        jobs = sweep_jobs(config)
    except UserError as err:
        refuse(message(err), err.exit_code)
    if not jobs:
        return
    loader = GlobalHydra.instance().config_loader()
    keys = swept_keys(config.hydra.overrides.task, config.hydra.sweeper.get("params"))
    names = [job_folder_name(overrides, keys, number) for number, overrides in enumerate(jobs)]
    sweep_dir = canonical(config.hydra.sweep.dir)
    written = [{RUN_FOLDER: sweep_dir / name} for name in names]
    problems = []
    machine = Machine.this(multirun=True)
    for number, (overrides, name) in enumerate(zip(jobs, names, strict=True)):
        try:
            job = with_output_dir(loader.load_sweep_config(config, overrides), sweep_dir / name)
            written[number] = written_folders(job, sweep_dir / name)
            admit(job, hydra_runtime(job)[0], machine, sweep_dir / name)
        except UserError as err:
            problems.append(f"job {number} ({name}): {message(err)}")
        except (OmegaConfBaseException, HydraException) as err:  # a value Hydra cannot set
            problems.append(f"job {number} ({name}): {' '.join(str(err).split())[:300]}")
    if is_optuna(config):  # its trials' folders are named by values drawn later
        what = "trials at the ends of the search space (hydra.sweeper.params)"
    else:
        problems = shared_folders(written) + problems
        what = "jobs"
    if problems:
        refuse(
            f"{len(problems)} of {len(jobs)} {what} cannot run, so none was started: "
            + " | ".join(problems),
            UserError.exit_code,
        )


def shared_folders(written: list[dict[str, Path]]) -> list[str]:
    """Two jobs that would write in one folder (their run folders, or checkpoint folders
    named alike): the second would overwrite the first's files."""
    problems = []
    for a in range(len(written)):
        for b in range(a + 1, len(written)):
            common = set(written[a].values()) & set(written[b].values())
            problems += [f"jobs {a} and {b} would share the folder {f}" for f in sorted(common)]
    return problems


def check_launcher(config: DictConfig) -> None:
    """A launcher whose optional packages are not installed (``hydra/launcher=slurm`` without
    the Slurm extra) is refused now, before the sweep's folder is made."""
    from hydra_plugins.multigpu_launcher.slurm_launcher import SlurmLauncherConf, missing_extra

    if (config.hydra.launcher or {}).get("_target_") != SlurmLauncherConf._target_:
        return
    refusal = missing_extra()
    if refusal is not None:
        refuse(refusal, UserError.exit_code)


def guarded(check: Callable[..., None]) -> Callable[..., None]:
    """Hydra turns an exception in a callback into a warning and goes on with the run: any
    failure of the checks ends here instead, in one line, before anything is written."""

    @functools.wraps(check)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            check(*args, **kwargs)
        except (UserError, SystemExit, KeyboardInterrupt):
            raise
        except Exception as err:  # noqa: BLE001 - whatever it is, the run must not start
            reason = " ".join(str(err).split("\n")[0].split()) or type(err).__name__
            refuse(f"the config could not be checked ({type(err).__name__}: {reason})", 2)

    return wrapper


class Preflight(Callback):
    """Admit the run (or the sweep's jobs) before Hydra writes anything."""

    @guarded
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        folder = Path(config.hydra.run.dir)
        check_creatable_folder(str(folder), "hydra.run.dir")
        try:
            cfg = with_output_dir(config, folder)
            admission = admit(cfg, hydra_runtime(cfg)[0], Machine.this(False), folder,
                              is_rank_zero())  # fmt: skip
            if admission.finished is not None:
                raise finished_notice(folder, admission.finished)
            if is_rank_zero():
                acquire_all(admission.folders)  # held until this process ends
        except UserError as err:
            refuse(message(err), err.exit_code)
        remember(folder, admission)

    @guarded
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        check_launcher(config)
        check_creatable_folder(config.hydra.sweep.dir, "hydra.sweep.dir")
        check_sweep(config)
        try:  # one sweep at a time in a sweep folder
            acquire_all({"hydra.sweep.dir": canonical(config.hydra.sweep.dir)})
        except UserError as err:
            refuse(message(err), err.exit_code)
