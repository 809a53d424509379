"""``hparams_search=optuna``'s sweeper: Hydra's Optuna sweeper with each trial told to the study
as its job ended (``multigpu.run.optuna_trials``). Hydra imports this module for every command,
so it imports nothing of the Optuna extra until the sweeper is made."""

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig
from typing_extensions import override


class OptunaTrials(Sweeper):
    """Takes the settings of Hydra's ``OptunaSweeperConf`` (``hydra/sweeper=optuna``)."""

    def __init__(self, **settings: Any) -> None:
        from multigpu.run.optuna_trials import OptunaTrials as Impl

        self.sweeper = Impl(**settings)

    @override
    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.sweeper.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    @override
    def sweep(self, arguments: list[str]) -> None:
        return self.sweeper.sweep(arguments)
