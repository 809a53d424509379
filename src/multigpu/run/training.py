"""``train(cfg)``: the whole run as a plain function, callable from tests and from ``train.py``.

The run is admitted first (``multigpu.run.admission``: the config, its folder, the checkpoint it
starts from), before torch and Lightning are imported when it starts from no checkpoint; from
the command line that happened before Hydra created the folder, and is not done twice. Then
``multigpu.run.fit`` trains. ``train`` owns the folders the run writes in (its run folder and its
checkpoint folder) and its record while it runs: however the run ends (any signal that would end
it included), ``metrics.json`` says how, or the error line says that it could not.
A run ends for the *first* signal that stops it (``multigpu.callbacks.interrupts.one_ending``).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, NoReturn

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from multigpu.callbacks.interrupts import Ending, by_first_signal, noted_only, one_ending
from multigpu.config.computation import computation
from multigpu.config.errors import (
    Interrupted,
    NothingToDo,
    OccupiedFolder,
    UserError,
    WriteFailed,
    add_note,
    message,
)
from multigpu.config.launch import Signal, stop_signals
from multigpu.config.settings import CLUSTER_LAUNCHERS, Machine, Run, resolve_run
from multigpu.run.admission import Admission, admit, check_unchanged, finished_notice
from multigpu.run.cli import hydra_runtime
from multigpu.run.optuna_check import is_optuna
from multigpu.run.resume import Resume, going_on, with_resume_hint
from multigpu.storage.atomic import write_json
from multigpu.storage.outcome import COMPLETED, Outcome, outcome_of
from multigpu.storage.ownership import is_free, owning
from multigpu.storage.paths import canonical
from multigpu.storage.record import (
    TIME_TO_TARGETS,
    RunRecord,
    is_rank_zero,
    record_ending,
    summarize,
)

log = logging.getLogger(__name__)
_admitted: dict[Path, Admission] = {}  # decided before Hydra made the folder (preflight.Preflight)
_started: set[Path] = set()  # the folders whose run train has started in this process


def resolve(cfg: DictConfig) -> Run:
    """The run's settings, on this machine."""
    choices, multirun = hydra_runtime(cfg)
    return resolve_run(cfg, choices, Machine.this(multirun))


def admit_run(cfg: DictConfig, output_dir: Path) -> Admission:
    """Whether and how this run starts, on this machine (``multigpu.run.admission``)."""
    choices, multirun = hydra_runtime(cfg)
    return admit(cfg, choices, Machine.this(multirun), output_dir, is_rank_zero())


def remember(output_dir: Path, admission: Admission) -> None:
    """Keep what was decided before Hydra created the folder, for ``train`` to use once; until
    ``train`` takes it, a stop signal records the run's ending (``ended_before_training``).
    The folder is kept absolute: under ``hydra.job.chdir`` Hydra changes into it first."""
    output_dir = canonical(output_dir)
    _admitted[output_dir] = admission
    if is_rank_zero() and threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, *stop_signals(os.environ)):
            signal.signal(signum, functools.partial(ended_before_training, output_dir))


def ended_before_training(output_dir: Path, signum: int, frame: Any) -> None:
    """A stop signal while Hydra makes the run's folder and sets up its job, before ``train``
    installs its own handlers: the run had ended with no record (SIGTERM silently). Recorded
    ``interrupted`` in the folder if Hydra made it, then one line and 128 + the signal's
    number. Once ``train`` has taken its admission, the signal does what it did before."""
    if canonical(output_dir) not in _admitted:  # train ran: this handler is only put back
        default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
        signal.signal(signum, default)
        signal.raise_signal(signum)
        return
    admission = _admitted[canonical(output_dir)]
    outcome = not_started(Signal(signum))
    record_unstarted(output_dir, admission.run.record(), admission.settings, outcome, owned=True)
    os.write(2, f"error: {outcome.reason}\n".encode())  # not print: it may be inside one
    os._exit(outcome.exit_code)  # Hydra's job set-up is not ours to unwind


def not_started(signum: Signal, sweep: str | None = None) -> Outcome:
    """How a run that a stop signal ended before its training started ended: its command run
    again starts it (a sweep's, as ``sweep`` says, runs the jobs left, this one among them)."""
    again = sweep or "run the command again"
    reason = f"interrupted by {signum.name} before training started; {again}"
    return Outcome("interrupted", reason, 128 + signum)


def sweep_going_on(cfg: DictConfig) -> str | None:
    """How the sweep of a multirun's job goes on once stopped; None outside a sweep."""
    if not hydra_runtime(cfg)[1]:
        return None
    hydra = cfg.hydra if "hydra" in cfg else HydraConfig.get()
    on_slurm = hydra.runtime.choices.get("hydra/launcher") in CLUSTER_LAUNCHERS
    return going_on(hydra.sweep.dir, is_optuna(hydra), "alone" if on_slurm else "stopped")


