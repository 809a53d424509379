"""Multirun support: a failing job is recorded and the sweep goes on; the report at the end,
whose rows also decide the sweep's exit status. A stop signal ends the sweep, whenever it
comes (``between_jobs`` while no job's ``train`` answers it)."""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from multigpu.callbacks.interrupts import defer_stop, deferred_stop, ignore_stop_signals
from multigpu.config.errors import Interrupted, OccupiedFolder, RunStopped, UserError, message
from multigpu.config.job_names import share_swept_keys
from multigpu.config.launch import Signal, stop_signals
from multigpu.run.admission import FINISHED, SWEEP_RECORD, check_same_sweep
from multigpu.run.cli import hydra_runtime
from multigpu.run.objective import job_ending
from multigpu.run.optuna_check import is_optuna
from multigpu.run.resume import going_on
from multigpu.run.run_summary import has_tensorboard_logs, shown_path, tensorboard_line
from multigpu.run.training import forget_started, started_in
from multigpu.storage.atomic import write_atomically
from multigpu.storage.outcome import outcome_of
from multigpu.storage.record_file import records_below

log = logging.getLogger(__name__)


def keep_sweeping(main: Callable[[DictConfig], Any]) -> Callable[[DictConfig], Any]:
    """In a multirun, an exception ends the job (``train`` has recorded how in the job's
    ``metrics.json``), not the sweep; outside one, it propagates. Ctrl-C and SIGTERM end the
    sweep, and so does a sweep folder that holds jobs of other settings."""

    @functools.wraps(main)
    def wrapper(cfg: DictConfig) -> Any:
        if not hydra_runtime(cfg)[1]:
            return main(cfg)
        try:
            return main(cfg)
        except (Interrupted, OccupiedFolder):  # Ctrl-C, or a sweep folder holding other jobs
            raise
        except Exception as err:
            if not isinstance(err, (UserError, RunStopped)):  # a bug: keep the traceback in the log
                log.error("job failed", exc_info=True)
            outcome, job = outcome_of(err), HydraConfig.get()
            name = Path(job.runtime.output_dir).name  # named by its values, as its folder
            said = f"job {job.job.num} ({name}) {outcome.status}: {outcome.reason}"  # its record's
            print(f"error: {said}", file=sys.stderr)
            return job_ending(None, outcome.status)  # Optuna: a pruned or failed trial

    return wrapper


class SweepReport(Callback):
    """Names the jobs' folders by what the sweep varies; writes and prints the sweep summary
    when the multirun ends; exits 1 when a job did not complete. The report covers every job
    in the sweep's folder, so the folder holds one sweep: another is refused as it starts."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from multigpu.run.preflight import guarded

        guarded(own_sweep_folder)(config)
        share_swept_keys(config)
        stop_between_jobs(going_on(config.hydra.sweep.dir, is_optuna(config)))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            search = is_optuna(config)  # a search's trials left are drawn anew, not run again
            report_sweep(
                Path(config.hydra.sweep.dir),
                None if search else going_on(config.hydra.sweep.dir, search=False, when="ended"),
            )
        finally:
            stop_as_before_sweep()


def report_sweep(sweep_dir: Path, goes_on: str | None = None) -> None:
    """Write and print the sweep's summary; exit 1 when a job did not complete, saying how
    the sweep ``goes_on`` where such a job would not end the same way again."""
    from multigpu.tools.report import incomplete, to_text, write_report  # matplotlib: only now

    if not records_below(sweep_dir):
        return
    rows = write_report(sweep_dir)
    print("\n" + to_text(rows), end="", flush=True)
    shown = shown_path(sweep_dir)
    print(
        f"sweep summary: {shown}/summary.md, test_acc.png, acc_vs_time.png, scaling.png",
        flush=True,
    )
    if has_tensorboard_logs(sweep_dir):
        print(tensorboard_line(sweep_dir), flush=True)
    failed = incomplete(rows)
    if failed:
        again = any(row["status"] not in FINISHED for row in rows) and goes_on
        said = f"error: {failed} of {len(rows)} jobs did not complete"
        print(said + (f"; {again}" if again else ""), file=sys.stderr)
        sys.exit(1)


def own_sweep_folder(config: DictConfig) -> None:
    """After ``Preflight`` admitted every job (a job that would take another's folder is named
    there): a folder holding another sweep is refused in one line, exit 2; one holding none is
    marked as this sweep's (``multirun.yaml``, which Hydra's basic sweeper writes next and
    another sweeper may not), so that no other sweep or run takes it."""
    from multigpu.run.preflight import refuse

    try:
        check_same_sweep(config)
    except UserError as err:
        refuse(message(err), err.exit_code)
    record = Path(str(config.hydra.sweep.dir)) / SWEEP_RECORD
    if not record.exists():
        write_atomically(record, OmegaConf.to_yaml(config))


def stop_between_jobs(sweep: str) -> None:
    """Answer a stop signal while none of the sweep's jobs runs ``train`` (``between_jobs``):
    Ctrl-C, SIGTERM and SIGHUP there had ended the sweep by their default action (SIGTERM
    without a word, the next job's folder left without a record). Each job's ``train`` puts
    its own handlers over these while it runs and this one back after."""
    forget_started()
    _going_on[:] = [sweep]
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, *stop_signals(os.environ)):
            before = signal.signal(signum, between_jobs)
            if before is not between_jobs:  # an earlier sweep's in this process: not put back
                _before_sweep[signum] = before


def stop_as_before_sweep() -> None:
    """The handlers from before the sweep, back once it has ended (its report written)."""
    while _before_sweep:
        signum, handler = _before_sweep.popitem()
        signal.signal(signum, handler)


_before_sweep: dict[int, Any] = {}  # the handlers ``stop_between_jobs`` replaced
_going_on: list[str] = [""]  # how the sweep that runs goes on once stopped (``going_on``)


def between_jobs(signum: int, frame: Any) -> None:
    """A stop signal between two jobs, or after the last: the sweep stops, with one line and
    128 + the signal's number. A job whose folder Hydra has made is given the signal
    (``defer_stop``): its ``train`` records it ``interrupted``, with its settings, as it starts,
    and stops the sweep, as a single run stopped while Hydra sets it up. A job whose folder is
    not made yet never is; the jobs that ran stay as they ended."""
    if deferred_stop() is not None:
        return  # the first signal is the sweep's ending
    if job_being_set_up() is not None:
        defer_stop(signum)
        return
    ignore_stop_signals()  # the first signal is the sweep's ending
    name = Signal(signum).name
    said = f"error: interrupted by {name} between the sweep's jobs: {_going_on[0]}\n"
    os.write(2, said.encode())  # not print: the signal may have come inside a write to stderr
    sys.exit(128 + signum)


def job_being_set_up() -> Path | None:
    """The folder of the job Hydra is setting up (its config is Hydra's while Hydra runs the
    job, and none between jobs): made, and not yet run by ``train``."""
    hydra = HydraConfig.instance().cfg
    if hydra is None:
        return None
    try:
        folder = OmegaConf.select(hydra, "hydra.runtime.output_dir", default=None)
    except Exception:  # noqa: BLE001 - caught mid-update by the signal: no job's folder yet
        return None
    if folder is None or not Path(folder).is_dir() or started_in(folder):
        return None
    return Path(folder)
