"""A result is never silently wrong: a resume continues the same run or says why not, a
finished result is never overwritten or relabelled, a run folder has one owner, job folders
are unique. The invariants in-process, with generated inputs (Hypothesis); the named cases as
real ``train.py`` runs."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, TINY, compose_config, composed, examples, run_script, start_script
from hypothesis import given
from hypothesis import strategies as st

from multigpu.config.computation import computation, describe, differences, flatten
from multigpu.config.errors import Interrupted, OccupiedFolder, UserError
from multigpu.config.job_names import MAX_NAME, job_folder_name
from multigpu.run.resume import check_same_run, latest_of
from multigpu.storage.outcome import COMPLETED, Outcome
from multigpu.storage.ownership import acquire, is_free, release
from multigpu.storage.record import RunRecord, summarize

EXAMPLES = examples(40)
RUN = {"strategy": "single", "devices": 1, "batch_size": 8, "lr": 0.1}
SYNTHETIC = [*TINY, "data=synthetic", "data.num_train=64", "data.num_test=32"]

# Values as JSON keeps them, and settings as flat mappings of dotted keys.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, width=32),
    st.text(max_size=12),
)
keys = st.lists(st.sampled_from("abcde"), min_size=1, max_size=3).map(".".join)
flat_settings = st.dictionaries(keys, scalars, max_size=6).filter(
    lambda d: not any(k.startswith(f"{o}.") for k in d for o in d)  # as flatten makes them
)


# What a run computes ---------------------------------------------------------------------------
def settings_of(*overrides: str, folder: Path = Path("/tmp/x")) -> dict:
    from conftest import resolve_on

    cfg = composed([*TINY, *overrides], folder)
    return computation(cfg, resolve_on(cfg))


ALONGSIDE = {"trainer.devices=2": ["strategy=scatter_allreduce"]}  # what the override needs


@pytest.mark.slow  # whole runs, 7-11 s: the default suite's 5 minutes; CI runs the slow suite
def test_settings_ignore_where_and_how_but_count_what_changes_the_math():
    base = settings_of()
    for same in (
        "data.num_workers=1",
        "data.pipeline=memory",
        "strategy=scatter_allreduce",
        "trainer.devices=2",
        "trainer.max_epochs=7",
        "phases=true",
        "logger=csv",
        "data.root=/elsewhere",
    ):
        overrides = [same, *ALONGSIDE.get(same, [])]
        assert differences(base, settings_of(*overrides)) == {}, same
    wide = settings_of("model.net.width=8")  # NHWC on a CPU needs 8: settings.check_channels_last
    assert differences(wide, settings_of("model.net.width=8", "model.channels_last=true")) == {}
    for changed, key in (
        ("model.optimizer.lr=0.2", "model.optimizer.lr"),
        ("model.optimizer.momentum=0.9", "model.optimizer.momentum"),
        ("data.train_subset=100", "data.train_subset"),
        ("data.batch_size=128", "data.batch_size"),
        ("seed=3", "seed"),
        ("model.net.width=8", "model.net.width"),
        ("+trainer.gradient_clip_val=1.0", "trainer.gradient_clip_val"),
        ("trainer.precision=bf16-mixed", "trainer.precision"),
        ("+model/scheduler=cosine", "model.scheduler"),
        ("float32_matmul_precision=highest", "float32_matmul_precision"),
    ):
        assert key in differences(base, settings_of(changed)), changed


def test_settings_recorded_before_the_matmul_precision_existed_still_match():
    """A record or checkpoint without ``float32_matmul_precision`` counts as its default
    (``high``), as every key added later does; another value is a difference by name."""
    current = settings_of()
    assert current["float32_matmul_precision"] == "high"
    older = {k: v for k, v in current.items() if k != "float32_matmul_precision"}
    assert differences(older, current) == {} and differences(current, older) == {}
    exact = settings_of("float32_matmul_precision=highest")
    assert differences(older, exact) == {"float32_matmul_precision": ("high", "highest")}


def test_the_global_batch_and_the_scaled_lr_count_as_resolved():
    per_device = ["data.batch_size_per_device=64", "strategy=scatter_allreduce"]
    one, two = settings_of(*per_device), settings_of(*per_device, "trainer.devices=2")
    assert differences(one, two)["data.batch_size"] == (64, 128)
    linear = ["model.lr_scaling.rule=linear", "data.batch_size=512"]
    assert settings_of(*linear)["model.optimizer.lr"] == pytest.approx(0.2)


@EXAMPLES
@given(flat_settings, flat_settings)
def test_differences_are_those_of_shared_keys_or_of_a_value_against_a_node(saved, current):
    changed = differences(saved, current)
    assert differences(saved, saved) == {}
    assert set(differences(current, saved)) == set(changed)
    for key, (old, new) in changed.items():
        assert key in saved or key in current
        assert old != new or type(old) is not type(new)
    for key in set(saved) & set(current):
        if key not in changed:
            assert json.dumps(saved[key]) == json.dumps(current[key]) or saved[key] == current[key]
    assert "\n" not in describe(changed)


@EXAMPLES
@given(
    flat_settings,
    st.sampled_from(["all", "weights"]),
    st.lists(st.sampled_from(["model", "model.weight_decay_on", "a", "a.b"]), max_size=3),
)
def test_a_setting_a_resume_keeps_is_refused_whatever_resume_changes_allows(
    others, grouped, allowed
):
    """``KEPT_ON_RESUME`` (the optimizer's grouping): a difference is one line naming
    ``init_from``, never a ``resume_changes`` that could not allow it."""
    other = "weights" if grouped == "all" else "all"
    saved = {**others, "model.weight_decay_on": grouped, "model.x": 1}
    current = {**others, "model.weight_decay_on": other, "model.x": 1}
    with pytest.raises(UserError) as error:
        check_same_run(Path("x.ckpt"), saved, current, allowed)
    text = str(error.value)
    assert "a resume keeps model.weight_decay_on" in text and "init_from=x.ckpt" in text
    assert "resume_changes" not in text and "\n" not in text


def test_a_scheduler_added_is_a_difference_though_its_keys_are_new():
    saved = flatten({"model": {"scheduler": None, "net": {"width": 4}}})
    current = flatten({"model": {"scheduler": {"T_max": 5}, "net": {"width": 4}}})
    assert list(differences(saved, current)) == ["model.scheduler"]


def test_settings_saved_before_the_model_module_moved_still_match():
    """Records and checkpoints of earlier versions name the model by its former module,
    ``multigpu.module``: the same class, so they resume and compare as the same run."""
    current = settings_of()
    assert current["model._target_"] == "multigpu.models.ImageClassifier"
    saved = {**current, "model._target_": "multigpu.module.ImageClassifier"}
    assert differences(saved, current) == {} and differences(current, saved) == {}
    assert check_same_run(Path("x.ckpt"), saved, current, []) == {}
    other = {**current, "model._target_": "elsewhere.ImageClassifier"}
    assert list(differences(other, current)) == ["model._target_"]


# Resume checks ----------------------------------------------------------------------------------
@EXAMPLES
@given(flat_settings, flat_settings, st.lists(keys, max_size=3))
def test_a_resume_is_refused_by_name_unless_every_difference_is_allowed(saved, current, allowed):
    changed = differences(saved, current)

    def covered(key: str) -> bool:
        return any(key == a or key.startswith(f"{a}.") for a in allowed)

    refused = [k for k in changed if not covered(k)]
    names = set(saved) | set(current)
    unknown = [a for a in allowed if not any(k == a or k.startswith(f"{a}.") for k in names)]
    if unknown:  # a misspelt key allows nothing: refused, naming it
        with pytest.raises(UserError, match=f"resume_changes names {unknown[0]}, which is not"):
            check_same_run(Path("x.ckpt"), saved, current, allowed)
    elif refused:
        with pytest.raises(UserError) as error:
            check_same_run(Path("x.ckpt"), saved, current, allowed)
        text, suggested = str(error.value), [*allowed, *refused]  # those allowed are kept
        assert "\n" not in text and f"resume_changes=[{','.join(suggested)}]" in text
        assert "init_from=x.ckpt" in text
        # Pasted back, the list resumes: seed and data.seed (${seed}) had each asked for the other.
        assert check_same_run(Path("x.ckpt"), saved, current, suggested) == changed
    else:
        assert check_same_run(Path("x.ckpt"), saved, current, allowed) == changed


def test_resume_changes_naming_no_setting_is_refused_with_the_closest():
    saved = {"model.scheduler.T_max": 2, "model.optimizer.lr": 0.1}
    with pytest.raises(
        UserError,
        match=r"resume_changes names model.scheduler.Tmax, which is "
        r"not a setting of this run: did you mean model.scheduler.T_max\?",
    ):
        check_same_run(Path("x.ckpt"), saved, {**saved, "model.scheduler.T_max": 4},
                       ["model.scheduler.Tmax"])  # fmt: skip


@pytest.mark.parametrize("name", ["trainer.devices", "data.root", "strategy", "strategy.timeout_s"])
def test_resume_changes_naming_what_does_not_change_the_math_says_so(name):
    """Such a key may change on a resume anyway: the line says that, not "did you mean"."""
    saved = {"model.optimizer.lr": 0.1}
    with pytest.raises(UserError, match=f"resume_changes names {name}, which does not change"):
        check_same_run(Path("x.ckpt"), saved, saved, [name])


def write_run(folder: Path, settings: dict, mtime: float) -> Path:
    (folder / "checkpoints").mkdir(parents=True)
    last = folder / "checkpoints" / "last.ckpt"
    last.write_bytes(b"checkpoint")
    record = summarize([{"epoch": 1}], RUN, settings=settings)  # completed: an epoch trained
    (folder / "metrics.json").write_text(json.dumps({**record, "status": "completed"}))
    os.utime(last, (mtime, mtime))
    return last


@EXAMPLES
@given(st.lists(st.sampled_from([{"lr": 0.1}, {"lr": 0.2}, {"lr": 0.1, "w": 4}]), max_size=5))
def test_latest_is_the_newest_checkpoint_of_the_same_settings(tmp_path_factory, runs):
    root = tmp_path_factory.mktemp("runs")
    paths = [write_run(root / str(i), s, 1_000_000 + i) for i, s in enumerate(runs)]
    wanted = {"lr": 0.1}
    same = [p for p, s in zip(paths, runs, strict=True) if not differences(s, wanted)]
    if same:
        assert latest_of(root, wanted, []) == same[-1]
    else:
        with pytest.raises(UserError) as error:
            latest_of(root, wanted, [])
        assert "\n" not in str(error.value)
        if paths:
            assert f"the newest is {paths[-1]}" in str(error.value)


# Run folders ------------------------------------------------------------------------------------
def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


records = st.one_of(
    st.fixed_dictionaries(
        {
            "status": st.sampled_from(["running", "completed", "diverged", "failed", "x"]),
            "settings": st.one_of(st.none(), st.just("SAME"), flat_settings),
            "epochs": st.one_of(st.integers(0, 5), st.text(max_size=3)),
            "history": st.one_of(st.just([]), st.lists(st.dictionaries(keys, scalars))),
        }
    ).map(lambda changes: json.dumps({**summarize([], RUN), **changes})),
    st.text(max_size=50),
    st.binary(max_size=50).map(lambda b: b.decode("latin-1")),
)


@EXAMPLES
@given(records, st.booleans())
def test_a_folder_is_taken_over_only_by_the_same_run_and_a_refusal_touches_nothing(
    tmp_path_factory, record, with_checkpoint
):
    from multigpu.config.settings import Machine
    from multigpu.run.admission import admit
    from multigpu.run.cli import hydra_runtime

    folder = tmp_path_factory.mktemp("run")
    cfg = composed([*SYNTHETIC, "trainer.max_epochs=3"], folder)
    from conftest import resolve_on

    same = computation(cfg, resolve_on(cfg))
    (folder / "metrics.json").write_text(record.replace('"SAME"', json.dumps(same)))
    if with_checkpoint:
        (folder / "checkpoints").mkdir()
        (folder / "checkpoints" / "last.ckpt").write_bytes(b"x")
    before = snapshot(folder)
    try:
        admission = admit(cfg, hydra_runtime(cfg)[0], Machine(0, 2, {}, False), folder)
    except UserError as error:
        assert "\n" not in str(error) and str(folder) in str(error)
    else:
        previous = json.loads(record.replace('"SAME"', json.dumps(same)))
        assert differences(previous["settings"], same) == {}  # only the same run
        if admission.finished is not None:
            assert previous["status"] in ("completed", "diverged")
        assert admission.continued == (
            folder / "checkpoints" / "last.ckpt" if with_checkpoint and not admission.finished
            else None
        )  # fmt: skip
        if admission.continued is None and admission.finished is None:  # started anew
            assert not (isinstance(previous.get("history"), list) and previous["history"])
    assert snapshot(folder) == before


@EXAMPLES
@given(
    st.lists(
        st.sampled_from(["epoch", "finish_completed", "finish_failed", "foreign", "end_on_disk"]),
        max_size=8,
    )
)
def test_a_record_moves_forward_only_and_only_by_its_own_run(tmp_path_factory, operations):
    path = tmp_path_factory.mktemp("run") / "metrics.json"
    record = RunRecord(path, {"strategy": "single"}, settings={"a": 1})
    record.claim([])
    ended = foreign = False
    for operation in operations:
        before = path.read_text()
        if operation == "epoch":
            record.add_epoch({"epoch": len(record.history) + 1, "test_acc": 0.5})
        elif operation.startswith("finish"):
            status = operation.split("_")[1]
            record.finish(COMPLETED if status == "completed" else Outcome(status, "why", 1))
        elif operation == "foreign":  # another run's record put there by hand
            path.write_text(json.dumps({"status": "running", "run_id": "other", "epochs": 9}))
            foreign, before = True, path.read_text()
        else:  # the record on disk ended by someone else
            on_disk = json.loads(path.read_text())
            path.write_text(json.dumps({**on_disk, "status": "failed"}))
            before = path.read_text()
        after = json.loads(path.read_text())
        if foreign or ended:
            assert path.read_text() == before  # never overwritten
        if after.get("status") != "running":
            ended = True
    final = json.loads(path.read_text())
    assert final["status"] in ("running", "completed", "failed")


@pytest.mark.parametrize("before", [0, 2])
def test_a_run_that_trained_no_epoch_is_not_completed(tmp_path, before):
    """However Lightning came to train nothing (a spent +trainer.max_time, no batch), the
    record cannot end ``completed``: only a run whose history grew is."""
    from multigpu.run.training import check_trained

    record = RunRecord(tmp_path / "metrics.json", {"strategy": "single"}, settings={"a": 1})
    history = [{"epoch": e + 1, "test_acc": 0.5} for e in range(before)]
    record.claim(history)
    with pytest.raises(UserError, match="no epoch was trained"):
        check_trained(record)
    record.add_epoch({"epoch": before + 1, "test_acc": 0.6})
    check_trained(record)  # one epoch more: trained


@pytest.mark.parametrize("status", ["interrupted", "failed", "running"])
def test_an_unfinished_folder_holding_max_epochs_is_a_notice_not_a_new_ending(tmp_path, status):
    """Run again with a ``trainer.max_epochs`` its checkpoint already holds: nothing to train,
    said in one notice, and the folder as it was (not relabelled ``failed`` or ``completed``)."""
    from multigpu.config.errors import NothingToDo
    from multigpu.config.settings import Machine
    from multigpu.run.admission import admit
    from multigpu.run.cli import hydra_runtime

    cfg = compose_config([*SYNTHETIC, "trainer.max_epochs=1"], tmp_path)
    choices = hydra_runtime(cfg)[0]
    first = admit(cfg, choices, Machine(0, 2, {}, False), tmp_path)
    record = RunRecord(tmp_path / "metrics.json", first.run.record(), settings=first.settings)
    record.claim([])
    record.add_epoch({"epoch": 1, "test_acc": 0.5, "train_loss": 1.0})
    if status != "running":
        record.finish(Outcome(status, "stopped", 1))
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"epoch 1's")
    before = snapshot(tmp_path)
    with pytest.raises(NothingToDo, match=f"holds this run, {status} after 1 epoch"):
        admit(cfg, choices, Machine(0, 2, {}, False), tmp_path)
    assert snapshot(tmp_path) == before
    # With more epochs to train it is continued from its last.ckpt, which is read first (of
    # the run its record holds): this one, no checkpoint at all, is refused, the folder as it was.
    more = compose_config([*SYNTHETIC, "trainer.max_epochs=2"], tmp_path)
    own = r"checkpoints/last.ckpt, the checkpoint this run folder continues, is not a checkpoint"
    with pytest.raises(UserError, match=own):
        admit(more, choices, Machine(0, 2, {}, False), tmp_path)
    assert snapshot(tmp_path) == before


def test_a_folder_with_a_checkpoint_but_no_record_is_not_taken_over(tmp_path):
    from multigpu.config.settings import Machine
    from multigpu.run.admission import admit
    from multigpu.run.cli import hydra_runtime

    cfg = compose_config(SYNTHETIC, tmp_path)
    (tmp_path / ".hydra").mkdir()  # what Hydra writes first is no run's
    (tmp_path / "train.log").write_text("")
    admit(cfg, hydra_runtime(cfg)[0], Machine(0, 2, {}, False), tmp_path)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"x")
    before = snapshot(tmp_path)
    last = tmp_path / "checkpoints" / "last.ckpt"
    held = f"{tmp_path} holds checkpoints/last.ckpt but no metrics.json: it is left as it is; "
    held += f"pass another hydra.run.dir (with ckpt_path={last} to resume it there)"
    with pytest.raises(OccupiedFolder) as refused:
        admit(cfg, hydra_runtime(cfg)[0], Machine(0, 2, {}, False), tmp_path)
    assert str(refused.value) == held
    # The resume in this same folder is refused alike: the advice names another folder.
    resumed = compose_config([*SYNTHETIC, f"ckpt_path={last}"], tmp_path)
    with pytest.raises(OccupiedFolder, match="but no metrics.json: it is left as it is"):
        admit(resumed, hydra_runtime(resumed)[0], Machine(0, 2, {}, False), tmp_path)
    assert snapshot(tmp_path) == before


# Folder ownership -------------------------------------------------------------------------------
HOLD = (
    "import sys, time; from multigpu.storage.ownership import acquire; acquire(sys.argv[1]); "
    "time.sleep(60)"
)


def test_a_folder_is_owned_until_its_process_dies_even_by_sigkill(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)])
    try:
        deadline = time.monotonic() + 20
        while is_free(tmp_path):
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.05)
        with pytest.raises(OccupiedFolder, match=f"in use by another run \\(pid {holder.pid}\\)"):
            acquire(tmp_path)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert is_free(tmp_path)
    assert acquire(tmp_path) is True
    release(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == []  # no lock file left


# One spelling per folder: a folder compared, locked or written is its canonical path, however
# the command line spelt it (relative, through a link, with ``~``, ``.`` or ``..``, a trailing
# ``/``), whether it exists yet or not.
spellings = st.fixed_dictionaries(
    {
        "start": st.sampled_from(["absolute", "link", "relative", "home", "home_link"]),
        "detours": st.lists(st.sampled_from(["dot", "up_and_back"]), max_size=2),
        "trailing_slash": st.booleans(),
        "exists": st.booleans(),
    }
)


@contextlib.contextmanager
def spelling_place(base: Path) -> Iterator[Path]:
    """``base/real`` as the working folder, ``base/link`` a link to it, ``$HOME`` ``base``:
    yields the working folder (every spelling names a folder under it)."""
    real, link = base / "real", base / "link"
    real.mkdir(exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(real)
    cwd, home = os.getcwd(), os.environ.get("HOME")
    os.chdir(real)
    os.environ["HOME"] = str(base)
    try:
        yield real
    finally:
        os.chdir(cwd)
        if home is None:
            os.environ.pop("HOME")
        else:
            os.environ["HOME"] = home


def spelt(folder: Path, real: Path, how: dict) -> str:
    """``folder`` (under ``real``, the working folder) as ``how`` writes it."""
    inside = folder.relative_to(real)
    start = {
        "absolute": str(real),
        "link": str(real.parent / "link"),
        "relative": ".",
        "home": "~/real",
        "home_link": "~/link",
    }[how["start"]]
    parts = list(inside.parts)
    for detour in how["detours"]:  # "./" or "outputs/../outputs" after the first part
        parts[1:1] = ["."] if detour == "dot" else ["..", parts[0]]
    return "/".join([start, *parts]) + ("/" if how["trailing_slash"] else "")


@EXAMPLES
@given(spellings, spellings)
def test_every_spelling_of_a_folder_is_one_folder_with_one_owner(tmp_path_factory, a, b):
    from multigpu.storage.ownership import is_held
    from multigpu.storage.paths import canonical

    base = tmp_path_factory.mktemp("spelt")
    with spelling_place(base) as real:
        folder = real / "outputs" / "run"
        if a["exists"]:
            folder.mkdir(parents=True)
        first, second = spelt(folder, real, a), spelt(folder, real, b)
        assert canonical(first) == canonical(second) == folder
        assert acquire(first) is True
        try:
            assert is_held(second) and is_free(second)  # this process's, not another's
            assert acquire(second) is False  # already owned: not "in use by another run"
        finally:
            release(second)
        assert not is_held(first)


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_runs_dir_spelt_through_its_parent_is_the_default_place(tmp_path):
    """``paths.runs_dir=../here/outputs`` run from ``here``: every run had been refused as "in
    use by another run (pid <its own>)", leaving ``.hydra/`` and ``train.log`` behind."""
    here = tmp_path / "here"
    here.mkdir()
    result = run_script("train.py", *SYNTHETIC, "paths.runs_dir=../here/outputs", cwd=here)
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = runs(here)
    assert json.loads((run / "metrics.json").read_text())["status"] == "completed"
    assert (run / "checkpoints" / "last.ckpt").is_file()


# Every folder a run writes in has one owner ------------------------------------------------------
@examples(8)  # each example starts the process that owns the folder
@given(st.sampled_from(["run", "checkpoints"]), st.booleans(), spellings)
def test_a_folder_another_process_owns_is_refused_by_name_and_folder(
    tmp_path_factory, held, inside, how
):
    """The run folder and the checkpoint folder (``callbacks.checkpoint.dirpath``, inside the
    run folder or anywhere, spelt any way): while another process owns one, the run is refused
    in one line naming the folder and the setting; nothing is written."""
    from multigpu.config.settings import Machine
    from multigpu.run.admission import admit
    from multigpu.run.cli import hydra_runtime

    base = tmp_path_factory.mktemp("owned")
    with spelling_place(base) as real:
        run = real / "run"
        checkpoints = run / "checkpoints" if inside else real / "elsewhere" / "ck"
        target = run if held == "run" else checkpoints
        target.mkdir(parents=True)
        dirpath = spelt(checkpoints, real, {**how, "exists": True})
        quoted = f"callbacks.checkpoint.dirpath='{dirpath}'"  # Hydra's grammar takes ~ quoted
        cfg = compose_config([*SYNTHETIC, quoted], run)
        before = {p: snapshot(p) for p in (run, checkpoints) if p.is_dir()}
        with owned_elsewhere(target):
            with pytest.raises(OccupiedFolder) as refused:
                admit(cfg, hydra_runtime(cfg)[0], Machine(0, 2, {}, False), run)
        said = str(refused.value)
        assert f"{target}" in said and "is in use by another run" in said and "\n" not in said
        key = "hydra.run.dir" if held == "run" else "callbacks.checkpoint.dirpath"
        assert said.endswith(f"or pass another {key}")
        assert {p: snapshot(p) for p in before} == before
        admission = admit(cfg, hydra_runtime(cfg)[0], Machine(0, 2, {}, False), run)
        assert sorted(admission.folders.values()) == sorted({run, checkpoints})


@contextlib.contextmanager
def owned_elsewhere(folder: Path) -> Iterator[None]:
    """``folder`` locked as another process's run holds it (a lock of its own open file, which
    this process's ownership does not know)."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(descriptor)


@pytest.mark.slow
@EXAMPLES
@given(
    st.lists(st.sampled_from(["last.ckpt", "previous.ckpt", "notes.txt"]), unique=True),
    st.sampled_from(["new", "same_run_unfinished", "other_run"]),
)
def test_a_checkpoint_folder_holding_another_runs_checkpoints_is_refused(
    tmp_path_factory, two_epochs, files, folder_holds
):
    """A checkpoint folder outside the run folder that holds checkpoints is refused unless the
    run continues its own folder's run from them (a real checkpoint: admission reads the one it
    continues); other files are no run's."""
    from multigpu.config.settings import Machine
    from multigpu.run.admission import admit
    from multigpu.run.cli import hydra_runtime

    base = tmp_path_factory.mktemp("shared")
    run, checkpoints = base / "run", base / "ck"
    cfg = compose_config([*SYNTHETIC, f"callbacks.checkpoint.dirpath={checkpoints}"], run)
    checkpoints.mkdir()
    for name in files:
        continued = name == "last.ckpt" and folder_holds == "same_run_unfinished"
        (checkpoints / name).write_bytes(two_epochs.read_bytes() if continued else b"x")
    if folder_holds != "new":
        from conftest import resolve_on

        resolved = resolve_on(cfg)
        settings, ran = computation(cfg, resolved), resolved.record()
        if folder_holds == "other_run":  # the record agrees with itself: run and settings
            settings, ran = {**settings, "seed": 7}, {**ran, "seed": 7}
        run.mkdir()
        (run / "metrics.json").write_text(json.dumps({**summarize([], ran, settings=settings)}))
    before = snapshot(base)
    continues = folder_holds == "same_run_unfinished" and "last.ckpt" in files
    has_checkpoints = any(name.endswith(".ckpt") for name in files)
    refusal_due = folder_holds == "other_run" or (has_checkpoints and not continues)
    try:
        admission = admit(cfg, hydra_runtime(cfg)[0], Machine(0, 2, {}, False), run)
    except OccupiedFolder as refused:
        said = str(refused)
        assert refusal_due and "\n" not in said, said
        if folder_holds != "other_run":  # that one: "holds a run with other settings"
            assert said.startswith(
                f"{checkpoints} (callbacks.checkpoint.dirpath) holds another run's checkpoints"
            )
        assert snapshot(base) == before
        return
    assert not refusal_due
    assert admission.continued == (checkpoints / "last.ckpt" if continues else None)


