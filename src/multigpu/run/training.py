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
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from multigpu.callbacks.interrupts import one_ending, sigterm_interrupts
from multigpu.config.errors import (
    Interrupted,
    NothingToDo,
    OccupiedFolder,
    UserError,
    WriteFailed,
    add_note,
    message,
)
from multigpu.config.launch import stop_signals
from multigpu.config.settings import Machine, Run, resolve_run
from multigpu.run.admission import Admission, admit, check_unchanged, finished_notice
from multigpu.run.cli import hydra_runtime
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
    ``train`` takes it, a stop signal records the run's ending (``ended_before_training``)."""
    _admitted[canonical(output_dir)] = admission
    if is_rank_zero() and threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, *stop_signals(os.environ)):
            signal.signal(signum, functools.partial(ended_before_training, output_dir))


def ended_before_training(output_dir: Path, signum: int, frame: Any) -> None:
    """A stop signal while Hydra makes the run's folder and sets up its job, before ``train``
    installs its own handlers: the run had ended with no record (SIGTERM silently). Recorded
    ``interrupted`` in the folder if Hydra made it, then one line and 128 + the signal's
    number. Once ``train`` has taken its admission, the signal does what it did before."""
    name = signal.Signals(signum).name
    if canonical(output_dir) not in _admitted:  # train ran: this handler is only put back
        default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
        signal.signal(signum, default)
        signal.raise_signal(signum)
        return
    reason = f"interrupted by {name} before training started; run the command again"
    record, admission = output_dir / "metrics.json", _admitted[canonical(output_dir)]
    if output_dir.is_dir() and not record.exists():  # the run's settings: the command continues
        started = summarize([], admission.run.record(), settings=admission.settings)
        write_json(record, {**started, "status": "interrupted", "reason": reason})
    elif output_dir.is_dir():
        record_ending(record, Outcome("interrupted", reason, 128 + signum))
    print(f"error: {reason}", file=sys.stderr, flush=True)
    os._exit(128 + signum)  # Hydra's job set-up is not ours to unwind


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
    its time to accuracy (docs/records.md, "Time to accuracy")."""
    resume = admission.resume
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
    A run that is refused writes nothing; one that starts owns its folder until it ends."""
    started = time.monotonic()  # before the data is touched: the clock of time to accuracy
    output_dir = Path(cfg.paths.output_dir)
    try:
        admission = _admitted.get(canonical(output_dir)) or admit_run(cfg, output_dir)
    except UserError as error:
        if hydra_runtime(cfg)[1] and not isinstance(error, (OccupiedFolder, NothingToDo)):
            record_ending(output_dir / "metrics.json", outcome_of(error))  # for the report
        raise
    if admission.finished is not None:
        if hydra_runtime(cfg)[1]:  # a sweep run again: the job is skipped
            log.info("%s", finished_notice(output_dir, admission.finished))
            return admission.finished
        raise finished_notice(output_dir, admission.finished)
    if is_rank_zero():  # the layout once, not once per process
        log.info(admission.run.describe())
    if admission.continued is not None:
        log.info("continuing this run from its own checkpoint %s", admission.continued)
    with (
        one_ending() as ending,
        owning(admission.folders) if is_rank_zero() else nullcontext(),
        sigterm_interrupts(),
    ):
        if ending is not None:  # over sigterm_interrupts' own, which it puts back when it ends
            ending.install()
            ending.armed = True
        _admitted.pop(canonical(output_dir), None)  # taken: train's handlers answer from here
        if is_rank_zero():
            check_unchanged(admission)  # a sweep's job was admitted when the sweep started
        record = start_record(output_dir, admission, cfg, started)
        try:
            carried = admission.resume.history if admission.resume else admission.history
            record.claim(carried, recorded=admission.recorded)
            from multigpu.run.fit import (
                fit,  # torch and Lightning: only once the config is known good
            )

            fit(cfg, admission, record, output_dir)
            check_trained(record)
        except BaseException as error:
            finish(record, error)
            raise
        completed = record.finish(COMPLETED)
    stop = ending.first if ending is not None else None
    if stop is not None and hydra_runtime(cfg)[1]:  # the job completed; the sweep was stopped
        raise Interrupted(
            f"interrupted by {stop.name} after the last epoch of {output_dir.name} (completed): "
            "the sweep stops; its command run again runs the jobs left",
            128 + stop,
        )
    return completed
