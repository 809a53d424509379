"""Breaks of the folder contract a tester found, each a named ``train.py`` case and a
generated one: a record never moves backwards (a resume from an older checkpoint into its own
run folder), the folder a run checks and locks is the folder it writes (a ``~``), every folder
a run writes has one owner (a checkpoint folder in another run's folder), a run stopped by
two signals records and exits with the same one (the first), a run's folders lie apart from
other runs' (neither inside one nor around one: a finished sweep's folder, the folder above a
live run), and a sweep's folder holds one sweep (a second sweep had replaced its
multirun.yaml)."""

from __future__ import annotations

import ast
import atexit
import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest
from conftest import REPO, TINY, composed, examples, start_script
from hypothesis import given
from hypothesis import strategies as st
from test_integrity import SYNTHETIC, snapshot, spelling_place, spellings, spelt, tiny_run

from multigpu.config.errors import Interrupted, OccupiedFolder, UserError
from multigpu.config.launch import Signal
from multigpu.config.settings import Machine
from multigpu.run.admission import (
    CHECKPOINT_FOLDER,
    RUN_FOLDER,
    Folder,
    admit,
    check_hydra_folder,
    check_moves_forward,
    written_folders,
)
from multigpu.run.cli import hydra_runtime
from multigpu.run.resume import Resume
from multigpu.storage.outcome import COMPLETED, Outcome
from multigpu.storage.paths import canonical
from multigpu.storage.record import RunRecord, agree