@pytest.mark.slow
@pytest.mark.subprocess
def test_two_runs_given_one_checkpoint_folder_the_second_is_refused(tmp_path):
    """``callbacks.checkpoint.dirpath=/tmp/ck`` given to two runs: the second had overwritten
    the first's ``last.ckpt``."""
    checkpoints = tmp_path / "ck"
    first = tiny_run(tmp_path, f"callbacks.checkpoint.dirpath={checkpoints}")
    assert first.returncode == 0, first.stderr[-3000:]
    before = snapshot(checkpoints)
    second = tiny_run(tmp_path, f"callbacks.checkpoint.dirpath={checkpoints}", "seed=7")
    assert second.returncode == 2, second.stderr[-3000:]
    (line,) = second.stderr.strip().splitlines()
    assert line.startswith(
        f"error: {checkpoints} (callbacks.checkpoint.dirpath) holds another run's checkpoints "
        "(last.ckpt): they are left as they are; pass another callbacks.checkpoint.dirpath"
    )
    assert snapshot(checkpoints) == before and len(runs(tmp_path)) == 1


@pytest.mark.subprocess
def test_a_sweep_whose_jobs_share_a_checkpoint_folder_is_refused_whole(tmp_path):
    checkpoints = tmp_path / "ck"
    sweep = tiny_run(
        tmp_path, "-m", "model.optimizer.lr=0.1,0.2", f"callbacks.checkpoint.dirpath={checkpoints}"
    )
    assert sweep.returncode == 2, sweep.stderr[-3000:]
    (line,) = sweep.stderr.strip().splitlines()
    assert line == (
        f"error: 2 of 2 jobs cannot run, so none was started: jobs 0 and 1 would share the "
        f"folder {checkpoints} (callbacks.checkpoint.dirpath); give each job its own"
    )
    assert not checkpoints.exists() and not (tmp_path / "outputs").exists()


