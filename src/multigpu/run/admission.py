"""Whether a run may start, and how: decided once, before anything is written.

``admit`` resolves the config (``multigpu.config.settings``), works out what the run computes
(``multigpu.config.computation``), checks its folder and the checkpoint it starts from
(``multigpu.run.resume``), and says how it starts: fresh, resuming a checkpoint, from a
checkpoint's weights, continuing its own folder, or not at all because that folder already
holds it finished. Everything it refuses is refused before Hydra creates the run folder or
writes its config there (``multigpu.run.preflight.Preflight`` calls it first), so a refused run
touches nothing on disk.

A run folder, once used, belongs to one run: another run of the same settings may continue it
(a launcher's restart, a sweep run again, the same command again after an interruption), a
run of other settings is refused, and a finished run is never overwritten or relabelled.
Every folder the run writes in (``written_folders``: its run folder and its checkpoint folder)
must be free of any other live run, none may be, be inside, or hold the folder of another run
or sweep (``check_apart_from_other_runs``: one marked by a ``metrics.json``, a ``.hydra``, a
checkpoint, a sweep's ``multirun.yaml``, or a live process's lock), and a checkpoint folder of
its own choosing (``callbacks.checkpoint.dirpath``) that holds checkpoints must hold this
run's. A sweep's folder lies apart from other runs' alike (``check_sweep_folder``) and holds
one sweep, continued by its own command only (``check_same_sweep``); its jobs live inside it.

A record only moves forward: a resume into a folder that holds a record of its run continues
that record (``check_moves_forward``): an older checkpoint (``previous.ckpt``) or another run's
is refused there, naming the folder's ``last.ckpt`` or a new folder instead.

A folder Hydra makes (``hydra.run.dir``, ``hydra.sweep.dir``, both under ``paths.runs_dir`` by
default) is made as spelt, before any of the project's code runs: one spelt with ``~`` is
refused (``check_hydra_folder``), since Hydra would make a folder named ``~`` where the
project's checks and locks read ``$HOME`` (``multigpu.storage.paths.canonical``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import Container, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from multigpu.config.computation import computation, describe, differences
from multigpu.config.errors import (
    NothingToDo,
    OccupiedFolder,
    UserError,
    WriteFailed,
    add_note,
    summary_line,
)
from multigpu.config.job_names import task_overrides
from multigpu.config.launch import renamed_by
from multigpu.config.names import FASHION_MNIST
from multigpu.config.settings import Machine, Run, check_batch_given, resolve_run
from multigpu.data.locate import check_reachable
from multigpu.run.resume import (
    Checked,
    Resume,
    allowed_changes,
    as_typed,
    each_job_from,
    plan_init,
    plan_resume,
)
from multigpu.storage.atomic import check_creatable, check_names_fit
from multigpu.storage.ckpt_path import LAST, PREVIOUS, BadCheckpoint
from multigpu.storage.ownership import check_free, holder, is_free
from multigpu.storage.paths import canonical, folders_below, is_within
from multigpu.storage.record import RUNNING, agree
from multigpu.storage.record_file import BadRecord, read_record

FINISHED = ("completed", "diverged")  # running them again would give the same
RECORD = "metrics.json"
HYDRA = ".hydra"  # Hydra's copy of a run's config, written before the run starts
HYDRAS_OWN = (HYDRA,)  # what Hydra writes in a run folder before the run starts (and *.log)
SWEEP_RECORD = "multirun.yaml"  # a sweep's config, written in its folder as it starts
MARKS = {  # what marks a folder as a run's, a sweep's or a run's checkpoint folder
    RECORD: "run",
    HYDRA: "run",
    SWEEP_RECORD: "sweep",
    LAST: "checkpoints",
    PREVIOUS: "checkpoints",
}
NOT_CHECKPOINTS = tuple(name for name, kind in MARKS.items() if kind != "checkpoints")
ABOVE = (RECORD, SWEEP_RECORD)  # what alone marks a folder above a run's as another's
SCAN_DEPTH = 4  # levels looked into: a runs_dir's runs are 2 down (<date>/<time>), sweep jobs 3
SCAN_LIMIT = 1000  # folders looked into at most
LOGGERS_FILES = ("events.out.tfevents.", "metrics.csv", "hparams.yaml")  # TensorBoard's, CSV's
RUNS_FILES = ("events.out.tfevents.", "phases.json", "hparams.yaml")  # a run's, beside its record
RUN_FOLDER = "hydra.run.dir"  # the settings that name the folders a run writes in
LOG_FILE = "hydra.job_logging.handlers.file.filename"  # a file: the other places are folders
# How the program writing in a place reads the path it is given: the loggers (but CSV's), the
# Trainer and torchvision expand ~ (the TensorBoard logger no $NAME: see its log_dir), Hydra
# and Python's logging neither.
EXPANDS = {
    "logger.save_dir": os.path.expanduser,
    "trainer.default_root_dir": os.path.expanduser,
    "data.root": os.path.expanduser,
}
# Places outside its folders that runs may share (``written_places``): the data set every run
# reads. The others are each run's own (a sweep's jobs may not share them).
SHARED_PLACES = ("data.root",)
CHECKPOINT_FOLDER = "callbacks.checkpoint.dirpath"


@dataclass(frozen=True)
class Admission:
    """How an admitted run starts."""

    run: Run
    settings: dict[str, Any]
    resume: Resume | None = None  # ckpt_path: continue that checkpoint's run
    init_from: Path | None = None  # a new run from that checkpoint's weights
    continued: Path | None = None  # the run folder's own last checkpoint, continued
    history: list[dict[str, Any]] = field(default_factory=list)  # the folder's, continued
    finished: dict[str, Any] | None = None  # the folder's finished record: nothing to run
    folders: dict[str, Path] = field(default_factory=dict)  # written_folders: the run owns them
    recorded: list[dict[str, Any]] = field(default_factory=list)  # the folder's record's history
    marks: tuple = ()  # folder_marks when admission read the folders (``check_unchanged``)
    sweep: Path | None = None  # the folder of the sweep it is a job of (``sweep_folder``)
    # The checkpoint it starts from, as read and checked here: restored without a second read.
    checked: Checked | None = field(default=None, repr=False, compare=False)

    @property
    def ckpt_path(self) -> Path | None:
        """The checkpoint Lightning resumes from, if any."""
        return self.resume.path if self.resume else self.continued

    @property
    def checkpoints(self) -> Path:
        """The folder its checkpoints go to (a run that starts: a finished one owns none)."""
        return checkpoint_folder(self.folders)

    @property
    def checkpoints_apart(self) -> bool:
        """Whether its checkpoints go outside its run folder (``callbacks.checkpoint.dirpath``),
        a folder that a new run resuming them must not share."""
        return bool(self.folders) and not is_within(self.checkpoints, self.folders[RUN_FOLDER])


def admit(
    cfg: DictConfig,
    choices: dict[str, str],
    machine: Machine,
    output_dir: str | Path,
    rank_zero: bool = True,
) -> Admission:
    """Raise ``UserError`` (a refused run) or ``NothingToDo`` (a notice), or say how to start."""
    check_hydra_folder(cfg, output_dir)
    run = resolve_run(cfg, choices, machine)
    check_batch_given(cfg.data, run.devices, given_keys(cfg))
    settings = computation(cfg, run)
    allowed = allowed_changes(container(cfg.get("resume_changes")))
    ckpt_path, init_from = cfg.get("ckpt_path"), cfg.get("init_from")
    if ckpt_path is not None and init_from is not None:
        raise UserError(
            f"ckpt_path={ckpt_path} and init_from={init_from} both given: ckpt_path resumes "
            "a run, init_from starts a new one from its weights; pass one of them"
        )
    if allowed and ckpt_path is None:
        raise UserError(
            f"resume_changes={allowed} without ckpt_path: it allows changes to a resumed run; "
            "pass ckpt_path=<file> or drop resume_changes"
        )
    folders, sweep = written_folders(cfg, output_dir), sweep_folder(cfg)
    marks = folder_marks(folders)  # before anything is read of them
    if rank_zero:  # the other ranks of a run write nothing in its folders
        check_names({**places_named(cfg, folders), **folders}, cfg.paths.get("runs_dir"))
        check_free(folders)
        check_apart_from_other_runs(folders, sweep)
        places = written_places(cfg, folders)
        check_places_apart(places, sweep)
        check_logger_folder_new(cfg, places, folders[RUN_FOLDER])
    checkpoints = checkpoint_folder(folders)
    own = folder_state(folders[RUN_FOLDER], checkpoints, settings, run.max_epochs, rank_zero, sweep)
    if own.finished is not None:
        return Admission(run, settings, finished=own.finished)
    if rank_zero:
        check_checkpoint_folder(folders, own)
        check_writable_folders(folders, cfg.paths.get("runs_dir"))
        check_places_usable(places_named(cfg, folders), folders)
    if cfg.data.get("_target_") == FASHION_MNIST:  # its files can be had, before any folder is made
        check_data_reachable(cfg, folders[RUN_FOLDER])
    fresh = Admission(run, settings, folders=folders, marks=marks, sweep=sweep)
    admission = starting_point(cfg, fresh, allowed, own, rank_zero)
    if rank_zero:  # what only Lightning refuses, once everything checked before torch passed
        from multigpu.run.lightning_arguments import check_trainer_arguments

        check_trainer_arguments(cfg)
    return admission


def folder_marks(folders: dict[str, Path]) -> tuple:
    """What another run would change in a run's folders: each one's record and last checkpoint,
    by size and modification time (None where there is none)."""
    marks = []
    for folder in folders.values():
        for name in (RECORD, LAST):
            try:
                found = (Path(folder) / name).stat()
                marks.append((str(folder), name, found.st_size, found.st_mtime_ns))
            except OSError:
                marks.append((str(folder), name, None))
    return tuple(marks)


def check_unchanged(admission: Admission) -> None:
    """Once the run owns its folders: they hold what admission read, and still lie apart from
    other runs' folders. Another run may have written there between the two (admitted into a
    folder no one held yet, or a sweep's job admitted when the sweep started), or taken a
    folder around or inside one of them (two runs admitted at once, neither's folder locked
    yet): what was decided from them no longer holds. Each run looks once it holds its locks,
    so of two such runs the later one sees the earlier's lock."""
    if not admission.folders:
        return
    if folder_marks(admission.folders) != admission.marks:
        raise OccupiedFolder(
            f"{admission.folders[RUN_FOLDER]} changed while this run was being checked (another "
            "run wrote its record or checkpoint there): it is left as it is; run the command "
            "again, or pass another hydra.run.dir"
        )
    check_apart_from_other_runs(admission.folders, admission.sweep)