PROBES = {"PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}


def record_of(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def one_line(stderr: str) -> str:
    (line,) = stderr.strip().splitlines()
    return line


def admitted(cfg, folder: Path):
    return admit(cfg, hydra_runtime(cfg)[0], Machine(0, 2, {}, False), folder)


# 1. A record only moves forward ---------------------------------------------------------------
def test_a_stop_between_an_epochs_entry_and_its_checkpoint_records_neither(tmp_path):
    """Ctrl-C after the epoch's entry was written to the record and before its checkpoint:
    the record held an epoch no checkpoint held, its reason said no epoch had finished, and
    the command run again trained that epoch anew over its entry. The entry is written once
    the checkpoint is: the record and the checkpoints agree whenever the run stops."""
    from multigpu.run.training import train
    from multigpu.storage.checkpoint import load_checkpoint

    folder = tmp_path / "run"
    stop = ["+callbacks.stop._target_=probes.CtrlCAfterEpochEntry", "+callbacks.stop.epoch=1"]
    with pytest.raises(Interrupted):
        train(composed([*SYNTHETIC, "trainer.max_epochs=3", *stop], folder))
    record = record_of(folder)
    assert record["status"] == "interrupted" and record["epochs"] == 1
    held = load_checkpoint(folder / "checkpoints" / "last.ckpt")["callbacks"]
    (history,) = [state["history"] for name, state in held.items() if "EpochHistory" in name]
    assert [h["epoch"] for h in history] == [h["epoch"] for h in record["history"]] == [1]


STOPS_IN_SET_UP = {  # a probe that sends the signal: as the run builds its parts, or in
    # Lightning's setup hook, inside its fit and before its own handlers
    "build": ["+callbacks.stop._target_=probes.SignalWhenBuilt"],
    "setup": ["+callbacks.stop._target_=probes.KillRank", "+callbacks.stop.rank=0"],
}
STOPS_IN_SET_UP["setup"].append("+callbacks.stop.step=-1")


@pytest.mark.parametrize(
    "signum,at,resumed",
    [
        ("SIGUSR1", "build", False),
        ("SIGXCPU", "build", False),  # ulimit -t: a CPU-time limit reached
        pytest.param("SIGRTMIN+3", "build", False, marks=pytest.mark.slow),  # a real-time one
        pytest.param("SIGALRM", "build", False, marks=pytest.mark.slow),
        pytest.param("SIGTERM", "setup", False, marks=pytest.mark.slow),  # the default suite's time
        ("SIGTERM", "setup", True),
    ],
)
def test_a_stop_while_the_run_is_set_up_says_how_to_go_on(tmp_path, signum, at, resumed):
    """A stop signal after the run claimed its record and before Lightning trains (as it
    builds its parts, or inside Lightning's fit before its handlers): its ending says how to go
    on, as one during training does; it said only "interrupted by SIGUSR1". Resumed into a new
    folder, which holds no checkpoint yet, the one it resumed is named again."""
    from multigpu.callbacks import interrupts
    from multigpu.run.training import train

    folder = tmp_path / "run"
    assert train(composed([*SYNTHETIC, "trainer.max_epochs=1"], folder))["epochs"] == 1
    record = record_of(folder)  # stopped after its first epoch, as Ctrl-C leaves it
    (folder / "metrics.json").write_text(json.dumps({**record, "status": "interrupted"}))
    last = folder / "checkpoints" / "last.ckpt"
    stop = [*STOPS_IN_SET_UP[at], f"+callbacks.stop.signum={signum}"]
    into = tmp_path / "new" if resumed else folder
    number = Signal[signum]
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, number)  # restored
    handlers = {each: signal.getsignal(each) for each in stops}
    overrides = [*SYNTHETIC, "trainer.max_epochs=2", *stop]
    try:
        with pytest.raises(Interrupted) as stopped:
            train(composed([*overrides, *([f"ckpt_path={last}"] if resumed else [])], into))
    finally:
        atexit.unregister(interrupts.ignored_until_exit)
        interrupts._ending = None
        for each, handler in handlers.items():
            signal.signal(each, handler)
    how = (
        f"no epoch had finished since the resume: resume with ckpt_path={last} again"
        if resumed
        else f"resume with ckpt_path={last}"  # not under paths.runs_dir: latest would not find it
    )
    said = f"interrupted by {signum}; {how}"
    assert (str(stopped.value), stopped.value.exit_code) == (said, 128 + number)
    assert record_of(into)["reason"] == said and record_of(into)["status"] == "interrupted"


@pytest.mark.slow
def test_another_runs_checkpoint_in_a_folders_place_is_not_continued(tmp_path):
    """A run folder continued without ``ckpt_path`` (its record interrupted) whose last.ckpt
    is another run's, of the same settings: the record's epochs had been replaced by the other
    run's, and the command exited 0. Refused in one line, nothing touched; with its own
    checkpoint back, the folder continues."""
    from multigpu.run.training import train

    folder, other = tmp_path / "A", tmp_path / "B"
    for run in (folder, other):
        assert train(composed([*SYNTHETIC, "trainer.max_epochs=1"], run))["epochs"] == 1
    record = record_of(folder)  # stopped after its first epoch, as Ctrl-C leaves it
    (folder / "metrics.json").write_text(json.dumps({**record, "status": "interrupted"}))
    last = folder / "checkpoints" / "last.ckpt"
    own = last.read_bytes()
    shutil.copy(other / "checkpoints" / "last.ckpt", last)
    before = snapshot(folder)
    with pytest.raises(OccupiedFolder) as refused:
        train(composed([*SYNTHETIC, "trainer.max_epochs=2"], folder))
    assert str(refused.value) == (
        f"{last} is not of the run that {folder} holds (its history differs from that folder's "
        f"metrics.json): continued, it would replace that run's record; it is left as it is: "
        f"resume the checkpoint into a new folder (ckpt_path={last} and another hydra.run.dir)"
    )
    assert snapshot(folder) == before
    last.write_bytes(own)
    continued = train(composed([*SYNTHETIC, "trainer.max_epochs=2"], folder))
    assert continued["status"] == "completed" and continued["history"][0] == record["history"][0]


@pytest.mark.slow
def test_a_folder_whose_checkpoints_are_elsewhere_is_not_started_again(tmp_path):
    """A run folder whose record holds epochs but whose checkpoint folder holds no last.ckpt
    (its checkpoints went to another ``callbacks.checkpoint.dirpath``, or were deleted): the same
    command without that dirpath had trained from scratch, and the record then held the new
    epochs followed by the old ones. Refused in one line, nothing touched; continued with its
    checkpoint, the record moves forward (found by a fresh try)."""
    from multigpu.run.training import train

    folder, aside = tmp_path / "run", tmp_path / "aside"
    elsewhere = [*SYNTHETIC, f"callbacks.checkpoint.dirpath={aside}"]
    assert train(composed([*elsewhere, "trainer.max_epochs=2"], folder))["epochs"] == 2
    record = record_of(folder)  # stopped after its second epoch, as Ctrl-C leaves it
    (folder / "metrics.json").write_text(json.dumps({**record, "status": "interrupted"}))
    before = snapshot(tmp_path)
    with pytest.raises(OccupiedFolder) as refused:
        train(composed([*SYNTHETIC, "trainer.max_epochs=3"], folder))
    assert str(refused.value) == (
        f"{folder} holds this run after 2 epoch(s), but {folder / 'checkpoints'} holds no "
        "last.ckpt to continue it from: started again, its record would go back; continue it "
        "with ckpt_path=<its last.ckpt> (in the checkpoint folder it was trained with), or "
        "pass another hydra.run.dir"
    )
    assert snapshot(tmp_path) == before
    # Resumed from a checkpoint and stopped before its own first: that checkpoint is named.
    origin = {"checkpoint": str(aside / "last.ckpt"), "epochs": 2, "changed": {}}
    resumed = {**record, "status": "interrupted", "resumed_from": origin}
    (folder / "metrics.json").write_text(json.dumps(resumed))
    with pytest.raises(OccupiedFolder, match=re.escape(
        f"continue it with ckpt_path={aside / 'last.ckpt'} (the checkpoint it was resumed from)"
    )):  # fmt: skip
        train(composed([*SYNTHETIC, "trainer.max_epochs=3"], folder))
    # None due yet (saved every 3 epochs; or no checkpoints at all): it starts again, as before.
    for none_due in (["callbacks.checkpoint.every_n_epochs=3"], ["callbacks.checkpoint=null"]):
        again = admitted(composed([*SYNTHETIC, "trainer.max_epochs=3", *none_due], folder), folder)
        assert again.continued is None and again.resume is None
    onward = [*SYNTHETIC, "trainer.max_epochs=3", f"ckpt_path={aside / 'last.ckpt'}"]
    continued = train(composed(onward, folder))
    assert continued["status"] == "completed" and continued["epochs"] == 3
    assert continued["history"][:2] == record["history"]


@pytest.mark.slow  # whole runs, 7-11 s: the default suite's 5 minutes; CI runs the slow suite
@pytest.mark.subprocess
def test_resuming_previous_ckpt_into_its_own_folder_is_refused_and_last_ckpt_continues(tmp_path):
    """``ckpt_path=<X>/checkpoints/previous.ckpt hydra.run.dir=<X>``: X's record had gone back
    to the older checkpoint's epochs (its later epoch lost, its last.ckpt overwritten). Now one
    line naming X's last.ckpt, nothing touched; previous.ckpt resumes into a new folder, and
    last.ckpt continues X forward."""
    run = tmp_path / "X"
    first = tiny_run(tmp_path, f"hydra.run.dir={run}", "trainer.max_epochs=2")
    assert first.returncode == 0, first.stderr[-3000:]
    record = record_of(run)  # stopped after its second epoch, as Ctrl-C leaves it
    (run / "metrics.json").write_text(json.dumps({**record, "status": "interrupted"}))
    before = snapshot(run)
    checkpoints = run / "checkpoints"
    older = tiny_run(
        tmp_path,
        f"hydra.run.dir={run}",
        "trainer.max_epochs=3",
        f"ckpt_path={checkpoints}/previous.ckpt",
    )
    assert older.returncode == 2, older.stderr[-3000:]
    assert one_line(older.stderr) == (
        f"error: ckpt_path={checkpoints}/previous.ckpt holds 1 epoch(s), and {run}/metrics.json "
        f"2: resumed in {run}, it would take the record back to 1; continue {run} with "
        f"ckpt_path={checkpoints}/last.ckpt, or resume previous.ckpt into a new folder "
        "(another hydra.run.dir)"
    )
    assert snapshot(run) == before

    elsewhere = tmp_path / "Y"
    aside = tiny_run(
        tmp_path,
        f"hydra.run.dir={elsewhere}",
        "trainer.max_epochs=2",
        f"ckpt_path={checkpoints}/previous.ckpt",
    )
    assert aside.returncode == 0, aside.stderr[-3000:]
    assert [h["epoch"] for h in record_of(elsewhere)["history"]] == [1, 2]
    assert snapshot(run) == before

    onward = tiny_run(
        tmp_path,
        f"hydra.run.dir={run}",
        "trainer.max_epochs=3",
        f"ckpt_path={checkpoints}/last.ckpt",
    )
    assert onward.returncode == 0, onward.stderr[-3000:]
    after = record_of(run)
    assert after["status"] == "completed" and [h["epoch"] for h in after["history"]] == [1, 2, 3]
    assert after["history"][:2] == record["history"]  # the recorded epochs, kept as they were


@pytest.mark.slow
def test_continuing_from_its_own_last_checkpoint_behind_its_record_never_goes_back(
    tmp_path, monkeypatch
):
    """Killed between writing the record and the checkpoint of its last epoch (or with
    ``callbacks.checkpoint.every_n_epochs=2``), a run's last.ckpt is an epoch behind its record:
    continuing the folder (the same command again, or ``ckpt_path=`` its last.ckpt) trains that
    epoch again, and the record keeps the epoch it had until then."""
    from conftest import compose_config

    from multigpu.run.training import train
    from multigpu.storage import record as record_module

    run = tmp_path / "run"
    assert train(compose_config([*SYNTHETIC, "trainer.max_epochs=2"], run))["epochs"] == 2
    checkpoints = run / "checkpoints"
    shutil.copyfile(checkpoints / "previous.ckpt", checkpoints / "last.ckpt")  # epoch 1's
    recorded = record_of(run)
    (run / "metrics.json").write_text(json.dumps({**recorded, "status": "interrupted"}))
    stopped = tmp_path / "stopped"
    shutil.copytree(run, stopped)
    writes = []
    write_json = record_module.write_json

    def watched(path, data):
        writes.append(data)
        write_json(path, data)

    monkeypatch.setattr(record_module, "write_json", watched)
    for how in ([], [f"ckpt_path={checkpoints}/last.ckpt"]):
        writes.clear()
        shutil.rmtree(run)
        shutil.copytree(stopped, run)
        final = train(compose_config([*SYNTHETIC, "trainer.max_epochs=3", *how], run))
        assert writes and all(w["epochs"] >= 2 for w in writes), [w["epochs"] for w in writes]
        assert final["status"] == "completed" and final["epochs"] == 3
        assert final["history"][0] == recorded["history"][0]  # epoch 1: the checkpoint's
        assert final["history"][1]["wall_s"] != recorded["history"][1]["wall_s"]  # trained again


def history(count: int, run: str) -> list[dict]:
    """A run's first ``count`` epochs; another ``run`` ended its epochs at other times."""
    offset = 0.0 if run == "same" else 0.5
    return [
        {"epoch": e + 1, "wall_s": 10.0 * (e + 1) + offset, "train_loss": 1.0 / (e + 1)}
        for e in range(count)
    ]


@examples(60)
@given(
    recorded=st.integers(0, 4),
    carried=st.integers(0, 5),
    run=st.sampled_from(["same", "other"]),
    path=st.sampled_from(["last.ckpt", "previous.ckpt", "elsewhere"]),
    last_exists=st.booleans(),
    restores=st.booleans(),
    more=st.integers(0, 3),
)
def test_a_resume_into_a_folder_holding_its_record_moves_it_forward_or_is_refused(
    tmp_path_factory, recorded, carried, run, path, last_exists, restores, more
):
    """Whatever checkpoint is resumed into a folder holding a record of its run: refused (one
    line, nothing written) unless it carries the record's epochs and no fewer, or is the
    folder's own last.ckpt; admitted, the record it writes never holds fewer epochs than the
    folder's did, nor other ones, whatever the run does next."""
    folder = tmp_path_factory.mktemp("run")
    checkpoints = folder / "checkpoints"
    checkpoints.mkdir()
    if last_exists or path == "last.ckpt":
        (checkpoints / "last.ckpt").write_bytes(b"x")
    ckpt = folder.parent / "elsewhere.ckpt" if path == "elsewhere" else checkpoints / path
    ours, theirs = history(recorded, "same"), history(carried, run)
    folders = {RUN_FOLDER: folder, CHECKPOINT_FOLDER: checkpoints}
    same_epochs = run == "same" or min(recorded, carried) == 0
    allowed = recorded == 0 or (same_epochs and (carried >= recorded or path == "last.ckpt"))
    try:
        check_moves_forward(folders, Folder(recorded=ours), Resume(ckpt, carried, {}, {}, theirs))
    except OccupiedFolder as refused:
        said = str(refused)
        assert not allowed and "\n" not in said and said.startswith(f"ckpt_path={ckpt} ")
        assert ("last.ckpt" in said.split(";")[-1]) == (checkpoints / "last.ckpt").is_file()
        return
    assert allowed
    record = RunRecord(folder / "metrics.json", {"strategy": "single"}, settings={"a": 1})
    record.claim(theirs, recorded=ours)
    if restores:  # Lightning restores the checkpoint's history
        record.set_history(theirs)
    for _ in range(more):
        record.add_epoch({"epoch": len(record.history) + 1, "wall_s": 1e6 + len(record.history)})
        on_disk = record_of(folder)["history"]
        assert len(on_disk) >= recorded and agree(on_disk, record.history)
    on_disk = record_of(folder)["history"]
    assert len(on_disk) >= recorded
    assert on_disk[: len(record.history)] == record.history  # what the run trained, as trained
    assert on_disk[len(record.history) :] == ours[len(record.history) :]  # the rest as recorded
    record.finish(COMPLETED if more else Outcome("interrupted", "stopped", 130))


# 2. The folder checked is the folder written ---------------------------------------------------
@pytest.mark.slow  # two whole commands, 8 s: the default suite's 5 minutes; CI runs the slow suite
@pytest.mark.subprocess
def test_a_tilde_in_the_run_folder_is_refused_and_in_the_checkpoint_folder_is_home(tmp_path):
    """Hydra makes ``hydra.run.dir='~/x'`` as ``./~/x`` while the checks and the lock read
    ``$HOME/x``: refused in one line, nothing made in either place (``paths.runs_dir`` and
    ``hydra.sweep.dir`` alike). ``callbacks.checkpoint.dirpath='~/ck'`` is written by the
    project's code: in ``$HOME/ck``, the folder it locked."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {"HOME": str(home)}
    for flags, key, value in (
        ([], "hydra.run.dir", "~/x"),
        ([], "paths.runs_dir", "~/runs"),
        (["-m", "seed=1"], "hydra.sweep.dir", "~/sweep"),
    ):
        refused = tiny_run(work, *flags, f"{key}='{value}'", env=env)
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert (
            f"{key}={value} starts with ~, which Hydra does not expand: it would make a folder "
            f"named ~ in {work}; pass an absolute path, e.g. {key}={home}/{value[2:]} (the "
            f"shell expands {key}=$HOME/...)"
        ) in one_line(refused.stderr)
        assert list(work.iterdir()) == [] and list(home.iterdir()) == []
    ran = tiny_run(work, "hydra.run.dir=run", "callbacks.checkpoint.dirpath='~/ck'", env=env)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert (home / "ck" / "last.ckpt").is_file() and not (work / "~").exists()
    assert record_of(work / "run")["status"] == "completed"


@pytest.mark.slow
@examples(40)
@given(how=spellings, where=st.sampled_from(["run", "checkpoints"]))
def test_the_folder_a_run_locks_is_the_folder_it_writes_however_spelt(tmp_path_factory, how, where):
    """A run folder (which Hydra makes as spelt, ``os.path.abspath``) and a checkpoint folder
    (which the run's code writes): either the spelling is refused in one line, or the folder
    checked and locked (``canonical``) is the one written."""
    from multigpu.callbacks import LastCheckpoint
    from multigpu.run.fit import build_callbacks

    base = tmp_path_factory.mktemp("spelt")
    with spelling_place(base) as real:
        folder = real / "outputs" / "job"
        if how["exists"]:
            folder.mkdir(parents=True)
        spelling = spelt(folder, real, how)
        if where == "run":
            cfg = composed(SYNTHETIC, Path(spelling))
            try:
                check_hydra_folder(cfg, spelling)
            except UserError as refused:
                assert spelling.startswith("~") and "\n" not in str(refused)
                assert str(refused).startswith(f"hydra.run.dir={spelling} starts with ~")
                return
            assert canonical(spelling) == canonical(os.path.abspath(spelling)) == folder
            return
        quoted = f"callbacks.checkpoint.dirpath='{spelling}'"
        cfg = composed([*SYNTHETIC, quoted], real / "run")
        locked = written_folders(cfg, real / "run")[CHECKPOINT_FOLDER]
        (checkpoint,) = [
            c for c in build_callbacks(cfg.callbacks, locked) if isinstance(c, LastCheckpoint)
        ]
        assert locked == folder and checkpoint.path.parent == folder  # where last.ckpt goes


# 3. Every folder a run writes has one owner ----------------------------------------------------
@pytest.mark.subprocess
@pytest.mark.slow  # five runs, 10 s: the generated in-process test below is its twin
def test_a_checkpoint_folder_in_another_runs_folder_is_refused_and_nothing_is_written(tmp_path):
    """``callbacks.checkpoint.dirpath`` at another (finished) run's folder, or its
    ``checkpoints``, or below: two owners of one folder, the other run's files overwritten.
    One line, exit 2, nothing written; a run folder inside another run's is refused alike."""
    other = tmp_path / "A"
    first = tiny_run(tmp_path, f"hydra.run.dir={other}")
    assert first.returncode == 0, first.stderr[-3000:]
    before = snapshot(other)
    mine = tmp_path / "B"
    for dirpath, where in (
        (other, "another run's folder"),
        (other / "checkpoints", f"inside another run's folder, {other}"),
        (other / "checkpoints" / "mine", f"inside another run's folder, {other}"),
    ):
        refused = tiny_run(
            tmp_path, f"hydra.run.dir={mine}", f"callbacks.checkpoint.dirpath={dirpath}", "seed=3"
        )
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert one_line(refused.stderr) == (
            f"error: {dirpath} (callbacks.checkpoint.dirpath) is {where} (it holds that run's "
            "metrics.json): its files are left as they are; pass a callbacks.checkpoint.dirpath "
            "outside other runs' folders"
        )
        assert snapshot(other) == before and not mine.exists()
    touched = {p: p.stat().st_mtime_ns for p in (other, other / "checkpoints")}
    for again in (other / "again", other / "checkpoints" / "again"):
        inside = tiny_run(tmp_path, f"hydra.run.dir={again}")
        assert inside.returncode == 2 and "(hydra.run.dir) is inside another run's folder" in (
            one_line(inside.stderr)
        )
    assert snapshot(other) == before
    # Not a file made and removed there either (a probe of writability did, before the check)
    assert {p: p.stat().st_mtime_ns for p in touched} == touched


@pytest.mark.slow
@examples(20)
@given(
    has_record=st.booleans(),
    run_inside=st.booleans(),
    target=st.sampled_from(["other", "other/checkpoints", "other/checkpoints/x", "own", "apart"]),
    how=spellings,
)
def test_no_folder_a_run_writes_is_in_another_runs_folder(
    tmp_path_factory, has_record, run_inside, target, how
):
    """However the checkpoint folder is spelt: a run whose run folder or checkpoint folder is,
    or is inside, a folder holding another run's record is refused in one line naming the
    folder and the setting, and nothing is written; any other is admitted with them."""
    base = tmp_path_factory.mktemp("owners")
    with spelling_place(base) as real:
        other = real / "other"
        other.mkdir()
        if has_record:
            (other / "metrics.json").write_text("{}")  # whatever it holds: another run's
        run = other / "mine" if run_inside else real / "mine"
        dirpath = {
            "own": run / "checkpoints",
            "apart": real / "ck",
        }.get(target, real / target)
        spelling = spelt(dirpath, real, {**how, "exists": False})
        cfg = composed([*SYNTHETIC, f"callbacks.checkpoint.dirpath='{spelling}'"], run)
        before = snapshot(base)
        in_other = has_record and (run_inside or target.startswith("other"))
        try:
            admission = admitted(cfg, run)
        except OccupiedFolder as refused:
            said = str(refused)
            assert in_other and "\n" not in said and "another run's folder" in said
            key = "hydra.run.dir" if run_inside else "callbacks.checkpoint.dirpath"
            assert f"({key})" in said and said.endswith(f"pass a {key} outside other runs' folders")
            assert snapshot(base) == before
            return
        assert not in_other
        assert admission.folders == {RUN_FOLDER: run, CHECKPOINT_FOLDER: dirpath}


# The places a run writes in besides its folders, by the setting that names each: the file a
# setting names in the place, if it names a file.
PLACES = {
    "hydra.output_subdir": "",
    "hydra.job_logging.handlers.file.filename": "train.log",
    "logger.save_dir": "",
    "trainer.default_root_dir": "",
    "data.root": "",
}


@pytest.mark.slow
@examples(8)
@given(
    key=st.sampled_from(sorted(PLACES)),
    mark=st.sampled_from(["metrics.json", "multirun.yaml", "last.ckpt", None]),
    depth=st.integers(0, 2),
    chdir=st.booleans(),
)
def test_no_place_a_run_writes_is_in_another_runs_folder(tmp_path_factory, key, mark, depth, chdir):
    """Hydra's config copy (``hydra.output_subdir=../A/.hydra`` replaced A's), its log file,
    the logger's files, Lightning's and the data set's had been written wherever they were
    named, inside another run's or sweep's folder or checkpoint folder too. Now such a place is
    refused in one line naming it and its setting, and nothing is written; anywhere else, the
    run is admitted. A relative path is read from where the job writes: the run folder for
    ``hydra.output_subdir`` and under ``hydra.job.chdir=true``, else the working folder."""
    from multigpu.run.admission import written_places

    base = tmp_path_factory.mktemp("places")
    other, run = base / "other", base / "mine"
    other.mkdir()
    if mark is not None:
        (other / mark).write_text("{}")
    place = other.joinpath(*["inner"] * depth)
    named = place / PLACES[key] if PLACES[key] else place
    from_run = chdir or key == "hydra.output_subdir"
    value = os.path.relpath(named, run) if from_run else str(named)
    data = [] if key == "data.root" else ["data=synthetic"]
    cfg = composed([*TINY, *data, f"hydra.job.chdir={chdir}", f"{key}={value}"], run)
    assert written_places(cfg, {RUN_FOLDER: run})[key] == place
    before = snapshot(base)
    # A checkpoint is another's folder only where it lies (as above a run's folder, a stray
    # last.ckpt in a project folder marks nothing); a record or a sweep's marks all below it.
    if mark is None or (mark == "last.ckpt" and depth > 0):
        admitted(cfg, run)
        return
    with pytest.raises(OccupiedFolder) as refused:
        admitted(cfg, run)
    said = str(refused.value)
    assert f"{place} ({key})" in said and "\n" not in said and "another" in said
    assert said.endswith(f"pass a {key} outside other runs' folders")
    assert snapshot(base) == before


# A place as its writer reads it, and one its writer cannot use: {case: (overrides with {other}
# (another run's folder), {run} and {afile} (a file), what the one line says)}.
PLACE_CASES = {
    "logger_sub_dir": (
        ["+logger.sub_dir=../other"],
        "logger.sub_dir=../other must be a folder below logger.save_dir (no .., not from / or ~)",
    ),
    "log_linked": (
        ["hydra.job_logging.handlers.file.filename=linked.log"],
        "(hydra.job_logging.handlers.file.filename) is another run's folder",
    ),
    "log_tilde": (
        ["hydra.job_logging.handlers.file.filename='~/x.log'"],
        "~/x.log (hydra.job_logging.handlers.file.filename) is in {cwd}/~, which is not a folder",
    ),
    "log_in_no_folder": (
        ["hydra.job_logging.handlers.file.filename=nodir/x.log"],
        "which is not a folder: Hydra's log file does not make one",
    ),
    "log_under_a_file": (
        ["hydra.job_logging.handlers.file.filename={afile}/x.log"],
        "is a file, not a folder (write elsewhere): pass a writable hydra.job_logging",
    ),
    "log_a_folder": (
        ["hydra.job_logging.handlers.file.filename={cwd}"],
        "(hydra.job_logging.handlers.file.filename) is a folder, not a file",
    ),
    "log_the_record": (
        ["hydra.job_logging.handlers.file.filename={run}/metrics.json"],
        "is a file the run writes itself",
    ),
    "log_a_checkpoint": (
        ["hydra.job_logging.handlers.file.filename={run}/checkpoints/last.ckpt"],
        "is a file the run writes itself",
    ),
    "logger_a_file": (["logger.save_dir={afile}"], "pass a writable logger.save_dir"),
    "config_copy_a_file": (["hydra.output_subdir=../afile"], "pass a writable hydra.output_subdir"),
    "csv_logger_folder_with_its_file": (
        ["logger=csv", "logger.save_dir={cwd}/csv"],
        "{cwd}/csv (logger.save_dir) holds another run's logs (metrics.csv)",
    ),
    "logger_folder_with_events": (
        ["logger.save_dir={cwd}/tb"],
        "{cwd}/tb (logger.save_dir) holds another run's logs (events.out.tfevents.1)",
    ),
}


@pytest.mark.parametrize("case", sorted(PLACE_CASES))
def test_a_place_is_read_as_its_writer_reads_it_and_must_be_usable(case, tmp_path, monkeypatch):
    """Lightning's logger joins ``sub_dir``; Python's logging follows a
    link, expands no ``~`` and makes no folder: each had written into another run's folder, or
    failed with a traceback after the run's folder was made. One line now, nothing written."""
    overrides, said = PLACE_CASES[case]
    other, run, afile = tmp_path / "other", tmp_path / "run", tmp_path / "afile"
    other.mkdir()
    (other / "metrics.json").write_text("{}")
    (other / "train.log").write_text("")
    (tmp_path / "linked.log").symlink_to(other / "train.log")
    afile.write_text("")
    (tmp_path / "tb").mkdir()
    (tmp_path / "tb" / "events.out.tfevents.1").write_text("")  # another run's, no record here
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "metrics.csv").write_text("")
    monkeypatch.chdir(tmp_path)
    given = [o.format(other=other, run=run, afile=afile, cwd=tmp_path) for o in overrides]
    cfg = composed([*SYNTHETIC, *given], run)
    before = snapshot(tmp_path)
    with pytest.raises(UserError) as refused:
        admitted(cfg, run)
    line = str(refused.value)
    assert said.format(cwd=tmp_path) in line and "\n" not in line, line
    assert snapshot(tmp_path) == before


def test_a_logger_folder_named_with_a_variable_is_the_folder_so_named(tmp_path, monkeypatch):
    """``logger.save_dir=$OTHER`` (quoted from the shell): the logger had expanded it into
    another run's folder, which admission refused; the folder named ``$OTHER`` is written
    now, as the logger writes it (``tests/test_tensorboard.py``)."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "metrics.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OTHER", str(other))
    run = tmp_path / "run"
    admitted(composed([*SYNTHETIC, "logger.save_dir=$OTHER"], run), run)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]  # admission writes nothing


@pytest.mark.parametrize(
    "case", ["log_where_hydra_makes_the_folder", "log_beside_checkpoints", "logger_versioned"]
)
def test_a_place_its_writer_can_use_is_admitted(case, tmp_path, monkeypatch):
    """Hydra makes the run folder and those above it before it opens its log file, a log file
    beside the checkpoints is not one of them, and a logger with no version makes a folder of
    its own: each had been refused by the places' checks. (``data.root`` is only read where
    the data is unpacked: ``check_reachable``'s.)"""
    run = tmp_path / "outputs" / "day" / "run"
    log = run.parent / "day.log" if case == "log_where_hydra_makes_the_folder" else run / "t.log"
    overrides = [*SYNTHETIC, f"hydra.job_logging.handlers.file.filename={log}"]
    if case == "log_beside_checkpoints":
        overrides.append(f"callbacks.checkpoint.dirpath={run}")
    if case == "logger_versioned":  # another run's events there: this one gets version_<n>
        (tmp_path / "tb").mkdir()
        (tmp_path / "tb" / "events.out.tfevents.1").write_text("")
        overrides += [f"logger.save_dir={tmp_path / 'tb'}", "logger.version=null"]
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    admission = admitted(composed(overrides, run), run)
    assert admission.folders[RUN_FOLDER] == run and snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "name,version,inside",
    [("", "", ""), ("a", "", "a"), ("", "b/c", "b/c"), ("a", 3, "a/version_3"), ("a", None, "a")],
)
def test_the_loggers_place_is_where_it_writes(tmp_path, name, version, inside):
    """``logger.name`` and ``logger.version`` move the logger's folder below ``save_dir``, as
    Lightning joins them: ``logger.save_dir=<runs> logger.name=<finished run>`` had written
    event files into that run's folder."""
    from multigpu.run.admission import written_places

    run = tmp_path / "mine"
    given = [f"logger.save_dir={tmp_path / 'tb'}", f"logger.name='{name}'"]
    given.append("logger.version=null" if version is None else f"logger.version='{version}'")
    if isinstance(version, int):
        given[-1] = f"logger.version={version}"
    cfg = composed([*TINY, "data=synthetic", *given], run)
    expected = canonical(tmp_path / "tb" / inside)
    assert written_places(cfg, {RUN_FOLDER: run})["logger.save_dir"] == expected


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_sweep_whose_values_name_hydras_job_runs(tmp_path):
    """``logger.save_dir=${hydra:sweep.dir}/tb_${hydra:job.num}``, as Hydra documents it: the
    sweep had been refused before its first job ("HydraConfig was not set"), its checks
    reading the job's values before Hydra sets them. Each job now writes in its own place."""
    from conftest import run_script

    result = run_script(
        "train.py", "-m", *SYNTHETIC, "logger.save_dir=${hydra:sweep.dir}/tb_${hydra:job.num}",
        "seed=1,2", "hydra.sweep.dir=sweep", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for number in (0, 1):
        assert list((tmp_path / "sweep" / f"tb_{number}").glob("events.out.tfevents.*"))
    # A run's folder named by Hydra's job, as Hydra documents it, had been refused likewise.
    named = "hydra.run.dir=runs/${hydra:job.override_dirname}"
    result = run_script("train.py", *SYNTHETIC, "seed=3", named, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (folder,) = (tmp_path / "runs").iterdir()
    assert "seed=3" in folder.name and record_of(folder)["status"] == COMPLETED.status


# 4. Two signals: the run ends for the first ----------------------------------------------------
def start_slow_run(tmp_path: Path, folder: Path, *extra: str):
    slow = ["+callbacks.slow._target_=probes.SlowAfterEpoch", "+callbacks.slow.epoch=0"]
    slow += ["+callbacks.slow.seconds=0.5", "data.batch_size=8", "trainer.max_epochs=3"]
    run = start_script(
        "train.py", *SYNTHETIC, *slow, *extra, f"hydra.run.dir={folder}", cwd=tmp_path, env=PROBES
    )
    deadline = time.monotonic() + 120
    while not (folder / "metrics.json").is_file():
        assert run.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1)  # into the first epoch's steps
    return run


def wait_for(condition, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.02)


@pytest.mark.slow  # whole runs, 7-11 s: the default suite's 5 minutes; CI runs the slow suite
@pytest.mark.subprocess
def test_sigterm_after_ctrl_c_was_recorded_does_not_change_the_exit_status(tmp_path):
    """Ctrl-C, then SIGTERM once the record says ``interrupted by SIGINT`` (while the process
    exits): it had died of the SIGTERM (status -15); now the second is ignored, exit 130."""
    folder = tmp_path / "run"
    linger = ["+callbacks.linger._target_=stop_probes.LingerAtExit", "+callbacks.linger.seconds=3"]
    run = start_slow_run(tmp_path, folder, *linger)
    run.send_signal(signal.SIGINT)
    wait_for(lambda: record_of(folder)["status"] != "running")
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=120)
    record = record_of(folder)
    assert record["status"] == "interrupted" and record["reason"].startswith(
        "interrupted by SIGINT"
    )
    assert run.returncode == 130, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("error: interrupted by SIGINT")


