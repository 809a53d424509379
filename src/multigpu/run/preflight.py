"""Hydra's callbacks before anything is written: a run, or every job of a sweep, is admitted
(``multigpu.run.admission``) and its parts built as its training will build them
(``multigpu.run.parts_check``: what torch or Lightning refuses only then) before Hydra creates its
folder and writes its config there, so a refused run or sweep leaves nothing on disk and
touches no existing folder. An admitted single run owns the folders it writes in from here on;
a sweep owns its sweep folder.
"""

from __future__ import annotations

import functools
import itertools
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from omegaconf.errors import (
    InterpolationResolutionError,
    MissingMandatoryValue,
    OmegaConfBaseException,
)

from multigpu.callbacks.interrupts import signals_held
from multigpu.config.errors import (
    UserError,
    WriteFailed,
    message,
)
from multigpu.config.job_names import (
    job_folder_name,
    share_swept_keys,
    swept_keys,
    task_overrides,
)
from multigpu.config.settings import Machine, plain, slurm_node
from multigpu.run.admission import (
    LOG_FILE,
    RUN_FOLDER,
    SHARED_PLACES,
    admit,
    check_hydra_folder,
    check_places_apart,
    check_unchanged,
    finished_notice,
    run_folder_setting,
    written_folders,
    written_places,
)
from multigpu.run.cli import hydra_runtime
from multigpu.run.command_line import as_hydra_sets_it, check_hydra_keys, with_output_dir
from multigpu.run.optuna_check import check_study, is_optuna, optuna_probe_jobs, study_places
from multigpu.run.parts_check import check_run_objects
from multigpu.run.training import remember
from multigpu.storage.atomic import check_creatable
from multigpu.storage.ownership import acquire_all
from multigpu.storage.paths import canonical, is_within
from multigpu.storage.record import is_rank_zero

log = logging.getLogger(__name__)
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def refuse(text: str, exit_code: int) -> None:
    """One line, then exit: ``error: ...`` for a mistake, the notice alone for exit 0."""
    print(f"error: {text}" if exit_code else text, file=sys.stderr, flush=True)
    sys.exit(exit_code)


def check_creatable_folder(folder: str, key: str, probe: bool = True, named: str = "") -> None:
    """A folder the run can make its own: named, not one above the folder the command runs
    in (``/`` would spread a run's files among the system's), reached by no link that leads
    nowhere, and writable (with ``probe``: a file made and removed where it would be made; a
    run's admission probes its folders itself, once it has found them apart from other runs',
    whose folders it must not touch). ``named``: the settings that name it, if more than
    ``key``."""
    refused_in_one_line(lambda: check_no_reference(str(folder), key, named))
    empty = not str(folder).strip()
    if empty or canonical(folder) in canonical(Path.cwd()).parents:
        what = "empty" if empty else "a folder above the one this command runs in"
        refuse(
            f"{key}={folder!s} is {what}: a run writes a folder of its own; pass a new one, "
            f"e.g. {key}=outputs/my_run",
            UserError.exit_code,
        )
    try:
        check_creatable(folder, probe)  # a link that leads nowhere: as spelt, not canonical
    except WriteFailed as err:
        refuse(f"{err}: pass a writable {named or key}", UserError.exit_code)


def check_no_reference(folder: str, key: str, named: str = "") -> None:
    """A folder's name holds no ``${`` (an escaped ``\\${``): the job's settings that name it
    would resolve it."""
    if "${" in folder:
        raise UserError(
            f"{key}={folder} holds '${{', which Hydra reads in the run's settings as a "
            f"reference to another setting: pass a {named or key} without one"
        )


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
    arguments = [f"{k}={v}" for k, v in params.items()] + task_overrides(config.hydra)
    parsed = OverridesParser.create().parse_overrides(arguments)
    return [list(job) for job in BasicSweeper.split_arguments(parsed, None)[0]]