def starting_point(
    cfg: DictConfig, fresh: Admission, allowed: list[str], own: Folder, rank_zero: bool = True
) -> Admission:
    """Where an admitted run starts: the checkpoint it resumes (``ckpt_path``), the one whose
    weights it starts from (``init_from``), or its own folder (continued, or new). A run folder
    that holds a record of this run is continued, never taken back."""
    ckpt_path, init_from, runs_dir = cfg.get("ckpt_path"), cfg.get("init_from"), cfg.paths.runs_dir
    net = container(cfg.model.net)
    fresh = replace(fresh, recorded=own.recorded)
    if ckpt_path is not None:
        max_steps, max_epochs = cfg.trainer.get("max_steps", -1), fresh.run.max_epochs
        max_time = cfg.trainer.get("max_time")
        resume, checked = plan_resume(
            ckpt_path,
            runs_dir,
            fresh.settings,
            allowed,
            max_epochs,
            net,
            max_steps,
            max_time,
            ours=fresh.folders.values(),
        )
        if rank_zero:  # the others may find rank 0's record ahead already
            check_moves_forward(fresh.folders, own, resume)
        return replace(fresh, resume=resume, checked=checked)
    if init_from is not None:
        if rank_zero and own.recorded:
            run_folder = fresh.folders[RUN_FOLDER]
            raise OccupiedFolder(
                f"{run_folder} holds {len(own.recorded)} epoch(s) of this run: init_from starts "
                f"a new run, whose record would replace them; pass another hydra.run.dir (or "
                f"continue that run: the same command without init_from)"
            )
        checked = plan_init(init_from, runs_dir, net)
        return replace(fresh, init_from=checked.path, checked=checked)
    checked = None
    if rank_zero and own.continued is None and checkpoint_due(cfg, len(own.recorded)):
        check_taken_back(fresh.folders, own)
    if rank_zero and own.continued is not None:
        checked = check_continues_its_record(fresh.folders[RUN_FOLDER], own)
    return replace(fresh, continued=own.continued, history=own.history, checked=checked)


