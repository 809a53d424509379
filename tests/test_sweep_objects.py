"""What torch and Lightning refuse only when a run builds its parts (a compile backend, a
callback's argument): refused before anything is written, for a single run and for every job
of a sweep, each distinct part built once (``multigpu.run.parts_check``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import CONF, TINY, examples
from hydra import initialize_config_dir
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import DictConfig

from multigpu.run.cli import register_resolvers

BASE = [*TINY, "data=synthetic", "data.num_train=64", "data.num_test=32"]


@contextlib.contextmanager
def composed(
    overrides: list[str], folder: Path, multirun: bool = True, base: list[str] = BASE
) -> Iterator[DictConfig]:
    """The config ``train.py [-m]`` composes, inside Hydra's context."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    register_resolvers()
    where = f"hydra.sweep.dir={folder}" if multirun else f"hydra.run.dir={folder}"
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        mode = RunMode.MULTIRUN if multirun else RunMode.RUN
        yield loader.load_configuration("config", [*base, *overrides, where], run_mode=mode)


def refusal(check, config: DictConfig, capsys) -> str:
    """The one ``error:`` line ``check(config)`` refuses with, exit 2."""
    with pytest.raises(SystemExit) as stop:
        check(config)
    lines = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


NAME = st.from_regex(r"[a-z][a-z_]{2,10}", fullmatch=True).filter(
    lambda name: name not in ("null", "true", "false", "nan", "inf")
)


@st.composite
def built_refusals(draw) -> tuple[list[str], str, str]:
    """(a sweep's overrides, the refused value as given, what refuses it): a value only its
    builder refuses, taken by the second job, or a key it does not take, by both."""
    kind = draw(st.sampled_from(["backend", "option", "every_n_epochs", "checkpoint", "bar"]))
    name = draw(NAME)
    if kind in ("checkpoint", "bar"):
        node = "checkpoint" if kind == "checkpoint" else "progress_bar"
        given = f"+callbacks.{node}.{name}=1"
        builder = "LastCheckpoint" if kind == "checkpoint" else "ProgressBar"
        return ["model.optimizer.lr=0.1,0.2", given], given, f"{builder} refuses it"
    if kind == "every_n_epochs":
        key, good, bad = "callbacks.checkpoint.every_n_epochs", "1", str(draw(st.integers(-99, 0)))
        builder = "LastCheckpoint"
    else:
        key, good, builder = "model.compile", "false", "torch.compile"
        bad = f"{{backend:{name}_nope}}" if kind == "backend" else f"{{options:{{{name}_x:1}}}}"
    return [f"{key}={good},{bad}"], f"{key}={bad}", f"{builder} refuses it"


@pytest.mark.slow
@examples(8)
@given(refused=built_refusals())
def test_a_sweep_with_a_job_its_builders_refuse_is_refused_whole(refused, tmp_path_factory, capsys):
    """A job takes a value only torch or Lightning refuses, once it builds the run's part: the
    sweep is refused before its folder is made, in one line naming the job and the value as
    given (before: a traceback, exit 1, the sweep folder and its report)."""
    from multigpu.run.preflight import check_sweep

    overrides, given, builder = refused
    folder = tmp_path_factory.mktemp("sweep")
    with composed(overrides, folder / "sweep") as config:
        line = refusal(check_sweep, config, capsys)
    count = 2 if given.startswith("+") else 1
    assert line.startswith(f"error: {count} of 2 jobs cannot run, so none was started: job ")
    assert line.count(f"): {given}: ") == count and builder in line
    assert list(folder.iterdir()) == []


def test_a_run_its_builders_refuse_writes_nothing(tmp_path, capsys):
    """A single run is refused the same way, before Hydra makes its folder."""
    from multigpu.run.preflight import Preflight

    with composed(["model.compile={backend:nonsense}"], tmp_path / "run", False) as config:
        line = refusal(Preflight().on_run_start, config, capsys)
    assert line.startswith("error: model.compile={backend:nonsense}: torch.compile refuses it")
    assert "Invalid backend: 'nonsense'" in line and line.endswith("or drop it")
    assert list(tmp_path.iterdir()) == []


def test_each_distinct_part_of_a_sweep_is_built_once(tmp_path, monkeypatch):
    """Three jobs that differ in the epochs alone build their model once and their Trainer
    three times (its arguments differ), and pass."""
    from multigpu.run import fit, parts_check
    from multigpu.run.preflight import check_sweep

    monkeypatch.setattr(parts_check, "_checked", {})
    built = []
    build_module = fit.build_module
    monkeypatch.setattr(fit, "build_module", lambda *a: built.append(a) or build_module(*a))
    with composed(["trainer.max_epochs=1,2,3"], tmp_path / "sweep") as config:
        check_sweep(config)
    assert len(built) == 1
    trainers = [key for key in parts_check._checked if key.startswith('["trainer"')]
    assert len(trainers) == 3
    assert not (tmp_path / "sweep").exists()


def test_a_full_size_network_is_checked_without_being_made(tmp_path, monkeypatch):
    """The module is built on torch's meta device: no memory, no initialisation."""
    import torch

    from multigpu.run import fit, parts_check
    from multigpu.run.preflight import check_sweep

    monkeypatch.setattr(parts_check, "_checked", {})
    devices = []
    build_module = fit.build_module

    def watched(*args):
        module = build_module(*args)
        devices.append(next(module.parameters()).device)
        return module

    monkeypatch.setattr(fit, "build_module", watched)
    with composed(["model.net.width=64", "model.optimizer.lr=0.1,0.2"], tmp_path / "s") as config:
        check_sweep(config)
    assert devices == [torch.device("meta")] * 2


