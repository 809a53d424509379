"""Train ResNet-18 on Fashion-MNIST: ``python train.py strategy=dp trainer.devices=2``."""

import hydra
from omegaconf import DictConfig

from multigpu.cli import register_resolvers, report_user_errors
from multigpu.sweep import keep_sweeping
from multigpu.training import train  # torch-free until the config is checked

register_resolvers()  # ${run_name:}, for hydra.run.dir


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
@report_user_errors
@keep_sweeping
def main(cfg: DictConfig) -> float | None:
    return train(cfg).get("test_acc")


if __name__ == "__main__":
    main()
