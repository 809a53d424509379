"""``hydra/launcher=slurm`` at work (``slurm_launcher.SlurmLauncher`` hands it the sweep): Hydra's
submitit launcher, made to work as given on any partition.

- Resources per job: the launcher's settings are resolved with each job's own config, so a sweep
  over ``trainer.devices=1,2`` gives each job its own tasks (one per device under DDP) and GPUs;
  jobs asking for the same go out as one array.
- A submission SLURM refuses ends the sweep with sbatch's reason in one line, not a traceback,
  and leaves nothing: the jobs submitted before it are cancelled, what was written removed.
- A stop signal to the sweep, once it submits, stops its jobs on Slurm too (they had run on).
- A job that SLURM will never start (a partition's limit, a node that cannot hold it) is named
  and cancelled after ``hydra.launcher.unschedulable_after_s`` seconds of waiting for that
  reason, instead of the launcher waiting forever; the sweep records it as failed.

It imports the Slurm extra (``pip install -e '.[slurm]'``), so it is imported only once the
launcher is chosen: its name starts with ``_``, which Hydra's plug-in scan skips.
"""

import contextlib
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import (
    SlurmLauncher as SubmititSlurmLauncher,
)
from omegaconf import OmegaConf

from multigpu.callbacks.interrupts import signals_held
from multigpu.config.errors import summary_line
from multigpu.config.job_names import sweep_job_folder
from multigpu.run.objective import job_ending
from multigpu.storage.outcome import Outcome
from multigpu.storage.ownership import discard
from multigpu.storage.record import record_ending
from multigpu.storage.record_file import records_below

log = logging.getLogger(__name__)


class WithoutSacct(logging.Filter):
    """submitit warns at every poll when the cluster keeps no accounting (sacct); squeue, which
    it falls back on, is enough."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Bypassing sacct error" not in record.getMessage()


logging.getLogger("submitit").addFilter(WithoutSacct())

# Pending reasons SLURM gives for a job it will not start as it stands (squeue's %r).
NEVER = ("PartitionTimeLimit", "PartitionNodeLimit", "PartitionConfig", "BadConstraints")
NEVER_PREFIXES = ("QOSMax", "AssocMax", "MaxCpuPerAccount", "MaxGRESPerAccount")
# The settings a refusal is usually about.
ASKED = ("partition", "nodes", "tasks_per_node", "cpus_per_task", "gpus_per_node", "mem_gb")
ASKED += ("timeout_min",)


class Refused(Exception):
    """sbatch refused a submission: the sweep's one line."""


class SubmititJobs(SubmititSlurmLauncher):
    """The launcher itself: Hydra's submitit SLURM launcher, with the jobs grouped by their
    resources, a refusal in one line, and jobs that will never start cancelled."""

    launched = False  # whether a launch of this sweep (a batch of an Optuna study) went out

    def launch(self, job_overrides, initial_job_idx: int) -> list[JobReturn]:
        assert self.config is not None and self.hydra_context is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        groups: dict[str, list[tuple[int, list[str]]]] = {}
        for number, overrides in enumerate(job_overrides, start=initial_job_idx):
            groups.setdefault(self.job_params(list(overrides)), []).append(
                (number, list(overrides))
            )
        submitted: dict[int, Any] = {}
        self.cancelled: dict[str, str] = {}
        there = set(sweep_dir.rglob("*"))
        with cancelled_if_stopped(submitted, self.config):
            for params, jobs in groups.items():
                try:
                    with signals_held():  # sbatch answers first: the jobs it took are known
                        submitted.update(self.submit(json.loads(params), jobs))
                except Refused as refused:  # what this launch submitted or wrote goes
                    gone([job.job_id for job in submitted.values()])
                    remove_new(sweep_dir, there)
                    if not self.launched:  # an earlier launch's jobs (Optuna's batches) stay
                        discard(sweep_dir)
                        if not records_below(sweep_dir):  # a folder given: not a sweep's yet
                            (sweep_dir / "multirun.yaml").unlink(missing_ok=True)
                    print(f"error: {refused}", file=sys.stderr, flush=True)
                    sys.exit(2)
            self.launched = True
            self.wait(submitted)
        overrides = dict(enumerate(job_overrides, start=initial_job_idx))
        return [
            self.result(number, job, list(overrides[number]), sweep_dir)
            for number, job in sorted(submitted.items())
        ]

    def job_params(self, overrides: list[str]) -> str:
        """The launcher's settings as this job's own config resolves them (JSON, to group by)."""
        job_config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        params = OmegaConf.to_container(job_config.hydra.launcher, resolve=True)
        params.pop("_target_", None)
        return json.dumps(params, sort_keys=True)

    def submit(self, params: dict[str, Any], jobs: list[tuple[int, list[str]]]) -> dict[int, Any]:
        """Submit ``jobs`` as one array; raises ``Refused`` with sbatch's reason."""
        import submitit  # slow to import: only once jobs go out

        self.unschedulable_after_s = params.pop("unschedulable_after_s", 300)
        executor = submitit.AutoExecutor(
            cluster="slurm",
            folder=params.pop("submitit_folder"),
            slurm_max_num_timeout=params.pop("max_num_timeout"),
        )
        shared = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(
            **{k if k in shared else f"slurm_{k}": v for k, v in params.items()}
        )
        for number, overrides in jobs:
            log.info(f"\t#{number} : {' '.join(filter_overrides(overrides))}")
        arguments = [
            (overrides, "hydra.sweep.dir", number, f"job_id_for_{number}", Singleton.get_state())
            for number, overrides in jobs
        ]
        try:
            with contextlib.redirect_stderr(io.StringIO()):  # submitit prints sbatch's lines
                array = executor.map_array(self, *zip(*arguments, strict=True))
        except Exception as err:  # sbatch refused the request: say why, in one line
            reason = " ".join(str(err).split()) or type(err).__name__
            asked = " ".join(f"{k}={params[k]}" for k in ASKED if params.get(k) is not None)
            raise Refused(
                f"SLURM refused the jobs ({reason}); they asked for {asked}: change "
                "hydra.launcher.<that>"
            ) from None
        return {number: job for (number, _), job in zip(jobs, array, strict=True)}

    def wait(self, submitted: dict[int, Any]) -> None:
        """Until SLURM lists none of the jobs as pending or running (squeue; submitit would ask
        sacct too, which clusters without accounting do not answer); a job pending for a reason
        SLURM will not get over is cancelled once it has waited ``unschedulable_after_s``."""
        pending_since: dict[str, float] = {}
        self.wait_for([job.job_id for job in submitted.values()], pending_since)

    def wait_for(self, job_ids: list[str], pending_since: dict[str, float]) -> None:
        while active := queued(job_ids):
            for job_id, reason in active:
                if not (reason in NEVER or reason.startswith(NEVER_PREFIXES)):
                    continue  # running, or pending for a reason that passes
                first = pending_since.setdefault(job_id, time.monotonic())
                if time.monotonic() - first >= self.unschedulable_after_s:
                    message = (
                        f"SLURM job {job_id} cannot start ({reason}): cancelled; fix "
                        "hydra.launcher (partition, timeout_min, nodes, resources)"
                    )
                    print(f"error: {message}", file=sys.stderr, flush=True)
                    self.cancelled[job_id] = message
                    subprocess.run(["scancel", job_id], check=False)
            time.sleep(5)

    def result(self, number: int, job: Any, overrides: list[str], sweep_dir: Path) -> JobReturn:
        """The job's own return; for a job that never ran (cancelled, or killed before Hydra
        could report), a record saying why in its folder, so that the sweep's report lists it
        as failed, and a failed ending for the sweeper (as a failed job returns)."""
        if job.paths.result_pickle.exists():
            return job.results()[0]
        reason = self.cancelled.get(job.job_id) or (
            f"SLURM job {job.job_id} ended without a result: see {job.paths.stderr}"
        )
        log.error("job %d: %s", number, reason)
        folder = sweep_dir / sweep_job_folder(overrides, number)
        record_ending(folder / "metrics.json", Outcome("failed", summary_line(reason), 1))
        ended = JobReturn(overrides=overrides, status=JobStatus.COMPLETED)
        ended._return_value = job_ending(None, "failed")
        return ended