def checkpoint_due(cfg: DictConfig, epochs: int) -> bool:
    """Whether a run that recorded ``epochs`` must have written a checkpoint by then: with a
    checkpoint callback saving every ``every_n_epochs``, one before the last recorded epoch (the
    record of an epoch is written before its checkpoint: a kill between them leaves none yet).
    Without one due, the run starts again and its record keeps its later epochs until they are
    trained again."""
    checkpoint = (cfg.get("callbacks") or {}).get("checkpoint")
    if not checkpoint:
        return False
    every = checkpoint.get("every_n_epochs", 1)
    return isinstance(every, int) and epochs > every


def checkpoint_elsewhere() -> str:
    """A run's checkpoint, where the command does not say where its checkpoints went."""
    return "ckpt_path=<its last.ckpt> (in the checkpoint folder it was trained with)"


def check_taken_back(folders: dict[str, Path], own: Folder) -> None:
    """A run folder whose record holds epochs continues from the ``last.ckpt`` of its
    checkpoint folder. Where there is none though one is due (``checkpoint_due``: deleted, or
    the epochs' checkpoints went to another ``callbacks.checkpoint.dirpath``), the run had
    started again from scratch and its record then held two runs' epochs, ending ``completed``
    with the old ones after the new: refused, as a record only moves forward."""
    run_folder, checkpoints = folders[RUN_FOLDER], checkpoint_folder(folders)
    resumed = own.resumed_from if isinstance(own.resumed_from, dict) else {}
    origin, carried = resumed.get("checkpoint"), resumed.get("epochs")
    with_it = checkpoint_elsewhere()
    if isinstance(origin, str) and Path(origin).is_file() and carried == len(own.recorded):
        with_it = f"{as_typed(Path(origin))} (the checkpoint it was resumed from)"
    raise OccupiedFolder(
        f"{run_folder} holds this run after {len(own.recorded)} epoch(s), but {checkpoints} "
        f"holds no {LAST} to continue it from: started again, its record would go back; "
        f"continue it with {with_it}, or pass another hydra.run.dir"
    )


def check_continues_its_record(run_folder: Path, own: Folder) -> Checked:
    """The folder's own ``last.ckpt``, continued without ``ckpt_path``, is of the run its
    record holds: the same epochs as far as both go (``check_moves_forward``'s rule for a
    ``ckpt_path`` resumed there). Another run's checkpoint put in its place would have replaced
    the record's epochs with its own. Read with torch; the run restores what was read here."""
    from multigpu.storage.checkpoint import NO_OLDER, epoch_history, load_checkpoint

    last = own.continued
    try:
        checkpoint = load_checkpoint(last)
    except BadCheckpoint as error:  # not ckpt_path=...: the command gave none
        said, previous = error.problem, last.with_name(PREVIOUS)
        # Resumed in this folder, the one before would take its record back: another folder;
        # with none, the same command would meet this checkpoint again.
        if previous.is_file():
            instead = f" (to go on from the one before it: {as_typed(previous)} and another "
            instead += "hydra.run.dir)"
        else:
            instead = f"; {NO_OLDER} in another hydra.run.dir (or none{renamed_by(os.environ)}; "
            instead += "in a sweep, another hydra.sweep.dir)"
        raise UserError(
            f"{last}, the checkpoint this run folder continues, {said}{instead}"
        ) from None
    if not agree(epoch_history(checkpoint) or [], own.recorded):
        raise OccupiedFolder(
            f"{last} is not of the run that {run_folder} holds (its history differs from that "
            f"folder's {RECORD}): continued, it would replace that run's record; it is left as "
            f"it is: resume the checkpoint into a new folder ({as_typed(last)} and another "
            "hydra.run.dir)"
        )
    return Checked(last, checkpoint)


def check_moves_forward(folders: dict[str, Path], own: Folder, resume: Resume) -> None:
    """A resume into a run folder that holds a record of its run continues that record, which
    only moves forward: the checkpoint carries the record's epochs (the same ones, as far as both
    go) and no fewer, or it is the folder's own ``last.ckpt`` (behind its record when
    ``callbacks.checkpoint.every_n_epochs`` > 1: the record keeps its later epochs until they
    are trained again, as when the folder is continued without ``ckpt_path``). An older
    checkpoint (``previous.ckpt``, or one copied aside) or another run's is refused before
    anything is written: resumed in place, it would take the record back and overwrite the
    folder's checkpoints."""
    recorded = own.recorded
    if not recorded:
        return
    run_folder, last = folders[RUN_FOLDER], checkpoint_folder(folders) / LAST
    path, carried = resume.path, resume.history
    if canonical(path) == canonical(last) and agree(carried, recorded):
        return
    continue_there = f"continue {run_folder} with {as_typed(last)}" if last.is_file() else ""
    new_folder = f"resume {path.name} into a new folder (another hydra.run.dir)"
    if not agree(carried, recorded):
        raise OccupiedFolder(
            f"ckpt_path={path} is not of the run that {run_folder} holds (its history differs "
            f"from that folder's {RECORD}): resumed there it would replace that run's record; "
            + ", or ".join(filter(None, [new_folder, continue_there]))
        )
    if max(resume.epochs, len(carried)) < len(recorded):
        raise OccupiedFolder(
            f"ckpt_path={path} holds {resume.epochs} epoch(s), and {run_folder / RECORD} "
            f"{len(recorded)}: resumed in {run_folder}, it would take the record back to "
            f"{resume.epochs}; " + ", or ".join(filter(None, [continue_there, new_folder]))
        )