# Job folders ------------------------------------------------------------------------------------
values = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=400
)


def check_names(a: str, b: str) -> None:
    name_a = job_folder_name([f"data.root={a}"], ["data.root"], 0)
    name_b = job_folder_name([f"data.root={b}"], ["data.root"], 1)
    assert (name_a == name_b) == (a == b)
    for name in (name_a, name_b):
        assert "/" not in name and len(name.encode()) <= MAX_NAME


@EXAMPLES
@given(values, values)
def test_job_folder_names_are_one_to_one_and_fit_the_file_system(a, b):
    check_names(a, b)


def test_the_named_job_folder_cases():
    check_names("/x/c_d", "/x/c/d")
    check_names("a" * 300, "a" * 300 + "b")


# The named cases, as real runs -----------------------------------------------------------------
def tiny_run(tmp_path: Path, *overrides: str, **kwargs):
    flags = [o for o in overrides if o.startswith("-")]  # -m first, as argparse wants
    rest = [o for o in overrides if not o.startswith("-")]
    return run_script("train.py", *flags, *SYNTHETIC, *rest, cwd=tmp_path, **kwargs)


def runs(tmp_path: Path) -> list[Path]:
    return sorted(p.parent for p in (tmp_path / "outputs").rglob("metrics.json"))


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_sweep_resuming_latest_is_refused_whole_when_a_job_has_no_checkpoint_of_its_own(
    tmp_path,
):
    first = tiny_run(tmp_path, "model.optimizer.lr=0.1")
    assert first.returncode == 0, first.stderr[-3000:]
    (earlier,) = runs(tmp_path)
    before = snapshot(earlier)
    sweep = tiny_run(
        tmp_path, "-m", "trainer.max_epochs=2", "model.optimizer.lr=0.1,0.2", "ckpt_path=latest"
    )
    assert sweep.returncode == 2
    (line,) = sweep.stderr.strip().splitlines()
    assert line.startswith("error: 1 of 2 jobs cannot run, so none was started: job 1 (lr_0.2)")
    assert "model.optimizer.lr=0.1 there, 0.2 here" in line
    assert not (tmp_path / "outputs" / "multirun").exists() and snapshot(earlier) == before

    resumed = tiny_run(tmp_path, "trainer.max_epochs=2", "ckpt_path=latest")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    (new,) = [r for r in runs(tmp_path) if r != earlier]
    record = json.loads((new / "metrics.json").read_text())
    assert [h["epoch"] for h in record["history"]] == [1, 2]
    assert [h["lr"] for h in record["history"]] == pytest.approx([0.1, 0.1])
    # found under the relative runs folder (outputs), recorded as the file it is from anywhere
    assert record["resumed_from"]["checkpoint"] == str(earlier / "checkpoints" / "last.ckpt")
    assert snapshot(earlier) == before

    # Nothing to train: a notice, exit 0, nothing written.
    done = tiny_run(tmp_path, "trainer.max_epochs=2", f"ckpt_path={new}/checkpoints/last.ckpt")
    assert done.returncode == 0 and "nothing to train" in done.stderr
    assert len(runs(tmp_path)) == 2 and len(list((tmp_path / "outputs").rglob(".hydra"))) == 2