@pytest.mark.parametrize(
    "overrides,said",
    [
        (
            ["hydra.sweep.subdir=fixed"],
            "2 of 2 jobs cannot run, so none was started: jobs 0 and 1 would share the folder "
            "{sweep}/fixed (hydra.sweep.subdir); give each job its own",
        ),
        (
            ["hydra.sweep.subdir=../out_${hydra:job.num}"],
            "hydra.sweep.subdir=../out_0 puts the job's folder at {top}/out_0, not inside",
        ),
        (
            ["hydra.output_subdir=../lr_0.1/hy"],
            "jobs 0 and 1 would write in {sweep}/lr_0.1/hy (job 1's hydra.output_subdir), inside "
            "{sweep}/lr_0.1 (job 0's hydra.sweep.subdir); give each job its own",
        ),
        (
            ["hydra.output_subdir=../shared"],
            "jobs 0 and 1 would share the folder {sweep}/shared (hydra.output_subdir)",
        ),
        (["logger.save_dir=${hydra:sweep.dir}/tb"], "would share the folder {sweep}/tb"),
        (["trainer.default_root_dir=${hydra:sweep.dir}/pl"], "would share the folder {sweep}/pl"),
        (
            ["hydra.job_logging.handlers.file.filename=${hydra:sweep.dir}/../shared.log"],
            "jobs 0 and 1 would share the file {top}/shared.log (hydra.job_logging.handlers.",
        ),
        (
            ["trainer.default_root_dir={top}/other"],  # another run's: each job, and the pair
            "error: 2 of 2 jobs cannot run, so none was started: jobs 0 and 1 would share the "
            "folder {top}/other (trainer.default_root_dir); give each job its own | job 0 ",
        ),
    ],
    ids=[
        *("one_subdir", "subdir_outside", "into_a_sibling", "one_config_copy", "one_logger"),
        *("one_lightning_folder", "one_log_file", "another_runs_folder"),
    ],
)
def test_jobs_whose_folders_or_places_collide_are_refused_whole(overrides, said, tmp_path, capsys):
    """The jobs' folders as Hydra will make them (``hydra.sweep.subdir`` resolved per job) and
    the places only a job's files go: two jobs sharing one, or one writing inside the other's,
    had been found only when the second job ran, after the first had written (Hydra's config
    copy replacing the first job's); a job folder outside the sweep's was never reported."""
    from multigpu.run.preflight import check_sweep

    sweep, other = tmp_path / "sweep", tmp_path / "other"
    other.mkdir()
    (other / "metrics.json").write_text("{}")
    overrides = [o.replace("{top}", str(tmp_path)) for o in overrides]
    with composed([*overrides, "model.optimizer.lr=0.1,0.2"], sweep) as config:
        line = refusal(check_sweep, config, capsys)
    assert line.startswith("error: ") and said.format(sweep=sweep, top=tmp_path) in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]


def test_a_data_root_every_job_shares_inside_one_jobs_folder_is_refused_whole(
    tmp_path, capsys, monkeypatch, shared_data
):
    """``data.root=${hydra:sweep.dir}/lr_0.1/data``: job 0 had trained and unpacked the data
    set into its own folder, and job 1 was refused only then, as writing in another run's."""
    from multigpu.run.preflight import check_sweep

    monkeypatch.setenv("MULTIGPU_DATA", str(shared_data))
    sweep = tmp_path / "sweep"
    given = [
        "data=fashion_mnist",
        "data.root=${hydra:sweep.dir}/lr_0.1/data",
        "model.optimizer.lr=0.1,0.2",
    ]
    with composed(given, sweep, base=TINY) as config:
        line = refusal(check_sweep, config, capsys)
    assert line == (
        f"error: 2 of 2 jobs cannot run, so none was started: data.root {sweep}/lr_0.1/data is "
        f"in job 0's folder {sweep}/lr_0.1 (hydra.sweep.subdir), where the other jobs would "
        "write too; pass a data.root outside the jobs' folders"
    )
    assert list(tmp_path.iterdir()) == []


def test_jobs_each_with_a_log_file_of_its_own_in_one_folder_are_admitted(tmp_path):
    """Hydra's log file is a file: jobs naming their own beside each other share no place (they
    had been refused as writing in the folder that holds them)."""
    from multigpu.run.preflight import check_sweep

    for folder in (tmp_path, "${hydra:sweep.dir}"):  # the sweep's: Hydra makes it first
        named = f"hydra.job_logging.handlers.file.filename={folder}/log_${{hydra:job.num}}.log"
        with composed([named, "model.optimizer.lr=0.1,0.2"], tmp_path / "sweep") as config:
            check_sweep(config)  # no SystemExit
        assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("multirun", [False, True], ids=["run", "sweep"])
def test_a_misspelt_key_of_hydras_config_in_a_value_is_refused(multirun, tmp_path, capsys):
    """Hydra's ``${hydra:...}`` resolver gives null for a key its config lacks: a misspelt one
    had trained with a null setting, or written a job's logs under ``None/``."""
    from multigpu.run.preflight import Preflight, check_sweep

    given = "logger.save_dir=${hydra:sweep.dri}/tb"
    with composed([given, *(["seed=1,2"] if multirun else [])], tmp_path / "x", multirun) as config:
        check = check_sweep if multirun else Preflight().on_run_start
        line = refusal(check, config, capsys)
    assert f"{given} names hydra.sweep.dri, which Hydra's config does not have" in line
    assert "did you mean hydra.sweep.dir?" in line
    assert list(tmp_path.iterdir()) == []
