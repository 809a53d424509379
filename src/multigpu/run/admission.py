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
must be free of any other live run, and a checkpoint folder of its own choosing
(``callbacks.checkpoint.dirpath``) that holds checkpoints must hold this run's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from omegaconf import Container, DictConfig, OmegaConf

from multigpu.config.computation import computation, describe, differences
from multigpu.config.errors import NothingToDo, OccupiedFolder, UserError, WriteFailed
from multigpu.config.names import FASHION_MNIST
from multigpu.config.settings import Machine, Run, resolve_run
from multigpu.data.locate import check_reachable
from multigpu.run.resume import Resume, allowed_changes, plan_init, plan_resume
from multigpu.storage.atomic import check_creatable
from multigpu.storage.ckpt_path import LAST
from multigpu.storage.ownership import check_free
from multigpu.storage.paths import canonical, is_within
from multigpu.storage.record_file import BadRecord, read_record

FINISHED = ("completed", "diverged")  # running them again would give the same
RECORD = "metrics.json"
HYDRAS_OWN = (".hydra",)  # what Hydra writes in a run folder before the run starts (and *.log)
RUNS_FILES = ("events.out.tfevents.", "phases.json", "hparams.yaml")  # a run's, beside its record
RUN_FOLDER = "hydra.run.dir"  # the settings that name the folders a run writes in
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

    @property
    def ckpt_path(self) -> Path | None:
        """The checkpoint Lightning resumes from, if any."""
        return self.resume.path if self.resume else self.continued

    @property
    def checkpoints(self) -> Path | None:
        """The folder its checkpoints go to; None for a run that does not start."""
        return checkpoint_folder(self.folders) if self.folders else None

    @property
    def epochs_before(self) -> int:
        """The epochs the run already holds: its folder's history, or the resumed checkpoint's
        (restored before any training)."""
        return self.resume.epochs if self.resume else len(self.history)


def admit(
    cfg: DictConfig,
    choices: dict[str, str],
    machine: Machine,
    output_dir: str | Path,
    rank_zero: bool = True,
) -> Admission:
    """Raise ``UserError`` (a refused run) or ``NothingToDo`` (a notice), or say how to start."""
    run = resolve_run(cfg, choices, machine)
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
    folders = written_folders(cfg, output_dir)
    if rank_zero:  # the other ranks of a run write nothing in its folders
        check_free(folders)
    checkpoints = checkpoint_folder(folders)
    own = folder_state(folders[RUN_FOLDER], checkpoints, settings, run.max_epochs, rank_zero)
    if own.finished is not None:
        return Admission(run, settings, finished=own.finished)
    if rank_zero:
        check_checkpoint_folder(folders, own)
        check_writable_folders(folders)
    data = cfg.data
    if data.get("_target_") == FASHION_MNIST:  # its files can be had, before any folder is made
        check_reachable(data.get("root", "data"), data.get("source"), data.get("download", True))
    admission = starting_point(cfg, Admission(run, settings, folders=folders), allowed, own)
    if rank_zero:  # what only Lightning refuses, once everything checked before torch passed
        from multigpu.run.lightning_arguments import check_trainer_arguments

        check_trainer_arguments(cfg)
    return admission


def starting_point(cfg: DictConfig, fresh: Admission, allowed: list[str], own: Folder) -> Admission:
    """Where an admitted run starts: the checkpoint it resumes (``ckpt_path``), the one whose
    weights it starts from (``init_from``), or its own folder (continued, or new)."""
    ckpt_path, init_from, runs_dir = cfg.get("ckpt_path"), cfg.get("init_from"), cfg.paths.runs_dir
    net = container(cfg.model.net)
    if ckpt_path is not None:
        max_steps, max_epochs = cfg.trainer.get("max_steps", -1), fresh.run.max_epochs
        resume = plan_resume(
            ckpt_path, runs_dir, fresh.settings, allowed, max_epochs, net, max_steps
        )
        return replace(fresh, resume=resume)
    if init_from is not None:
        return replace(fresh, init_from=plan_init(init_from, runs_dir, net))
    return replace(fresh, continued=own.continued, history=own.history)


