"""Whether ``hydra/launcher=slurm`` can run here: the launcher's target, and the refusal where
the Slurm extra or Slurm itself is missing. Below both its readers (``multigpu.run.preflight``
and the plugin, ``hydra_plugins.multigpu_launcher.slurm_launcher``), which Hydra imports for
every command: this imports nothing of the extra, and submitit is only looked for (it is slow
to import)."""

import importlib
import importlib.util
import shutil

SLURM_LAUNCHER = "hydra_plugins.multigpu_launcher.slurm_launcher.SlurmLauncher"
INSTALL = "pip install -e '.[slurm]'"
# What the extra brings: Hydra's submitit launcher, and submitit, which that imports late.
SUBMITIT_LAUNCHER = "hydra_plugins.hydra_submitit_launcher.submitit_launcher"
SUBMITIT = "submitit"
SRUN = "srun"  # on the PATH of every machine that submits to a Slurm cluster


def missing_extra() -> str | None:
    """The one-line refusal of ``hydra/launcher=slurm`` without the Slurm extra, else None."""
    try:
        importlib.import_module(SUBMITIT_LAUNCHER)
        if importlib.util.find_spec(SUBMITIT) is None:
            raise ModuleNotFoundError(f"No module named {SUBMITIT!r}", name=SUBMITIT)
    except ImportError as err:
        return f"hydra/launcher=slurm needs the Slurm extra, not installed here ({err}): {INSTALL}"
    return None


def cannot_submit() -> str | None:
    """The one-line refusal of a sweep on ``hydra/launcher=slurm`` that could submit no job:
    without the Slurm extra, or without Slurm's ``srun`` (submitit's sign of a cluster, which
    it answered with a traceback once the sweep's folder was made); else None."""
    refusal = missing_extra()
    if refusal is None and shutil.which(SRUN) is None:
        refusal = (
            f"hydra/launcher=slurm submits the jobs to Slurm, whose {SRUN} is not on this "
            "machine's PATH: run the sweep where Slurm's commands are (a cluster's login node), "
            "or add their folder to PATH"
        )
    return refusal