@pytest.mark.slow  # a whole run signalled twice, 5 s: the default suite's 5 minutes
@pytest.mark.subprocess
def test_sigterm_while_lightning_answers_ctrl_c_leaves_the_run_stopped_by_sigint(tmp_path):
    """SIGTERM while Lightning handles Ctrl-C (its callbacks' ``on_exception``): the run was
    recorded and exited as stopped by SIGTERM, the second signal; now by SIGINT, 130."""
    folder = tmp_path / "run"
    hold = ["+callbacks.hold._target_=probes.SlowToFail", "+callbacks.hold.seconds=3"]
    run = start_slow_run(tmp_path, folder, *hold)
    run.send_signal(signal.SIGINT)
    time.sleep(1)  # inside the 3 s of on_exception
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=120)
    record = record_of(folder)
    assert record["reason"].startswith("interrupted by SIGINT"), record["reason"]
    assert run.returncode == 130, stderr[-3000:]


class FakeLightning:
    """Lightning's SIGTERM handling while it trains: notes the signal, then calls the handler
    it found (the run's), as ``_HandlersCompose`` does."""

    def __init__(self, found):
        self.found, self.received = found, []

    def __call__(self, signum, frame):
        self.received.append(signum)
        self.found(signum, frame)


SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


@examples(60)
@given(
    signals=st.lists(st.sampled_from(SIGNALS), min_size=1, max_size=5),
    phase=st.sampled_from(["before_training", "training", "after_the_run"]),
)
def test_the_first_stop_signal_is_the_runs_ending_and_later_ones_are_ignored(signals, phase):
    """However many signals come, in any order: the first stops the run as it always did
    (``KeyboardInterrupt``, ``Interrupted`` with 128 + its number, or Lightning's SIGTERM
    handling), and is the run's ending; every later one does nothing."""
    from multigpu.callbacks import interrupts

    previous = {s: signal.getsignal(s) for s in SIGNALS}
    before: list[int] = []  # what the handlers before the run's were given
    for signum in SIGNALS:  # never this process's own default actions
        signal.signal(signum, lambda signum, frame: before.append(signum))
    try:
        with interrupts.one_ending() as ending:
            ending.install()
            ending.armed = phase != "after_the_run"
            lightning = FakeLightning(ending.handler)
            if phase == "training":
                signal.signal(signal.SIGTERM, lightning)
            first, *later = signals
            handler = lightning if phase == "training" and first == signal.SIGTERM else None
            outcome = deliver(handler or signal.getsignal(first), first)
            if phase == "after_the_run":  # outside the run: what the handler before did
                assert outcome is None and before == [first]
            elif first == signal.SIGINT:
                assert isinstance(outcome, KeyboardInterrupt)
            elif phase == "before_training":
                assert isinstance(outcome, Interrupted) and outcome.exit_code == 128 + first
                assert str(outcome) == f"interrupted by {first.name}"
            else:  # handed to Lightning, which stops after the current step
                assert outcome is None and lightning.received[-1] == signal.SIGTERM
            received = list(lightning.received)
            for signum in later:
                via = lightning if phase == "training" and signum == signal.SIGTERM else None
                assert deliver(via or signal.getsignal(signum), signum) is None
            assert ending.first == first and interrupts.run_stop_signal() == first
            assert before == ([first] if phase == "after_the_run" else [])
            assert lightning.received[: len(received)] == received
            assert all(s == signal.SIGTERM for s in lightning.received[len(received) :])
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        atexit.unregister(interrupts.ignored_until_exit)
        interrupts._ending = None


