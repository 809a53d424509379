"""Every option of every config group composes into something ``train(cfg)`` can build."""

from __future__ import annotations

import pytest
from conftest import CONF, compose_config, resolve_on
from hydra.utils import instantiate

from multigpu.run.fit import build_strategy


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize(
    "group,option",
    [
        (g, o)
        for g in ("data", "model", "trainer", "strategy", "logger", "callbacks", "experiment")
        for o in options(g)
    ],
)
def test_every_group_option_composes(group, option, tmp_path):
    cfg = compose_config([f"{group}={option}"], output_dir=tmp_path)
    if group != "experiment":  # overlays merge into the other groups, leaving no key
        assert cfg[group] is not None
    # Every _target_ in the composed tree resolves to something importable.
    for name in ("data", "model", "trainer", "logger"):
        assert cfg[name]._target_


def test_defaults_are_the_d2l_settings(tmp_path):
    cfg = compose_config([], output_dir=tmp_path)
    assert cfg.data.batch_size == 256
    assert cfg.model.optimizer.lr == 0.1
    assert cfg.model.optimizer.momentum == 0 and cfg.model.optimizer.weight_decay == 0
    assert cfg.model.optimizer._partial_ is True
    assert cfg.model.net.width == 64 and cfg.model.net.init_std == 0.01
    assert resolve_on(cfg).strategy == "single"
    assert cfg.logger._target_.endswith("TensorBoardLogger")


def test_d2l_experiment_is_the_reference_recipe(tmp_path):
    cfg = compose_config(["experiment=d2l"], output_dir=tmp_path)
    assert (cfg.data.batch_size, cfg.model.optimizer.lr, cfg.trainer.max_epochs) == (256, 0.1, 10)
    assert cfg.model.optimizer.momentum == 0 and cfg.model.net.init_std == 0.01


def test_scheduler_options_build_against_an_optimizer(tmp_path):
    import torch

    for option in options("model/scheduler"):
        cfg = compose_config([f"+model/scheduler={option}"], output_dir=tmp_path)
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        scheduler = instantiate(cfg.model.scheduler)(optimizer)
        assert isinstance(scheduler, torch.optim.lr_scheduler.LRScheduler)


def test_strategy_group_builds_single_device(tmp_path):
    cfg = compose_config(["trainer.accelerator=cpu"], output_dir=tmp_path)
    run = resolve_on(cfg)
    strategy = build_strategy(cfg.strategy, run)
    assert run.strategy == "single" and str(strategy.root_device) == "cpu"


@pytest.mark.parametrize("option", options("strategy"))
def test_every_strategy_option_builds_on_the_cpu(option, tmp_path):
    from pytorch_lightning.strategies import DDPStrategy

    devices = 1 if option in ("single", "dp") else 2
    overrides = [f"strategy={option}", "trainer.accelerator=cpu", f"trainer.devices={devices}"]
    cfg = compose_config(overrides, output_dir=tmp_path)
    run = resolve_on(cfg)
    strategy = build_strategy(cfg.strategy, run)
    became = {"auto": "ddp"}.get(option, option)  # auto on two devices is DDP
    assert run.strategy == became and run.devices == devices
    if run.processes > 1:  # Lightning places DDP's processes on their devices when it starts
        assert isinstance(strategy, DDPStrategy) and run.trainer_devices == devices
    else:
        assert str(strategy.root_device) == "cpu"


def test_logger_and_callbacks_instantiate(tmp_path):
    for logger in options("logger"):
        cfg = compose_config([f"logger={logger}"], output_dir=tmp_path)
        assert instantiate(cfg.logger).save_dir == str(tmp_path)
    cfg = compose_config(["callbacks=default"], output_dir=tmp_path)
    built = [instantiate(c) for c in cfg.callbacks.values()]
    assert {type(c).__name__ for c in built} == {
        "LastCheckpoint",
        "ProgressBar",
        "TestSetFigures",
    }


def test_an_error_line_stays_one_line_whatever_it_quotes():
    """A value with a line break (a path from an environment variable) cannot split the line
    a script reads."""
    from multigpu.config.errors import UserError, message

    error = UserError("data.source=/tmp/a\nb is not a folder")
    error.add_note("second\r\npart")
    assert message(error) == "data.source=/tmp/a\\nb is not a folder; second\\r\\npart"


def stopped_while_building():
    from multigpu.config.errors import Interrupted

    raise Interrupted("interrupted by SIGTERM", 143)


def test_a_signal_while_a_constructor_runs_stays_an_interruption():
    """Hydra wraps what a constructor raises; a SIGTERM while the network or Trainer is built
    must still end the run ``interrupted`` (143), not ``failed``."""
    from multigpu.config.errors import Interrupted
    from multigpu.run.build import build

    with pytest.raises(Interrupted, match="interrupted by SIGTERM"):
        build({"_target_": "test_config.stopped_while_building"})


@pytest.mark.parametrize(
    "text,name",
    [
        ("DataLoader worker (pid 6873) is killed by signal: Terminated. ", "SIGTERM"),
        ("DataLoader worker (pid(s) 12, 13) is killed by signal: Interrupt. ", "SIGINT"),
        ("DataLoader worker (pid 6873) is killed by signal: User defined signal 1. ", "SIGUSR1"),
        ("DataLoader worker (pid 6873) is killed by signal: Killed. ", None),
        ("Connection closed by peer", None),
        ("DataLoader worker (pid(s) 12, 13) exited unexpectedly", None),  # no run: no stop
    ],
)
def test_loader_workers_ended_by_a_signal_mean_the_run_was_interrupted(text, name):
    """A SIGTERM to the process group (timeout, Slurm) reaches the workers first."""
    from multigpu.run.fit import signal_of_loader_workers

    found = signal_of_loader_workers(RuntimeError(text))
    assert (found.name if found is not None else None) == name
    from multigpu.run.fit import loader_worker_death

    death = loader_worker_death(RuntimeError(text))  # said in one line where no stop was it
    assert (death is None) == ("DataLoader" not in text)


def test_loader_workers_reaped_before_their_signal_was_seen_wait_for_the_runs():
    """Torch may reap a worker the group's SIGTERM ended before it reads how it ended ("exited
    unexpectedly"): the run's own stop signal, noted then or a moment later, says it."""
    import signal

    from multigpu.callbacks import interrupts
    from multigpu.run.fit import signal_of_loader_workers

    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        with interrupts.one_ending() as ending:
            ending.armed = True
            ending.note(signal.SIGTERM)
            error = RuntimeError("DataLoader worker (pid(s) 12, 13) exited unexpectedly")
            assert signal_of_loader_workers(error) == signal.SIGTERM
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        interrupts._ending = None
        import atexit

        atexit.unregister(interrupts.ignored_until_exit)
