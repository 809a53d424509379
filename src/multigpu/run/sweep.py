"""Multirun support: a failing job is recorded and the sweep goes on; the report at the end,
whose rows also decide the sweep's exit status."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from multigpu.config.errors import Interrupted, OccupiedFolder, RunStopped, UserError
from multigpu.config.job_names import share_swept_keys
from multigpu.run.cli import hydra_runtime
from multigpu.run.objective import job_ending
from multigpu.run.run_summary import has_tensorboard_logs, shown_path, tensorboard_line
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
            print(f"error: job {job.job.num} ({name}) failed: {outcome.reason}", file=sys.stderr)
            return job_ending(None, outcome.status)  # Optuna: a pruned or failed trial

    return wrapper


class SweepReport(Callback):
    """Names the jobs' folders by what the sweep varies; writes and prints the sweep summary
    when the multirun ends; exits 1 when a job did not complete."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        share_swept_keys(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from multigpu.tools.report import incomplete, to_text, write_report  # matplotlib: only now

        sweep_dir = Path(config.hydra.sweep.dir)
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
            print(f"error: {failed} of {len(rows)} jobs did not complete", file=sys.stderr)
            sys.exit(1)