def check_hydra_folder(cfg: DictConfig, output_dir: str | Path | None) -> None:
    """The run's folder (a sweep's, for a job of one) as Hydra makes it: before any of the
    project's code runs, as spelt. A ``~`` at its start would make a folder named ``~`` in the
    working folder, while every check, lock and write of the project reads the folder as
    ``$HOME``'s (``canonical``): refused, naming the setting that spelt it. A sweep checks its
    folder once, as it starts (``output_dir`` None), where it lies too (``check_sweep_folder``)."""
    hydra = cfg.get("hydra") if isinstance(cfg, DictConfig) else None
    spelt = [] if output_dir is None else [("hydra.run.dir", str(output_dir))]
    if hydra is not None and hydra.get("mode") is not None and str(hydra.mode).endswith("MULTIRUN"):
        spelt.append(("hydra.sweep.dir", str(hydra.sweep.dir)))
    check_no_tilde(cfg, spelt)
    sweep_dir = dict(spelt).get("hydra.sweep.dir")
    if output_dir is None and sweep_dir is not None:
        check_sweep_folder(sweep_dir)


def check_no_tilde(cfg: DictConfig, spelt: list[tuple[str, str]]) -> None:
    """Each folder Hydra makes, by the setting that spelt it, starts with no ``~``."""
    runs_dir = str((cfg.get("paths") or {}).get("runs_dir", ""))
    for key, value in spelt:
        if not value.startswith("~"):
            continue
        if runs_dir.startswith("~") and value.startswith(runs_dir):
            key, value = "paths.runs_dir", runs_dir
        example = os.path.expanduser(value)
        raise UserError(
            f"{key}={value} starts with ~, which Hydra does not expand: it would make a folder "
            f"named ~ in {os.getcwd()}; pass an absolute path, e.g. {key}={example} (the shell "
            f"expands {key}=$HOME/...)"
        )


@dataclass(frozen=True)
class OtherRun:
    """The folder of another run or sweep, and what shows it is one."""

    folder: Path
    kind: str  # "run", "sweep" or "checkpoints": whose folder it is
    shown_by: str  # the file that marks it, or the live process holding its lock

    def described(self) -> str:
        return {
            "run": "another run's folder",
            "sweep": "another sweep's folder",
            "checkpoints": "another run's checkpoint folder",
        }[self.kind]


def other_run(
    folder: Path, names: tuple[str, ...] = tuple(MARKS), locked: bool = True
) -> OtherRun | None:
    """``folder`` as another run's or sweep's folder, if one of ``names`` marks it (``MARKS``)
    or, with ``locked``, another process holds its lock (a live run that has not written its
    record yet); None if nothing does."""
    for name in names:
        if os.path.lexists(folder / name):
            owner = "sweep" if MARKS[name] == "sweep" else "run"
            return OtherRun(folder, MARKS[name], f"it holds that {owner}'s {name}")
    if locked and not is_free(folder):
        return OtherRun(folder, "run", f"it is in use by {holder(folder)}")
    return None


def check_apart_from_other_runs(folders: dict[str, Path], sweep: Path | None = None) -> None:
    """No folder the run writes in is, is inside, or holds the folder of another run or sweep
    (``other_run``): two owners of one folder, or of folders one inside the other, would
    overwrite each other's files, and a sweep's report or ``tensorboard --logdir`` over one
    would take in the other's runs. The run's own folders may lie one inside the other (its
    ``checkpoints``), and a job of a sweep (``sweep``: its folder) lives inside the sweep's
    folder, which holds its jobs. Looking inside a folder is bounded (``SCAN_DEPTH``,
    ``SCAN_LIMIT``) and stops at the first run found, so a run among hundreds of others in
    ``outputs/`` pays only for the folders above it."""
    run_folder = folders[RUN_FOLDER]
    own = {folder: NOT_CHECKPOINTS for folder in (*folders.values(), run_folder / "checkpoints")}
    own[run_folder] = ()  # its record and .hydra: folder_state's; multirun.yaml: other_itself's
    for key, folder in folders.items():
        found = (
            other_itself(key, folders)
            or other_above(folder, run_folder, own, sweep)
            or other_below(folder, own)
        )
        if found is not None:
            raise apart_refusal(key, folder, found)


def check_sweep_folder(spelt: str) -> None:
    """A sweep's folder, as the sweep starts, under the rule of ``check_apart_from_other_runs``:
    not a run's folder, not inside another run's or sweep's, and holding no run unless it is a
    sweep's folder already (its ``multirun.yaml``: whether this sweep continues it is
    ``check_same_sweep``'s, once its jobs are checked). An empty folder or one above the
    working folder is refused as named (``multigpu.run.preflight.check_creatable_folder``)."""
    folder = canonical(spelt) if spelt.strip() else None
    if folder is None or folder in canonical(Path.cwd()).parents:
        return
    runs_own = tuple(name for name, kind in MARKS.items() if kind != "sweep")
    found = other_run(folder, runs_own, locked=False) or other_above(folder)
    if found is None and not os.path.lexists(folder / SWEEP_RECORD):
        found = other_below(folder)
        if found is not None and is_sweep_job(found.folder, folder):
            found = None  # a sweep's folder without its multirun.yaml (Optuna's wrote none)
    if found is not None:
        raise apart_refusal("hydra.sweep.dir", folder, found)


def is_sweep_job(job: Path, sweep: Path) -> bool:
    """Whether ``job`` is a job Hydra ran in the sweep folder ``sweep``: directly inside it,
    its ``.hydra/hydra.yaml`` of a multirun. Hydra's Optuna sweeper wrote no ``multirun.yaml``,
    so such a folder is known as a sweep's by its jobs, and its command continues it."""
    try:
        mode = OmegaConf.load(job / HYDRA / "hydra.yaml").hydra.mode
    except Exception:  # noqa: BLE001 - no Hydra config of a job there
        return False
    return job.parent == sweep and str(mode).endswith("MULTIRUN")


def other_itself(key: str, folders: dict[str, Path]) -> OtherRun | None:
    """The folder itself as another's, by the marks that are not this run's own there: a run
    folder that holds a sweep's ``multirun.yaml``, or checkpoints but no record and no
    checkpoint folder of this run; a checkpoint folder that holds a run's record or ``.hydra``,
    or a sweep's ``multirun.yaml``. A record in the run folder is ``folder_state``'s, a lock
    ``check_free``'s, checkpoints in the checkpoint folder ``check_checkpoint_folder``'s."""
    folder, run_folder = folders[key], folders[RUN_FOLDER]
    if key == RUN_FOLDER:
        names: tuple[str, ...] = (SWEEP_RECORD,)
        if folder != checkpoint_folder(folders) and not os.path.lexists(folder / RECORD):
            names += (LAST, PREVIOUS)
    elif folder == run_folder:
        return None
    else:
        names = (RECORD, HYDRA, SWEEP_RECORD)
    return other_run(folder, names, locked=False)


