"""Which checkpoint a run starts from, and whether it may.

A resume (``ckpt_path``) continues the same computation: the checkpoint's settings
(``multigpu.config.computation``) must equal the run's, except the keys named in ``resume_changes``
(a deliberate change, e.g. a longer cosine schedule: ``resume_changes=[model.scheduler.T_max]``),
which the new record lists. ``ckpt_path=latest`` is the newest checkpoint *of this run's
settings*. Starting a new run from a checkpoint's weights alone, with its own settings,
optimizer and record, is another option: ``init_from``.

The settings of a candidate for ``latest`` are read from the ``metrics.json`` of its run (no
torch needed); the checkpoint chosen is then read whole (``multigpu.storage.checkpoint``), and
its own settings are what is compared.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multigpu.config.computation import (
    IGNORED_KEYS,
    IGNORED_NODES,
    KEPT_ON_RESUME,
    as_recorded,
    as_text,
    describe,
    differences,
)
from multigpu.config.errors import (
    Interrupted,
    NothingToDo,
    UserError,
    as_override,
    closest,
    did_you_mean,
)
from multigpu.config.settings import check_max_time
from multigpu.storage.ckpt_path import (
    LAST,
    LATEST,
    BadCheckpoint,
    as_typed,
    checkpoint_file,
    hydra_value,
)
from multigpu.storage.outcome import outcome_of
from multigpu.storage.ownership import holder, is_free
from multigpu.storage.paths import canonical, is_within
from multigpu.storage.record_file import BadRecord, read_record

# The network settings its weights' shapes follow (not its init: weights of any init fit it).
NETWORK_SHAPE = ("width", "in_channels", "num_classes", "norm")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resume:
    """A checkpoint to continue from: its path, the finished epochs it holds, the settings it
    was trained with, the differences ``resume_changes`` allowed, and the history it carries
    (the record a resume writes first holds it: a record only moves forward, also when the
    resume goes into the folder of the run it continues)."""

    path: Path
    epochs: int
    settings: dict[str, Any]
    changed: dict[str, tuple] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """What the new run's ``metrics.json`` says of it (``resumed_from``)."""
        return {
            "checkpoint": str(canonical(self.path)),  # read from elsewhere: no relative path
            "epochs": self.epochs,
            "changed": {
                key: {"from": as_recorded(old), "to": as_recorded(new)}
                for key, (old, new) in self.changed.items()
            },
        }


@dataclass(eq=False)
class Checked:
    """A checkpoint admission read and checked whole, handed to the run's start once: what the
    run restores is what was checked, and the file is not read (its digest, its checks) twice."""

    path: Path
    checkpoint: dict[str, Any] | None = field(repr=False)

    def take(self, path: Path) -> dict[str, Any] | None:
        """The checkpoint, if it is ``path``'s; once, so that it is not held past its restore."""
        checkpoint, self.checkpoint = self.checkpoint, None
        return checkpoint if canonical(path) == canonical(self.path) else None


JOB = "JOB"  # where a job's folder goes in ``each_job_from``


def each_job_from(sweep: Path) -> str:
    """``ckpt_path`` for every job of a sweep run again into a new one: its own job's checkpoint
    in ``sweep`` (the new sweep names each job's folder alike, by its swept values; jobs of equal
    settings, ``strategy=dp,ddp``, are told apart by it as ``ckpt_path=latest`` cannot)."""
    head, _, tail = hydra_value(str(sweep / JOB / "checkpoints" / LAST)).rpartition(f"/{JOB}/")
    return shlex.quote(f"ckpt_path={head}/${{hydra:sweep.subdir}}/{tail}")


def resume_hint(
    checkpoints: Path,
    resumed: Path | None = None,
    runs_dir: str | Path | None = None,
    apart: bool = False,
) -> str:
    """How to go on from the run's checkpoint folder, or (none there yet) from the checkpoint
    the run ``resumed`` from another folder; ``ckpt_path=latest`` too where it looks
    (``runs_dir``: a run folder elsewhere, from ``hydra.run.dir``, is not found there). A
    folder ``apart`` from the run's (``callbacks.checkpoint.dirpath``) stays this run's: the
    resume writes its checkpoints in another."""
    last = checkpoints / LAST
    if last.is_file():
        latest = runs_dir is not None and is_within(checkpoints, runs_dir)
        hint = f"resume with {as_typed(last)}" + (" (or ckpt_path=latest)" if latest else "")
        return hint + (" and another callbacks.checkpoint.dirpath" if apart else "")
    if resumed is not None:
        return f"no epoch had finished since the resume: resume with {as_typed(resumed)} again"
    return "no checkpoint was written yet, so there is none to resume: run the command again"