@pytest.mark.slow  # five runs in a row
@pytest.mark.subprocess
def test_init_from_starts_a_new_run_from_the_weights_with_its_own_settings(tmp_path):
    first = tiny_run(tmp_path, "model.optimizer.lr=0.1")
    assert first.returncode == 0, first.stderr[-3000:]
    (earlier,) = runs(tmp_path)
    last = earlier / "checkpoints" / "last.ckpt"
    refused = tiny_run(tmp_path, "model.optimizer.lr=0.3", f"ckpt_path={last}")
    assert refused.returncode == 2
    assert (
        f"pass resume_changes=[model.optimizer.lr] to change it deliberately, or init_from={last}"
        " instead of ckpt_path to start a new run from its weights" in (refused.stderr)
    )
    for mismatch in ([f"init_from={last}"], [f"ckpt_path={last}", "resume_changes=[model]"]):
        other_width = tiny_run(tmp_path, "model.net.width=5", "trainer.max_epochs=2", *mismatch)
        assert other_width.returncode == 2 and len(runs(tmp_path)) == 1  # nothing written
        key = mismatch[0].split("=")[0]
        assert f"error: {key}={last} does not fit this network" in other_width.stderr
    started = tiny_run(tmp_path, "model.optimizer.lr=0.3", f"init_from={last}")
    assert started.returncode == 0, started.stderr[-3000:]
    (new,) = [r for r in runs(tmp_path) if r != earlier]
    record = json.loads((new / "metrics.json").read_text())
    assert record["init_from"] == str(last) and record["resumed_from"] is None
    assert [h["epoch"] for h in record["history"]] == [1]
    assert record["history"][0]["lr"] == pytest.approx(0.3)


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_finished_run_folder_is_never_overwritten_or_relabelled(tmp_path):
    folder = tmp_path / "run"
    first = tiny_run(tmp_path, f"hydra.run.dir={folder}")
    assert first.returncode == 0, first.stderr[-3000:]
    before = snapshot(folder)
    said = {}
    for overrides, status, text in (
        (["model.net.width=0"], 2, "model.net.width=0 must be a positive integer"),
        (["model.net.width=5"], 2, f"{folder} holds a run with other settings"),
        (["trainer.max_epochs=3"], 2, "a finished result is not trained further in place"),
        ([], 0, f"{folder} already holds this run, completed after 1 epoch(s)"),
    ):
        again = tiny_run(tmp_path, f"hydra.run.dir={folder}", *overrides)
        assert again.returncode == status, again.stderr[-2000:]
        (said[text],) = again.stderr.strip().splitlines()
        assert text in said[text] and "Traceback" not in again.stderr
        assert snapshot(folder) == before  # record, config, checkpoint, events: all as they were
    # The advice to train further, followed: the same command had been refused again.
    advised = f"ckpt_path={folder / 'checkpoints' / 'last.ckpt'} trainer.max_epochs=3"
    line = said["a finished result is not trained further in place"]
    assert f"{advised}, and another hydra.run.dir or none" in line
    more = tiny_run(tmp_path, *advised.split())
    assert more.returncode == 0, more.stderr[-2000:]
    assert snapshot(folder) == before


