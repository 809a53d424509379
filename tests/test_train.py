"""Whole runs: ``train(cfg)`` in-process, and ``train.py`` / ``eval.py`` as real subprocesses."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch
from conftest import CONF, TINY, compose_config, examples, run_script, tensorboard_scalars
from hydra import compose, initialize_config_dir
from hypothesis import given
from hypothesis import strategies as st

from multigpu.config.errors import UserError
from multigpu.config.names import FASHION_MNIST
from multigpu.run.evaluation import evaluate
from multigpu.run.training import train
from multigpu.storage.checkpoint import load_network


@pytest.mark.parametrize("batches", ["true", "2"])
def test_a_smoke_run_records_the_batches_it_trained_and_no_test_accuracy(batches, tmp_path):
    """``+trainer.fast_dev_run`` (the README's smoke run) trains and evaluates a few batches,
    which Lightning counts as the epoch: the record says how many it trained (no epoch's speed
    from them) and gives no test accuracy (it claimed one from a batch of the test set)."""
    smoke = ["data=synthetic", "data.batch_size=64", f"+trainer.fast_dev_run={batches}"]
    summary = train(compose_config([*TINY, *smoke], tmp_path))
    assert summary["status"] == "completed" and summary["epochs"] == 1
    (epoch,) = summary["history"]
    assert epoch["partial_batches"] == (1 if batches == "true" else int(batches))
    assert epoch["test_acc"] is None and summary["test_acc"] is None
    assert epoch["train_loss"] > 0 and summary["epoch_s"] is None  # no whole epoch was timed
    assert summary["run"]["strategy"] == "single" and summary["run"]["batch_size"] == 64


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, data_root):
    """Two short epochs of a narrow network on real data, through ``python train.py``, in a
    project folder as a user's: the run is ``<project>/outputs/run``."""
    project = tmp_path_factory.mktemp("project")
    result = run_script(
        "train.py",
        *TINY,
        "trainer.max_epochs=2",
        "data.train_subset=1024",
        "data.test_subset=1000",
        "data.batch_size=128",
        f"data.root={data_root}",
        "hydra.run.dir=outputs/run",
        cwd=project,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return project / "outputs" / "run"


@pytest.mark.subprocess
def test_run_leaves_config_events_checkpoint_and_metrics(finished_run):
    assert (finished_run / ".hydra" / "config.yaml").is_file()
    assert (finished_run / "checkpoints" / "last.ckpt").is_file()
    metrics = json.loads((finished_run / "metrics.json").read_text())
    assert metrics["status"] == "completed" and metrics["epochs"] == 2
    assert metrics["run"]["batch_size"] == 128 and metrics["run"]["lr"] == 0.1
    assert metrics["best_test_acc"] >= metrics["history"][0]["test_acc"]
    assert metrics["epoch_s"] > 0 and metrics["samples_per_s"] > 0

    events = list(finished_run.glob("events.out.tfevents.*"))
    assert len(events) == 1
    scalars = tensorboard_scalars(finished_run)
    expected = {"train/loss", "train/acc", "test/acc", "time/epoch_s", "throughput/samples_per_s"}
    assert expected <= set(scalars)
    test_acc = [value for _, value in scalars["test/acc"]]
    assert len(test_acc) == 2
    assert test_acc[-1] == pytest.approx(metrics["test_acc"], abs=1e-6)


@pytest.mark.slow  # whole runs, 7-11 s: the default suite's 5 minutes; CI runs the slow suite
@pytest.mark.subprocess
def test_eval_of_the_latest_checkpoint_reports_the_runs_test_accuracy(finished_run, data_root):
    """``ckpt_path=latest`` in the project folder, as train.py takes it; stdout is the JSON
    alone (``eval.py ... | jq``), whatever Lightning says goes to stderr."""
    result = run_script(
        "eval.py",
        "ckpt_path=latest",
        f"data.root={data_root}",
        "data.test_subset=1000",
        "trainer.accelerator=cpu",
        cwd=finished_run.parent.parent,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    reported = json.loads(result.stdout)
    metrics = json.loads((finished_run / "metrics.json").read_text())
    assert reported["checkpoint"] == "outputs/run/checkpoints/last.ckpt"
    assert reported["samples"] == 1000 and reported["epochs_trained"] == metrics["epochs"] == 2
    assert reported["test_acc"] == pytest.approx(metrics["test_acc"], abs=1e-6)
    assert "GPU available" not in result.stderr and "TPU available" not in result.stderr


@pytest.mark.slow
@pytest.mark.subprocess
def test_eval_stopped_by_sigterm_says_so_and_prints_no_result(finished_run, data_root):
    """Stopped while it tests, eval.py exits 143 with one line and an empty stdout (a script
    piping it sees a failure, not a success without a result). Started warm, with one image
    per batch, so that the signal lands in the test loop on any machine."""
    import signal
    import time

    from conftest import start_script

    args = [f"ckpt_path={finished_run}/checkpoints/last.ckpt", f"data.root={data_root}"]
    args += ["trainer.accelerator=cpu", "data.batch_size=1"]
    proc = start_script("eval.py", *args, cwd=finished_run)
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and out == "", err[-2000:]
    assert err.strip().splitlines()[-1].startswith("error: interrupted by SIGTERM"), err[-2000:]
    assert "Traceback" not in err


def test_eval_computes_with_the_matmul_precision_its_checkpoint_trained_with():
    """As the run's own evaluations did; a checkpoint from before the setting counts as its
    default, as a resume counts it; a value that is not one is refused in one line."""
    from multigpu.run.evaluation import trained_matmul_precision
    from multigpu.storage.ckpt_path import SETTINGS

    exact = {SETTINGS: {"float32_matmul_precision": "highest", "seed": 1}}
    assert trained_matmul_precision(exact, "a.ckpt") == "highest"
    assert trained_matmul_precision({SETTINGS: {"seed": 1}}, "a.ckpt") == "high"
    assert trained_matmul_precision({SETTINGS: None}, "a.ckpt") == "high"
    edited = {SETTINGS: {"float32_matmul_precision": "fast"}}
    with pytest.raises(UserError, match=r"^ckpt_path=a.ckpt records float32_matmul_precision="):
        trained_matmul_precision(edited, "a.ckpt")


def test_eval_latest_without_runs_says_what_to_pass(tmp_path):
    """The runs folder is named in one spelling, however it was given (``/x/.//``: ``/x/``)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        runs = f"paths.runs_dir={tmp_path}/.//"
        cfg = compose("eval", overrides=["ckpt_path=latest", runs])
    said = f"ckpt_path=latest found no checkpoints/last.ckpt under {tmp_path}/: pass"
    with pytest.raises(UserError, match=f"^{re.escape(said)}"):
        evaluate(cfg)


@pytest.mark.parametrize("spelt", ["{}", "{}/./", "{}//"])
def test_the_hint_offers_latest_only_where_latest_finds_the_checkpoint(tmp_path, spelt):
    """A run folder given by ``hydra.run.dir`` outside ``paths.runs_dir`` is not where
    ``ckpt_path=latest`` looks: its stop's hint names the file alone."""
    from multigpu.run.resume import newest_checkpoints, resume_hint

    runs = tmp_path / "outputs"
    inside, outside = runs / "a" / "checkpoints", tmp_path / "elsewhere" / "checkpoints"
    for folder in (inside, outside):
        folder.mkdir(parents=True)
        (folder / "last.ckpt").write_bytes(b"a checkpoint")
    for folder in (inside, outside):
        offered = "(or ckpt_path=latest)" in resume_hint(folder, None, spelt.format(runs))
        found = [c.resolve() for c in newest_checkpoints(spelt.format(runs))]
        assert offered == ((folder / "last.ckpt").resolve() in found)
    assert "(or ckpt_path=latest)" in resume_hint(inside, None, runs)


def test_latest_names_the_runs_folder_in_one_spelling(tmp_path):
    from multigpu.run.resume import latest_of

    with pytest.raises(UserError, match=f"under {re.escape(str(tmp_path))}/: train a run"):
        latest_of(f"{tmp_path}/./", {}, [])


@pytest.mark.parametrize(
    ("trained", "here", "refused"),
    [
        ((1, 1000), (42, 500), "data.seed=1"),  # two subsets drawn with other seeds
        ((1, 1000), (42, None), None),  # all images: the run's 1000 among them
        ((1, None), (42, 500), None),  # 500 of the images the run was tested on
        ((1, 10000), (42, 500), None),  # a "subset" of every image is every image
        ((42, 1000), (42, 500), None),  # the same seed: 500 of the run's 1000
    ],
)
def test_eval_on_a_real_data_set_compares_the_seed_where_both_draw_a_subset(trained, here, refused):
    from multigpu.run.evaluation import check_same_test_set

    stored = {
        "data._target_": FASHION_MNIST,
        "data.seed": trained[0],
        "data.test_subset": trained[1],
    }
    config = {"_target_": FASHION_MNIST, "seed": here[0], "test_subset": here[1]}
    if refused is None:
        check_same_test_set(config, "fashion_mnist", stored, "x.ckpt")
        return
    with pytest.raises(UserError) as error:
        check_same_test_set(config, "fashion_mnist", stored, "x.ckpt")
    assert str(error.value).endswith(f"would draw other images: pass {refused}")


def test_eval_of_a_synthetic_checkpoint_says_every_setting_to_pass_at_once():
    from multigpu.config.names import SYNTHETIC
    from multigpu.run.evaluation import check_same_test_set

    stored = {"defaults.data": "synthetic", "data._target_": SYNTHETIC, "data.seed": 7}
    stored |= {"data.num_test": 32}
    with pytest.raises(UserError) as error:
        check_same_test_set(
            {"_target_": FASHION_MNIST, "seed": 42}, "fashion_mnist", stored, "x.ckpt"
        )
    assert str(error.value) == (
        "ckpt_path=x.ckpt was trained and tested on data=synthetic, and data=fashion_mnist here "
        "would test it on other images: pass data=synthetic data.num_test=32 data.seed=7"
    )


@pytest.mark.subprocess
def test_eval_of_a_checkpoint_on_another_data_set_is_one_line(finished_run):
    """A checkpoint trained on Fashion-MNIST, evaluated with ``data=synthetic``: its accuracy on
    noise had been printed as the checkpoint's."""
    checkpoint = finished_run / "checkpoints" / "last.ckpt"
    result = run_script(
        "eval.py", f"ckpt_path={checkpoint}", "data=synthetic", "trainer.accelerator=cpu",
        cwd=finished_run,
    )  # fmt: skip
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"error: ckpt_path={checkpoint} was trained and tested on data=fashion_mnist, and "
        "data=synthetic here would test it on other images: pass data=fashion_mnist"
    ]


@pytest.mark.subprocess
def test_eval_refuses_another_data_set_from_the_runs_record_before_reading_the_checkpoint(
    finished_run, tmp_path
):
    """A checkpoint in its run's folder is refused by its run's ``metrics.json`` before torch
    loads it (a second, not ten): here the file is not even a checkpoint, and the data's
    refusal comes first; without the record, the file's own."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    checkpoint = run / "checkpoints" / "last.ckpt"
    checkpoint.write_bytes(b"not a checkpoint")
    shutil.copy(finished_run / "metrics.json", run / "metrics.json")
    command = ("eval.py", f"ckpt_path={checkpoint}", "trainer.accelerator=cpu")
    result = run_script(*command, "data=synthetic", cwd=tmp_path)
    assert result.returncode == 2
    assert "was trained and tested on data=fashion_mnist" in result.stderr
    result = run_script(*command, "data=synthetic", "data.num_classes=5", cwd=tmp_path)
    assert "was trained on 10 classes and the data has 5" in result.stderr
    (run / "metrics.json").unlink()
    result = run_script(*command, "data=synthetic", cwd=tmp_path)
    assert result.returncode == 2 and "data=fashion_mnist" not in result.stderr
    assert "not a checkpoint" in result.stderr or "cannot be read" in result.stderr


@examples(40)
@given(
    trained=st.tuples(
        st.sampled_from([1, 2]), st.sampled_from([4, 6]), st.sampled_from([None, 2, 3])
    ),
    here=st.tuples(st.sampled_from([1, 2]), st.sampled_from([4, 6]), st.sampled_from([None, 2, 3])),
)
def test_eval_tests_on_the_images_its_checkpoint_was_tested_on(trained, here):
    """(seed, num_test, test_subset) of synthetic data at training and here: eval.py goes on
    exactly where one test set holds the other (the images and labels, as the data module
    draws them; a subset of them, or more of the same), else says what to pass."""
    from multigpu.config.names import SYNTHETIC
    from multigpu.data import SyntheticDataModule
    from multigpu.run.evaluation import check_same_test_set

    def images(seed, num_test, test_subset) -> set:
        data = SyntheticDataModule(
            num_train=2, num_test=num_test, seed=seed, test_subset=test_subset
        )
        data.setup()
        return {(x.numpy().tobytes(), int(y)) for x, y in data.test_set}

    keys = ("data.seed", "data.num_test", "data.test_subset")
    stored = {"defaults.data": "synthetic", "data._target_": SYNTHETIC}
    stored |= dict(zip(keys, trained, strict=True))
    config = {
        "_target_": SYNTHETIC,
        **dict(zip(("seed", "num_test", "test_subset"), here, strict=True)),
    }
    a, b = images(*trained), images(*here)
    try:
        check_same_test_set(config, "synthetic", stored, "x.ckpt")
    except UserError as refused:
        assert not (a <= b or b <= a)
        said = re.fullmatch(
            r"ckpt_path=x.ckpt was tested with (.+) during training, and (.+) here would draw "
            r"other images: pass \1",
            str(refused),
        )
        assert said is not None, str(refused)  # every setting to pass, at once
        then = dict(kv.split("=") for kv in said[1].split())
        here = dict(kv.split("=") for kv in said[2].split())
        assert then.keys() == here.keys() <= {"data.seed", "data.num_test"}
        assert all(then[k] == str(stored[k]) != here[k] for k in then)
        return
    assert a <= b or b <= a


def test_checkpoint_loads_into_a_plain_module(finished_run):
    net = load_network(finished_run / "checkpoints" / "last.ckpt")
    assert isinstance(net, torch.nn.Sequential)
    assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    state = torch.load(finished_run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert not any(key.startswith("module.") or ".module." in key for key in state)


@pytest.mark.parametrize(
    "overrides,said",
    [
        (["data.test_subset=0"], "data.test_subset=0 must be a positive integer"),
        (["data.batch_size=0"], "data.batch_size=0 must be a positive integer"),
        (["data.num_workers=-1"], "data.num_workers=-1 must be between 0 and"),
        (["data=synthetic", "data.num_classes=0"], "data.num_classes=0 must be between 2 and"),
        (["+data.foo=1"], "data.foo is not a setting of data=fashion_mnist"),
        (["data.pipeline=bogus"], "data.pipeline='bogus' is not known: use one of"),
        (["data.test_subset=99999999"], "data.test_subset=99999999 is more than the 10000 test"),
        (["data=synthetic", "data.num_classes=5"], "was trained on 10 classes and the data has 5"),
        (["~data"], "data._target_ is missing from the config: eval.py needs it"),
        (["~paths"], "paths.runs_dir is missing from the config: eval.py needs it"),
        (["~ckpt_path"], "ckpt_path is missing from the config: eval.py needs it"),
    ],
)
def test_eval_checks_its_data_as_training_does(finished_run, overrides, said):
    """eval.py's data node goes through training's checks; the checkpoint's classes against
    the data's once it is read."""
    ckpt = finished_run / "checkpoints" / "last.ckpt"
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "eval",
            overrides=[f"ckpt_path={ckpt}", f"paths.output_dir={finished_run}", *overrides],
            return_hydra_config=True,
        )
    with pytest.raises(UserError, match=re.escape(said)):
        evaluate(cfg)


SLURM_TASK = {"SLURM_JOB_ID": "1", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}


@pytest.mark.parametrize(
    ("environ", "said"),
    [
        ({"PL_TRAINER_LIMIT_TEST_BATCHES": "1"}, "PL_TRAINER_LIMIT_TEST_BATCHES=1 is set: "
         "Lightning would give the Trainer limit_test_batches=1"),
        ({**SLURM_TASK, "SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1"},
         "eval.py runs in one process, but this is process 1 of the 2 the launcher started: "
         "start it once"),
        ({**SLURM_TASK, "SLURM_NTASKS": "4", "SLURM_PROCID": "0", "SLURM_NTASKS_PER_NODE": "4",
          "PL_TRAINER_LIMIT_TEST_BATCHES": ""}, None),
        ({**SLURM_TASK, "SLURM_NTASKS": "4", "SLURM_PROCID": "0"},
         "eval.py in a SLURM job of 4 tasks without --ntasks-per-node"),
    ],
    ids=["trainer_default", "srun_second_task", "batch_script_of_a_job_of_tasks",
         "batch_script_without_tasks_per_node"],
)  # fmt: skip
def test_eval_checks_its_environment_as_training_does(finished_run, monkeypatch, environ, said):
    """Found by a fresh try: ``PL_TRAINER_LIMIT_TEST_BATCHES=1`` evaluated one batch and
    reported the whole test set's size; two srun tasks ended in a traceback. A job's batch
    script (the first of its tasks) evaluates, and an empty variable is Lightning's nothing."""
    ckpt = finished_run / "checkpoints" / "last.ckpt"
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "eval",
            overrides=[f"ckpt_path={ckpt}", f"paths.output_dir={finished_run}"],
            return_hydra_config=True,
        )
    if said is None:
        assert 0 <= evaluate(cfg)["test_acc"] <= 1
        return
    with pytest.raises(UserError, match=f"^{re.escape(said)}"):
        evaluate(cfg)