def cancelled_if_stopped(submitted: dict[int, Any], config: Any) -> Any:
    """A stop signal while the sweep's jobs are submitted, queued or run on Slurm cancels the
    ones ``submitted`` (a running one gets SIGTERM from Slurm, records it and keeps its
    checkpoint), and ends the sweep in one line saying how it goes on: stopped, the sweep had
    left them to run, and its command run again submitted them a second time."""
    from multigpu.config.launch import Signal, answering_stops
    from multigpu.run.optuna_check import is_optuna
    from multigpu.run.resume import going_on

    def stop(signum: Signal) -> None:
        left = cancel([job.job_id for job in submitted.values()])
        goes_on = going_on(config.hydra.sweep.dir, is_optuna(config))
        said = f"error: interrupted by {signum.name} while the sweep's jobs were on "
        said += f"Slurm: {left} cancelled (a running one records it); {goes_on}\n"
        os.write(2, said.encode())
        sys.exit(128 + signum)

    return answering_stops(stop)


def cancel(job_ids: list[str]) -> int:
    """Cancel these jobs (a running one's processes get SIGTERM and record the stop, as a
    stopped run does; Slurm kills what still runs after its KillWait: a job that SIGTERM finds
    starting, before the run answers it, had run on); how many SLURM still had."""
    left = queued(job_ids) if job_ids else []
    if left:
        subprocess.run(
            ["scancel", *(job_id for job_id, _ in left)], check=False, capture_output=True
        )
    return len(left)


def gone(job_ids: list[str], patience_s: float = 60) -> None:
    """Cancel these jobs and wait until Slurm has ended them (a job that had started could
    still write in the sweep's folder), ``patience_s`` at most."""
    deadline = time.monotonic() + patience_s
    while cancel(job_ids) and time.monotonic() < deadline:
        time.sleep(1)


def remove_new(folder: Path, there: set[Path]) -> None:
    """Remove what was written in ``folder`` since it held only ``there`` (submitit's files)."""
    new = set(folder.rglob("*")) - there
    for path in new:
        if path.parent not in new:  # the root of what is new there
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def queued(job_ids: list[str]) -> list[tuple[str, str]]:
    """(job id, pending reason, or the state) of each of these jobs SLURM has not finished."""
    command = ["squeue", "-h", "-r", "-o", "%i %T %r", "-j", ",".join(job_ids)]  # -r: 1 a task
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    found = []
    for line in result.stdout.splitlines():
        job_id, state, reason = (line.split(maxsplit=2) + ["", ""])[:3]
        found.append((job_id, reason if state == "PENDING" else state))
    return found