def with_resume_hint(
    error: BaseException,
    checkpoints: Path,
    resumed: Path | None,
    runs_dir: str | Path,
    sweep: str | None = None,
    apart: bool = False,
) -> BaseException:
    """How a run that claimed its record ends: ``error`` itself, or for a stop (at any point:
    importing torch, set-up, the rendezvous, training) an ``Interrupted`` saying how to go on:
    a sweep's job, as its sweep does (``going_on``: the job continues from its checkpoint)."""
    stopped = outcome_of(error)
    if stopped.status != "interrupted":
        return error
    hint = sweep or resume_hint(checkpoints, resumed, runs_dir, apart)
    return Interrupted(f"{stopped.reason}; {hint}", stopped.exit_code)


SHELL_SAFE = re.compile(r"[\w./:=+-]+", re.ASCII)  # what a shell passes on as it is


GOING_ON = {  # how a sweep goes on: when it stopped, when one Slurm job did, when it ended
    "stopped": "the {sweep} stops; its command run again with {setting} {then}",
    "alone": "the {sweep}'s command run again with {setting}, once it has ended, {then}",
    "ended": "the {sweep}'s command run again with {setting} {then}",
}


def going_on(sweep_dir: Any, search: bool, when: str = "stopped") -> str:
    """How a stopped sweep goes on: its command over the same folder (without
    ``hydra.sweep.dir`` the command makes a new one, named by the time it starts), which skips
    the jobs that finished and continues the others; a ``search`` (Optuna's) draws on. A Slurm
    job stopped ``alone`` (cancelled by itself) leaves the sweep waiting on the others."""
    setting = f"hydra.sweep.dir={sweep_dir}"
    if not reads_back(setting, str(sweep_dir)):  # in Hydra's quotes, then the shell's
        doubled = re.sub(r'(\\+)(?="|$)', lambda run: run[1] * 2, str(sweep_dir))
        setting = shlex.quote('hydra.sweep.dir="' + doubled.replace('"', '\\"') + '"')
    sweep, then = ("search", "goes on with it") if search else ("sweep", "runs the jobs left")
    return GOING_ON[when].format(sweep=sweep, setting=setting, then=then)


