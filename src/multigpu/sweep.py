"""Multirun support: a failing job is recorded and the sweep goes on; the report at the end."""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from multigpu.cli import in_multirun
from multigpu.errors import Interrupted, RunStopped, UserError
from multigpu.jsonfile import write_json_atomically
from multigpu.report.summary import to_text, write_report

log = logging.getLogger(__name__)


def failure_reason(err: BaseException) -> str:
    if isinstance(err, (UserError, RunStopped)):
        return str(err)
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}"[:500]


def record_failure(
    output_dir: Path, reason: str, run: dict[str, Any], status: str = "failed"
) -> None:
    """Mark the job's ``metrics.json`` failed (or diverged) with its reason, creating it if
    training never started, so that the sweep summary shows why."""
    path = output_dir / "metrics.json"
    metrics = json.loads(path.read_text()) if path.exists() else {"schema": 1, "run": run}
    metrics.update(status=status, reason=reason)
    metrics.setdefault("history", [])
    metrics.setdefault("epochs", len(metrics["history"]))
    write_json_atomically(path, metrics)


def keep_sweeping(main: Callable[[DictConfig], Any]) -> Callable[[DictConfig], Any]:
    """In a multirun, an exception ends the job, not the sweep; outside one, it propagates.
    Ctrl-C and SIGTERM end the sweep too."""

    @functools.wraps(main)
    def wrapper(cfg: DictConfig) -> Any:
        if not in_multirun():
            return main(cfg)
        try:
            return main(cfg)
        except Interrupted:
            raise
        except Exception as err:
            from multigpu.training import run_settings

            reason = failure_reason(err)
            if not isinstance(err, (UserError, RunStopped)):  # a bug: keep the traceback in the log
                log.error("job failed", exc_info=True)
            try:
                run = run_settings(cfg, cfg.strategy.get("name", "?"))
            except Exception:
                run = {}
            status = err.status if isinstance(err, RunStopped) else "failed"
            record_failure(Path(HydraConfig.get().runtime.output_dir), reason, run, status)
            print(f"error: job {HydraConfig.get().job.num} failed: {reason}", file=sys.stderr)
            SweepReport.failed_jobs += 1
            return float("nan")  # Optuna records a NaN objective as a failed trial

    return wrapper


class SweepReport(Callback):
    """Writes and prints the sweep summary when a multirun ends."""

    failed_jobs = 0

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if not any(sweep_dir.rglob("metrics.json")):
            return
        rows = write_report(sweep_dir)
        SweepReport.failed_jobs = sum(r["status"] != "completed" for r in rows)
        print("\n" + to_text(rows), end="", flush=True)
        print(f"sweep summary: {sweep_dir}/summary.md, test_acc.png, scaling.png", flush=True)
        if SweepReport.failed_jobs:
            print(
                f"error: {SweepReport.failed_jobs} of {len(rows)} jobs did not complete",
                file=sys.stderr,
                flush=True,
            )


def exit_status() -> int:
    return 1 if SweepReport.failed_jobs else 0
