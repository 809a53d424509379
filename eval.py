"""Test accuracy of a checkpoint: ``python eval.py ckpt_path=<run>/checkpoints/last.ckpt``."""

import json

import hydra
from omegaconf import DictConfig

from multigpu.cli import report_user_errors
from multigpu.evaluation import evaluate  # torch-free until the settings are checked
from multigpu.quiet import quiet

quiet()


@hydra.main(version_base="1.3", config_path="conf", config_name="eval")
@report_user_errors
def main(cfg: DictConfig) -> float:
    result = evaluate(cfg)
    print(json.dumps(result))
    return result["test_acc"]


if __name__ == "__main__":
    main()