def reads_back(setting: str, value: str) -> bool:
    """Whether ``setting``, typed as it is, reaches Hydra as the text ``value`` (not ``null``,
    ``FALSE`` or ``1e3``, which Hydra reads as other types)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    if not SHELL_SAFE.fullmatch(setting):
        return False
    try:
        (override,) = OverridesParser.create().parse_overrides([setting])
    except HydraException:
        return False
    return override.value() == value


def record_beside(checkpoint: Path) -> dict[str, Any] | None:
    """The record of the run a ``<run>/checkpoints/last.ckpt`` belongs to, if readable."""
    try:
        return read_record(checkpoint.parent.parent / "metrics.json")
    except BadRecord:
        return None


def newest_checkpoints(runs_dir: str | Path) -> list[Path]:
    """Every ``checkpoints/last.ckpt`` under ``runs_dir`` (``~`` expanded, as ``canonical``
    reads it; a relative one stays relative, so that the paths named are as short), newest
    first."""
    found = []
    for path in Path(runs_dir).expanduser().glob(f"**/checkpoints/{LAST}"):
        try:
            if path.is_file():
                found.append((path.stat().st_mtime, path))
        except OSError:
            continue
    return [path for _, path in sorted(found, reverse=True)]


def latest_of(
    runs_dir: str | Path, settings: dict[str, Any], allowed: list[str], ours: Iterable[Path] = ()
) -> Path:
    """The newest checkpoint under ``runs_dir`` whose run has these settings (but for
    ``allowed`` keys) and is not training now (its folder free, or one of this run's own,
    ``ours``, which its rank 0 holds while the other ranks look); none: one line naming the
    newest there is and how it differs, or the run that trains it."""
    runs_dir = Path(runs_dir).expanduser()  # named in one spelling: no "./" or trailing "/"
    candidates = newest_checkpoints(runs_dir)
    if not candidates:
        raise UserError(
            f"ckpt_path=latest found no checkpoints/{LAST} under {runs_dir}/: train a run "
            f"first, or pass ckpt_path=<run>/checkpoints/{LAST}"
        )
    own, held = {canonical(folder) for folder in ours}, None
    for path in candidates:  # newest first: the records read only as far as the one taken
        saved = (record_beside(path) or {}).get("settings")
        if not isinstance(saved, dict) or refused_changes(saved, settings, allowed):
            continue
        if canonical(run := path.parent.parent) in own or is_free(run):
            return path
        held = held or path  # a run still trains it: taken from it only when named
    if held is not None:
        raise UserError(
            f"ckpt_path=latest: the newest checkpoint of this run's settings, {held}, is of a "
            f"run still training ({holder(held.parent.parent)}): wait for it to end and pass "
            f"ckpt_path=latest again, or pass {as_typed(held)} to go on from it now, apart"
        )
    newest = candidates[0]
    saved = (record_beside(newest) or {}).get("settings")
    refused = refused_changes(saved, settings, allowed) if isinstance(saved, dict) else {}
    how = (
        f"it differs: {describe(refused)}"
        if refused
        else "its run's metrics.json records no settings"
    )
    raise UserError(
        f"ckpt_path=latest found no checkpoint of this run's settings under {runs_dir}/ (the "
        f"newest is {newest}; {how}): "
        + (
            other_shape(refused)
            or f"to start a new run from its weights pass {as_typed(newest, 'init_from')} "
            "instead of ckpt_path, or pass ckpt_path=<file> of a run with these settings"
        )
    )


def other_shape(changed: dict[str, tuple]) -> str | None:
    """The ways forward from a checkpoint of another network shape than the one configured:
    its weights load into no other (``init_from`` and ``resume_changes`` are refused too)."""
    shape = [k for k in changed if k.startswith("model.net.") and k[10:] in NETWORK_SHAPE]
    if not shape:
        return None
    was = " ".join(f"{key}={as_text(changed[key][0])}" for key in shape)
    return (
        f"a network of another shape cannot load its weights: pass {was} to resume it, or no "
        "ckpt_path to train this network from scratch"
    )


def refused_changes(
    saved: dict[str, Any], current: dict[str, Any], allowed: list[str]
) -> dict[str, tuple]:
    """The differences that ``allowed`` (keys, or nodes: ``model.scheduler``) does not cover."""

    def covered(key: str) -> bool:
        return any(key == a or key.startswith(f"{a}.") for a in allowed)

    return {k: v for k, v in differences(saved, current).items() if not covered(k)}


def check_same_run(
    path: Path, saved: dict[str, Any] | None, current: dict[str, Any], allowed: list[str]
) -> dict[str, tuple]:
    """The differences a resume makes (all allowed); a difference not allowed is refused by
    name, with the two ways forward."""
    if saved is None:
        raise UserError(
            f"ckpt_path={path} records no settings (written by an older version), so resuming "
            f"it cannot be checked to continue the same run: pass init_from={path} instead of "
            "ckpt_path to start a new run from its weights"
        )
    check_kept(path, differences(saved, current))
    check_allowed_keys(allowed, saved, current)
    refused = refused_changes(saved, current, allowed)
    if shaped := other_shape(refused):
        raise UserError(
            f"ckpt_path={path} was trained with other settings ({describe(refused)}): {shaped}"
        )
    if refused:
        keys = ",".join([*allowed, *refused])  # those it allows already, kept
        raise UserError(
            f"ckpt_path={path} was trained with other settings ({describe(refused)}): a "
            f"resume continues the same run; pass resume_changes=[{keys}] to change "
            f"{'it' if len(refused) == 1 else 'them'} deliberately, or init_from={path} "
            "instead of ckpt_path to start a new run from its weights"
        )
    return differences(saved, current)


def check_kept(path: Path, changed: dict[str, tuple]) -> None:
    """The settings that shape a checkpoint's state (``KEPT_ON_RESUME``) are those it was
    trained with, whatever ``resume_changes`` allows."""
    for key in (k for k in KEPT_ON_RESUME if k in changed):
        raise UserError(
            f"ckpt_path={path} was trained with other settings ({describe({key: changed[key]})}),"
            f" and a resume keeps {key} ({KEPT_ON_RESUME[key]}): pass init_from={path} instead "
            "of ckpt_path to start a new run from its weights with the new value"
        )


def check_allowed_keys(allowed: list[str], saved: dict[str, Any], current: dict[str, Any]):
    """Each ``resume_changes`` entry names a setting (or a node of them) of either side: a
    misspelt one would allow nothing, silently."""
    keys = set(saved) | set(current)
    for name in allowed:
        if name in IGNORED_KEYS or name.split(".")[0] in IGNORED_NODES:
            raise UserError(
                f"resume_changes names {name}, which does not change what is computed: a "
                "resume may change it without resume_changes; drop it from the list"
            )
        if not any(k == name or k.startswith(f"{name}.") for k in keys):
            hint = (
                did_you_mean(closest(name, sorted(keys)))[2:] or "use a key of the run's settings"
            )
            raise UserError(
                f"resume_changes names {name}, which is not a setting of this run: {hint} "
                "(the keys are listed under settings in its metrics.json)"
            )


def check_something_to_train(path: Path, reached: dict[str, tuple[Any, Any]]) -> None:
    """A resume must have training left under each of the run's limits: ``reached`` maps
    ``epochs``/``steps`` to (what the checkpoint holds, the run's limit; None or -1: none)."""
    for unit, (count, limit) in reached.items():
        if isinstance(count, int) and limit not in (None, -1) and count >= limit:
            raise NothingToDo(
                f"ckpt_path={path} already holds {count} {unit[:-1]}(s) and trainer.max_{unit}="
                f"{limit}: nothing to train (nothing was written); to train on, pass a larger "
                f"trainer.max_{unit}"
            )


def check_time_to_train(path: Path, checkpoint: dict[str, Any], max_time: Any) -> None:
    """A resume under ``+trainer.max_time`` must have time left: Lightning's Timer carries the
    training time the checkpoint's run spent, and stops at once when it is spent (the run
    then failed, no epoch trained, with its folder and record made)."""
    limit = check_max_time(max_time)
    timer = (checkpoint.get("callbacks") or {}).get("Timer") or {}
    spent = (timer.get("time_elapsed") or {}).get("train")
    if limit is not None and isinstance(spent, (int, float)) and spent >= limit:
        raise NothingToDo(
            f"ckpt_path={path} already holds {spent:.0f} s of training and trainer.max_time="
            f"{as_override(max_time)}: nothing to train (nothing was written); to train on, "
            "pass a longer +trainer.max_time (it counts the time the checkpoint holds)"
        )


def find_checkpoint(
    value: Any, key: str, runs_dir: str | Path, settings, allowed, ours: Iterable[Path] = ()
) -> Path:
    """``ckpt_path``/``init_from`` as a checkpoint file: ``latest`` is the newest of these
    settings for a resume (``settings`` given; ``ours``: ``latest_of``'s), the newest of any
    for ``init_from``."""
    if str(value) != LATEST:
        return checkpoint_file(value, key)
    if settings is not None:
        return latest_of(runs_dir, settings, allowed, ours)
    candidates = newest_checkpoints(runs_dir)
    if not candidates:
        raise UserError(
            f"{key}=latest found no checkpoints/{LAST} under {Path(runs_dir).expanduser()}/: "
            f"pass {key}=<file>"
        )
    return candidates[0]


def plan_resume(
    ckpt_path: Any,
    runs_dir: str | Path,
    settings: dict[str, Any],
    allowed: list[str],
    max_epochs: int | None,
    net: dict[str, Any],
    max_steps: int = -1,
    max_time: Any = None,
    ours: Iterable[Path] = (),
) -> tuple[Resume, Checked]:
    """The checkpoint a resume continues, read whole and checked against the run, its
    network included (``net``: the configured ``model.net``), before anything is written;
    ``ours``: the run's own folders (``latest_of``)."""
    path = find_checkpoint(ckpt_path, "ckpt_path", runs_dir, settings, allowed, ours)
    check_recorded_network(path, net, "ckpt_path")
    check_recorded_settings(path, settings, allowed)
    # torch: only once there is a file to read
    from multigpu.storage.checkpoint import (
        check_resumable,
        epoch_history,
        finished_epochs,
        stored_settings,
    )

    checkpoint = read_fitting(path, net, "ckpt_path")
    check_resumable(path, checkpoint)
    saved = stored_settings(checkpoint)
    changed = check_same_run(path, saved, settings, allowed)
    epochs = finished_epochs(checkpoint)
    steps = checkpoint.get("global_step")
    check_something_to_train(path, {"epochs": (epochs, max_epochs), "steps": (steps, max_steps)})
    check_time_to_train(path, checkpoint, max_time)
    if changed:
        log.info("resuming with deliberate changes: %s", describe(changed, limit=len(changed)))
    # Kept absolute, from where the command started: under hydra.job.chdir the run moves away.
    path = canonical(path)
    resume = Resume(path, epochs, saved, changed, epoch_history(checkpoint) or [])
    return resume, Checked(path, checkpoint)


def plan_init(init_from: Any, runs_dir: str | Path, net: dict[str, Any]) -> Checked:
    """The checkpoint whose weights a new run starts from: read whole and fitted to the
    configured network now, so that a bad file is refused before anything is written."""
    path = find_checkpoint(init_from, "init_from", runs_dir, None, [])
    check_recorded_network(path, net, "init_from")
    return Checked(canonical(path), read_fitting(path, net, "init_from"))  # as a resume's


def check_recorded_settings(path: Path, settings: dict[str, Any], allowed: list[str]) -> None:
    """Before torch loads: a checkpoint in its run's ``checkpoints`` folder, of a run never
    resumed with changes, holds the settings its run's record names, so a resume with others
    is refused at once (about a second, not ten). A record whose run changed on a resume
    (``resumed_from.changed``) may hold other settings than an older checkpoint beside it:
    the checkpoint answers, as one kept elsewhere does."""
    if (saved := settings_beside(path)) is not None:
        check_same_run(path, saved, settings, allowed)


def settings_beside(path: Path) -> dict[str, Any] | None:
    """The settings a checkpoint in its run's ``checkpoints`` folder was trained with, from its
    run's record, read without torch; None where they may differ (a run resumed with changes)
    or are unknown: the checkpoint's own then answer."""
    record = record_beside(path) if path.parent.name == "checkpoints" else None
    resumed = (record or {}).get("resumed_from")
    saved = (record or {}).get("settings")
    if isinstance(saved, dict) and not (isinstance(resumed, dict) and resumed.get("changed")):
        return saved
    return None


def check_recorded_network(path: Path, net: dict[str, Any], key: str) -> None:
    """Before torch loads: a checkpoint in its run's ``checkpoints`` folder was trained with
    the network its run's record names, so a network of another shape is refused at once. The
    weights' own check (``read_fitting``) stays, for a checkpoint kept elsewhere."""
    record = record_beside(path) if path.parent.name == "checkpoints" else None
    recorded = (record or {}).get("settings") or {}  # none readable: the weights answer
    for name in NETWORK_SHAPE:
        was, now = recorded.get(f"model.net.{name}"), net.get(name)
        if was is not None and now is not None and was != now:
            raise UserError(
                f"{key}={path} does not fit this network: it was trained with model.net.{name}="
                f"{was} (its run's metrics.json) and model.net.{name}={now} is configured; pass "
                f"model.net.{name}={was}"
            )


def read_fitting(path: Path, net: dict[str, Any], key: str) -> dict[str, Any]:
    """The checkpoint at ``path``, whose weights fit the network ``net`` describes; every
    refusal names ``key``."""
    from multigpu.models import resnet18
    from multigpu.storage.checkpoint import check_fits, load_checkpoint

    try:
        checkpoint = load_checkpoint(path)
        settings = {k: v for k, v in net.items() if not k.startswith("_")}
        check_fits(path, checkpoint, resnet18(**settings), settings)
    except BadCheckpoint as err:  # the reader's lines say ckpt_path
        raise err.said_of(key) from None
    return checkpoint


def allowed_changes(value: Any) -> list[str]:
    """``resume_changes``: a list of dotted keys (or nodes)."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(k, str) and k for k in value):
        raise UserError(
            f"resume_changes={as_text(value)} must be a list of settings, e.g. "
            "resume_changes=[model.scheduler.T_max]"
        )
    return list(value)