def other_above(
    folder: Path,
    stop: Path | None = None,
    own: Mapping[Path, tuple[str, ...]] | None = None,
    sweep: Path | None = None,
) -> OtherRun | None:
    """The nearest run's or sweep's folder above ``folder``, else the nearest checkpoint
    folder (one inside a run's folder is named by that run's). The run's own folder ends the
    search (``stop``: the folders above it are its own to check); its sweep's folder is passed,
    and its other folders are another's only by the marks ``own`` gives them. Any other folder
    above, up to ``/``, is another's by its record, a sweep's ``multirun.yaml``, or as a live
    run's (Hydra's ``.hydra`` and a lock another process holds): a project folder holding a
    stray ``last.ckpt`` or ``.hydra``, or locked by ``flock`` around the command, is none."""
    checkpoints = None
    for candidate in folder.parents:
        if candidate == stop:
            break
        if candidate == sweep:
            continue
        if own is not None and candidate in own:
            found = other_run(candidate, own[candidate], locked=False)
        else:
            found = other_run(candidate, ABOVE, locked=os.path.lexists(candidate / HYDRA))
        if found is not None and found.kind != "checkpoints":
            return found
        checkpoints = checkpoints or found
    return checkpoints


def other_below(folder: Path, own: Mapping[Path, tuple[str, ...]] | None = None) -> OtherRun | None:
    """The first folder inside ``folder`` (nearest first) that is another's, within
    ``SCAN_DEPTH`` levels and ``SCAN_LIMIT`` folders. The run's own folders there (its
    ``checkpoints``) are looked into, and are another's only by the marks ``own`` gives them.
    No lock is probed: a live run's folder shows Hydra's ``.hydra`` from its start, and a
    thousand probes could make a run starting beside fail to take its own lock."""
    for inside in folders_below(folder, SCAN_DEPTH, SCAN_LIMIT):
        marks = own[inside] if own is not None and inside in own else tuple(MARKS)
        found = other_run(inside, marks, locked=False)
        if found is not None:
            return found
    return None


def apart_refusal(key: str, folder: Path, found: OtherRun) -> OccupiedFolder:
    """The one line refusing ``folder`` (named by ``key``) for ``found``, with the way on."""
    if found.folder == folder:
        where, fix = f"is {found.described()}", f"pass a {key} outside other runs' folders"
    elif found.folder in folder.parents:
        where = f"is inside {found.described()}, {found.folder}"
        fix = f"pass a {key} outside other runs' folders"
    else:
        where = f"holds {found.described()}, {found.folder}"
        fix = f"pass a new {key}, one that holds no other run's folder"
    return OccupiedFolder(
        f"{folder} ({key}) {where} ({found.shown_by}): its files are left as they are; {fix}"
    )


def sweep_folder(cfg: DictConfig) -> Path | None:
    """The folder of the sweep whose job this run is (None for a run of its own): from the
    config when composed with Hydra's, else from the running app."""
    hydra = hydra_of(cfg)
    if hydra is None or not str(hydra.get("mode")).endswith("MULTIRUN"):
        return None
    # Relative to where the sweep started: a job under hydra.job.chdir=true runs in its folder.
    started = (hydra.get("runtime") or {}).get("cwd") or ""
    return canonical(os.path.join(started, os.path.expanduser(str(hydra.sweep.dir))))


def check_same_sweep(config: DictConfig) -> None:
    """A folder that holds a sweep's ``multirun.yaml`` is that sweep's: the same command
    continues it (docs/sweeps.md, "Running a sweep again"), and any other sweep is refused.
    Its jobs would join the first sweep's in one report, and Hydra would replace the first
    sweep's ``multirun.yaml``, the one record of what it ran, with its own. The same command is
    the same task overrides and ``hydra.sweeper.params``; a launcher's settings may change."""
    folder = canonical(str(config.hydra.sweep.dir))
    path = folder / SWEEP_RECORD
    if not os.path.lexists(path):
        return
    try:
        first = swept(OmegaConf.load(path))
    except Exception as err:  # noqa: BLE001 - whatever the file holds, it is not replaced
        reason = summary_line(err)
        raise OccupiedFolder(
            f"{path} cannot be read ({reason[:200]}): that sweep's folder is left as it is; "
            "pass another hydra.sweep.dir"
        ) from None
    now = swept(config)
    if not same_sweep(now, first):
        raise OccupiedFolder(
            f"{folder} (hydra.sweep.dir) holds another sweep, {sweep_shown(*first, now[0])} (its "
            f"{SWEEP_RECORD}): its jobs and files are left as they are; pass another "
            "hydra.sweep.dir (to continue that sweep: its own command again)"
        )


def given_keys(cfg: DictConfig) -> set[str]:
    """The keys the command line sets (Hydra's task overrides, without ``+`` or ``++``; not
    those it deletes with ``~``); none where no Hydra app composed ``cfg``."""
    hydra = (
        cfg.hydra if "hydra" in cfg else HydraConfig.get() if HydraConfig.initialized() else None
    )
    if hydra is None:
        return set()
    given = (o for o in task_overrides(hydra) if not o.startswith("~"))  # ~key: deleted
    return {override.split("=", 1)[0].lstrip("+") for override in given}


def swept(config: DictConfig) -> tuple[list[Any], Any]:
    """What a sweep runs: its task overrides and its sweeper's ``params``, as given."""
    hydra = config.hydra
    params = hydra.sweeper.get("params") if hydra.get("sweeper") is not None else None
    return task_overrides(hydra), container(params) or {}


def same_sweep(one: tuple[list[Any], Any], other: tuple[list[Any], Any]) -> bool:
    """The same overrides in any order (the same jobs, in the same folders), the same params."""
    return sorted(map(str, one[0])) == sorted(map(str, other[0])) and one[1] == other[1]


def sweep_shown(task: list[Any], params: Any, task_now: list[Any]) -> str:
    """The first sweep, by what differs: its overrides, or else its sweeper's params."""
    if sorted(map(str, task)) != sorted(map(str, task_now)) or not params:
        return f"started with {' '.join(map(str, task)) or 'no overrides'}"
    return f"whose hydra.sweeper.params were {params}"


