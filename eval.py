"""Test accuracy of a checkpoint: ``python eval.py ckpt_path=<run>/checkpoints/last.ckpt``
(or ``ckpt_path=latest``). Stdout is the JSON alone, for a pipe; everything else goes to stderr
(log lines: ``conf/eval.yaml``)."""

# ruff: noqa: E402  (the command line is checked before the imports that take longest)
from multigpu.run.console import guard_console, one_line_on_ctrl_c, stops_in_one_line
from multigpu.run.quiet import quiet

guard_console()  # a closed stdout or stderr never fails the evaluation
quiet()
if __name__ == "__main__":
    stops_in_one_line()  # SIGTERM and the like too, before the run's own handling holds them
    with one_line_on_ctrl_c():
        from multigpu.run.command_line import check_command_line, evaluation_values

        check_command_line("eval", evaluation_values, sweeps=False)  # a misspelt key: exit 2

import json
import sys
from contextlib import redirect_stdout

import hydra
from omegaconf import DictConfig

from multigpu.callbacks.interrupts import sigterm_interrupts
from multigpu.run.cli import report_user_errors
from multigpu.run.evaluation import evaluate  # torch-free until the settings are checked


@hydra.main(version_base="1.3", config_path="conf", config_name="eval")
@report_user_errors
def main(cfg: DictConfig) -> float:
    # whatever the evaluation prints is not the result; SIGTERM ends it with one line
    with redirect_stdout(sys.stderr), sigterm_interrupts():
        result = evaluate(cfg)
    print(json.dumps(result), flush=True)
    return result["test_acc"]


if __name__ == "__main__":
    with one_line_on_ctrl_c():
        main()
