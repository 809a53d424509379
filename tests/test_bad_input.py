"""Every bad input of the reliability list, through a real ``python train.py`` subprocess: a
non-zero exit within seconds, before any training, with one ``error:`` line naming the value
and the fix, no traceback, and the run's ``metrics.json`` saying the same. A mistake in a
config value or a path is answered before torch is even imported (each run is watched with
``PYTHONPROFILEIMPORTTIME``); only what needs the data or Lightning comes after."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import hypothesis.strategies as st
import pytest
import torch
from conftest import REPO, TINY, copy_raw, examples, run_script, write_gz
from hypothesis import assume, given

from multigpu.config.errors import UserError, message
from multigpu.models import resnet18
from multigpu.models.classifier import ImageClassifier
from multigpu.storage.checkpoint import check_fits, classifier, load_checkpoint
from multigpu.tools.bench.mistakes import MISTAKES

pytestmark = pytest.mark.subprocess

CORES = os.cpu_count() or 1

# A few of the one list of config mistakes (tests/test_settings.py checks every one of them
# in-process) as real ``python train.py`` runs: one for each way a mistake is found before torch
# (a number's range, a type, a group option, a Lightning argument, the data's classes, the
# machine's cores and precisions). {case: (overrides, text the error line must contain)}
CONFIG_CASES = {
    case: MISTAKES[case]
    for case in (
        *("devices_more_than_cpu_cores", "lr_zero", "lr_not_a_number", "unknown_strategy"),
        *("lightning_refuses_an_argument", "num_classes_not_the_datas", "fp16_on_the_cpu"),
        *("split_weights_not_numbers", "seed_negative"),
    )
}
# The runs whose imports the tests read: {job of ``outcomes``}.
BEFORE_TORCH = {f"config:{case}" for case in CONFIG_CASES}
BEFORE_TORCH |= {f"ckpt:{case}" for case in ("missing", "latest_without_runs", "a_folder")}
BEFORE_TORCH |= {"eval.py:no_ckpt_path", "eval.py:a_folder"}
# Cases answered only after torch is imported (they need Lightning, the data or a checkpoint).
AFTER_IMPORT: set[str] = set()  # every config case is answered before torch now


def stderr_lines(result) -> list[str]:
    """What the run said on stderr, without the import-time profile."""
    return [line for line in result.stderr.splitlines() if not line.startswith("import time:")]


def imported(result) -> set[str]:
    return {
        line.rsplit("|", 1)[-1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }


def check_one_line_error(result, expected_status: int, text: str, cwd: Path, started: bool) -> None:
    """One ``error:`` line; a run refused before it started writes nothing at all, one that
    had started records the same line in its ``metrics.json``."""
    said = "\n".join(stderr_lines(result))
    assert result.returncode == expected_status, said[-2000:]
    assert "Traceback" not in said, said[-2000:]
    assert text in said, said[-2000:]
    if expected_status == 2:
        last = said.strip().splitlines()[-1]
        assert last.startswith("error: ") and text in last
        records = list(cwd.rglob("metrics.json"))
        if started:
            (record,) = records  # the run's record says why it failed
            recorded = json.loads(record.read_text())
            assert recorded["status"] == "failed" and recorded["reason"] == last[len("error: ") :]
        else:
            assert records == [] and not (cwd / "outputs").exists()  # nothing written
    assert not list(cwd.rglob("*.ckpt")) and not list(cwd.rglob("events.out.tfevents.*"))


LABELS = "t10k-labels-idx1-ubyte"
IMAGES = "t10k-images-idx3-ubyte"
# A malformed file through a real run: one line, exit 2, nothing written. The reader's other
# refusals (sizes, a label outside 0-9, a truncated .gz) are checked in-process by
# tests/test_data.py.
DATA_CASES = {
    "wrong_magic": (LABELS, struct.pack(">II", 0x0803, 10_000) + bytes(10_000), "magic"),
}

CKPT_CASES = {
    "missing": ([], "does not exist"),
    "latest_without_runs": ([], "ckpt_path=latest found no checkpoints/last.ckpt under outputs/"),
    "other_width": (
        ["model.net.width=8"],
        "parameter '0.weight' has shape [4, 1, 3, 3] in the checkpoint and [8, 1, 3, 3] "
        "here; it was trained with model.net.width=4",
    ),
    "a_folder": ([], "is a folder that holds no checkpoint (.ckpt) in it or its checkpoints/"),
    "weights_without_training_state": (
        [],
        "holds weights but no training state (optimizer_states, loops, epoch, global_step): "
        "training cannot continue from it; eval.py can still evaluate it",
    ),
}
# Weights that do not fit the configured network, given as init_from (as ckpt_path, the
# checkpoint's missing training state is refused first): refused before anything is written.
INIT_FROM = ("other_width",)
# Files that are zip archives of tensors, but not checkpoints of ours: (build it, what is said),
# through train.py (resuming) and eval.py alike; train.py refuses those without training state
# for that first.


def width4_checkpoint(path: Path, **changes) -> Path:
    """A checkpoint of a width-4, 10-class network, in the layout ``train.py`` writes (weights
    and hyperparameters, no training state), with ``changes`` to what it holds."""
    net = {"_target_": "multigpu.models.resnet18", "width": 4, "num_classes": 10}
    optimizer = {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.1}
    module = ImageClassifier(net=net, optimizer=optimizer)
    checkpoint = {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}
    torch.save({**checkpoint, **changes}, path)
    return path


class RunsCode:
    """What a malicious checkpoint pickles: unpickling it would run a shell command."""

    def __reduce__(self):
        return (os.system, ("echo this should never run",))


def crafted(case: str, path: Path) -> Path:
    net = {"_target_": "multigpu.models.resnet18", "width": 4}
    if case == "bare_state_dict":
        torch.save(ImageClassifier(net=net).net.state_dict(), path)
    elif case == "unknown_settings":
        width4_checkpoint(path, hyper_parameters={"net": {**net, "depth": 50}})
    elif case == "weights_not_its_settings":
        width4_checkpoint(path, hyper_parameters={"net": {**net, "width": 8}})
    elif case == "contains_code":
        width4_checkpoint(path, extra=RunsCode())
    return path


CRAFTED = {
    "bare_state_dict": "is a bare state_dict of tensors, not a checkpoint written by train.py",
    "unknown_settings": "has network settings this network does not take (depth=50)",
    "contains_code": "refused: it contains code (posix.system); a checkpoint written by "
    "train.py holds only tensors and plain values",
    # eval.py builds the network the file describes; train.py builds the configured one (and
    # refuses this file for having no training state).
    "weights_not_its_settings": "does not fit this network: parameter '0.weight' has shape "
    "[4, 1, 3, 3] in the checkpoint and [8, 1, 3, 3] here; its weights do not match its own "
    "network settings",
}
CRAFTED_CASES = [(c, s) for c in CRAFTED for s in ("train.py", "eval.py")]
CRAFTED_CASES.remove(("weights_not_its_settings", "train.py"))
CRAFTED_CASES.remove(("unknown_settings", "train.py"))  # refused first: no training state


def data_case(case: str, cwd: Path, shared_data: Path) -> list[str]:
    name, payload, _ = DATA_CASES[case]
    raw = copy_raw(shared_data, cwd / "data")
    if payload is None:
        bad = raw / f"{name}.gz"
        bad.write_bytes(bad.read_bytes()[:100_000])
    else:
        write_gz(raw / f"{name}.gz", payload)
    return [f"data.root={cwd / 'data'}", "data.source=null"]


def ckpt_case(case: str, cwd: Path, checkpoint: Path) -> list[str]:
    overrides, _ = CKPT_CASES[case]
    path = {
        "missing": cwd / "nope.ckpt",
        "latest_without_runs": "latest",
        "a_folder": cwd,
    }.get(case, checkpoint)
    return [*overrides, f"{'init_from' if case in INIT_FROM else 'ckpt_path'}={path}"]


# Each kind of bad checkpoint goes through a real run once; the crafted files that eval.py
# refuses for the same reason as another (a file train.py did not write) are read in-process
# by test_crafted_checkpoints_are_refused_by_the_reader.
IN_PROCESS_ONLY = {("bare_state_dict", "eval.py"), ("unknown_settings", "eval.py")}
IN_PROCESS_ONLY |= {("weights_not_its_settings", "eval.py")}


def job_of(item: pytest.Item) -> str | None:
    """The run of ``outcomes`` a collected test reads."""
    params = getattr(item, "callspec", None)
    params = params.params if params else {}
    name = item.originalname if isinstance(item, pytest.Function) else item.name
    return {
        "test_bad_config_value": lambda: f"config:{params['case']}",
        "test_malformed_data_file": lambda: f"data:{params['case']}",
        "test_data_missing_and_no_download": lambda: "data:missing_no_download",
        "test_bad_ckpt_path": lambda: f"ckpt:{params['case']}",
        "test_checkpoints_that_are_not_ours": lambda: f"{params['script']}:{params['case']}",
        "test_eval_answers_a_missing_or_wrong_path_before_torch": lambda: (
            f"eval.py:{params['case']}"
        ),
    }.get(name, lambda: None)()


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory, shared_data) -> dict[str, tuple]:
    """The runs the selected tests read, started side by side (startup is one core's import
    work, so running them in parallel uses the machine's cores); {case: (result, cwd)}."""
    selected = {job_of(item) for item in request.session.items if item.module is request.module}
    checkpoint = width4_checkpoint(tmp_path_factory.mktemp("ckpt") / "width4.ckpt")
    jobs = {}
    for case in CONFIG_CASES:
        jobs[f"config:{case}"] = CONFIG_CASES[case][0]
    for case in DATA_CASES:
        cwd = tmp_path_factory.mktemp(case)
        jobs[f"data:{case}"] = (data_case(case, cwd, shared_data), cwd)
    jobs["data:missing_no_download"] = [
        f"data.root={tmp_path_factory.mktemp('empty')}",
        "data.source=null",
        "data.download=false",
    ]
    for case in CKPT_CASES:
        cwd = tmp_path_factory.mktemp(case)
        jobs[f"ckpt:{case}"] = (ckpt_case(case, cwd, checkpoint), cwd)
    for case, script in CRAFTED_CASES:
        cwd = tmp_path_factory.mktemp(case)
        path = crafted(case, cwd.parent / f"{cwd.name}.ckpt")
        jobs[f"{script}:{case}"] = ([f"ckpt_path={path}"], cwd)
    jobs["eval.py:no_ckpt_path"] = ([], tmp_path_factory.mktemp("eval"))
    jobs["eval.py:a_folder"] = ([f"ckpt_path={tmp_path_factory.mktemp('folder')}"], None)

    def launch(key: str):
        job = jobs[key]
        overrides, cwd = job if isinstance(job, tuple) else (job, None)
        cwd = cwd or tmp_path_factory.mktemp("run")
        # The imports are watched (a cold python) where the answer must come before torch.
        env = {"PYTHONPROFILEIMPORTTIME": "1"} if key in BEFORE_TORCH else {}
        if key.startswith("eval.py:"):
            result = run_script("eval.py", *overrides, "trainer.accelerator=cpu", cwd=cwd, env=env)
        else:
            result = run_script("train.py", *TINY, *overrides, cwd=cwd, timeout=300, env=env)
        return result, cwd

    jobs = {key: job for key, job in jobs.items() if key in selected}
    with ThreadPoolExecutor(max_workers=CORES + 1) as pool:
        return dict(zip(jobs, pool.map(launch, jobs), strict=True))


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_bad_config_value(case, outcomes):
    _, text = CONFIG_CASES[case]
    result, cwd = outcomes[f"config:{case}"]
    check_one_line_error(result, 2, text, cwd, started=f"config:{case}" in AFTER_IMPORT)
    modules = imported(result)
    assert "hydra" in modules  # the imports are seen at all
    if f"config:{case}" not in AFTER_IMPORT:
        assert "torch" not in modules and "pytorch_lightning" not in modules


@pytest.mark.parametrize("case", sorted(DATA_CASES))
def test_malformed_data_file(case, outcomes):
    name, _, text = DATA_CASES[case]
    result, cwd = outcomes[f"data:{case}"]
    check_one_line_error(result, 2, text, cwd, started=False)  # read before any folder is made
    assert str(cwd / "data" / "FashionMNIST" / "raw" / name) in result.stderr


def test_data_missing_and_no_download(outcomes):
    result, cwd = outcomes["data:missing_no_download"]  # found before any folder is made
    check_one_line_error(result, 2, "Fashion-MNIST not found in", cwd, started=False)
    assert "data.source (or MULTIGPU_DATA)" in result.stderr


@pytest.mark.parametrize("case", sorted(CKPT_CASES))
def test_bad_ckpt_path(case, outcomes):
    _, text = CKPT_CASES[case]
    result, cwd = outcomes[f"ckpt:{case}"]
    check_one_line_error(result, 2, text, cwd, started=False)  # all refused before any folder
    key = "init_from=" if case in INIT_FROM else "ckpt_path="  # the line names the value given
    assert key in stderr_lines(result)[-1]
    if case in ("missing", "latest_without_runs", "a_folder"):  # found from the path alone
        assert "torch" not in imported(result)


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_checkpoints_are_refused_by_the_reader(case, tmp_path):
    """What eval.py does with a file, in-process: read it, then build the network it describes."""
    path = crafted(case, tmp_path / f"{case}.ckpt")
    with pytest.raises(UserError) as refused:
        classifier(load_checkpoint(path), path)
    said = str(refused.value)
    assert said.startswith(f"ckpt_path={path} ") and CRAFTED[case] in said and "\n" not in said


def test_weights_for_another_class_count_name_the_setting_they_were_trained_with(tmp_path):
    """What train.py checks before it uses init_from (the default suite runs other_width)."""
    path = width4_checkpoint(tmp_path / "width4.ckpt")
    configured = {"width": 4, "num_classes": 5}
    with pytest.raises(UserError) as refused:
        check_fits(path, load_checkpoint(path), resnet18(**configured), configured)
    said = str(refused.value)
    assert said.startswith(f"ckpt_path={path} does not fit this network: parameter ")
    assert said.endswith(
        "has shape [10, 32] in the checkpoint and [5, 32] here; it was trained with "
        "model.net.num_classes=10"
    )


@pytest.mark.parametrize(
    ("script", "args", "status"),
    [
        ("train.py", ["strategy=horovod"], 2),
        ("train.py", ["--help"], 0),
        ("eval.py", ["--help"], 0),
    ],
    ids=["unknown_option", "train_help", "eval_help"],
)
def test_hydra_answers_before_torch_is_imported(script, args, status, tmp_path):
    """``--help`` and Hydra's own errors come back in about a second: the scripts import torch
    and Lightning only once a run starts."""
    result = run_script(script, *args, cwd=tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == status, result.stderr[-2000:]
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "hydra" in imported  # the imports are seen at all
    assert "torch" not in imported and "pytorch_lightning" not in imported


@pytest.mark.parametrize("case,script", [c for c in CRAFTED_CASES if c not in IN_PROCESS_ONLY])
def test_checkpoints_that_are_not_ours(case, script, outcomes):
    result, cwd = outcomes[f"{script}:{case}"]
    said = stderr_lines(result)
    assert result.returncode == 2 and "Traceback" not in "\n".join(said), said[-20:]
    assert said[-1].startswith("error: ckpt_path=") and CRAFTED[case] in said[-1]
    assert "this should never run" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "case,text",
    [
        ("no_ckpt_path", "ckpt_path is required: python eval.py ckpt_path="),
        ("a_folder", "is a folder that holds no checkpoint (.ckpt) in it or its checkpoints/"),
    ],
)
def test_eval_answers_a_missing_or_wrong_path_before_torch(case, text, outcomes):
    result, _ = outcomes[f"eval.py:{case}"]
    said = stderr_lines(result)
    assert result.returncode == 2 and said[-1].startswith("error: ") and text in said[-1]
    assert "hydra" in imported(result) and "torch" not in imported(result)


# Lightning's Trainer arguments: refused before anything is written -----------------------------
SYNTHETIC = [*TINY, "data=synthetic", "data.num_train=64", "data.num_test=32"]


def test_accumulate_grad_batches_zero_is_refused_before_anything_is_written(tmp_path):
    """It had trained into a ZeroDivisionError traceback, after the run folder and its record
    were made; in a sweep, the job had started and failed."""
    text = "trainer.accumulate_grad_batches=0 must be 1 or more"
    alone = run_script("train.py", *SYNTHETIC, "+trainer.accumulate_grad_batches=0", cwd=tmp_path)
    check_one_line_error(alone, 2, text, tmp_path, started=False)
    sweep = run_script(
        "train.py", "-m", *SYNTHETIC, "+trainer.accumulate_grad_batches=1,0", cwd=tmp_path
    )
    check_one_line_error(sweep, 2, text, tmp_path, started=False)
    assert stderr_lines(sweep)[-1].startswith("error: 1 of 2 jobs cannot run, so none was started")


def test_a_trainer_argument_only_lightning_refuses_writes_nothing(tmp_path):
    """What Lightning refuses only when it builds its Trainer (a duration it cannot read) is
    found by admission, which builds one before the run's folder exists."""
    from conftest import compose_config

    from multigpu.config.settings import Machine
    from multigpu.run.admission import admit
    from multigpu.run.cli import hydra_runtime

    folder = tmp_path / "run"
    cfg = compose_config([*SYNTHETIC, "+trainer.val_check_interval=abc"], folder)
    with pytest.raises(UserError) as refused:
        admit(cfg, hydra_runtime(cfg)[0], Machine(0, CORES, {}, False), folder)
    assert str(refused.value) == (
        "trainer: Invalid time format for `val_check_interval`: 'abc'. Expected 'DD:HH:MM:SS'."
    )
    assert list(tmp_path.iterdir()) == []


def test_a_rank_set_by_hand_is_refused_before_anything_is_written(tmp_path):
    """``LOCAL_RANK=1 python train.py``: it had trained as rank 1, which writes nothing, and
    exited 0 with a checkpoint but no ``metrics.json`` and no lock."""
    result = run_script("train.py", *SYNTHETIC, cwd=tmp_path, env={"LOCAL_RANK": "1"})
    text = "LOCAL_RANK=1 is set, but no launcher started this process"
    check_one_line_error(result, 2, text, tmp_path, started=False)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A width-4 run's folder, as train.py leaves it: its record and its checkpoints."""
    from conftest import compose_config

    from multigpu.run.training import train

    folder = tmp_path_factory.mktemp("trained") / "run"
    data = ["data=synthetic", "data.num_train=64", "data.num_test=32", "data.batch_size=32"]
    assert train(compose_config([*TINY, *data], folder))["status"] == "completed"
    return folder


@pytest.mark.parametrize(
    ("setting", "value"), [("width", 8), ("num_classes", 5), ("norm", "none"), ("in_channels", 3)]
)
@pytest.mark.parametrize("key", ["ckpt_path", "init_from"])
def test_a_network_its_run_did_not_train_is_refused_before_torch_reads_the_file(
    key, setting, value, trained_run, monkeypatch
):
    """Its run's record names the network a checkpoint in ``<run>/checkpoints`` holds: another
    shape is refused from it (0.5 s rather than 3 s), the file left unread."""
    from multigpu.run import resume
    from multigpu.storage import checkpoint as reader

    def unread(path):
        raise AssertionError(f"{path} was read")

    monkeypatch.setattr(reader, "load_checkpoint", unread)
    last = trained_run / "checkpoints" / "last.ckpt"
    recorded = json.loads((trained_run / "metrics.json").read_text())["settings"]
    net = {name: recorded[f"model.net.{name}"] for name in resume.NETWORK_SHAPE} | {setting: value}
    with pytest.raises(UserError) as refused:
        if key == "init_from":
            resume.plan_init(str(last), trained_run.parent, net)
        else:
            resume.plan_resume(str(last), trained_run.parent, {}, [], 5, net)
    was = recorded[f"model.net.{setting}"]
    assert str(refused.value) == (
        f"{key}={last} does not fit this network: it was trained with model.net.{setting}={was} "
        f"(its run's metrics.json) and model.net.{setting}={value} is configured; pass "
        f"model.net.{setting}={was}"
    )


def test_a_resume_with_other_settings_is_refused_before_torch_reads_the_file(
    trained_run, monkeypatch
):
    """Its run's record names the settings a checkpoint in ``<run>/checkpoints`` holds: a
    resume with another learning rate is refused from it (it took 10-12 s, found by a fresh
    try), the file left unread. A record whose run was resumed with changes leaves it to the
    checkpoint, which may be older than the change."""
    from multigpu.run import resume
    from multigpu.storage import checkpoint as reader

    def unread(path):
        raise AssertionError(f"{path} was read")

    monkeypatch.setattr(reader, "load_checkpoint", unread)
    last = trained_run / "checkpoints" / "last.ckpt"
    record = json.loads((trained_run / "metrics.json").read_text())
    recorded = record["settings"]
    net = {name: recorded[f"model.net.{name}"] for name in resume.NETWORK_SHAPE}
    changed = {**recorded, "model.optimizer.lr": recorded["model.optimizer.lr"] * 3}
    with pytest.raises(UserError, match=f"^ckpt_path={re.escape(str(last))} was trained with "):
        resume.plan_resume(str(last), trained_run.parent, changed, [], 5, net)
    with pytest.raises(AssertionError, match="was read"):  # allowed: the file is read
        resume.plan_resume(str(last), trained_run.parent, changed, ["model.optimizer.lr"], 5, net)
    origin = {"checkpoint": "elsewhere.ckpt", "epochs": 1, "changed": {"model.optimizer.lr": [1]}}
    (trained_run / "metrics.json").write_text(json.dumps({**record, "resumed_from": origin}))
    try:
        with pytest.raises(AssertionError, match="was read"):
            resume.plan_resume(str(last), trained_run.parent, changed, [], 5, net)
    finally:  # the run is the module's
        (trained_run / "metrics.json").write_text(json.dumps(record))


SHAPES = {  # each network-shape setting: the values a record and a config may hold
    "width": st.integers(1, 2048),
    "in_channels": st.integers(1, 4),
    "num_classes": st.integers(2, 100),
    "norm": st.sampled_from(["batch", "none"]),
}


@given(
    recorded=st.fixed_dictionaries({}, optional=SHAPES),
    configured=st.fixed_dictionaries({}, optional=SHAPES),
    beside_its_record=st.booleans(),
)
def test_a_record_refuses_exactly_the_network_shapes_it_names_otherwise(
    recorded, configured, beside_its_record
):
    """Generated: a checkpoint in its run's ``checkpoints`` folder is refused before torch
    when, and only when, its record and the config both name a shape setting with two values;
    the first such setting is the one said, with the record's value as the fix. Elsewhere the
    record is not read and the weights answer."""
    from multigpu.run import resume

    folder = "checkpoints" if beside_its_record else "kept"
    path = Path("/nowhere/run") / folder / "last.ckpt"
    record = {"settings": {f"model.net.{k}": v for k, v in recorded.items()}}
    differ = [k for k in resume.NETWORK_SHAPE if k in recorded and k in configured]
    differ = [k for k in differ if recorded[k] != configured[k]] if beside_its_record else []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(resume, "record_beside", lambda checkpoint: record)
        if not differ:
            resume.check_recorded_network(path, configured, "init_from")
            return
        with pytest.raises(UserError) as refused:
            resume.check_recorded_network(path, configured, "init_from")
    first = differ[0]
    assert f"model.net.{first}={recorded[first]} (its run's metrics.json)" in str(refused.value)
    assert str(refused.value).endswith(f"pass model.net.{first}={recorded[first]}")


def test_a_checkpoint_kept_apart_from_its_record_is_fitted_by_its_weights(trained_run, tmp_path):
    """Copied out of its run folder, nothing names its network but the file: the weights'
    check answers, after torch reads it."""
    from multigpu.run import resume

    kept = tmp_path / "kept" / "checkpoints" / "last.ckpt"
    kept.parent.mkdir(parents=True)
    kept.write_bytes((trained_run / "checkpoints" / "last.ckpt").read_bytes())
    with pytest.raises(UserError, match=r"does not fit this network: parameter '0.weight' has"):
        resume.plan_init(str(kept), tmp_path, {"width": 8, "num_classes": 10})


@pytest.mark.parametrize("script", ["train.py", "eval.py"])
def test_a_current_folder_deleted_is_said_in_one_line(script, tmp_path):
    """A shell left in a folder since deleted: Hydra reads the current folder first thing, and
    failed with a traceback."""
    import subprocess
    import sys

    gone = tmp_path / "gone"
    gone.mkdir()
    shell = f'cd "{gone}" && rmdir "{gone}" && exec "{sys.executable}" "{REPO / script}" seed=1'
    result = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: the current folder no longer exists (deleted or moved): cd into one that does"
    ]
    assert list(tmp_path.iterdir()) == []


