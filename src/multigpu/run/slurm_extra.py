"""Whether ``hydra/launcher=slurm`` can run here: the launcher's target, and the refusal where
the Slurm extra is missing. Below both its readers (``multigpu.run.preflight`` and the plugin,
``hydra_plugins.multigpu_launcher.slurm_launcher``), which Hydra imports for every command:
this imports nothing of the extra, and submitit is only looked for (it is slow to import)."""

import importlib
import importlib.util

SLURM_LAUNCHER = "hydra_plugins.multigpu_launcher.slurm_launcher.SlurmLauncher"
INSTALL = "pip install -e '.[slurm]'"
# What the extra brings: Hydra's submitit launcher, and submitit, which that imports late.
SUBMITIT_LAUNCHER = "hydra_plugins.hydra_submitit_launcher.submitit_launcher"
SUBMITIT = "submitit"


def missing_extra() -> str | None:
    """The one-line refusal of ``hydra/launcher=slurm`` without the Slurm extra, else None."""
    try:
        importlib.import_module(SUBMITIT_LAUNCHER)
        if importlib.util.find_spec(SUBMITIT) is None:
            raise ModuleNotFoundError(f"No module named {SUBMITIT!r}", name=SUBMITIT)
    except ImportError as err:
        return f"hydra/launcher=slurm needs the Slurm extra, not installed here ({err}): {INSTALL}"
    return None