@pytest.mark.slow
@pytest.mark.subprocess
def test_two_runs_in_one_folder_at_once_the_second_is_refused(tmp_path):
    folder = tmp_path / "run"
    env = {"PYTHONPATH": str(REPO / "tests"), "MULTIGPU_DATA": "unused"}
    slow = [*SYNTHETIC, "+callbacks.slow._target_=probes.SlowAfterEpoch"]
    slow += ["+callbacks.slow.epoch=0", "+callbacks.slow.seconds=2", "data.batch_size=8"]
    slow += [f"hydra.run.dir={folder}"]
    first = start_script("train.py", *slow, cwd=tmp_path, env=env)
    try:
        deadline = time.monotonic() + 120
        while not (folder / "metrics.json").is_file():
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        second = tiny_run(tmp_path, f"hydra.run.dir={folder}")
        assert second.returncode == 2
        (line,) = second.stderr.strip().splitlines()
        assert line == (
            f"error: {folder} is in use by another run (pid {first.pid}): wait for it to end, "
            "or pass another hydra.run.dir"
        )
    finally:
        first.terminate()
        first.communicate(timeout=60)
    record = json.loads((folder / "metrics.json").read_text())
    assert record["status"] == "interrupted"


@pytest.mark.slow
@pytest.mark.subprocess
def test_sigterm_while_the_data_is_unpacked_is_recorded_and_leaves_no_partial_file(
    tmp_path, shared_data
):
    """Before Lightning's fit has a handler of its own: the run ends interrupted (143), says so
    in one line, its record says so, and the file being unpacked is not left half-written."""
    data = tmp_path / "data"
    command = [sys.executable, str(REPO / "train.py"), *TINY, f"data.root={data}"]
    command += [f"data.source={shared_data}", "hydra.run.dir=run"]
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    run = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(data.rglob("*.partial")):
        assert run.poll() is None and time.monotonic() < deadline, run.stderr.read()[-2000:]
        time.sleep(0.005)
    run.terminate()
    said = run.stderr.read()
    assert run.wait(timeout=60) == 143, said[-2000:]
    reason = "interrupted by SIGTERM; no checkpoint was written yet, so there is none to resume"
    reason += ": run the command again"
    assert said.strip().splitlines()[-1] == f"error: {reason}"
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert record["status"] == "interrupted" and record["reason"] == reason
    assert not list(tmp_path.rglob("*.partial"))


@pytest.mark.parametrize("folder", ["/", "..", "../.."])
def test_a_run_folder_above_the_working_folder_is_refused(folder, tmp_path, monkeypatch, capsys):
    """``hydra.run.dir=/`` would spread a run's files among the system's."""
    from multigpu.run.preflight import check_creatable_folder

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit:
        check_creatable_folder(folder, "hydra.run.dir")
    assert exit.value.code == 2
    said = capsys.readouterr().err
    assert said.startswith(f"error: hydra.run.dir={folder} is a folder above the one this")
    check_creatable_folder(str(tmp_path / "run"), "hydra.run.dir")  # a new folder: fine


def test_a_resume_at_max_steps_is_a_notice_and_writes_nothing(tmp_path):
    """A checkpoint that holds ``trainer.max_steps`` steps has nothing left to train, whatever
    its epochs: a notice, not a new ``completed`` run of no steps."""
    from multigpu.config.errors import NothingToDo
    from multigpu.config.settings import Machine
    from multigpu.run.admission import admit
    from multigpu.run.cli import hydra_runtime
    from multigpu.run.training import train

    steps = [*SYNTHETIC, "trainer.max_epochs=2", "+trainer.max_steps=1"]
    first = tmp_path / "first"
    assert train(compose_config(steps, first))["status"] == "completed"
    last = first / "checkpoints" / "last.ckpt"
    again = compose_config([*steps, f"ckpt_path={last}"], tmp_path / "again")
    with pytest.raises(NothingToDo, match=r"already holds 1 step\(s\) and trainer.max_steps=1"):
        admit(again, hydra_runtime(again)[0], Machine(0, 2, {}, False), tmp_path / "again")
    assert not (tmp_path / "again").exists()


# A record only moves forward ----------------------------------------------------------------------
def test_a_resume_into_its_own_runs_folder_never_writes_fewer_epochs(tmp_path, monkeypatch):
    """``ckpt_path=<X>/checkpoints/last.ckpt hydra.run.dir=<X>`` after an interruption: the
    record the resume writes when it starts already holds the checkpoint's epochs (it was
    rewritten with none until the checkpoint was restored: killed in that window, X was left at
    0 epochs, ``running``)."""
    from multigpu.run import fit as fit_module
    from multigpu.run.training import train

    run = tmp_path / "run"
    assert train(compose_config(SYNTHETIC, run))["epochs"] == 1
    record = json.loads((run / "metrics.json").read_text())
    (run / "metrics.json").write_text(json.dumps({**record, "status": "interrupted"}))
    seen = []

    def stopped_before_the_restore(cfg, admission, started, output_dir):
        seen.append(json.loads((output_dir / "metrics.json").read_text()))
        raise KeyboardInterrupt  # a signal in the window before Lightning restores

    monkeypatch.setattr(fit_module, "fit", stopped_before_the_restore)
    resume = [*SYNTHETIC, f"ckpt_path={run}/checkpoints/last.ckpt", "trainer.max_epochs=2"]
    with pytest.raises(Interrupted) as stopped:  # Ctrl-C, said with how to go on
        train(compose_config(resume, run))
    (at_start,) = seen
    assert at_start["epochs"] == 1 and [h["epoch"] for h in at_start["history"]] == [1]
    after = json.loads((run / "metrics.json").read_text())
    assert after["epochs"] == 1 and after["status"] == "interrupted"
    said = f"interrupted by SIGINT; resume with ckpt_path={run}/checkpoints/last.ckpt"
    assert str(stopped.value).startswith(said) and after["reason"] == str(stopped.value)