def record_unstarted(
    output_dir: Path,
    run: dict[str, Any],
    settings: dict[str, Any] | None,
    outcome: Outcome,
    owned: bool,
) -> None:
    """Record a run that a stop signal ended before it claimed its record: in a folder without
    one, an ``interrupted`` record with the run's settings (its command continues the folder);
    a folder Hydra has not made stays unmade. A record the folder already holds is only
    ended (``record_ending``: a ``running`` one) by a process that owns the folder: before
    that, it may be another live run's."""
    record = output_dir / "metrics.json"
    if not output_dir.is_dir() or not is_rank_zero():
        return
    if not record.exists():
        started = summarize([], run, settings=settings)
        write_json(record, {**started, "status": outcome.status, "reason": outcome.reason})
    elif owned:
        record_ending(record, outcome)


def finish(record: RunRecord, error: BaseException) -> None:
    """Record how the run ended; if even that cannot be written, the error line says so. A
    rank other than 0 records it when rank 0, the record's owner, has gone (killed)."""
    try:
        record.finish(outcome_of(error))
        if not is_rank_zero() and owner_gone(record.path.parent):
            record_ending(record.path, outcome_of(error))
    except WriteFailed as unwritten:
        if str(record.path) not in message(error):  # else the line already names it
            add_note(error, f"{record.path.name} could not be updated either ({unwritten})")


def owner_gone(folder: Path, wait_s: float = 3.0) -> bool:
    """Whether the folder's owner has ended, waiting a moment: a peer sees rank 0's sockets
    close just before its process is gone."""
    deadline = time.monotonic() + wait_s
    while not is_free(folder):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def check_trained(record: RunRecord) -> None:
    """A run is ``completed`` only if it trained an epoch: Lightning ends a fit that had
    nothing to do (``+trainer.max_time`` already spent, no batch to train) without a word.
    Rank 0 reads the file, which holds the history whichever process trained."""
    if is_rank_zero() and not record.trained():
        raise UserError(
            "no epoch was trained: Lightning stopped before the first one ended; check "
            "+trainer.max_time and +trainer.limit_train_batches"
        )


def start_record(
    output_dir: Path, admission: Admission, cfg: DictConfig, started: float
) -> RunRecord:
    """The run's record; ``started``: ``time.monotonic()`` when the run started, the clock of
    its time to accuracy (docs/records.md, "Time to accuracy"). A run that continues its own
    folder's checkpoint is resumed from it as much as one given ``ckpt_path``."""
    resume = admission.resume
    if admission.continued is not None:
        resume = Resume(admission.continued, len(admission.history), admission.settings)
    targets = cfg.get("time_to_targets")
    return RunRecord(
        output_dir / "metrics.json",
        admission.run.record(),
        settings=admission.settings,
        started=started,
        resumed_from=resume.record() if resume else None,
        init_from=str(admission.init_from) if admission.init_from else None,
        time_to_targets=TIME_TO_TARGETS if targets is None else [float(t) for t in targets],
    )


def train(cfg: DictConfig) -> dict[str, Any]:
    """Train and evaluate as configured; return the final record (also in ``metrics.json``).
    A run that is refused writes nothing; one that starts owns its folder until it ends.
    From its first line, a stop signal is the run's ending (``one_ending``), recorded however
    early it comes: a sweep's job had been admitted here under the sweep's handlers."""
    started = time.monotonic()  # before the data is touched: the clock of time to accuracy
    output_dir = Path(cfg.paths.output_dir)
    with one_ending() as ending:
        try:
            completed = admitted_run(cfg, output_dir, started, ending)
        except BaseException as error:
            stopped = by_first_signal(error, ending.first if ending else None)
            if stopped is error:
                raise
            raise stopped from error
        stop_sweep_after(cfg, output_dir, ending)
    return completed


def started_in(folder: str | Path) -> bool:
    """Whether ``train`` has started the run of this folder in this process (in this sweep):
    from then on its own handlers answer a stop signal, and it records how the run ended."""
    return canonical(folder) in _started


def forget_started() -> None:
    """A new sweep in this process: no job of it has started yet, whatever folders earlier
    sweeps' jobs used."""
    _started.clear()


def stop_sweep_after(cfg: DictConfig, output_dir: Path, ending: Ending | None) -> None:
    """A signal that only skipped the work after the last epoch of a sweep's job stops the
    sweep: the job completed, and the others wait for the sweep's command run again. Raised
    inside ``one_ending``'s block, which then keeps ignoring later signals until exit."""
    stop, sweep = ending.first if ending is not None else None, sweep_going_on(cfg)
    if stop is not None and sweep is not None:
        raise Interrupted(
            f"interrupted by {stop.name} after the last epoch of {output_dir.name} (completed): "
            f"{sweep}",
            128 + stop,
        )