def written_folders(cfg: DictConfig, output_dir: str | Path) -> dict[str, Path]:
    """Every folder the run writes in, canonical, by the setting that names it: its run folder
    (the record, the config, the logger's files) and its checkpoint folder when it has one."""
    folders = {RUN_FOLDER: canonical(output_dir)}
    checkpoint = (cfg.get("callbacks") or {}).get("checkpoint") or {}
    if checkpoint.get("dirpath") == "":  # the working folder, outside the run's: not meant
        raise UserError(
            f"{CHECKPOINT_FOLDER}='' names no folder: drop it (the run's own checkpoints/), give "
            "a folder, or pass callbacks.checkpoint=null for no checkpoints"
        )
    if checkpoint.get("dirpath") is not None:
        folders[CHECKPOINT_FOLDER] = canonical(str(checkpoint["dirpath"]))
    return folders


def written_places(cfg: DictConfig, folders: dict[str, Path]) -> dict[str, Path]:
    """The places outside its own folders (``folders``) that a run writes in (``places_named``).
    Places every run may share (``SHARED_PLACES``) are not owned, only kept out of other runs'
    folders (``check_places_apart``)."""
    own = folders.values()
    places = places_named(cfg, folders)
    return {key: p for key, p in places.items() if not any(p == f or f in p.parents for f in own)}


def job_folder(cfg: DictConfig, run_folder: Path) -> Path:
    """Where the job's relative paths start: the run folder under ``hydra.job.chdir``, which
    Hydra changes into, else here."""
    hydra = hydra_of(cfg)
    chdir = hydra is not None and OmegaConf.select(hydra, "job.chdir", default=None)
    return run_folder if chdir else Path.cwd()


def check_data_reachable(cfg: DictConfig, run_folder: Path) -> None:
    """The data's files can be had from where the job will look: a relative ``data.root`` or
    ``data.source`` is from the job's folder (``job_folder``), and said so where that is not
    here."""
    base, data = job_folder(cfg, run_folder), cfg.data
    root, source = data.get("root", "data"), data.get("source")
    moved = base != Path.cwd()  # else the paths as given, as the messages say them

    def from_job(path: Any) -> Any:
        return base / Path(str(path)).expanduser() if moved and path is not None else path

    try:
        check_reachable(from_job(root), from_job(source), data.get("download", True))
    except UserError as refused:
        given = {"data.root": root, "data.source": source}
        named = [  # the relative paths the refusal names, as the run folder makes them
            f"{key}={path}"
            for key, path in given.items()
            if path
            and not os.path.isabs(os.path.expanduser(str(path)))
            and re.search(re.escape(str(from_job(path))) + r"(?![^/\s:;,)])", str(refused))
        ]
        if moved and named:
            add_note(
                refused,
                f"under hydra.job.chdir=true {named[0]} is a path from the run folder, {base}: "
                "give an absolute one",
            )
        raise


def places_named(cfg: DictConfig, folders: dict[str, Path]) -> dict[str, Path]:
    """Every place a run writes in besides its folders, by the setting that names it: Hydra's
    copy of the config (``hydra.output_subdir``, from the run folder) and its log file (the file
    itself), the logger's folder, Lightning's own (``trainer.default_root_dir``: a Slurm
    requeue's ``hpc_ckpt_<n>.ckpt``, a profiler's), the data set's. Each is read as the program
    that writes there reads it (``EXPANDS``); a relative path is the job's: from the run folder
    under ``hydra.job.chdir``, which Hydra changes into."""
    hydra, run_folder = hydra_of(cfg), folders[RUN_FOLDER]
    subdir = hydra.get("output_subdir") if hydra is not None else None
    try:
        log = OmegaConf.select(hydra, "job_logging.handlers.file.filename", default=None)
    except OmegaConfBaseException:  # ${hydra.runtime.output_dir}: a config Hydra has not run
        log = None
    base = job_folder(cfg, run_folder)
    given = {
        "hydra.output_subdir": None if subdir is None else run_folder / str(subdir),
        LOG_FILE: log,
        "logger.save_dir": logger_folder(cfg),
        "trainer.default_root_dir": OmegaConf.select(cfg, "trainer.default_root_dir", default=None),
        "data.root": OmegaConf.select(cfg, "data.root", default=None),
    }
    return {
        key: canonical(base / EXPANDS.get(key, str)(str(value)))  # an absolute value stays
        for key, value in given.items()
        if value is not None
    }


def logger_folder(cfg: DictConfig) -> Path | None:
    """Where the logger writes: ``save_dir``/``name``/``version``/``sub_dir``, as Lightning's
    loggers join them (an empty name or version adds nothing, a number is ``version_<n>``,
    none: a new ``version_<n>`` it picks)."""
    logger = cfg.get("logger") or {}
    if logger.get("save_dir") is None:
        return None
    name, version, sub_dir = logger.get("name"), logger.get("version"), logger.get("sub_dir")
    if isinstance(version, int):
        version = f"version_{version}"
    parts = [str(part) for part in (name, version, sub_dir) if part not in (None, "")]
    return Path(str(logger.save_dir), *parts)


def check_places_apart(places: dict[str, Path], sweep: Path | None) -> None:
    """No place the run writes in outside its folders (``written_places``) is another run's
    folder, checkpoint folder or sweep's folder, or lies inside a run's or sweep's folder
    (``other_above``): Hydra's config copy would replace that run's, the logger's files or the
    data set's would join its files. Its own sweep's folder may hold them."""
    for key, place in places.items():
        place = place.parent if key == LOG_FILE else place  # a file in another run's folder
        if place == sweep:
            continue
        found = other_run(place, locked=os.path.lexists(place / HYDRA))
        found = found or other_above(place, sweep=sweep)
        if found is not None:
            raise apart_refusal(key, place, found)


