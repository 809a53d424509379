"""This project's SLURM launcher for Hydra (``hydra/launcher=slurm``). Hydra loads launchers
only from the ``hydra_plugins`` namespace, and imports it to find its config schema."""