@examples(20)
@given(signals=st.lists(st.sampled_from(SIGNALS), min_size=1, max_size=3), training=st.booleans())
def test_a_signal_while_the_runs_ending_is_recorded_is_noted_not_raised(signals, training):
    """While the run's ending is worked out and recorded (``noted_only``), the first stop
    signal is noted, not raised: raised from a handler inside the record's write, it cut the
    write short and left the record ``running``. Lightning is not handed it either."""
    from multigpu.callbacks import interrupts

    previous = {s: signal.getsignal(s) for s in SIGNALS}
    try:
        with interrupts.one_ending() as ending:
            ending.armed = True
            lightning = FakeLightning(ending.handler)
            if training:
                signal.signal(signal.SIGTERM, lightning)
            with interrupts.noted_only(ending):
                for signum in signals:
                    assert deliver(ending.handler, signum) is None
            assert ending.raising and lightning.received == []
            assert interrupts.run_stop_signal() == signals[0]
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        atexit.unregister(interrupts.ignored_until_exit)
        interrupts._ending = None


def test_a_loader_workers_end_while_the_runs_ending_is_recorded_raises_nothing():
    """Torch's loader raises from SIGCHLD when a worker has died, wherever this process is: a
    signal to the process group ends the workers with the run, and that raise cut the record's
    write short (the record left ``running``, in 3 of 10 real runs). Held off while recorded."""
    import subprocess

    from multigpu.callbacks import interrupts

    def worker_died(signum, frame):
        raise RuntimeError("DataLoader worker (pid 1) is killed by signal: Terminated.")

    previous = {s: signal.getsignal(s) for s in (*SIGNALS, signal.SIGCHLD)}
    signal.signal(signal.SIGCHLD, worker_died)
    try:
        with interrupts.one_ending() as ending:
            ending.armed = True
            with interrupts.noted_only(ending):
                subprocess.run(["true"], check=True)  # a child ends: SIGCHLD
                time.sleep(0.1)
            assert signal.getsignal(signal.SIGCHLD) is worker_died
            with pytest.raises(RuntimeError, match="is killed by signal"):
                subprocess.run(["true"], check=True)
                time.sleep(0.1)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        interrupts._ending = None


