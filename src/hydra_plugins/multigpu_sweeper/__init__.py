"""This project's Optuna sweeper for Hydra (``hparams_search=optuna``). Hydra loads sweepers
only from the ``hydra_plugins`` namespace, and imports it for every command."""