def admitted_run(
    cfg: DictConfig, output_dir: Path, started: float, ending: Ending | None
) -> dict[str, Any]:
    """Admit the run, then run it; a stop signal before the run has claimed its record is
    recorded (``recorded_if_stopped``) with the settings admission resolved."""
    try:
        if ending is not None:
            ending.armed = True  # inside the block that records a stop: none goes unrecorded
        _started.add(canonical(output_dir))  # from here this function records the run's end
        if ending is not None and ending.first is not None:  # came while Hydra set up the job
            raise Interrupted(f"interrupted by {ending.first.name}", 128 + ending.first)
        admission = admission_of(cfg, output_dir)
    except BaseException as error:
        with noted_only(ending):
            stopped = recorded_if_stopped(cfg, output_dir, None, error, False, ending)
        raise_stopped(stopped, error)
    if admission.finished is not None:
        if hydra_runtime(cfg)[1]:  # a sweep run again: the job is skipped
            log.info("%s", finished_notice(output_dir, admission.finished))
            return admission.finished
        raise finished_notice(output_dir, admission.finished)
    if is_rank_zero():  # the layout once, not once per process
        log.info(admission.run.describe())
    if admission.continued is not None:
        log.info("continuing this run from its own checkpoint %s", admission.continued)
    with ExitStack() as held:  # the folders stay owned while a stop is recorded
        owned = False
        try:
            if is_rank_zero():
                # A sweep's job was admitted when the sweep started: no run wrote there since.
                unchanged = functools.partial(check_unchanged, admission)
                held.enter_context(owning(admission.folders, unchanged))
                owned = True
            _admitted.pop(canonical(output_dir), None)  # taken: train's handlers answer now
            record = claimed_record(cfg, output_dir, admission, started)
        except BaseException as error:
            with noted_only(ending):
                stopped = recorded_if_stopped(cfg, output_dir, admission, error, owned, ending)
            raise_stopped(stopped, error)
        try:
            from multigpu.run.fit import (
                fit,  # torch and Lightning: only once the config is known good
            )

            fit(cfg, admission, record, output_dir)
            check_trained(record)
        except BaseException as error:
            with noted_only(ending):  # a signal now cannot cut the record's write short
                checkpoints = admission.checkpoints
                stopped = by_first_signal(error, ending.first if ending else None)
                runs_dir = cfg.paths.runs_dir
                ended = with_resume_hint(
                    stopped,
                    checkpoints,
                    admission.ckpt_path,
                    runs_dir,
                    sweep_going_on(cfg),
                    admission.checkpoints_apart,
                )
                finish(record, ended)
            if ended is error:
                raise
            raise ended from None
        with noted_only(ending):  # a signal now finds the run completed
            return record.finish(COMPLETED)


def claimed_record(
    cfg: DictConfig, output_dir: Path, admission: Admission, started: float
) -> RunRecord:
    """The run's record, written (claimed) once its folders are held, checked unchanged."""
    record = start_record(output_dir, admission, cfg, started)
    carried = admission.resume.history if admission.resume else admission.history
    record.claim(carried, recorded=admission.recorded)
    return record


def raise_stopped(stopped: BaseException, error: BaseException) -> NoReturn:
    """Raise what the run ends with: ``error`` as it came, or the stop it turned out to be."""
    if stopped is error:
        raise error
    raise stopped from None


def admission_of(cfg: DictConfig, output_dir: Path) -> Admission:
    """What was decided before Hydra made the folder, or the run admitted now (a sweep's job,
    a test's call). A refused sweep job is recorded for the sweep's report."""
    try:
        return _admitted.get(canonical(output_dir)) or admit_run(cfg, output_dir)
    except UserError as error:
        if hydra_runtime(cfg)[1] and not isinstance(error, (OccupiedFolder, NothingToDo)):
            record_ending(output_dir / "metrics.json", outcome_of(error))  # for the report
        raise


def recorded_if_stopped(
    cfg: DictConfig,
    output_dir: Path,
    admission: Admission | None,
    error: BaseException,
    owned: bool,
    ending: Ending | None,
) -> BaseException:
    """The exception a run ends with when ``error`` came before it claimed its record. Once a
    stop signal has come, it is the run's ending, whatever ``error`` became (admission reads
    the config and the folder, and a signal raised inside that is wrapped or taken for a bad
    value): recorded ``interrupted`` with the run's settings (resolved now if admission had
    not finished), and answered with the record's reason. A refusal that leaves the folder as
    it is, or any other error, is ``error`` itself."""
    signum = stop_of(error, ending)
    if signum is None or isinstance(error, (OccupiedFolder, NothingToDo)):
        return error
    ended = not_started(signum, sweep_going_on(cfg))
    if admission is not None:
        run, settings = admission.run.record(), admission.settings
    else:
        run, settings = resolved_settings(cfg)
    record_unstarted(output_dir, run, settings, ended, owned)
    return Interrupted(ended.reason or "", ended.exit_code)


def stop_of(error: BaseException, ending: Ending | None) -> Signal | None:
    """The stop signal that ended the run: the first that came, or the one ``error`` says."""
    if ending is not None and ending.first is not None:
        return ending.first
    outcome = outcome_of(error)
    if outcome.status != "interrupted":
        return None
    return Signal(outcome.exit_code - 128)


def resolved_settings(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The run's layout and settings as admission resolves them, for the record of a run
    stopped before admission finished; none when the config cannot be resolved (admission
    would have refused it)."""
    try:
        run = resolve(cfg)
        return run.record(), computation(cfg, run)
    except Exception:  # noqa: BLE001 - a refused config: the record says how it ended alone
        return {}, None