@pytest.mark.parametrize("sent", [signal.SIGTERM, None])
def test_a_closed_loader_pipe_waits_a_moment_for_the_signal_that_closed_it(sent):
    """A signal to the process group ends a loader worker, whose closed pipe this process may
    read before its own handler runs: ``stop_signal_within`` waits for that signal (noted, not
    raised), and gives up after its time where none comes (a failure of another kind)."""
    import threading

    from multigpu.callbacks import interrupts

    previous = {s: signal.getsignal(s) for s in SIGNALS}
    try:
        with interrupts.one_ending() as ending:
            ending.armed = True
            if sent is not None:
                threading.Timer(0.5, os.kill, (os.getpid(), sent)).start()
            started = time.monotonic()
            assert interrupts.stop_signal_within(0.6 if sent is None else 30) == sent
            waited = time.monotonic() - started
            assert waited < 10 if sent is not None else waited >= 0.6
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        atexit.unregister(interrupts.ignored_until_exit)
        interrupts._ending = None


def deliver(handler, signum: int):
    """Call ``handler`` as the signal would; what it raised (or None)."""
    try:
        if callable(handler):
            handler(signum, None)
    except (KeyboardInterrupt, Interrupted) as raised:
        return raised
    return None


def test_a_signal_that_only_skipped_the_work_after_the_last_epoch_hands_the_signals_back():
    """The run completed (the signal skipped its test figures): the handlers before the run
    answer the next signal, so that a sweep's next job, or its report, can still be stopped;
    a run that a signal stopped keeps ignoring later ones until the process exits."""
    from multigpu.callbacks import interrupts

    signums = (signal.SIGINT, signal.SIGTERM)
    before = {s: signal.getsignal(s) for s in signums}
    with interrupts.one_ending():
        interrupts.note_stop_signal(signal.SIGINT)  # as fit notes one after the last epoch
    assert {s: signal.getsignal(s) for s in signums} == before
    assert interrupts.run_stop_signal() is None

    with pytest.raises(KeyboardInterrupt), interrupts.one_ending():
        interrupts.note_stop_signal(signal.SIGINT)
        raise KeyboardInterrupt
    try:
        assert interrupts.run_stop_signal() == signal.SIGINT
        assert all(signal.getsignal(s) != before[s] for s in signums)  # later ones ignored
    finally:
        atexit.unregister(interrupts.ignored_until_exit)
        interrupts._ending = None
        for signum, handler in before.items():
            signal.signal(signum, handler)