def test_eval_keeps_no_copy_of_its_config():
    """``eval.py ... hydra.run.dir=<run> hydra.output_subdir=.hydra`` had replaced the run's
    own copy of its config (found by a fresh try): refused before Hydra starts the job."""
    from multigpu.run.command_line import evaluation_values, refusal

    argv = ["ckpt_path=r1/checkpoints/last.ckpt", "hydra.run.dir=r1", "hydra.output_subdir=.hydra"]
    assert refusal(argv, "eval", evaluation_values) == (
        "hydra.output_subdir=.hydra: eval.py writes nothing, not even a copy of its config (its "
        "result is the JSON on stdout); drop it"
    )
    assert refusal(argv[:2], "eval", evaluation_values) == (
        "hydra.run.dir=r1: eval.py writes nothing, and makes no folder (its result is the JSON "
        "on stdout); drop it"
    )  # Hydra had made the folder, empty
    assert refusal(argv[:1], "eval", evaluation_values) is None


@pytest.mark.parametrize("flag", ["-m", "--multirun"])
def test_eval_runs_no_sweep(flag, monkeypatch, capsys, tmp_path):
    """``eval.py -m ... data.test_subset=8,16`` wrote Hydra's multirun folder and its config
    (and, for a refused job, three lines and the folder): eval.py writes nothing."""
    from multigpu.run.command_line import check_command_line, evaluation_values

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["eval.py", flag, "ckpt_path=x.ckpt", "data.test_subset=8,16"])
    with pytest.raises(SystemExit) as ended:
        check_command_line("eval", evaluation_values, sweeps=False)
    assert ended.value.code == 2 and list(tmp_path.iterdir()) == []
    assert capsys.readouterr().err == (
        f"error: {flag}: eval.py writes nothing, and a sweep writes Hydra's multirun folder; run "
        "eval.py once for each value\n"
    )


def test_eval_refuses_a_trainer_setting_it_would_ignore(finished_run):
    """``eval.py ... +trainer.limit_test_batches=0.25`` had tested the whole set, and
    ``trainer.max_epochs=5`` changed nothing (found by a fresh try): refused, by the command
    line's check or, for an append it leaves to the job, by the job before torch."""
    from multigpu.run.command_line import as_hydra_sets_it, evaluation_values, refusal

    ckpt = f"ckpt_path={finished_run / 'checkpoints' / 'last.ckpt'}"
    said = "trainer.max_epochs is not read by eval.py, which tests the whole test set on one"
    assert refusal([ckpt, "trainer.max_epochs=5"], "eval", evaluation_values).startswith(said)
    assert refusal([ckpt, "trainer.precision=bf16-mixed"], "eval", evaluation_values) is None
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("eval", [ckpt, "+trainer.limit_test_batches=0.25"], return_hydra_config=True)
    with as_hydra_sets_it(cfg), pytest.raises(UserError, match="^trainer.limit_test_batches is"):
        evaluate(cfg)