def test_a_value_that_refers_to_a_dropped_key_is_named_by_its_key(capsys):
    """``~paths.runs_dir`` leaves ``hydra.run.dir``'s ``${paths.runs_dir}`` with nothing to
    refer to: the checks before the run said "the config could not be checked", naming no key."""
    from omegaconf import OmegaConf

    from multigpu.run.preflight import guarded

    cfg = OmegaConf.create({"hydra": {"run": {"dir": "${paths.runs_dir}/x"}}, "paths": {}})
    check = guarded(lambda: cfg.hydra.run.dir)
    with pytest.raises(SystemExit) as stopped:
        check()
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: hydra.run.dir cannot be resolved (Interpolation key 'paths.runs_dir' not found): "
        "give what it refers to"
    ]


def test_a_run_folder_through_a_link_that_leads_nowhere_is_refused_before_admission(
    tmp_path, capsys
):
    """The check before admission writes nothing (admission probes once the folder is known to
    be apart from other runs'), yet reads the folder as spelt: its canonical form has followed
    the link already, and a run had trained in the link's missing target."""
    from multigpu.run.preflight import check_creatable_folder

    link = tmp_path / "scratch"
    link.symlink_to(tmp_path / "unmounted")
    with pytest.raises(SystemExit) as stopped:
        check_creatable_folder(str(link / "run"), "hydra.run.dir", probe=False)
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: cannot write {link / 'run'}: {link} is a link that leads nowhere (write "
        "elsewhere): pass a writable hydra.run.dir"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scratch"]


REFERENCE = "holds '${', which Hydra reads in the run's settings as a reference to another setting"


@given(
    before=st.text(st.characters(blacklist_characters="\0/"), max_size=8),
    after=st.text(st.characters(blacklist_characters="\0"), max_size=8),
    key=st.sampled_from(["hydra.run.dir", "hydra.sweep.dir"]),
)
def test_a_folder_named_with_a_reference_is_refused_naming_its_setting(before, after, key):
    """An escaped ``\\${`` gives a folder whose name holds ``${``, which the job's settings
    that name the folder (``paths.output_dir``, the Trainer's root) read as a reference: the
    run or the sweep failed on "Interpolation key not found", naming another setting or none."""
    import contextlib
    import io

    from multigpu.run.preflight import check_creatable_folder

    folder = f"outputs/{before}${{{after}"
    said = io.StringIO()
    with pytest.raises(SystemExit) as stopped, contextlib.redirect_stderr(said):
        check_creatable_folder(folder, key, probe=False)
    assert stopped.value.code == 2
    shown = folder.replace("\r", "\\r").replace("\n", "\\n")  # a line break in it, as \n
    assert said.getvalue() == f"error: {key}={shown} {REFERENCE}: pass a {key} without one\n"


@pytest.mark.parametrize("key", ["hydra.sweep.dir", "hydra.sweep.subdir"])
def test_a_sweep_folder_named_with_a_reference_is_refused_before_its_jobs(tmp_path, key):
    """The job folders' name (``hydra.sweep.subdir``) too: the jobs were refused for "Interpolation
    key 'x' not found", which named no setting."""
    result = run_script("train.py", "-m", *TINY, "seed=1,2", f"{key}=sw/\\${{x}}", cwd=tmp_path)
    said = f"{key}=sw/${{x}} {REFERENCE}: pass a {key} without one"
    if key == "hydra.sweep.subdir":  # each job's folder
        jobs = [f"job {n} (seed_{n + 1}): {said}" for n in (0, 1)]
        said = "2 of 2 jobs cannot run, so none was started: " + " | ".join(jobs)
    assert result.returncode == 2 and stderr_lines(result) == [f"error: {said}"]
    assert list(tmp_path.iterdir()) == []


def test_a_run_folder_under_paths_runs_dir_names_that_setting_too(tmp_path, capsys):
    """``paths.runs_dir=<a file>/x``: the line named only hydra.run.dir, which the user had not
    given (Hydra names the run folder under paths.runs_dir)."""
    from multigpu.run.admission import run_folder_setting
    from multigpu.run.preflight import check_creatable_folder

    (tmp_path / "f").write_text("")
    runs_dir = str(tmp_path / "f" / "x")
    folder = tmp_path / "f" / "x" / "2026-11-28" / "run"
    assert run_folder_setting(tmp_path / "elsewhere", runs_dir) == "hydra.run.dir"
    named = run_folder_setting(folder, runs_dir)
    with pytest.raises(SystemExit) as stopped:
        check_creatable_folder(str(folder), "hydra.run.dir", False, named)
    assert stopped.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: cannot write {folder}: {tmp_path / 'f'} is a file")
    assert line.endswith(
        f"pass a writable hydra.run.dir, or a paths.runs_dir other than {runs_dir}, which holds it"
    )


@pytest.mark.parametrize(
    ("interval", "refused"),
    [
        (3, "evaluates every 3 of the 4 training batches of an epoch, so not after its last"),
        (0.75, "evaluates every 3 of the 4 training batches of an epoch, so not after its last"),
        (5, "is more than the 4 training batches of an epoch"),
        (5.0, "=5.0 is more than the 4 training batches of an epoch"),  # Lightning: a count
        (2.0, None),  # every 2 batches, as Lightning reads it
        ("3 +trainer.limit_train_batches=2.0", "=3 is more than the 2 training batches"),
        ("2 +trainer.limit_train_batches=3.0", "evaluates every 2 of the 3 training batches"),
        ("3 +trainer.fast_dev_run=true", None),  # Lightning evaluates a smoke run's batch
        (1, None),
        (2, None),
        (4, None),
        (0.5, None),
        (0.25, None),
        (1.0, None),
    ],
)
def test_an_evaluation_interval_that_misses_the_epochs_last_batch_is_refused(interval, refused):
    """Lightning evaluates every ``val_check_interval`` batches (a fraction: of the epoch's);
    one that does not divide the epoch's 4 batches never tests its last weights, and the epoch
    had been recorded with the accuracy of earlier ones."""
    from conftest import composed, resolve_on

    given, *more = str(interval).split()
    batches = ["data.batch_size=16", f"+trainer.val_check_interval={given}", *more]
    cfg = composed([*SYNTHETIC, *batches])
    if refused is None:
        resolve_on(cfg)
        return
    with pytest.raises(UserError) as error:
        resolve_on(cfg)
    assert refused in str(error.value) and str(error.value).endswith("or drop it")


def test_an_epoch_not_evaluated_after_its_last_batch_records_no_test_accuracy(
    tmp_path, monkeypatch
):
    """Whatever the settings let through (a duration's evaluation falls where time says), the
    record's test accuracy is of the weights at the epoch's end or none: here the settings'
    refusal is taken away, the epoch evaluated after its third batch of four, and its record
    holds no accuracy; evaluated after every second one, the accuracy eval.py measures on the
    checkpoint."""
    from conftest import CONF, compose_config
    from hydra import compose, initialize_config_dir

    from multigpu.config import settings
    from multigpu.run.evaluation import evaluate
    from multigpu.run.training import train

    monkeypatch.setattr(settings, "check_val_interval", lambda trainer, batches: None)
    for interval, run in ((3, tmp_path / "3"), (2, tmp_path / "2")):
        overrides = [*SYNTHETIC, "data.batch_size=16", f"+trainer.val_check_interval={interval}"]
        train(compose_config(overrides, run))
        record = json.loads((run / "metrics.json").read_text())
        assert record["status"] == "completed" and len(record["history"]) == 1
        if interval == 3:
            assert record["test_acc"] is None and record["history"][0]["test_acc"] is None
            continue
        checkpoint = run / "checkpoints" / "last.ckpt"
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            again = compose(
                "eval",
                overrides=[f"ckpt_path={checkpoint}", "data=synthetic", "data.num_test=32"]
                + ["trainer.accelerator=cpu", f"paths.output_dir={run}"],
                return_hydra_config=True,
            )
        assert record["test_acc"] == pytest.approx(evaluate(again)["test_acc"], abs=1e-6)


@pytest.mark.parametrize("accumulate", [1, 4])
def test_the_linear_rule_scales_by_the_images_of_an_update(accumulate):
    """An update that sums ``accumulate_grad_batches`` batches sees that many times the global
    batch: the linear rule had scaled the lr by one batch alone."""
    from conftest import composed, resolve_on

    rule = ["model.lr_scaling.rule=linear", "model.lr_scaling.base_batch=64"]
    added = [f"+trainer.accumulate_grad_batches={accumulate}"]
    run = resolve_on(composed([*SYNTHETIC, "data.batch_size=16", *rule, *added]))
    assert run.batch_size == 16 and run.lr == pytest.approx(0.1 * 16 * accumulate / 64)


def test_a_relative_data_path_under_chdir_is_judged_from_the_run_folder(tmp_path, monkeypatch):
    """Under ``hydra.job.chdir=true`` the job reads a relative ``data.source`` from its run
    folder: it had been judged from here, passed, and failed once the run folder and its
    record were written. Now refused first, saying so; an absolute one is taken."""
    from conftest import SHARED_DATA, compose_config

    from multigpu.config.settings import Machine
    from multigpu.run.admission import admit
    from multigpu.run.cli import hydra_runtime

    shutil.copytree(SHARED_DATA, tmp_path / "shared")
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "x"
    for source, refused in (("shared", True), (tmp_path / "shared", False)):
        overrides = ["trainer.accelerator=cpu", "hydra.job.chdir=true", f"data.source={source}"]
        cfg = compose_config([*overrides, f"data.root={tmp_path / 'root'}"], run)
        if not refused:
            admit(cfg, hydra_runtime(cfg)[0], Machine(0, CORES, {}, False), run)
            continue
        with pytest.raises(UserError) as error:
            admit(cfg, hydra_runtime(cfg)[0], Machine(0, CORES, {}, False), run)
        assert message(error.value).endswith(
            f"under hydra.job.chdir=true data.source=shared is a path from the run folder, {run}: "
            "give an absolute one"
        )
        assert not (tmp_path / "runs").exists()
    # The note names the setting the refusal is about: data.source=data_shared, not the
    # default data.root=data, whose folder's name begins the same.
    cfg = compose_config(["trainer.accelerator=cpu", "hydra.job.chdir=true", "data.source=data_x"])
    cfg.paths.output_dir = str(run)
    with pytest.raises(UserError) as error:
        admit(cfg, hydra_runtime(cfg)[0], Machine(0, CORES, {}, False), run)
    assert "; under hydra.job.chdir=true data.source=data_x is a path" in message(error.value)


def test_an_empty_checkpoint_folder_is_refused_before_anything(tmp_path, monkeypatch):
    """``callbacks.checkpoint.dirpath=''`` had written ``last.ckpt`` into the folder the command
    ran in, outside the run's, and said nothing of it."""
    from conftest import compose_config

    from multigpu.config.settings import Machine
    from multigpu.run.admission import admit
    from multigpu.run.cli import hydra_runtime

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    cfg = compose_config([*SYNTHETIC, "callbacks.checkpoint.dirpath=''"], run)
    with pytest.raises(UserError, match=r"^callbacks.checkpoint.dirpath='' names no folder: drop"):
        admit(cfg, hydra_runtime(cfg)[0], Machine(0, CORES, {}, False), run)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("per_device", [None, 8])
def test_a_null_batch_is_the_per_device_ones_to_make(per_device, tmp_path):
    """``data.batch_size=null data.batch_size_per_device=8`` had been refused as a type ("must
    be an integer, e.g. data.batch_size=256"), and that advice, followed, was refused as a
    batch not used. Null leaves the batch to the per-device one; alone, it is one line."""
    from conftest import compose_config, resolve_on

    from multigpu.config.settings import Machine
    from multigpu.run.admission import admit
    from multigpu.run.cli import hydra_runtime

    given = ["data.batch_size=null", f"data.batch_size_per_device={per_device or 'null'}"]
    cfg = compose_config([*SYNTHETIC, *given], tmp_path / "run")
    if per_device is None:
        with pytest.raises(UserError, match=r"^data.batch_size=null must be a positive integer"):
            resolve_on(cfg)
        return
    assert resolve_on(cfg).batch_size == per_device
    admit(cfg, hydra_runtime(cfg)[0], Machine(0, CORES, {}, False), tmp_path / "run")


def test_a_batch_ddp_cannot_split_names_a_strategy_that_keeps_it():
    """A resumed run keeps its batch: the only advice, another batch, had then been refused as
    a change of the run. The refusal names a strategy that splits any batch, which, followed,
    keeps it; on several nodes (where that strategy cannot run) it is not offered."""
    from conftest import composed, resolve_on

    ddp = ["data.batch_size=15", "trainer.devices=2"]
    with pytest.raises(UserError) as refused:
        resolve_on(composed([*SYNTHETIC, *ddp, "strategy=ddp"]))
    assert str(refused.value).endswith(
        "e.g. data.batch_size=16, or, to keep this batch (as a resume must), "
        "strategy=scatter_allreduce, whose replicas split any batch"
    )
    assert resolve_on(composed([*SYNTHETIC, *ddp, "strategy=scatter_allreduce"])).batch_size == 15
    from multigpu.config.settings import check_batch_divides

    with pytest.raises(UserError) as refused:
        check_batch_divides(15, 4, num_nodes=2)
    assert str(refused.value).endswith("e.g. data.batch_size=16")


@examples(200)
@given(
    batches=st.integers(1, 40),
    interval=st.one_of(
        st.integers(1, 50), st.floats(0.01, 1.0), st.sampled_from([1.0, 2.0, 3.0, 8.0])
    ),
    limit=st.one_of(st.none(), st.integers(1, 40), st.floats(0.05, 1.0), st.just(4.0)),
)
def test_an_interval_is_refused_exactly_where_the_epochs_last_batch_goes_untested(
    batches, interval, limit
):
    """A second computation, batch by batch as Lightning's loop goes: it evaluates after batch
    i (from 0) where (i + 1) is a multiple of its interval (a count; a fraction of the epoch's
    batches, at least 1; a whole float a count), over the batches the limit leaves."""
    from multigpu.config.settings import check_val_interval

    def count(value):  # Lightning's reading of a limit or an interval
        return int(value) if isinstance(value, int) or value > 1 else None

    trained = batches if limit is None else min(batches, count(limit) or int(batches * limit))
    assume(trained >= 1)  # no batch at all: check_batch_limits' refusal
    every = count(interval) or max(1, int(trained * interval))
    evaluated = [i for i in range(trained) if (i + 1) % every == 0]
    trainer = {"val_check_interval": interval}
    trainer |= {} if limit is None else {"limit_train_batches": limit}
    try:
        check_val_interval(trainer, batches)
    except UserError as refused:
        assert every > trained or trained - 1 not in evaluated, str(refused)
        return
    assert every <= trained and trained - 1 in evaluated