def test_a_signal_the_process_was_started_ignoring_stays_ignored():
    """``nohup python train.py ... &`` ignores SIGHUP so that the run outlives its terminal: the
    run had put its own handler in place, and a closed terminal ended it ``interrupted``."""
    import subprocess
    import sys

    probe = (
        "import signal; from multigpu.config.launch import stop_signals; "
        "print(sorted(s.name for s in stop_signals({})))"
    )

    def stops(ignored: bool) -> str:
        hup = signal.SIG_IGN if ignored else signal.SIG_DFL
        started = subprocess.run(
            [sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            check=True,
            preexec_fn=lambda: signal.signal(signal.SIGHUP, hup),
        )
        return started.stdout.strip()

    every = ["SIGALRM", "SIGHUP", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGXCPU"]
    every += ["SIGIO", "SIGPROF", "SIGPWR", "SIGSTKFLT", "SIGVTALRM", "SIGRTMIN", "SIGRTMAX"]
    every += ["SIGABRT", "SIGTRAP", "SIGSYS"]  # those that dump core, but the hardware faults
    numbers = " ".join(map(str, range(signal.SIGRTMIN + 1, signal.SIGRTMAX)))  # as bash names
    named = subprocess.run(["bash", "-c", f"kill -l {numbers}"], capture_output=True, text=True)
    every += [f"SIG{name}" for name in named.stdout.split()]
    assert stops(ignored=False) == str(sorted(every))
    assert stops(ignored=True) == str(sorted(name for name in every if name != "SIGHUP"))


def test_a_signal_another_handler_holds_at_start_stays_its_own():
    """A profiler that set its SIGPROF handler before the run (a sampling profiler starting
    the script) keeps it: only a signal left at its default, which would end the process
    unrecorded, is the run's to stop for."""
    import subprocess
    import sys

    probe = (
        "import signal; signal.signal(signal.SIGPROF, lambda *a: None); "
        "from multigpu.config.launch import stop_signals; "
        "print(sorted(s.name for s in stop_signals({})))"
    )
    started = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    names = ast.literal_eval(started.stdout)
    assert "SIGPROF" not in names and {"SIGVTALRM", "SIGIO", "SIGRTMIN+3"} <= set(names)


def test_a_folder_another_run_wrote_in_after_admission_is_not_taken(tmp_path):
    """A run admitted into a folder no one held yet takes its lock seconds later (after torch
    has built its parts); a sweep's job is admitted when the sweep starts. Another run that
    finished there in between had its record and checkpoint overwritten. Now the run, once it
    owns its folders, finds them as admission read them, or is refused and leaves them."""
    from conftest import compose_config

    from multigpu.run.admission import check_unchanged
    from multigpu.run.training import train

    folder = tmp_path / "run"
    cfg = compose_config([*SYNTHETIC, "trainer.max_epochs=1"], folder)
    admission = admitted(cfg, folder)
    check_unchanged(admission)  # nothing changed: taken
    other = train(compose_config([*SYNTHETIC, "trainer.max_epochs=1", "seed=9"], folder))
    assert other["status"] == COMPLETED.status
    before = snapshot(folder)
    with pytest.raises(OccupiedFolder, match=r"changed while this run was being checked"):
        check_unchanged(admission)
    assert snapshot(folder) == before


@pytest.mark.slow
@pytest.mark.subprocess
def test_sigterm_as_the_run_folder_appears_leaves_a_record_the_command_continues(tmp_path):
    """A SIGTERM 20-100 ms after Hydra made the run's folder (before ``train`` set its
    handlers) had ended the run with exit 143, no line and no ``metrics.json``. Wherever it
    lands now, the folder holds an ``interrupted`` record of the run's settings, the error is
    one line, and the same command continues the folder."""
    folder = tmp_path / "run"
    run = start_script(
        "train.py", *SYNTHETIC, "trainer.max_epochs=30", f"hydra.run.dir={folder}", cwd=tmp_path
    )
    wait_for(folder.is_dir, seconds=120)
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 143, stderr[-3000:]
    assert one_line(stderr).startswith("error: interrupted by SIGTERM")
    record = record_of(folder)
    assert record["status"] == "interrupted" and record["settings"]
    again = tiny_run(tmp_path, f"hydra.run.dir={folder}", "trainer.max_epochs=1")
    assert again.returncode == 0, again.stderr[-3000:]
    assert record_of(folder)["status"] == COMPLETED.status


# Where a SIGTERM is sent, by the function it follows: as the run takes its folder, and as
# Hydra changes into it (hydra.job.chdir=true) before the run's job starts.
STOPPED_AFTER = {
    "taken": ("multigpu.run.preflight", "acquire_all", []),
    "chdir": ("os", "chdir", ["hydra.job.chdir=true"]),
}


@pytest.mark.subprocess
@pytest.mark.slow  # a cold interpreter each, 7 s: the default suite's 5 minutes
@pytest.mark.parametrize("after", ["taken", "chdir"])
def test_sigterm_just_after_the_run_takes_its_folder_is_recorded_there(tmp_path, after):
    """The run's folder exists from the moment it is taken (``acquire_all``), before the
    handler that records an early stop was set: a SIGTERM there ended the process by the
    signal (status -15), the folder left with no record. So did one after Hydra changed into
    the folder (``hydra.job.chdir``), where the handler looked for the run by its relative
    path. Sent at exactly those points now, it is the run's one line, exit 143, and an
    ``interrupted`` record of its settings."""
    from conftest import run_python

    folder = tmp_path / "run"
    module, name, extra = STOPPED_AFTER[after]
    script = tmp_path / "sigterm_after.py"
    script.write_text(
        f"import os, runpy, signal, sys, {module} as patched\n"
        f"original = patched.{name}\n"
        "def then_stopped(*args, **kwargs):\n"
        "    done = original(*args, **kwargs)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    return done\n"
        f"patched.{name} = then_stopped\n"
        f"sys.argv[0] = {str(REPO / 'train.py')!r}\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    result = run_python(
        str(script), *SYNTHETIC, *extra, "hydra.run.dir=run", cwd=tmp_path, timeout=120
    )
    assert result.returncode == 143, result.stderr[-3000:]
    assert one_line(result.stderr).startswith("error: interrupted by SIGTERM")
    record = record_of(folder)
    assert record["status"] == "interrupted" and record["settings"]


@pytest.mark.slow  # a cold interpreter, 7 s
@pytest.mark.subprocess
def test_a_refusal_as_a_signal_is_held_is_said_before_the_signal_acts(tmp_path):
    """A SIGTERM held while the run takes its folders, which are then refused: the signal's
    default had ended the process before the refusal was said (no line). Now the line, then
    the process ends by the signal; nothing is written."""
    from conftest import run_python

    script = tmp_path / "refused_as_stopped.py"
    script.write_text(
        "import os, runpy, signal, sys\n"
        "import multigpu.run.preflight as preflight\n"
        "from multigpu.config.errors import OccupiedFolder\n"
        "def refused(*args, **kwargs):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    raise OccupiedFolder('run (hydra.run.dir) is in use by another run')\n"
        "preflight.acquire_all = refused\n"
        f"sys.argv[0] = {str(REPO / 'train.py')!r}\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    result = run_python(str(script), *SYNTHETIC, "hydra.run.dir=run", cwd=tmp_path, timeout=120)
    assert result.returncode == -signal.SIGTERM, result.stderr[-3000:]
    assert one_line(result.stderr) == "error: run (hydra.run.dir) is in use by another run"
    assert sorted(p.name for p in tmp_path.iterdir()) == [script.name]


@pytest.mark.slow  # a whole sweep's start, 8 s: the default suite's 5 minutes
@pytest.mark.subprocess
def test_a_tilde_in_the_sweep_folder_is_one_line_for_the_whole_sweep(tmp_path):
    """It had been refused once per job, the same reason repeated inside the sweep's line."""
    from conftest import run_script

    result = run_script(
        "train.py", "-m", *SYNTHETIC, 'hydra.sweep.dir="~/never"', "seed=1,2,3", cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr[-3000:]
    line = one_line(result.stderr)
    assert line.startswith("error: hydra.sweep.dir=~/never starts with ~")
    assert line.count("starts with ~") == 1
    assert list(tmp_path.iterdir()) == [] and not Path("~/never").expanduser().exists()


# 5. A run's folders lie apart from other runs' -----------------------------------------------
def held_elsewhere(folder: Path):
    """A process other than this one holding ``folder``'s lock, as a live run does (started,
    its lock taken); ended with ``kill``."""
    import subprocess
    import sys

    holding = (
        "import fcntl, os, sys, time; d = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY); "
        "fcntl.flock(d, fcntl.LOCK_EX); print('held', flush=True); time.sleep(120)"
    )
    folder.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-c", holding, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().strip() == "held"
    return process


def finished_sweep(folder: Path, jobs: tuple[str, ...] = ("seed_1", "seed_2")) -> Path:
    """A sweep's folder as a finished sweep leaves it: its multirun.yaml, a folder per job with
    its Hydra config and record, and its report."""
    folder.mkdir(parents=True)
    (folder / "multirun.yaml").write_text("hydra:\n  overrides:\n    task: [seed=1,2]\n")
    (folder / "summary.csv").write_text("job,status\n")
    for job in jobs:
        (folder / job / ".hydra").mkdir(parents=True)
        (folder / job / "checkpoints").mkdir()
        (folder / job / "checkpoints" / "last.ckpt").write_bytes(b"x")
        (folder / job / "metrics.json").write_text("{}")
    return folder


def a_run(folder: Path) -> Path:
    """A finished run's folder, as ``train.py`` leaves it."""
    (folder / ".hydra").mkdir(parents=True)
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"x")
    (folder / "metrics.json").write_text("{}")
    return folder


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder``: a file's bytes, None for a folder."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(folder.rglob("*"))
    }


def refused_line(cfg, folder: Path, base: Path) -> str:
    """The refusal of a run admitted into ``folder`` (one line), with nothing under ``base``
    changed."""
    before = tree(base)
    with pytest.raises(OccupiedFolder) as refused:
        admitted(cfg, folder)
    assert tree(base) == before
    said = str(refused.value)
    assert "\n" not in said
    return said


def test_a_run_into_a_finished_sweeps_folder_is_refused(tmp_path):
    """``hydra.run.dir=<a finished sweep's folder>`` was admitted: the run's record, config and
    checkpoint went among the sweep's jobs and report. Refused now, and so is a run inside it
    beside its jobs, or inside one of its jobs."""
    sweep = finished_sweep(tmp_path / "sweep")
    for folder, where in (
        (sweep, "is another sweep's folder (it holds that sweep's multirun.yaml)"),
        (sweep / "x", f"is inside another sweep's folder, {sweep} (it holds that sweep's "),
        (sweep / "seed_1" / "x", f"is inside another run's folder, {sweep / 'seed_1'} (it "),
    ):
        said = refused_line(composed(SYNTHETIC, folder), folder, tmp_path)
        assert said.startswith(f"{folder} (hydra.run.dir) {where}"), said
        assert said.endswith(
            "its files are left as they are; pass a hydra.run.dir outside other runs' folders"
        )


def test_the_folder_above_a_live_run_is_refused(tmp_path):
    """A live run's folder before its record is written is known by Hydra's ``.hydra`` (below
    a run's folder) and, above it, with its lock: a run given the folder above it (or the one
    above that) was admitted, around the live run's files."""
    live = tmp_path / "live" / "A"
    holder = held_elsewhere(live)
    (live / ".hydra").mkdir()  # Hydra's files, written as the run starts, before its record
    try:
        for folder in (tmp_path / "live", tmp_path):
            said = refused_line(composed(SYNTHETIC, folder), folder, tmp_path)
            assert said == (
                f"{folder} (hydra.run.dir) holds another run's folder, {live} (it holds that "
                "run's .hydra): its files are left as they are; pass a new hydra.run.dir, one "
                "that holds no other run's folder"
            )
        inside = live / "mine"
        said = refused_line(composed(SYNTHETIC, inside), inside, tmp_path)
        assert said.startswith(f"{inside} (hydra.run.dir) is inside another run's folder, {live}")
    finally:
        holder.kill()
        holder.wait()


def test_a_folder_holding_another_runs_checkpoint_folder_is_refused(tmp_path):
    """A run whose checkpoints went to ``callbacks.checkpoint.dirpath=X/ck``: a run given X was
    admitted, X/ck inside its folder. Refused; so is X/ck itself as a run folder."""
    ck = tmp_path / "X" / "ck"
    ck.mkdir(parents=True)
    (ck / "last.ckpt").write_bytes(b"x")
    folder = tmp_path / "X"
    said = refused_line(composed(SYNTHETIC, folder), folder, tmp_path)
    assert said.startswith(
        f"{folder} (hydra.run.dir) holds another run's checkpoint folder, {ck} (it holds that "
        "run's last.ckpt)"
    )
    said = refused_line(composed(SYNTHETIC, ck), ck, tmp_path)
    assert said.startswith(f"{ck} (hydra.run.dir) is another run's checkpoint folder")


def test_a_checkpoint_folder_holding_other_runs_is_refused(tmp_path):
    """``callbacks.checkpoint.dirpath=outputs``: the run's checkpoints among the folders of the
    runs there, and ``dirpath=<a sweep's folder>`` among its jobs."""
    outputs = tmp_path / "outputs"
    a_run(outputs / "2026-11-25" / "12-00-00")
    sweep = finished_sweep(outputs / "2026-11-25" / "13-00-00")
    run = tmp_path / "mine"
    for dirpath, where in (
        (outputs, f"holds another run's folder, {outputs / '2026-11-25' / '12-00-00'}"),
        (sweep, "is another sweep's folder"),
    ):
        cfg = composed([*SYNTHETIC, f"callbacks.checkpoint.dirpath={dirpath}"], run)
        said = refused_line(cfg, run, tmp_path)
        assert said.startswith(f"{dirpath} (callbacks.checkpoint.dirpath) {where} (it holds")


def as_sweep_job(cfg, sweep: Path):
    """``cfg`` as a job of a sweep in ``sweep`` sees it."""
    from omegaconf import open_dict

    with open_dict(cfg):
        cfg.hydra.mode = "MULTIRUN"
        cfg.hydra.sweep.dir = str(sweep)
    return cfg


def test_the_usual_layouts_are_admitted(tmp_path):
    """What the project makes: runs side by side in ``outputs/<date>``, a sweep's jobs inside
    its folder (the folder holding its multirun.yaml, its other jobs finished, its lock this
    process's), a run continued in its own folder, a checkpoint folder inside its run folder or
    of its own elsewhere holding its checkpoints."""
    from multigpu.run.admission import check_apart_from_other_runs

    outputs = tmp_path / "outputs" / "2026-11-25"
    for time_of_day in ("12-00-00", "12-30-00"):
        a_run(outputs / time_of_day)
    beside = outputs / "13-00-00"
    assert admitted(composed(SYNTHETIC, beside), beside).folders[RUN_FOLDER] == beside

    sweep = finished_sweep(outputs / "14-00-00", jobs=("seed_1",))
    job = sweep / "seed_2"
    cfg = as_sweep_job(composed([*SYNTHETIC, "seed=2"], job), sweep)
    assert admitted(cfg, job).sweep == sweep

    own = a_run(tmp_path / "own")
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "last.ckpt").write_bytes(b"x")
    for folders in (
        {RUN_FOLDER: own},
        {RUN_FOLDER: own, CHECKPOINT_FOLDER: own / "checkpoints"},
        {RUN_FOLDER: own, CHECKPOINT_FOLDER: own / "elsewhere"},
        {RUN_FOLDER: own, CHECKPOINT_FOLDER: ck},
        {RUN_FOLDER: ck / "run", CHECKPOINT_FOLDER: ck},
    ):
        check_apart_from_other_runs(folders)


def test_looking_for_other_runs_costs_the_same_among_hundreds(tmp_path, monkeypatch):
    """A run under an ``outputs/`` of hundreds of runs looks at the folders above its own
    only; a folder holding them stops at the first run it finds."""
    from multigpu.run import admission

    looked: list[Path] = []
    other_run = admission.other_run

    def counted(folder, *args, **kwargs):
        looked.append(folder)
        return other_run(folder, *args, **kwargs)

    monkeypatch.setattr(admission, "other_run", counted)
    counts = []
    for many in (3, 300):
        outputs = tmp_path / str(many) / "outputs"
        for n in range(many):
            (outputs / f"run{n:03}").mkdir(parents=True)
            (outputs / f"run{n:03}" / "metrics.json").write_text("{}")
        looked.clear()
        new = outputs / "new"
        admission.check_apart_from_other_runs({RUN_FOLDER: new})
        counts.append(len(looked))
        looked.clear()
        with pytest.raises(OccupiedFolder, match=r"holds another run's folder, .*run000 "):
            admission.check_apart_from_other_runs({RUN_FOLDER: outputs})
        assert [f for f in looked if outputs in f.parents] == [outputs / "run000"]
    assert counts[0] == counts[1]  # the folders above, whatever lies beside


MARK_FILES = ["metrics.json", ".hydra", "multirun.yaml", "last.ckpt", "live"]
NODES = ["a", "a/b", "a/b/c", "a/checkpoints", "a/d", "e"]
TARGETS = [*NODES, "a/new", "a/b/new", "a/b/c/new", "e/new", "new"]


def mark(folder: Path, how: str, held: list[int]) -> None:
    """``folder`` made another's as ``how`` says: a file or folder that marks it, or its lock
    held by an open file of its own (``flock``: no other open file may take it)."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    if how == "live":
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        held.append(descriptor)
    elif how == ".hydra":
        (folder / how).mkdir()
    else:
        (folder / how).write_bytes(b"x")


def allowed(folder: Path, how: str, written: Path, run: Path, checkpoints: Path, sweep) -> bool:
    """Whether a mark on ``folder``, seen from the ``written`` folder, is the new run's own (its
    record, Hydra's config and lock in its run folder; checkpoints and lock in its checkpoint
    folders), or its sweep's folder above it."""
    if folder == sweep and folder in written.parents:
        return True
    if folder == run:
        own = ["metrics.json", ".hydra", "live", *(["last.ckpt"] if run == checkpoints else [])]
        return how in own
    return folder in (checkpoints, run / "checkpoints") and how in ("last.ckpt", "live")


