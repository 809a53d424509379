"""The command line's answer before Hydra runs the job (``multigpu.run.command_line``): the
config it judges a plain command's values on is the one Hydra composes for the job, and its
answer to a value is the job's."""

from __future__ import annotations

from conftest import TINY, compose_config, composed_command, examples, resolve_on
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from multigpu.config.errors import UserError, as_override, message
from multigpu.run.command_line import refusal


def values_on(cpu_cores: int, cuda_devices: int = 0):
    """The command line's check of the values (``training_values``), on a machine described."""

    def check(cfg) -> None:
        resolve_on(cfg, cuda_devices=cuda_devices, cpu_cores=cpu_cores)

    return check


VALUE_KEYS = {  # leaf keys and values that may be refused, as a user may give them
    "data.batch_size": st.integers(-3, 300),
    "trainer.devices": st.integers(-2, 4) | st.sampled_from(["auto", "2", "x"]),
    "trainer.max_epochs": st.integers(-3, 3),
    "model.optimizer.lr": st.floats(-1, 1, allow_nan=False) | st.just("fast"),
    "model.net.width": st.integers(-1, 600),
    "strategy": st.sampled_from(["single", "ddp", "dp", "scatter_allreduce"]),
    "trainer.precision": st.sampled_from(["32", "bf16-mixed", "16-mixed", "64"]),
    "seed": st.integers(-2, 2**33) | st.none(),
}


@examples(10)  # each composes twice: the command line's check, then the job's config
@given(data=st.data())
def test_the_command_lines_answer_to_a_value_is_the_jobs(data, tmp_path_factory):
    """A value the command line refuses, the job refuses alike, and one it takes, the job takes:
    the same check on the config Hydra composes for the job (checked here as the job gets it,
    composed whole by Hydra), never a second rule."""
    keys = data.draw(st.lists(st.sampled_from(sorted(VALUE_KEYS)), min_size=1, max_size=3))
    line = [f"{key}={as_override(data.draw(VALUE_KEYS[key]))}" for key in dict.fromkeys(keys)]
    said = refusal([*TINY, *line], "config", values_on(2))
    try:
        resolve_on(compose_config([*TINY, *line], tmp_path_factory.mktemp("job")))
        job = None
    except UserError as refused:
        job = message(refused)
    assert said == job


def test_a_bad_value_under_a_flag_is_left_to_hydra_and_the_job():
    """``--cfg job`` prints the config (a bad value in it is not run), and ``-m``'s jobs are
    checked as a sweep: the command line's check of the values stands aside for any flag (and
    for a multirun asked for by its setting)."""
    line = [*TINY, "data.batch_size=-1"]
    assert "data.batch_size=-1 must be" in refusal(line, "config", values_on(2))
    for flag in (["--cfg", "job"], ["-m"], ["--multirun"], ["hydra.mode=MULTIRUN"]):
        assert refusal([*flag, *line], "config", values_on(2)) is None


GROUPS = {
    "strategy": ["single", "ddp", "dp", "scatter_allreduce", "auto"],
    "data": ["fashion_mnist", "synthetic"],
    "experiment": ["quickstart", "fast", "speedrun", "speedrun_gpu", "d2l"],
}
PLAIN = {  # keys every option has, with values of every plain kind
    "seed": st.integers(0, 9) | st.none(),
    "trainer.max_epochs": st.integers(1, 5),
    "model.optimizer.lr": st.floats(0.01, 1),
    "data.batch_size": st.integers(1, 512),
    "model.compile": st.booleans(),
    "hydra.job.chdir": st.booleans(),
    "callbacks.progress_bar": st.none(),
    "trainer.precision": st.sampled_from(["32", "bf16-mixed"]),
}


@examples(8)  # each composes twice
@given(data=st.data())
def test_a_plain_commands_config_is_the_one_hydra_composes_for_its_job(data):
    """``job_config``: the group options' composition with the values set as Hydra sets them,
    its record of the command line (``hydra.overrides``, ``hydra.job.override_dirname``)
    included, equals Hydra's composition of the whole line; the output folder aside, which
    Hydra alone knows."""
    groups = data.draw(st.lists(st.sampled_from(sorted(GROUPS)), unique=True, max_size=2))
    keys = data.draw(st.lists(st.sampled_from(sorted(PLAIN)), unique=True, max_size=3))
    line = [f"{group}={data.draw(st.sampled_from(GROUPS[group]))}" for group in groups]
    line += [f"{key}={as_override(data.draw(PLAIN[key]))}" for key in keys]
    line = data.draw(st.permutations(line))
    ours = composed_command(line)
    assert ours is not None, line  # every override plain
    hydras = compose_config(line)
    for cfg in (ours, hydras):  # the output folder: Hydra's alone
        cfg.paths.output_dir = cfg.hydra.runtime.output_dir = "-"
    assert OmegaConf.to_container(ours) == OmegaConf.to_container(hydras)


def test_a_command_hydra_may_refuse_has_no_config_of_the_command_lines():
    """An append, a list, a map, a sweep, an interpolation: Hydra composes these its own way."""
    for line in (
        ["+trainer.gradient_clip_val=1"],
        ["trainer.devices=[0,1]"],
        ["trainer={max_epochs: 2}"],
        ["seed=1,2"],
        ["seed=${trainer.max_epochs}"],
    ):
        assert composed_command(line) is None, line