@pytest.mark.parametrize("keeps_previous", [True, False], ids=["previous", "no_previous"])
@pytest.mark.parametrize("damage", [pytest.param("cut", marks=pytest.mark.slow), "flipped"])
def test_a_damaged_checkpoint_the_folder_continues_is_named_as_its_own(
    damage, keeps_previous, tmp_path
):
    """The same command again continues the folder's own ``last.ckpt``: damaged (cut short, or
    a byte flipped: its digest differs), it is named as that, not as a ``ckpt_path`` the
    command never gave, with the one before to use instead, once, and in another folder (in
    this one it would take the record back, which is refused)."""
    from multigpu.run.training import train

    run = tmp_path / "a run"  # its name holds a space, which the line keeps whole
    last = run / "checkpoints" / "last.ckpt"
    train(compose_config([*SYNTHETIC, "trainer.max_epochs=2"], run))
    record = json.loads((run / "metrics.json").read_text())
    (run / "metrics.json").write_text(json.dumps({**record, "status": "interrupted"}))
    held = (run / "metrics.json").read_bytes()
    last.unlink()  # previous.ckpt is a second name of the same file: cut a copy instead
    kept = (run / "checkpoints" / "previous.ckpt").read_bytes()
    if damage == "cut":
        last.write_bytes(kept[:-100])
    else:  # a byte in the middle: of the weights' values, which most of the file holds
        at = len(kept) // 2
        last.write_bytes(kept[:at] + bytes([kept[at] ^ 0xFF]) + kept[at + 1 :])
    previous = last.with_name("previous.ckpt")
    if not keeps_previous:  # the line had said to train again, which met the same checkpoint
        previous.unlink()
    with pytest.raises(UserError) as error:
        train(compose_config([*SYNTHETIC, "trainer.max_epochs=3"], run))
    said = str(error.value)
    damaged = "is not a readable" if damage == "cut" else "is damaged: its contents no longer"
    assert said.startswith(f"{last}, the checkpoint this run folder continues, {damaged}"), said
    if not keeps_previous:
        assert said.endswith(
            "; this run keeps no older checkpoint; train again in another hydra.run.dir (or none; "
            "in a sweep, another hydra.sweep.dir)"
        )
        assert (run / "metrics.json").read_bytes() == held
        other = tmp_path / "other"
        train(compose_config([*SYNTHETIC, "trainer.max_epochs=3"], other))
        assert json.loads((other / "metrics.json").read_text())["epochs"] == 3
        return
    from multigpu.storage.ckpt_path import as_typed

    instead = f"(to go on from the one before it: {as_typed(previous)} and another hydra.run.dir)"
    assert said.endswith(instead) and said.count("ckpt_path=") == 1
    assert (run / "metrics.json").read_bytes() == held
    with pytest.raises(UserError, match="it would take the record back"):  # as the line says
        train(compose_config([*SYNTHETIC, "trainer.max_epochs=3", f"ckpt_path={previous}"], run))
    assert (run / "metrics.json").read_bytes() == held
    other = tmp_path / "other"
    train(compose_config([*SYNTHETIC, "trainer.max_epochs=3", f"ckpt_path={previous}"], other))
    assert json.loads((other / "metrics.json").read_text())["epochs"] == 3


@pytest.mark.slow
def test_a_run_continuing_its_own_folder_says_it_resumed(tmp_path):
    """The same command again after an interruption continues the folder from its own
    checkpoint: its record had ``resumed_from: null``, so its times (which count the restart)
    passed for those of a run never stopped (docs/records.md compares those). It names the
    epochs the checkpoint holds, also where the folder's record had run ahead of it."""
    import shutil

    from multigpu.run.training import train

    run = tmp_path / "a run"  # its name holds a space, which the line keeps whole
    last = run / "checkpoints" / "last.ckpt"

    def interrupted() -> None:
        record = json.loads((run / "metrics.json").read_text())
        (run / "metrics.json").write_text(json.dumps({**record, "status": "interrupted"}))

    train(compose_config([*SYNTHETIC, "trainer.max_epochs=2"], run))
    shutil.copy(last, tmp_path / "two.ckpt")
    interrupted()
    again = train(compose_config([*SYNTHETIC, "trainer.max_epochs=3"], run))
    assert again["resumed_from"] == {"checkpoint": str(last), "epochs": 2, "changed": {}}
    shutil.copy(tmp_path / "two.ckpt", last)  # behind the record's 3 epochs
    interrupted()
    third = train(compose_config([*SYNTHETIC, "trainer.max_epochs=4"], run))
    assert [h["epoch"] for h in third["history"]] == [1, 2, 3, 4]
    assert third["resumed_from"] == {"checkpoint": str(last), "epochs": 2, "changed": {}}


def test_a_resume_with_no_time_left_under_max_time_is_a_notice():
    """Lightning's Timer carries the training time a checkpoint's run spent: resumed under the
    same ``+trainer.max_time``, it stopped at once, and the run failed with its folder made
    ("no epoch was trained"). Now a notice, before anything is written; with time left, or
    no Timer in the checkpoint, the resume goes on."""
    from multigpu.config.errors import NothingToDo
    from multigpu.run.resume import check_time_to_train

    held = {"callbacks": {"Timer": {"time_elapsed": {"train": 120.5, "validate": 9.0}}}}
    with pytest.raises(NothingToDo, match=r"already holds 120 s of training and trainer.max_ti"):
        check_time_to_train(Path("last.ckpt"), held, "00:00:02:00")
    for left in ("00:00:02:01", {"minutes": 3}, None):
        check_time_to_train(Path("last.ckpt"), held, left)
    check_time_to_train(Path("last.ckpt"), {}, "00:00:00:01")


@pytest.mark.parametrize("ran_with", [3, 2], ids=["a_limit_stopped_it", "max_epochs_ended_it"])
def test_a_completed_run_is_finished_where_its_limit_stopped_it(tmp_path, ran_with):
    """Completed after 2 epochs: stopped by ``max_steps``/``max_time`` before the 3 epochs it
    ran with, its command run again (any max_epochs) is a notice; ended by its own 2 epochs,
    asking for 5 is refused with the way to train on (a limit merely set is not what ended it)."""
    from multigpu.config.settings import Machine
    from multigpu.run.admission import admit
    from multigpu.run.cli import hydra_runtime

    cfg = compose_config([*SYNTHETIC, f"trainer.max_epochs={ran_with}"], tmp_path)
    first = admit(cfg, hydra_runtime(cfg)[0], Machine(0, 2, {}, False), tmp_path)
    record = RunRecord(tmp_path / "metrics.json", first.run.record(), settings=first.settings)
    record.claim([])
    for epoch in (1, 2):
        record.add_epoch({"epoch": epoch, "test_acc": 0.5, "train_loss": 1.0})
    record.finish(COMPLETED)
    more = compose_config([*SYNTHETIC, "trainer.max_epochs=5"], tmp_path)
    if ran_with == 3:
        assert admit(more, hydra_runtime(more)[0], Machine(0, 2, {}, False), tmp_path).finished
    else:
        with pytest.raises(OccupiedFolder, match="not trained further in place") as refused:
            admit(more, hydra_runtime(more)[0], Machine(0, 2, {}, False), tmp_path)
        assert str(refused.value).endswith("and another hydra.run.dir or none")


def test_a_completed_run_with_its_own_checkpoint_folder_is_told_to_change_that_too(tmp_path):
    """Its checkpoints in ``callbacks.checkpoint.dirpath``: the advice to train on in a new
    folder, followed with that dirpath, was refused (it holds the run's checkpoints)."""
    from multigpu.run.admission import folder_state

    record = RunRecord(tmp_path / "metrics.json", RUN, settings={"seed": 1})
    record.claim([])
    record.add_epoch({"epoch": 1, "test_acc": 0.5, "train_loss": 1.0})
    record.finish(COMPLETED)
    sweep = tmp_path.parent
    for checkpoints, in_sweep, ending in (
        (tmp_path / "checkpoints", None, "another hydra.run.dir or none"),
        (sweep / "ck", None, "another hydra.run.dir or none and callbacks.checkpoint.dirpath"),
        (sweep / "ck", sweep, "another hydra.sweep.dir and callbacks.checkpoint.dirpath"),
    ):
        with pytest.raises(OccupiedFolder, match="not trained further in place") as refused:
            folder_state(tmp_path, checkpoints, {"seed": 1}, 3, True, in_sweep)
        assert str(refused.value).endswith(ending)


# A change resume_changes allows is the change trained with --------------------------------------
@pytest.fixture(scope="module")
def two_epochs(tmp_path_factory) -> Path:
    """The last checkpoint of a tiny run of 2 epochs (SGD, lr 0.1, no momentum, no schedule)."""
    from multigpu.run.training import train

    run = tmp_path_factory.mktemp("two_epochs")
    train(compose_config([*SYNTHETIC, "data.batch_size=16", "trainer.max_epochs=2"], run))
    return run / "checkpoints" / "last.ckpt"