@examples(80)
@given(
    marks=st.fixed_dictionaries(
        {node: st.sampled_from([None, None, None, *MARK_FILES]) for node in NODES}
    ),
    run=st.sampled_from(TARGETS),
    checkpoints=st.sampled_from([None, "own", *TARGETS, "a/ck", "ck"]),
    in_sweep=st.booleans(),
)
def test_no_folder_a_run_writes_is_inside_or_holds_another_runs(
    tmp_path_factory, marks, run, checkpoints, in_sweep
):
    """Whatever folders around hold runs, sweeps, checkpoints or a live run's lock, and
    wherever the run and its checkpoints point: refused exactly when one of them is, is inside,
    or holds a folder so marked that is not the run's own (nor its sweep's, above it), in one
    line naming the setting, its folder and the other's, with nothing changed on disk."""
    from multigpu.run.admission import check_apart_from_other_runs

    base = canonical(tmp_path_factory.mktemp("apart"))
    held: list[int] = []
    try:
        for node, how in marks.items():
            if how is not None:
                mark(base / node, how, held)
        run_folder = base / run
        folders = {RUN_FOLDER: run_folder}
        if checkpoints is not None:
            folders[CHECKPOINT_FOLDER] = (
                run_folder / "checkpoints" if checkpoints == "own" else base / checkpoints
            )
        sweep = run_folder.parent if in_sweep and run_folder.parent != base else None
        own_checkpoints = folders.get(CHECKPOINT_FOLDER, run_folder / "checkpoints")
        foreign = [
            (folder, key, base / node)
            for node, how in marks.items()
            if how is not None
            for key, folder in folders.items()
            if related(folder, base / node)
            and not allowed(base / node, how, folder, run_folder, own_checkpoints, sweep)
            and marks_above(base / node, how, folder, {run_folder, own_checkpoints})
        ]
        before = tree(base)
        try:
            check_apart_from_other_runs(folders, sweep)
        except OccupiedFolder as refused:
            said = str(refused)
            assert foreign and "\n" not in said and tree(base) == before
            assert any(named(said, *pair) for pair in foreign), (said, foreign)
            return
        assert not foreign and tree(base) == before
    finally:
        for descriptor in held:
            os.close(descriptor)


def marks_above(other: Path, how: str, folder: Path, own: set[Path]) -> bool:
    """Whether ``how`` makes ``other`` another's, seen from ``folder``: above it, a record or a
    sweep's alone (a stray ``last.ckpt``, ``.hydra`` or lock up to ``/`` is no run's); below
    it, any mark but a lock (a live run shows its ``.hydra``); at one of the run's own
    folders, any mark."""
    if other in own | {o / "checkpoints" for o in own}:
        return True
    if other in folder.parents:
        return how in ("metrics.json", "multirun.yaml")
    return how != "live" or other == folder


def related(folder: Path, other: Path) -> bool:
    """Whether one of the two folders is, or is inside, the other."""
    return folder == other or other in folder.parents or folder in other.parents


def named(said: str, folder: Path, key: str, other: Path) -> bool:
    """Whether the refusal names ``folder`` by ``key`` and the other's folder as it lies."""
    if other == folder:
        return said.startswith(f"{folder} ({key}) is another ")
    relation = "is inside" if other in folder.parents else "holds"
    return said.startswith(f"{folder} ({key}) {relation} another ") and f", {other} (" in said


@pytest.mark.slow
@pytest.mark.subprocess
def test_train_py_into_a_finished_sweeps_folder_is_one_line_and_writes_nothing(tmp_path):
    """The tester's command: the run's record, checkpoint and config had gone into the sweep's
    folder among its jobs (exit 0). Refused before anything is written."""
    sweep = finished_sweep(tmp_path / "sweep")
    before = tree(tmp_path)
    refused = tiny_run(tmp_path, f"hydra.run.dir={sweep}")
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert one_line(refused.stderr) == (
        f"error: {sweep} (hydra.run.dir) is another sweep's folder (it holds that sweep's "
        "multirun.yaml): its files are left as they are; pass a hydra.run.dir outside other "
        "runs' folders"
    )
    assert tree(tmp_path) == before


# 6. A sweep's folder holds one sweep --------------------------------------------------------
def as_sweep(overrides: list[str], folder: Path):
    """The config of ``train.py -m <overrides> hydra.sweep.dir=<folder>`` as the sweep starts."""
    from omegaconf import open_dict

    cfg = as_sweep_job(composed(SYNTHETIC), folder)  # a swept value is not composed: its jobs are
    with open_dict(cfg):
        cfg.hydra.overrides.task = [*SYNTHETIC, *overrides]
    return cfg


def test_a_sweep_folder_inside_or_holding_other_runs_is_refused_as_the_sweep_starts(tmp_path):
    """``hydra.sweep.dir=outputs`` put the sweep's jobs among the runs there and its report over
    all of them; one at a run's folder, or inside one, put its jobs in that run's. Refused once,
    as the sweep starts; a new folder, or a sweep's own (whether this sweep's: below), is not."""
    outputs = tmp_path / "outputs"
    run = a_run(outputs / "2026-11-25" / "12-00-00")
    for folder, where in (
        (outputs, f"holds another run's folder, {run}"),
        (run, "is another run's folder"),
        (run / "sweep", f"is inside another run's folder, {run}"),
    ):
        with pytest.raises(OccupiedFolder) as refused:
            check_hydra_folder(as_sweep(["seed=1,2"], folder), None)
        assert str(refused.value).startswith(f"{folder} (hydra.sweep.dir) {where} (it holds ")
    for folder in (outputs / "2026-11-25" / "13-00-00", finished_sweep(tmp_path / "sweep")):
        check_hydra_folder(as_sweep(["seed=1,2"], folder), None)