def check_sweep(config: DictConfig) -> None:
    """Every job's config and folder, before the first job starts: a sweep with jobs that
    cannot run is refused in one line that lists them. An Optuna study's trials are not
    known yet: its settings, and every value it can draw, are checked instead.

    In two rounds: every job as far as the checks before torch go (a value refused there is
    answered without importing torch or Optuna), then what torch and Lightning refuse when a
    job builds its Trainer, module, data module, strategy, callbacks and logger
    (``check_run_objects``: each distinct part built once, reading no file and writing none)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    from multigpu.run.lightning_arguments import torch_checks_later

    try:
        jobs = sweep_jobs(config)
    except UserError as err:
        refuse(message(err), err.exit_code)
    if jobs is None:
        return
    loader = GlobalHydra.instance().config_loader()
    share_swept_keys(config)  # the ${job_folder:} resolver names each job as it will then
    keys = swept_keys(task_overrides(config.hydra), config.hydra.sweeper.get("params"))
    names = [job_folder_name(overrides, keys, number) for number, overrides in enumerate(jobs)]
    sweep_dir = canonical(config.hydra.sweep.dir)
    written = [{RUN_FOLDER: sweep_dir / name} for name in names]
    shared: list[dict[str, Path]] = [{} for _ in names]
    problems: list[Problem] = []
    starting = []
    machine = Machine.this(multirun=True)
    with torch_checks_later():
        for number, (overrides, name) in enumerate(zip(jobs, names, strict=True)):
            try:
                loaded = loader.load_sweep_config(config, overrides)
                folder = job_folder_of(loaded, sweep_dir, number)
                name = folder.relative_to(sweep_dir).as_posix()
                job = with_output_dir(loaded, folder, number)
                check_hydra_keys(job)
                with as_hydra_sets_it(job):
                    written[number], shared[number] = own_and_shared_places(
                        job, written_folders(job, folder)
                    )
                    admission = admit(job, hydra_runtime(job)[0], job_machine(job, machine), folder)
            except UserError as err:
                problems.append((frozenset({number}), f"job {number} ({name}): {message(err)}"))
            except (OmegaConfBaseException, HydraException) as err:  # a value Hydra cannot set
                said = " ".join(str(err).split())[:300]
                problems.append((frozenset({number}), f"job {number} ({name}): {said}"))
            else:
                if admission.finished is None:  # a finished job is skipped: nothing is built
                    starting.append((number, f"job {number} ({name})", job, admission.run))
    if is_optuna(config):  # its trials' run folders are named by values drawn later
        what = "trials at the ends of the search space (hydra.sweeper.params)"
        if config.hydra.sweeper.get("n_trials", 2) > 1:  # a folder of its own each, or none
            problems = shared_folders([outside_own(w) for w in written]) + problems
    else:
        problems = shared_folders(written) + shared_inside_jobs(shared, written) + problems
        what = "jobs"
    refuse_jobs(problems, len(jobs), what)
    if is_optuna(config):  # imports Optuna: the sampler, search space and storage it makes
        try:
            check_places_apart(study_places(config.hydra.sweeper.storage), sweep_dir)
            check_study(config)
        except UserError as err:
            refuse(message(err), err.exit_code)
    for number, job_name, job, run in starting:
        try:
            with as_hydra_sets_it(job):
                check_run_objects(job, run)
        except UserError as err:
            problems.append((frozenset({number}), f"{job_name}: {message(err)}"))
    refuse_jobs(problems, len(jobs), what)


def own_and_shared_places(
    job: DictConfig, folders: dict[str, Path]
) -> tuple[dict[str, Path], dict[str, Path]]:
    """The job's folders with the places outside them that only its files go to, and the places
    it shares with the other jobs: the ``SHARED_PLACES``, and a logger's ``save_dir/name``
    without a version (each job's logger picks a new one there)."""
    places = written_places(job, folders)
    shared_keys = set(SHARED_PLACES)
    if (job.get("logger") or {}).get("version", "") is None:
        shared_keys.add("logger.save_dir")
    shared = {key: place for key, place in places.items() if key in shared_keys}
    return folders | {k: p for k, p in places.items() if k not in shared_keys}, shared


def refused_in_one_line(check: Callable[[], Any]) -> None:
    """``check()``, its refusal said in one line and exit 2 (``refuse``)."""
    try:
        check()
    except UserError as err:
        refuse(message(err), err.exit_code)


def job_folder_of(loaded: DictConfig, sweep_dir: Path, number: int) -> Path:
    """Where Hydra will make the job's folder: its ``hydra.sweep.subdir`` resolved as Hydra
    resolves it once the job has its number, inside the sweep's folder or refused (the sweep's
    report reads the jobs there)."""
    numbered = with_output_dir(loaded, sweep_dir, number)
    with as_hydra_sets_it(numbered):
        subdir = str(numbered.hydra.sweep.subdir)
    check_no_reference(subdir, "hydra.sweep.subdir")
    folder = canonical(sweep_dir / subdir)
    if sweep_dir not in folder.parents:
        raise UserError(
            f"hydra.sweep.subdir={subdir} puts the job's folder at {folder}, not inside the "
            f"sweep's folder {sweep_dir}, where its report looks for it; pass a "
            "hydra.sweep.subdir below it (the default names each job by what differs)"
        )
    return folder


Problem = tuple[frozenset[int], str]  # the jobs a problem stops, and what it is
SWEEP_NAMES = {RUN_FOLDER: "hydra.sweep.subdir"}  # what names a job's folder in a sweep


def refuse_jobs(problems: list[Problem], count: int, what: str) -> None:
    """One line for every problem, counting the jobs they stop (a pair of jobs is two)."""
    if problems:
        stopped = frozenset().union(*(jobs for jobs, _ in problems))
        refuse(
            f"{len(stopped)} of {count} {what} cannot run, so none was started: "
            + " | ".join(text for _, text in problems),
            UserError.exit_code,
        )


def outside_own(written: dict[str, Path]) -> dict[str, Path]:
    """An Optuna trial's folders that are not named by its drawn values: a checkpoint folder
    outside its run folder (every trial would write there)."""
    run = written[RUN_FOLDER]
    return {k: f for k, f in written.items() if k != RUN_FOLDER and not is_within(f, run)}


def shared_folders(written: list[dict[str, Path]]) -> list[Problem]:
    """Two jobs that would write in one place (their run folders, checkpoint folders, or the
    places only one job's files go), or one inside the other's: the second would overwrite the
    first's files, or hold them. One problem per pair of jobs, naming the settings."""
    problems: list[Problem] = []
    for a, b in itertools.combinations(range(len(written)), 2):
        pairs = itertools.product(written[a].items(), written[b].items())
        for (key_a, one), (key_b, other) in pairs:
            key_a, key_b = SWEEP_NAMES.get(key_a, key_a), SWEEP_NAMES.get(key_b, key_b)
            if one == other:
                whose = key_a if key_a == key_b else f"job {a}'s {key_a}, job {b}'s {key_b}"
                kind = "file" if LOG_FILE in (key_a, key_b) else "folder"
                said = f"jobs {a} and {b} would share the {kind} {one} ({whose})"
            elif other in one.parents or one in other.parents:
                inner, outer = sorted([(one, a, key_a), (other, b, key_b)], key=depth, reverse=True)
                said = (
                    f"jobs {a} and {b} would write in {inner[0]} (job {inner[1]}'s {inner[2]}), "
                    f"inside {outer[0]} (job {outer[1]}'s {outer[2]})"
                )
            else:
                continue
            problems.append((frozenset((a, b)), f"{said}; give each job its own"))
            break
    return problems


def shared_inside_jobs(
    shared: list[dict[str, Path]], written: list[dict[str, Path]]
) -> list[Problem]:
    """A place the jobs share (``data.root``) inside a job's folders: the other jobs would write
    there too (that job's admission takes it as its own, and the next job's had found it another
    run's folder only after that job had run). One problem per place and job folder."""
    found: dict[tuple[str, Path, int, str, Path], set[int]] = {}
    for a, places in enumerate(shared):
        for key, place in places.items():
            for b, folders in enumerate(written):
                for key_b, folder in folders.items():
                    if b != a and (place == folder or folder in place.parents):
                        found.setdefault((key, place, b, key_b, folder), {b}).add(a)
    return [
        (
            frozenset(jobs),
            f"{key} {place} is in job {b}'s folder {folder} ({SWEEP_NAMES.get(key_b, key_b)}), "
            f"where the other jobs would write too; pass a {key} outside the jobs' folders",
        )
        for (key, place, b, key_b, folder), jobs in found.items()
    ]


def depth(place: tuple[Path, int, str]) -> int:
    return len(place[0].parts)


def job_machine(job: DictConfig, here: Machine) -> Machine:
    """The machine a sweep's job runs on: this one, or the Slurm node it asks for."""
    from multigpu.run.slurm_extra import SLURM_LAUNCHER

    launcher = plain(job.hydra.launcher) or {}
    if launcher.get("_target_") != SLURM_LAUNCHER:
        return here
    return slurm_node(launcher, plain(job.trainer), hydra_runtime(job)[0]["strategy"], here)


def check_launcher(config: DictConfig) -> None:
    """A launcher whose optional packages are not installed (``hydra/launcher=slurm`` without
    the Slurm extra) is refused now, before the sweep's folder is made."""
    from multigpu.run.slurm_extra import SLURM_LAUNCHER, cannot_submit

    if (config.hydra.launcher or {}).get("_target_") != SLURM_LAUNCHER:
        return
    refusal = cannot_submit()
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
            key = getattr(err, "full_key", None)  # OmegaConf's: where it failed
            unresolved = (InterpolationResolutionError, MissingMandatoryValue)
            if isinstance(err, unresolved) and key:  # ~paths.runs_dir, say
                refuse(f"{key} cannot be resolved ({reason}): give what it refers to", 2)
            refuse(f"the config could not be checked ({type(err).__name__}: {reason})", 2)

    return wrapper


class Preflight(Callback):
    """Admit the run (or the sweep's jobs) before Hydra writes anything."""

    @guarded
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        with as_hydra_sets_it(config):  # hydra.run.dir=runs/${hydra:job.override_dirname}
            folder = Path(config.hydra.run.dir)
        named = run_folder_setting(folder, config.paths.get("runs_dir"))
        check_creatable_folder(str(folder), "hydra.run.dir", False, named)  # admit probes it
        try:
            cfg = with_output_dir(config, folder)
            check_hydra_keys(cfg)
            with as_hydra_sets_it(cfg):
                choices = hydra_runtime(cfg)[0]
                admission = admit(cfg, choices, Machine.this(False), folder, is_rank_zero())
                if admission.finished is not None:
                    raise finished_notice(folder, admission.finished)
                if is_rank_zero():
                    check_run_objects(cfg, admission.run)  # what torch refuses when built
            # A stop signal once the folder exists is the run's ending, recorded there: held
            # until the run is remembered, whose handler records it. Refused there, the line
            # is said first; a signal held meanwhile then ends the process.
            with signals_held():
                if is_rank_zero():
                    # Held until this process ends; no run wrote there since admission read them.
                    taken = functools.partial(check_unchanged, admission)
                    refused_in_one_line(lambda: acquire_all(admission.folders, taken))
                remember(folder, admission)
        except UserError as err:
            refuse(message(err), err.exit_code)

    @guarded
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        check_launcher(config)
        try:  # once, not in each job's line
            check_hydra_folder(config, None)
        except UserError as err:
            refuse(message(err), err.exit_code)
        check_creatable_folder(config.hydra.sweep.dir, "hydra.sweep.dir")
        check_sweep(config)
        try:  # one sweep at a time in a sweep folder
            acquire_all({"hydra.sweep.dir": canonical(config.hydra.sweep.dir)})
        except UserError as err:
            refuse(message(err), err.exit_code)