@pytest.mark.slow
def test_optimizer_settings_a_resume_changes_are_the_ones_it_trains_with(
    two_epochs, tmp_path, caplog
):
    """``model.optimizer.lr=0.05 resume_changes=[model.optimizer.lr]`` was recorded as the
    run's lr, and the restored optimizer went on at 0.1: its epochs were those of the run
    continued unchanged (momentum and weight decay the same)."""
    import torch

    from multigpu.run.training import train

    changes = {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.001}
    overrides = [f"model.optimizer.{key}={value}" for key, value in changes.items()]
    allowed = ",".join(f"model.optimizer.{key}" for key in changes)
    resume = [f"ckpt_path={two_epochs}", f"resume_changes=[{allowed}]", "trainer.max_epochs=3"]
    with caplog.at_level(logging.INFO, logger="multigpu.models.classifier"):
        record = train(
            compose_config([*SYNTHETIC, "data.batch_size=16", *overrides, *resume], tmp_path)
        )
    assert record["history"][-1]["lr"] == pytest.approx(0.05)
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    (group,) = saved["optimizer_states"][0]["param_groups"]
    assert {key: group[key] for key in changes} == changes
    assert record["resumed_from"]["changed"]["model.optimizer.momentum"] == {"from": 0, "to": 0.9}
    said = "resuming after 2 epoch(s) with the optimizer as configured now: lr 0.05 (the "
    assert said + "checkpoint's had 0.1)" in caplog.text  # the epochs, not a schedule's steps


@pytest.mark.slow
def test_a_schedule_a_resume_adds_is_where_it_would_be_in_a_run_that_had_it(two_epochs, tmp_path):
    """``+model/scheduler=cosine resume_changes=[model.scheduler]`` failed writing the record
    (a node is no JSON value) and, written, began the cosine from its start: the third epoch's
    lr is the third of a run that had the cosine from the first."""
    from multigpu.run.training import train

    common = [*SYNTHETIC, "data.batch_size=16", "trainer.max_epochs=3", "+model/scheduler=cosine"]
    resume = [f"ckpt_path={two_epochs}", "resume_changes=[model.scheduler]"]
    resumed = train(compose_config([*common, *resume], tmp_path / "resumed"))
    throughout = train(compose_config(common, tmp_path / "throughout"))
    assert resumed["history"][-1]["lr"] == pytest.approx(throughout["history"][-1]["lr"])
    assert resumed["history"][-1]["lr"] < 0.1  # the schedule has moved
    assert resumed["resumed_from"]["changed"] == {"model.scheduler": {"from": None, "to": "{...}"}}


@pytest.mark.parametrize("named", [True, False], ids=["in_resume_changes", "alone"])
def test_weight_decay_on_is_refused_as_a_change(named, two_epochs, tmp_path):
    """The optimizer state is grouped by ``weight_decay_on`` (changed: Lightning's ValueError
    after the run folder was made): one line, naming ``init_from`` (not ``resume_changes``,
    which cannot change it), and nothing written."""
    from multigpu.config.settings import Machine
    from multigpu.run.admission import admit
    from multigpu.run.cli import hydra_runtime

    key = "model.weight_decay_on"
    resume = [f"ckpt_path={two_epochs}", "trainer.max_epochs=3"]
    resume += [f"resume_changes=[{key}]"] if named else []
    overrides = [*SYNTHETIC, "data.batch_size=16", f"{key}=weights", *resume]
    cfg = compose_config(overrides, tmp_path / "run")
    with pytest.raises(UserError) as refused:
        admit(cfg, hydra_runtime(cfg)[0], Machine(0, 2, {}, False), tmp_path / "run")
    said = str(refused.value)
    assert f"a resume keeps {key}" in said and f"init_from={two_epochs}" in said
    assert "resume_changes" not in said
    assert "\n" not in said and not (tmp_path / "run").exists()


def cosine(epochs: float, t_max: int, lr: float = 0.1) -> float:
    """torch's CosineAnnealingLR in closed form, ``epochs`` in (fractions for steps)."""
    return lr * (1 + math.cos(math.pi * epochs / t_max)) / 2


SLOW = pytest.mark.slow  # two trainings each: the default suite keeps the other two


@pytest.mark.parametrize(
    ("first", "resumed", "t_max", "epoch", "at"),
    [
        # The schedule per step from a checkpoint of a schedule per epoch: epoch 3 starts 2
        # epochs in (8 of 12 steps).
        pytest.param(
            ["+model/scheduler=cosine", "trainer.max_epochs=2", "model.scheduler.T_max=3"],
            ["+model/scheduler=cosine", "model.scheduler_interval=step", "model.scheduler.T_max=3",
             "trainer.max_epochs=3", "resume_changes=[model.scheduler_interval]"], 3, 3, 2.0,
            marks=SLOW, id="interval_changed"),
        # An epoch max_steps stopped inside (2 of its 4 batches) counts as one, as in the
        # history: Lightning had not stepped the schedule for it, and epoch 3 began where
        # epoch 2 had.
        pytest.param(
            ["+model/scheduler=cosine", "trainer.max_epochs=4", "+trainer.max_steps=6"],
            ["+model/scheduler=cosine", "trainer.max_epochs=4",
             "resume_changes=[trainer.max_steps]"], 4, 3, 2.0, id="after_a_partial_epoch"),
        # Per step, with half the steps per epoch from the resume on: 2 epochs in are 4 of the
        # new 8 steps (the 8 steps the checkpoint holds had put it at the cosine's end).
        pytest.param(
            ["+model/scheduler=cosine", "model.scheduler_interval=step", "trainer.max_epochs=2",
             "model.scheduler.T_max=4"],
            ["+model/scheduler=cosine", "model.scheduler_interval=step", "trainer.max_epochs=4",
             "model.scheduler.T_max=4", "+trainer.accumulate_grad_batches=2",
             "resume_changes=[trainer.accumulate_grad_batches]"], 4, 3, 2.0,
            id="steps_per_epoch_changed"),
        # The same after an epoch max_steps stopped halfway: its share of an epoch, half of the
        # new 2 steps, puts the third epoch at step 3 of 8.
        pytest.param(
            ["+model/scheduler=cosine", "model.scheduler_interval=step", "trainer.max_epochs=4",
             "model.scheduler.T_max=4", "+trainer.max_steps=6"],
            ["+model/scheduler=cosine", "model.scheduler_interval=step", "trainer.max_epochs=4",
             "model.scheduler.T_max=4", "+trainer.accumulate_grad_batches=2",
             "resume_changes=[trainer.accumulate_grad_batches,trainer.max_steps]"], 4, 3, 1.5,
            marks=SLOW, id="steps_per_epoch_changed_after_a_partial_epoch"),
    ],
)  # fmt: skip
def test_a_resumed_schedule_is_where_the_epochs_it_holds_put_it(
    first, resumed, t_max, epoch, at, tmp_path
):
    from multigpu.run.training import train

    common = [*SYNTHETIC, "data.batch_size=16"]  # 4 batches an epoch
    train(compose_config([*common, *first], tmp_path / "first"))
    last = tmp_path / "first" / "checkpoints" / "last.ckpt"
    cfg = compose_config([*common, *resumed, f"ckpt_path={last}"], tmp_path / "resumed")
    record = train(cfg)
    assert record["history"][epoch - 1]["lr"] == pytest.approx(cosine(at, t_max), rel=1e-6)