def test_a_second_sweep_into_a_sweeps_folder_is_refused_and_its_own_command_continues(
    tmp_path, capsys
):
    """A second sweep with the same ``hydra.sweep.dir`` and other overrides replaced the first
    sweep's multirun.yaml (the record of what it ran) and joined its jobs in one report. Now it
    is refused in one line naming the first sweep's command, nothing changed; the first
    sweep's own command continues it (docs/sweeps.md), its multirun.yaml kept as it was."""
    from multigpu.run.sweep import own_sweep_folder

    folder = tmp_path / "sweep"
    folder.mkdir()
    first = as_sweep(["seed=1,2"], folder)
    own_sweep_folder(first)  # a new sweep marks its folder as its own
    recorded = (folder / "multirun.yaml").read_text()
    (folder / "seed_1").mkdir()
    (folder / "seed_1" / "metrics.json").write_text("{}")
    before = tree(folder)
    for other in (["seed=3,4"], ["seed=1,2", "model.optimizer.lr=0.3"], ["seed=2,1"]):
        with pytest.raises(SystemExit) as stop:
            own_sweep_folder(as_sweep(other, folder))
        assert stop.value.code == 2
        assert one_line(capsys.readouterr().err) == (
            f"error: {folder} (hydra.sweep.dir) holds another sweep, started with "
            f"{' '.join([*SYNTHETIC, 'seed=1,2'])} (its multirun.yaml): its jobs and files are "
            "left as they are; pass another hydra.sweep.dir (to continue that sweep: its own "
            "command again)"
        )
        assert tree(folder) == before
    own_sweep_folder(as_sweep(["seed=1,2"], folder))
    assert (folder / "multirun.yaml").read_text() == recorded and tree(folder) == before
    reordered = as_sweep([], folder)  # the same overrides typed in another order: the same jobs
    reordered.hydra.overrides.task = ["seed=1,2", *reversed(SYNTHETIC)]
    own_sweep_folder(reordered)
    assert tree(folder) == before


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_second_sweep_in_the_same_folder_leaves_the_first_as_it_was(tmp_path):
    """End to end: a sweep, then another with other overrides into its folder (it had run,
    replacing multirun.yaml and the report), then the first sweep's command again (it
    continues: its jobs finished, nothing is trained, multirun.yaml as it was)."""
    sweep = tmp_path / "sweep"
    command = ["-m", "seed=1,2", f"hydra.sweep.dir={sweep}"]
    first = tiny_run(tmp_path, *command)
    assert first.returncode == 0, first.stderr[-3000:]
    recorded = tree(sweep)
    other = tiny_run(tmp_path, "-m", "seed=3,4", f"hydra.sweep.dir={sweep}")
    assert other.returncode == 2, other.stderr[-3000:]
    assert one_line(other.stderr).startswith(
        f"error: {sweep} (hydra.sweep.dir) holds another sweep, started with "
    )
    assert tree(sweep) == recorded
    again = tiny_run(tmp_path, *command)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{sweep / 'seed_1'} already holds this run" in again.stdout + again.stderr
    assert (sweep / "multirun.yaml").read_bytes() == recorded["multirun.yaml"]
    for job in ("seed_1", "seed_2"):
        assert (sweep / job / "metrics.json").read_bytes() == recorded[f"{job}/metrics.json"]


def test_folders_owned_then_refused_are_left_as_they_were(tmp_path):
    """``acquire_all`` with a check that refuses (a run written there since admission): the
    folders it made are gone, a folder that was there stays, and nothing stays held."""
    from multigpu.storage.ownership import acquire_all, is_free, is_held

    (tmp_path / "kept").mkdir()
    folders = {"hydra.run.dir": tmp_path / "new" / "run", "dirpath": tmp_path / "kept"}

    def refuse() -> None:
        raise OccupiedFolder("written since admission")

    with pytest.raises(OccupiedFolder):
        acquire_all(folders, refuse)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]
    assert not any(is_held(f) for f in folders.values()) and is_free(tmp_path / "kept")
    (tmp_path / "new" / "run").mkdir(parents=True)
    (tmp_path / "new" / "other").mkdir()  # made meanwhile by someone else: not ours to remove
    with pytest.raises(OccupiedFolder):
        acquire_all({"hydra.run.dir": tmp_path / "new" / "run" / "x"}, refuse)
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["other", "run"]
    assert list((tmp_path / "new" / "run").iterdir()) == []


@pytest.mark.parametrize("stray", ["last.ckpt", ".hydra", "flock"])
def test_a_project_folder_with_a_stray_mark_or_lock_is_no_runs(tmp_path, stray):
    """A ``last.ckpt`` copied into the project to evaluate, a ``.hydra`` left by an app run with
    ``hydra.run.dir=.``, or ``flock <project> python train.py ...`` around the command: the
    project folder above every run folder is not another run's, and runs are admitted."""
    from multigpu.run.admission import check_apart_from_other_runs

    project = tmp_path / "project"
    project.mkdir()
    holder = None
    if stray == "flock":
        holder = held_elsewhere(project)
    elif stray == ".hydra":
        (project / stray).mkdir()
    else:
        (project / stray).write_bytes(b"x")
    try:
        run = project / "outputs" / "2026-11-27" / "12-00-00"
        check_apart_from_other_runs({RUN_FOLDER: run, CHECKPOINT_FOLDER: run / "checkpoints"})
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()


@pytest.mark.parametrize("mode", ["MULTIRUN", "RUN"])
def test_an_optuna_sweep_folder_without_multirun_yaml_is_a_sweeps(tmp_path, mode):
    """Hydra's Optuna sweeper wrote no ``multirun.yaml``: its folder is known as a sweep's by
    its jobs (``.hydra/hydra.yaml`` of a multirun), so its command continues it; a folder of
    single runs is still refused as a sweep's folder."""
    from multigpu.run.admission import check_sweep_folder

    folder = tmp_path / "study"
    for job in ("0", "1"):
        a_run(folder / job)
        (folder / job / ".hydra" / "hydra.yaml").write_text(f"hydra:\n  mode: {mode}\n")
    if mode == "MULTIRUN":
        check_sweep_folder(str(folder))
        return
    with pytest.raises(OccupiedFolder, match=f"holds another run's folder, {folder / '0'}"):
        check_sweep_folder(str(folder))


def test_a_sweeps_folder_is_where_the_sweep_started_also_under_chdir(tmp_path, monkeypatch):
    """``hydra.job.chdir=true`` runs each job in its own folder: a relative ``hydra.sweep.dir``
    is the one the sweep started in, not one inside the job's (every job had been refused as
    inside its own sweep's folder)."""
    from omegaconf import OmegaConf

    from multigpu.run.admission import sweep_folder

    started, job = tmp_path / "project", tmp_path / "project" / "outputs" / "s" / "seed_1"
    job.mkdir(parents=True)
    monkeypatch.chdir(job)
    cfg = OmegaConf.create(
        {
            "hydra": {
                "mode": "MULTIRUN",
                "sweep": {"dir": "outputs/s"},
                "runtime": {"cwd": str(started)},
            }
        }
    )
    assert sweep_folder(cfg) == canonical(started / "outputs" / "s")


def test_jobs_of_a_sweep_writing_one_inside_the_other_are_refused(tmp_path):
    """``-m callbacks.checkpoint.dirpath=ck,ck/inner``: the second job's checkpoints had gone
    inside the first's checkpoint folder (both completed); two jobs' folders may neither be
    one nor lie one inside the other."""
    from multigpu.run.preflight import shared_folders

    ck = tmp_path / "ck"
    written = [
        {RUN_FOLDER: tmp_path / "sw" / "a", CHECKPOINT_FOLDER: ck},
        {RUN_FOLDER: tmp_path / "sw" / "b", CHECKPOINT_FOLDER: ck / "inner"},
        {RUN_FOLDER: tmp_path / "sw" / "c", CHECKPOINT_FOLDER: ck},
    ]
    key, own = CHECKPOINT_FOLDER, "give each job its own"
    assert shared_folders(written) == [
        ({0, 1}, f"jobs 0 and 1 would write in {ck / 'inner'} (job 1's {key}), inside {ck} "
         f"(job 0's {key}); {own}"),
        ({0, 2}, f"jobs 0 and 2 would share the folder {ck} ({key}); {own}"),
        ({1, 2}, f"jobs 1 and 2 would write in {ck / 'inner'} (job 1's {key}), inside {ck} "
         f"(job 2's {key}); {own}"),
    ]  # fmt: skip
    apart = [{RUN_FOLDER: tmp_path / "sw" / name} for name in "abc"]
    assert shared_folders(apart) == []


def test_a_loaders_pipe_lost_to_a_stop_signal_ends_the_run_interrupted(tmp_path):
    """A SIGTERM to the process group can end a loader worker before this process stops after
    its step: the worker's closed pipe (``ConnectionResetError``) failed the run, exit 1, one
    time in ten. After a stop signal it is the stop: interrupted, 143, resumable."""
    from multigpu.callbacks import interrupts
    from multigpu.run.training import train

    folder = tmp_path / "run"
    probe = ["+callbacks.stop._target_=probes.StopThenLoseALoader", "+callbacks.stop.step=2"]
    handlers = {each: signal.getsignal(each) for each in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(Interrupted) as stopped:
            train(composed([*SYNTHETIC, "trainer.max_epochs=2", *probe], folder))
    finally:
        atexit.unregister(interrupts.ignored_until_exit)
        interrupts._ending = None
        for each, handler in handlers.items():
            signal.signal(each, handler)
    assert stopped.value.exit_code == 143 and str(stopped.value).startswith(
        "interrupted by SIGTERM"
    )
    assert record_of(folder)["status"] == "interrupted"