def check_logger_folder_new(cfg: DictConfig, places: dict[str, Path], run_folder: Path) -> None:
    """A new run's logger folder outside its run folder holds no run's logs yet: two runs'
    TensorBoard events in one folder are one run to TensorBoard (its HParams the last one's),
    and a CSV logger deletes the files it finds there. Not checked where the logger picks a
    ``version_<n>`` folder of its own (``logger.version=null``), where the folder's record
    continues the run that wrote them, or for a resume (``ckpt_path``), which may go on with
    its own."""
    place, logger = places.get("logger.save_dir"), cfg.get("logger") or {}
    if place is None or logger.get("version", "") is None or cfg.get("ckpt_path") is not None:
        return
    if (run_folder / RECORD).exists() or not place.is_dir():
        return
    held = sorted(p.name for p in place.iterdir() if p.name.startswith(LOGGERS_FILES))
    if held:
        raise OccupiedFolder(
            f"{place} (logger.save_dir) holds another run's logs ({held[0]}): they are left as "
            "they are; pass another logger.save_dir, or logger.version=null for a version_<n> "
            "folder of its own"
        )


def hydra_of(cfg: DictConfig) -> Any:
    """The Hydra config of the run: composed with it, else the running app's (None: neither)."""
    hydra = cfg.get("hydra") if "hydra" in cfg else None
    if hydra is None and HydraConfig.initialized():
        hydra = HydraConfig.get()
    return hydra


def checkpoint_folder(folders: dict[str, Path]) -> Path:
    """Where the run's checkpoints go: ``callbacks.checkpoint.dirpath``, or its run folder's
    ``checkpoints`` (where a run without checkpoints would have them)."""
    return folders.get(CHECKPOINT_FOLDER, folders[RUN_FOLDER] / "checkpoints")


def check_writable_folders(folders: dict[str, Path], runs_dir: str | None = None) -> None:
    """Each folder the run writes in can be made and written, before anything is written."""
    for key, folder in folders.items():
        try:
            check_creatable(folder)
        except WriteFailed as err:
            raise UserError(f"{err}: pass a writable {setting_of(key, folder, runs_dir)}") from None


def check_names(places: dict[str, Path], runs_dir: str | None) -> None:
    """Every folder and place the run writes in has names its file system can hold, before
    any is looked at: a name too long fails every look (``is_dir`` included) with an OSError
    that named no setting."""
    for key, place in places.items():
        try:
            check_names_fit(Path(place.parent if key == LOG_FILE else place).absolute())
        except WriteFailed as err:
            raise UserError(f"{err}: pass a writable {setting_of(key, place, runs_dir)}") from None


def setting_of(key: str, place: Path, runs_dir: str | None) -> str:
    """The settings that name a place, as a refusal names them."""
    if key == RUN_FOLDER:
        return run_folder_setting(place, runs_dir)
    return PLACE_SETTINGS.get(key, key)


def run_folder_setting(folder: str | Path, runs_dir: str | None) -> str:
    """The settings that name a run folder: ``hydra.run.dir``, and ``paths.runs_dir`` where the
    folder lies under it (Hydra's default name for it), which a user may have given instead."""
    if runs_dir is None or not is_within(folder, runs_dir):
        return RUN_FOLDER
    return f"{RUN_FOLDER}, or a paths.runs_dir other than {runs_dir}, which holds it"


# A place named by more than its key: the logger's folder is save_dir/name/version/sub_dir.
PLACE_SETTINGS = {"logger.save_dir": "logger.save_dir (with logger.name, version and sub_dir)"}


def check_places_usable(places: dict[str, Path], folders: dict[str, Path]) -> None:
    """Each place can be written before anything is: its folder made as its writer makes it
    (``data.root``: ``check_reachable``'s, which writes nothing where the data is unpacked),
    Hydra's log file in a folder that exists or that Hydra makes (the run folder and those
    above it), and not a file the run writes itself (its record, checkpoints, config copy)."""
    for key, place in places.items():
        if key in SHARED_PLACES:
            continue
        try:
            check_creatable(place.parent if key == LOG_FILE else place)
        except WriteFailed as err:
            raise UserError(f"{err}: pass a writable {setting_of(key, place, None)}") from None
    log, run_folder = places.get(LOG_FILE), folders[RUN_FOLDER]
    if log is None:
        return
    instead = f"name a file in the run folder, e.g. {run_folder / 'train.log'}"
    if log.is_dir():
        raise UserError(f"{log} ({LOG_FILE}) is a folder, not a file: {instead}")
    if log in own_files(places, folders):
        raise UserError(
            f"{log} ({LOG_FILE}) is a file the run writes itself: the log would be written into "
            f"it; {instead}"
        )
    made = log.parent == run_folder or log.parent in run_folder.parents  # Hydra makes these
    if not made and not log.parent.is_dir():
        raise UserError(
            f"{log} ({LOG_FILE}) is in {log.parent}, which is not a folder: Hydra's log file "
            f"does not make one; make it first, or {instead}"
        )


def own_files(places: dict[str, Path], folders: dict[str, Path]) -> set[Path]:
    """The files a run writes itself: its record and phases, its checkpoints, Hydra's copy of
    its config."""
    run, checkpoints = folders[RUN_FOLDER], checkpoint_folder(folders)
    copy = places.get("hydra.output_subdir", run / HYDRA)
    return {
        run / RECORD,
        run / "phases.json",
        checkpoints / LAST,
        checkpoints / PREVIOUS,
        *(copy / name for name in ("config.yaml", "hydra.yaml", "overrides.yaml")),
    }


def check_checkpoint_folder(folders: dict[str, Path], own: Folder) -> None:
    """A checkpoint folder outside the run folder that holds checkpoints holds another run's
    (their record is elsewhere), unless this run continues from them (its own folder's run):
    refused, so that no run's checkpoints are overwritten by another's."""
    folder = folders.get(CHECKPOINT_FOLDER)
    if folder is None or is_within(folder, folders[RUN_FOLDER]) or own.continued is not None:
        return
    held = sorted(p.name for p in folder.glob("*.ckpt")) if folder.is_dir() else []
    if held:
        raise OccupiedFolder(
            f"{folder} ({CHECKPOINT_FOLDER}) holds another run's checkpoints "
            f"({', '.join(held[:3])}): they are left as they are; pass another "
            f"{CHECKPOINT_FOLDER} (to continue that run: ckpt_path={folder / LAST} with a new "
            f"{CHECKPOINT_FOLDER})"
        )


def container(value: Any) -> Any:
    return OmegaConf.to_container(value) if isinstance(value, Container) else value


