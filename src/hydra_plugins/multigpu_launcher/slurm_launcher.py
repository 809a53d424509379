"""``hydra/launcher=slurm``: each sweep job as a SLURM job, through Hydra's submitit launcher
(``_submitit.SubmititJobs`` does the work: resources per job, one-line refusals, jobs that
will never start cancelled).

Hydra imports every module under ``hydra_plugins`` when it starts, for every command, so this
one imports nothing of the Slurm extra (``pip install -e '.[slurm]'``: submitit and Hydra's
submitit launcher): without it, a command that does not choose this launcher says nothing
about it, and one that does is refused in one line naming the install command, before
anything is written (``multigpu.run.preflight``, or here when the launcher is made). Its
settings are therefore declared here, as the submitit launcher's ``SlurmQueueConf`` declares
them (a test compares the two), plus ``unschedulable_after_s``.
"""

import sys
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from multigpu.run.slurm_extra import SLURM_LAUNCHER, missing_extra


@dataclass
class SlurmLauncherConf:
    """Hydra's submitit SLURM settings (``SlurmQueueConf``, in its order, with its defaults),
    plus how long a job may wait for a reason SLURM will not get over before it is
    cancelled."""

    submitit_folder: str = "${hydra.sweep.dir}/.submitit/%j"
    timeout_min: int = 60  # the job's time limit
    cpus_per_task: int | None = None
    gpus_per_node: int | None = None
    tasks_per_node: int = 1
    mem_gb: int | None = None  # per node
    nodes: int = 1
    name: str = "${hydra.job.name}"
    stderr_to_stdout: bool = False
    _target_: str = SLURM_LAUNCHER
    partition: str | None = None  # sbatch's options
    qos: str | None = None
    comment: str | None = None
    constraint: str | None = None
    exclude: str | None = None
    gres: str | None = None
    cpus_per_gpu: int | None = None
    gpus_per_task: int | None = None
    mem_per_gpu: str | None = None
    mem_per_cpu: str | None = None
    account: str | None = None
    signal_delay_s: int = 120  # submitit's: the warning signal this long before the limit
    max_num_timeout: int = 0  # requeues after a time-out
    additional_parameters: dict[str, Any] = field(default_factory=dict)  # other sbatch options
    array_parallelism: int = 256
    setup: list[str] | None = None  # commands run before srun in the batch script
    unschedulable_after_s: int = 300


ConfigStore.instance().store(group="hydra/launcher", name="multigpu_slurm", node=SlurmLauncherConf)


class SlurmLauncher(Launcher):
    """What Hydra finds and makes for ``hydra/launcher=slurm``: it makes the launcher that does
    the work only now, with the Slurm extra, and hands it the sweep."""

    def __init__(self, **params: Any) -> None:
        refusal = missing_extra()
        if refusal is not None:  # no preflight ran (a config without this project's callbacks)
            print(f"error: {refusal}", file=sys.stderr, flush=True)
            sys.exit(2)
        from hydra_plugins.multigpu_launcher._submitit import SubmititJobs

        self.jobs = SubmititJobs(**params)

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.jobs.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def launch(self, job_overrides: Any, initial_job_idx: int) -> Any:
        return self.jobs.launch(job_overrides, initial_job_idx)
