"""Train ResNet-18 on Fashion-MNIST: ``python train.py strategy=dp trainer.devices=2``."""

# ruff: noqa: E402  (the command line is checked before the imports that take longest)
from multigpu.run.console import guard_console, one_line_on_ctrl_c, stops_in_one_line
from multigpu.run.quiet import quiet

guard_console()  # a closed stdout or stderr (| head, a closed terminal) never fails the run
quiet()  # here too for DDP's workers, which start from this file
if __name__ == "__main__":
    stops_in_one_line()  # SIGTERM and the like too, before the run's own handling holds them
    with one_line_on_ctrl_c():
        from multigpu.run.command_line import check_command_line, training_values

        check_command_line("config", training_values)  # a misspelt name or bad value: exit 2

import hydra
from omegaconf import DictConfig

from multigpu.callbacks.interrupts import ended_until_exit
from multigpu.run.cli import hydra_runtime, register_resolvers, report_user_errors
from multigpu.run.objective import JobEnding, job_ending
from multigpu.run.run_summary import print_closing_lines
from multigpu.run.sweep import keep_sweeping
from multigpu.run.training import train  # torch-free until the config is checked
from multigpu.storage.record import is_rank_zero

register_resolvers()  # ${run_name:} for hydra.run.dir, ${job_folder:} for a sweep's jobs


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
@report_user_errors
@keep_sweeping
def main(cfg: DictConfig) -> JobEnding:
    record = train(cfg)
    if is_rank_zero() and not hydra_runtime(cfg)[1]:  # a sweep ends with its own table
        ended_until_exit()  # completed: a signal now would exit 128 + it, the record completed
        print_closing_lines(record, cfg.paths.output_dir)
    return job_ending(record)  # what a sweeper is told (Optuna: the trial's state and value)


if __name__ == "__main__":
    with one_line_on_ctrl_c():
        main()