def read_previous(path: Path) -> dict[str, Any]:
    """The folder's record, or a refusal naming it (a folder whose record cannot be read is
    not taken over)."""
    try:
        return read_record(path)
    except BadRecord as err:
        raise OccupiedFolder(
            f"{err}: this folder is not taken over; pass another hydra.run.dir"
        ) from None


@dataclass(frozen=True)
class Folder:
    """What a run folder holds of the same run: its last checkpoint and history to continue,
    or its finished record."""

    continued: Path | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    finished: dict[str, Any] | None = None
    recorded: list[dict[str, Any]] = field(default_factory=list)  # its unfinished record's
    resumed_from: dict[str, Any] | None = None  # its record's: the checkpoint it resumed


def folder_state(
    output_dir: Path,
    checkpoints: Path,
    settings: dict[str, Any],
    max_epochs: int | None,
    rank_zero: bool,
    sweep: Path | None = None,
) -> Folder:
    """What the run folder already holds: nothing, the same run unfinished (continued from its
    last checkpoint in ``checkpoints``), the same run finished (nothing to run), or another run
    (refused). A run a step or time limit completed before its own ``max_epochs`` finished
    there: its command run again is a notice, not a request to train further."""
    path = output_dir / RECORD
    if not path.exists():
        if rank_zero:  # the other ranks of a run may start first and find rank 0's files
            check_nothing_else(output_dir)
        return Folder()
    previous = read_previous(path)
    saved = previous.get("settings")
    last = checkpoints / LAST
    if never_started(previous) and not last.is_file():  # a launcher's record of its job
        if rank_zero:
            check_nothing_else(output_dir)
        return Folder()
    if not isinstance(saved, dict) or differences(saved, settings):
        how = describe(differences(saved, settings)) if isinstance(saved, dict) else None
        raise OccupiedFolder(
            f"{output_dir} holds a run with other settings"
            + (f" ({how})" if how else " (a record of an older version)")
            + ": it is left as it is; pass another hydra.run.dir (re-running a sweep: the "
            "overrides it was started with, or another hydra.sweep.dir)"
        )
    status, epochs = previous.get("status"), previous.get("epochs")
    if rank_zero and status in FINISHED:
        if (
            status == "completed"
            and not stopped_by_a_limit(previous)
            and wants_more(epochs, max_epochs)
        ):
            finished = (
                f"{output_dir} holds this run completed after {epochs} epoch(s): a finished "
                "result is not trained further in place; "
            )
            apart = "" if is_within(checkpoints, output_dir) else f" and {CHECKPOINT_FOLDER}"
            if sweep is not None:  # each job from its own checkpoint
                own = each_job_from(sweep) if not apart else checkpoint_elsewhere()
                raise OccupiedFolder(
                    f"{finished}resume the sweep into a new one with {own} "
                    f"trainer.max_epochs={max_epochs}, and another hydra.sweep.dir{apart}"
                )
            raise OccupiedFolder(
                f"{finished}resume it into a new folder with "
                f"{as_typed(last) if last.is_file() else checkpoint_elsewhere()} "
                f"trainer.max_epochs={max_epochs}, and another hydra.run.dir or none"
                f"{renamed_by(os.environ)}{apart}"
            )
        return Folder(finished=previous)
    history = previous.get("history")
    history = history if isinstance(history, list) else []
    if not last.is_file():
        return Folder(recorded=history, resumed_from=previous.get("resumed_from"))
    if isinstance(max_epochs, int) and max_epochs != -1 and len(history) >= max_epochs:
        raise NothingToDo(  # not continued to a `completed` of fewer epochs than it holds
            f"{output_dir} holds this run, {status} after {len(history)} epoch(s), and "
            f"trainer.max_epochs={max_epochs}: nothing to train, and its record is unchanged "
            f"(continue it with trainer.max_epochs>{len(history)})"
        )
    return Folder(continued=last, history=history, recorded=history)


def never_started(record: dict[str, Any]) -> bool:
    """A record of a job that ended before its run began (a launcher wrote it: SLURM never
    started the job, or it died before Hydra ran it): no settings and no epoch, so it holds
    nothing of a run, and the job run again takes its folder over."""
    return (
        record.get("settings") is None
        and not record.get("epochs")
        and not record.get("history")
        and record.get("status") not in (RUNNING, *FINISHED)
    )


def check_nothing_else(output_dir: Path) -> None:
    """A folder without a record holds nothing of a run: one with a run's checkpoint or logs
    but no ``metrics.json`` is not taken over (other files, a user's, stay as they are)."""
    last = output_dir / "checkpoints" / LAST
    try:
        found = [p.name for p in output_dir.iterdir() if p.name not in HYDRAS_OWN]
    except (FileNotFoundError, NotADirectoryError):
        return  # a folder still to be made, or a file in the way (the write check says so)
    runs_files = sorted(name for name in found if name.startswith(RUNS_FILES))
    if last.is_file() or runs_files:
        resume = f" (with {as_typed(last)} to resume it there)" if last.is_file() else ""
        held = [f"checkpoints/{LAST}"] if last.is_file() else runs_files[:2]
        raise OccupiedFolder(
            f"{output_dir} holds {', '.join(held)} but no {RECORD}: it is left as "
            f"it is; pass another hydra.run.dir{resume}"
        )


def stopped_by_a_limit(record: dict[str, Any]) -> bool:
    """Whether a completed run ended before the ``max_epochs`` it ran with (``max_steps`` or
    ``max_time`` stopped it): one with no limit of epochs (-1) always did."""
    ran_with, epochs = (record.get("run") or {}).get("max_epochs"), record.get("epochs")
    counted = isinstance(ran_with, int) and isinstance(epochs, int)
    return counted and (ran_with == -1 or epochs < ran_with)


def wants_more(epochs: Any, max_epochs: int | None) -> bool:
    if not isinstance(epochs, int) or max_epochs is None:
        return False
    return max_epochs == -1 or epochs < max_epochs


def finished_notice(output_dir: Path, record: dict[str, Any]) -> NothingToDo:
    return NothingToDo(
        f"{output_dir} already holds this run, {record.get('status')} after "
        f"{record.get('epochs')} epoch(s): nothing to train, and its record is unchanged"
    )