@pytest.mark.slow
def test_weights_only_decayed_with_momentum_resume_as_if_never_stopped(tmp_path):
    """``model.weight_decay_on=weights`` numbers the parameters weights first: its momentum
    buffers were checked against the network's own order, and every checkpoint of such a run
    (``experiment=speedrun``'s kind) was refused as edited, for a resume, ``init_from`` and
    ``eval.py`` alike."""
    import torch

    from multigpu.run.training import train
    from multigpu.storage.checkpoint import load_network

    recipe = [
        *SYNTHETIC,
        "data.batch_size=16",
        "model.weight_decay_on=weights",
        "model.optimizer.weight_decay=0.001",
        "model.optimizer.momentum=0.9",
    ]
    train(compose_config([*recipe, "trainer.max_epochs=2"], tmp_path / "first"))
    last = tmp_path / "first" / "checkpoints" / "last.ckpt"
    load_network(last)  # was refused
    resume = [f"ckpt_path={last}", "trainer.max_epochs=3"]
    train(compose_config([*recipe, *resume], tmp_path / "resumed"))
    train(compose_config([*recipe, "trainer.max_epochs=3"], tmp_path / "once"))
    weights = [
        torch.load(tmp_path / run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
        for run in ("resumed", "once")
    ]
    for name, value in weights[0].items():
        torch.testing.assert_close(value, weights[1][name], msg=name)


def test_a_run_continuing_its_own_folder_keeps_its_csv_rows(tmp_path):
    """``logger=csv``: Lightning's writer deleted the ``metrics.csv`` it found, and the run
    continued after a stop kept only the rows of the epochs it trained itself."""
    import csv

    from multigpu.run.training import train

    run, logged = tmp_path / "run", tmp_path / "run" / "metrics.csv"
    train(compose_config([*SYNTHETIC, "logger=csv", "trainer.max_epochs=1"], run))
    record = json.loads((run / "metrics.json").read_text())
    (run / "metrics.json").write_text(json.dumps({**record, "status": "interrupted"}))
    first = logged.read_text()
    train(compose_config([*SYNTHETIC, "logger=csv", "trainer.max_epochs=2"], run))
    assert logged.read_text().startswith(first.splitlines()[0])  # one header, the same
    rows = list(csv.DictReader(logged.open()))
    assert {row["epoch"] for row in rows} == {"1", "2"}  # counted from 1, as everywhere else
    assert all(line in logged.read_text() for line in first.splitlines()[1:])
    history = json.loads((run / "metrics.json").read_text())["history"]
    tested = {int(row["epoch"]): float(row["test/acc"]) for row in rows if row.get("test/acc")}
    assert tested == pytest.approx({h["epoch"]: h["test_acc"] for h in history})


def test_a_resume_under_chdir_records_the_checkpoint_it_read_and_names_its_folder(tmp_path):
    """Under ``hydra.job.chdir=true`` a relative ``ckpt_path`` is read from where the command
    started; the record named it from the run folder Hydra moved into (a file that does not
    exist), and the closing lines named the run folder ``.``."""
    run_script("train.py", *SYNTHETIC, "trainer.max_epochs=1", "hydra.run.dir=a", cwd=tmp_path)
    resumed = run_script(
        "train.py",
        *SYNTHETIC,
        "trainer.max_epochs=2",
        "ckpt_path=a/checkpoints/last.ckpt",
        "hydra.job.chdir=true",
        "hydra.run.dir=b",
        cwd=tmp_path,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    record = json.loads((tmp_path / "b" / "metrics.json").read_text())
    read = tmp_path.resolve() / "a" / "checkpoints" / "last.ckpt"
    assert record["resumed_from"]["checkpoint"] == str(read) and record["epochs"] == 2
    assert "run folder: b\n" in resumed.stdout


@given(
    status=st.sampled_from(["failed", "interrupted"]),
    reason=st.text(max_size=40),
    checkpoint=st.booleans(),
    epochs=st.integers(0, 2),
)
def test_a_job_that_never_started_leaves_its_folder_to_the_job_run_again(
    tmp_path_factory, status, reason, checkpoint, epochs
):
    """A launcher records a job SLURM never started (or that died before Hydra ran it) in its
    folder, with no settings and no epoch: the sweep's command run again had refused that
    folder as "a record of an older version", so the sweep could not be continued. Such a
    record holds nothing of a run; one with epochs, or beside a checkpoint, is still kept."""
    from multigpu.run.admission import Folder, folder_state
    from multigpu.storage.record import record_ending

    folder = tmp_path_factory.mktemp("job")
    record_ending(folder / "metrics.json", Outcome(status, reason, 1))
    if epochs:  # a run's record without settings: of an older version
        kept = json.loads((folder / "metrics.json").read_text())
        kept.update(epochs=epochs, history=[{"epoch": n + 1} for n in range(epochs)])
        (folder / "metrics.json").write_text(json.dumps(kept))
    if checkpoint:
        (folder / "checkpoints").mkdir()
        (folder / "checkpoints" / "last.ckpt").write_bytes(b"")
    settings = {"seed": 1}
    if epochs or checkpoint:
        with pytest.raises(OccupiedFolder, match="a record of an older version"):
            folder_state(folder, folder / "checkpoints", settings, 1, True)
    else:
        assert folder_state(folder, folder / "checkpoints", settings, 1, True) == Folder()


@pytest.mark.parametrize("key", ["width", "num_classes"])
def test_a_resume_to_another_network_shape_is_told_the_ways_that_load_its_weights(key, tmp_path):
    """``ckpt_path=latest model.net.width=16`` after a width-8 run had said to pass init_from,
    which then refused the weights ("pass model.net.width=8"): a circle. Neither init_from nor
    resume_changes loads weights of another shape."""
    from multigpu.storage.atomic import write_json

    saved = {f"model.net.{key}": 8, "seed": 1, "model.net.norm": "batch"}
    current = {f"model.net.{key}": 16, "seed": 1, "model.net.norm": "group"}
    ways = (
        f"a network of another shape cannot load its weights: pass model.net.norm=batch "
        f"model.net.{key}=8 to resume it, or no ckpt_path to train this network from scratch"
    )
    with pytest.raises(UserError) as refused:
        check_same_run(Path("x.ckpt"), saved, current, [])
    assert str(refused.value).endswith(ways) and "init_from" not in str(refused.value)
    last = tmp_path / "runs" / "a" / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    last.write_bytes(b"")
    write_json(last.parent.parent / "metrics.json", summarize([], {}, settings=saved))
    with pytest.raises(UserError) as refused:
        latest_of(tmp_path / "runs", current, [])
    assert str(refused.value).endswith(ways) and "init_from" not in str(refused.value)
    assert latest_of(tmp_path / "runs", saved, []) == last  # the way it names resumes


@pytest.mark.parametrize(
    ("key", "named"),
    [
        ("callbacks.checkpoint.dirpath", "callbacks.checkpoint.dirpath"),
        ("logger.save_dir", "logger.save_dir (with logger.name, version and sub_dir)"),
        ("data.root", "data.root"),
    ],
)
@pytest.mark.parametrize(("length", "depth"), [(256, 0), (600, 2)])
def test_a_name_too_long_for_a_place_is_refused_naming_its_setting(
    key, named, length, depth, tmp_path_factory
):
    """A name over 255 bytes failed the first look at the folder (``is_dir``) with an OSError
    that named no setting: "the config could not be checked"."""
    from multigpu.config.settings import Machine
    from multigpu.run.admission import admit
    from multigpu.run.cli import hydra_runtime

    folder = tmp_path_factory.mktemp("run")
    place = folder.parent / Path(*["x"] * depth) / ("a" * length)
    data = TINY if key == "data.root" else SYNTHETIC  # Fashion-MNIST's files have a root
    cfg = compose_config([*data, f"{key}={place}"], folder)
    with pytest.raises(UserError) as refused:
        admit(cfg, hydra_runtime(cfg)[0], Machine(0, 2, {}, False), folder)
    said = str(refused.value)
    assert "is longer than the 255 bytes a name can have" in said
    assert said.endswith(f": pass a writable {named}")
    assert list(folder.iterdir()) == []


def test_latest_passes_over_a_checkpoint_a_run_still_trains(two_epochs, tmp_path):
    """``ckpt_path=latest`` had taken the newest checkpoint of these settings even where its
    run was still training, and gone on from it apart, as a second run. Now the newest of a
    run that has ended; where every one is still training, one line naming that run, and the
    explicit path to go on from it apart."""
    from multigpu.run.resume import latest_of

    settings = json.loads((two_epochs.parent.parent / "metrics.json").read_text())["settings"]
    runs = tmp_path / "outputs"
    for age, name in enumerate(("ended", "training")):
        shutil.copytree(two_epochs.parent.parent, runs / name)
        os.utime(runs / name / "checkpoints" / "last.ckpt", (1000 + age, 1000 + age))
    ended, training = (runs / n / "checkpoints" / "last.ckpt" for n in ("ended", "training"))
    assert latest_of(runs, settings, []) == training  # nothing holds it: the newest
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(runs / "training")])
    try:
        deadline = time.monotonic() + 20
        while is_free(runs / "training"):
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.05)
        assert latest_of(runs, settings, []) == ended
        # The run's own folder, which its rank 0 holds while the other ranks look: taken.
        assert latest_of(runs, settings, [], ours=[runs / "training"]) == training
        shutil.rmtree(runs / "ended")
        with pytest.raises(UserError) as refused:
            latest_of(runs, settings, [])
        assert str(refused.value) == (
            f"ckpt_path=latest: the newest checkpoint of this run's settings, {training}, is of "
            f"a run still training (pid {holder.pid}): wait for it to end and pass "
            f"ckpt_path=latest again, or pass ckpt_path={training} to go on from it now, apart"
        )
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