def written_folders(cfg: DictConfig, output_dir: str | Path) -> dict[str, Path]:
    """Every folder the run writes in, canonical, by the setting that names it: its run folder
    (the record, the config, the logger's files) and its checkpoint folder when it has one."""
    folders = {RUN_FOLDER: canonical(output_dir)}
    checkpoint = (cfg.get("callbacks") or {}).get("checkpoint") or {}
    if checkpoint.get("dirpath") is not None:
        folders[CHECKPOINT_FOLDER] = canonical(str(checkpoint["dirpath"]))
    return folders


def checkpoint_folder(folders: dict[str, Path]) -> Path:
    """Where the run's checkpoints go: ``callbacks.checkpoint.dirpath``, or its run folder's
    ``checkpoints`` (where a run without checkpoints would have them)."""
    return folders.get(CHECKPOINT_FOLDER, folders[RUN_FOLDER] / "checkpoints")


def check_writable_folders(folders: dict[str, Path]) -> None:
    """Each folder the run writes in can be made and written, before anything is written."""
    for key, folder in folders.items():
        try:
            check_creatable(folder)
        except WriteFailed as err:
            raise UserError(f"{err}: pass a writable {key}") from None


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


def folder_state(
    output_dir: Path,
    checkpoints: Path,
    settings: dict[str, Any],
    max_epochs: int | None,
    rank_zero: bool,
) -> Folder:
    """What the run folder already holds: nothing, the same run unfinished (continued from its
    last checkpoint in ``checkpoints``), the same run finished (nothing to run), or another run
    (refused)."""
    path = output_dir / RECORD
    if not path.exists():
        if rank_zero:  # the other ranks of a run may start first and find rank 0's files
            check_nothing_else(output_dir)
        return Folder()
    previous = read_previous(path)
    saved = previous.get("settings")
    if not isinstance(saved, dict) or differences(saved, settings):
        how = describe(differences(saved, settings)) if isinstance(saved, dict) else None
        raise OccupiedFolder(
            f"{output_dir} holds a run with other settings"
            + (f" ({how})" if how else " (a record of an older version)")
            + ": it is left as it is; pass another hydra.run.dir (re-running a sweep: the "
            "overrides it was started with, or another hydra.sweep.dir)"
        )
    last = checkpoints / LAST
    status, epochs = previous.get("status"), previous.get("epochs")
    if rank_zero and status in FINISHED:
        if status == "completed" and wants_more(epochs, max_epochs):
            raise OccupiedFolder(
                f"{output_dir} holds this run completed after {epochs} epoch(s): a finished "
                f"result is not trained further in place; resume it into a new folder with "
                f"ckpt_path={last} trainer.max_epochs={max_epochs}"
            )
        return Folder(finished=previous)
    history = previous.get("history")
    history = history if isinstance(history, list) else []
    if not last.is_file():
        return Folder()
    if isinstance(max_epochs, int) and max_epochs != -1 and len(history) >= max_epochs:
        raise NothingToDo(  # not continued to a `completed` of fewer epochs than it holds
            f"{output_dir} holds this run, {status} after {len(history)} epoch(s), and "
            f"trainer.max_epochs={max_epochs}: nothing to train, and its record is unchanged "
            f"(continue it with trainer.max_epochs>{len(history)})"
        )
    return Folder(continued=last, history=history)


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
        resume = f"resume it with ckpt_path={last}, or " if last.is_file() else ""
        held = [f"checkpoints/{LAST}"] if last.is_file() else runs_files[:2]
        raise OccupiedFolder(
            f"{output_dir} holds {', '.join(held)} but no {RECORD}: it is left as "
            f"it is; {resume}pass another hydra.run.dir"
        )


def wants_more(epochs: Any, max_epochs: int | None) -> bool:
    if not isinstance(epochs, int) or max_epochs is None:
        return False
    return max_epochs == -1 or epochs < max_epochs


def finished_notice(output_dir: Path, record: dict[str, Any]) -> NothingToDo:
    return NothingToDo(
        f"{output_dir} already holds this run, {record.get('status')} after "
        f"{record.get('epochs')} epoch(s): nothing to train, and its record is unchanged"
    )
