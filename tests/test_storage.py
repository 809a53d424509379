"""Disks that refuse writes, with real mounts: a read-only run or checkpoint folder is refused
before training in one line; a disk that fills up mid-run ends it with one line naming the file
and the cause, nothing half-written left, the previous checkpoint intact and the record saying
why (or the line saying it could not). Mounting needs root: elsewhere these tests skip."""

from __future__ import annotations

import errno
import json
import os
import shlex
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import TINY, examples, run_script
from hypothesis import given
from hypothesis import strategies as st
from test_faults import PROBES_ENV, RUN

from multigpu.storage.checkpoint import load_checkpoint

pytestmark = pytest.mark.subprocess


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def can_mount(tmp_path_factory) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs or a read-only bind mount needs root")
    probe = tmp_path_factory.mktemp("probe")
    try:
        mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe))
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.skip(f"this machine cannot mount a tmpfs: {getattr(err, 'stderr', err)}")
    subprocess.run(["umount", str(probe)], check=True)


@contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """``folder``, seen through a read-only bind mount."""
    view = folder.with_name(folder.name + "_ro")
    view.mkdir()
    mount("--bind", str(folder), str(view))
    try:
        mount("-o", "remount,ro,bind", str(view))
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=True)


@contextmanager
def small_disk(folder: Path, size: str) -> Iterator[Path]:
    folder.mkdir()
    mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder))
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def last_line(result) -> str:
    return result.stderr.strip().splitlines()[-1]


def test_a_read_only_run_folder_is_refused_before_anything(can_mount, tmp_path):
    (tmp_path / "disk").mkdir()
    with read_only(tmp_path / "disk") as disk:
        result = run_script(
            "train.py", *TINY, "data=synthetic", f"hydra.run.dir={disk}/run", cwd=tmp_path
        )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert last_line(result) == (
        f"error: cannot write {disk}/run: Read-only file system (the file system is read-only: "
        "write elsewhere): pass a writable hydra.run.dir"
    )
    assert not list((tmp_path / "disk").iterdir())


def test_a_read_only_checkpoint_folder_is_refused_before_anything(can_mount, tmp_path):
    """Checked with every folder the run writes in, before any is made (it had been refused
    only once the run's folder and record existed)."""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    with read_only(run_dir / "checkpoints") as checkpoints:
        result = run_script(
            "train.py",
            *TINY,
            "data=synthetic",
            f"hydra.run.dir={run_dir}",
            f"callbacks.checkpoint.dirpath={checkpoints}",
            cwd=tmp_path,
        )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert last_line(result) == (
        f"error: cannot write {checkpoints}: Read-only file system (the file system is "
        "read-only: write elsewhere): pass a writable callbacks.checkpoint.dirpath"
    )
    assert not (run_dir / "metrics.json").exists() and not (run_dir / ".hydra").exists()


@pytest.mark.parametrize(
    "free",
    [pytest.param(200_000, marks=pytest.mark.slow), pytest.param(0, marks=pytest.mark.slow)],
    ids=["room_for_the_record", "no_room_at_all"],
)
def test_a_disk_that_fills_up_mid_run(free, can_mount, tmp_path, data_root):
    """The disk fills when epoch 2 starts: its checkpoint cannot be written (the record's entry
    for it comes after), nor, with no room at all, the record's ending. Epoch 1's checkpoint
    is intact, the record holds epoch 1 as the checkpoint does, and the run resumes from it
    elsewhere."""
    with small_disk(tmp_path / "disk", "24m") as disk:
        run_dir = disk / "run"
        result = run_script(
            "train.py",
            *RUN,
            f"data.root={data_root}",
            f"hydra.run.dir={run_dir}",
            "+callbacks.fill._target_=probes.FillDisk",
            f"+callbacks.fill.path={disk}/filler",
            "+callbacks.fill.epoch=1",
            f"+callbacks.fill.free={free}",
            cwd=tmp_path,
            env=PROBES_ENV,
        )
        last = run_dir / "checkpoints" / "last.ckpt"
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
        said = (
            f"error: cannot write {last}: No space left on device (the disk is full: free "
            f"space, or write elsewhere); resume with ckpt_path={last}"  # not under outputs/
        )
        if not free:
            said += "; metrics.json could not be updated either"
        assert last_line(result).startswith(said), last_line(result)
        assert not list(run_dir.rglob("*.partial"))
        assert load_checkpoint(last)["epoch"] == 0  # epoch 1's, intact and verified
        recorded = json.loads((run_dir / "metrics.json").read_text())
        assert recorded["epochs"] == 1  # as the checkpoint
        if free:
            assert recorded["status"] == "failed"
            assert recorded["reason"] == last_line(result)[len("error: ") :]
        else:  # its ending could not be written, and the line said so
            assert recorded["status"] == "running"
        (disk / "filler").unlink()
        resumed = run_script(
            "train.py", *RUN, f"data.root={data_root}", f"ckpt_path={last}", cwd=tmp_path
        )
    assert resumed.returncode == 0, resumed.stderr[-3000:]


def test_a_run_folder_behind_a_looping_link_or_a_file_is_refused_in_one_line(tmp_path):
    """What Hydra's makedirs would fail on with a traceback, named before it runs."""
    from multigpu.config.errors import WriteFailed
    from multigpu.storage.atomic import check_creatable

    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "file").write_text("")
    for folder, said in [
        (tmp_path / "a", "is a link that leads nowhere"),
        (tmp_path / "a" / "run", f"{tmp_path / 'a'} is a link that leads nowhere"),
        (tmp_path / "dangling" / "run", "is a link that leads nowhere"),
        (tmp_path / "file" / "run", f"{tmp_path / 'file'} is a file, not a folder"),
    ]:
        with pytest.raises(WriteFailed, match=said):
            check_creatable(folder)
    check_creatable(tmp_path / "new" / "run")  # a folder still to be made: fine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "dangling", "file"]


@examples(40)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=3), st.sampled_from(["a", "ü", "€"]))
def test_a_folder_is_refused_exactly_where_the_os_could_not_make_it(tmp_path_factory, sizes, char):
    """A name longer than the file system holds is refused before anything is made, and only
    then, as ``os.makedirs`` itself finds (the second computation, in a scratch folder): a long
    checkpoint folder had left the folders above it behind, empty."""
    from multigpu.config.errors import WriteFailed
    from multigpu.storage.atomic import check_creatable

    base = tmp_path_factory.mktemp("names")
    folder = base.joinpath(*(char * size for size in sizes))
    try:
        check_creatable(folder)
        refused = None
    except WriteFailed as err:
        refused = err
    try:
        os.makedirs(base / "scratch" / folder.relative_to(base))
        makeable = True
    except OSError as err:
        assert err.errno == errno.ENAMETOOLONG
        makeable = False
    assert (refused is None) == makeable
    assert refused is None or "bytes a name can have here" in str(refused)
    assert [p.name for p in base.iterdir()] == ["scratch"]  # nothing made by the check


@pytest.mark.parametrize("names", [14, 16, 17])
def test_a_folder_whose_path_leaves_no_room_for_its_files_is_refused(tmp_path, names):
    """A path of names each short enough but together near the OS's 4096 bytes: a run folder
    there had failed writing its record (a traceback, after Hydra's files), a checkpoint folder
    once the first epoch had trained (found by a fresh try). Taken exactly where the folder
    and a file of the longest name in it can be made (the second computation)."""
    from multigpu.config.errors import WriteFailed
    from multigpu.storage.atomic import check_creatable

    folder = tmp_path.joinpath(*("d" * 250 for _ in range(names)))
    try:
        check_creatable(folder)
        refused = None
    except WriteFailed as err:
        refused = str(err)
    try:
        folder.mkdir(parents=True)
        (folder / ("f" * 255)).write_text("")
        makeable = True
    except OSError as err:
        assert err.errno == errno.ENAMETOOLONG
        makeable = False
    assert (refused is None) == makeable, refused
    assert refused is None or "more than the 4096 bytes a path can have" in refused


def test_the_report_of_a_sweep_on_a_read_only_disk_is_one_line(can_mount, tmp_path, capsys):
    from test_record_file import record, write_job

    from multigpu.tools.report.__main__ import main

    sweep = tmp_path / "sweep"
    write_job(sweep, "lr_0.1", record())
    with read_only(sweep) as view:
        assert main([str(view)]) == 1
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and said.startswith(f"error: cannot write the report in {view}")


@pytest.mark.parametrize(
    "files",
    [
        [],
        ["checkpoints/last.ckpt"],
        ["last.ckpt", "epoch=1.ckpt"],
        ["epoch=1.ckpt", "epoch=2.ckpt"],
        ["notes.txt", "checkpoints/epoch=3.ckpt"],
        ["notes.txt"],
    ],
)
def test_a_folder_given_as_a_checkpoint_is_answered_with_one_that_exists(files, tmp_path):
    """A folder as ``ckpt_path``: the file suggested is in it (a run's last one, else the
    newest .ckpt in it or its checkpoints/); one holding none had been answered with a run's
    path it did not hold."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from multigpu.storage.ckpt_path import BadCheckpoint, checkpoint_file

    for age, name in enumerate(files):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
        os.utime(tmp_path / name, (1000 + age, 1000 + age))
    with pytest.raises(BadCheckpoint) as refused:
        checkpoint_file(tmp_path)
    said = str(refused.value)
    if not any(name.endswith(".ckpt") for name in files):
        assert said.startswith(f"ckpt_path={tmp_path} is a folder that holds no checkpoint")
        return
    (override,) = OverridesParser.create().parse_overrides(shlex.split(said.rpartition("e.g. ")[2]))
    suggested = Path(override.value())  # the advice as the shell and Hydra read it back
    assert suggested.is_file() and suggested.parent in (tmp_path, tmp_path / "checkpoints")
    checkpoint_file(suggested)  # followed, the advice is taken
    if "epoch=2.ckpt" in files:
        assert suggested.name == "epoch=2.ckpt"  # the newest
    if "checkpoints/epoch=3.ckpt" in files:
        assert suggested == tmp_path / "checkpoints" / "epoch=3.ckpt"


def test_a_dangling_link_among_a_folders_checkpoints_is_passed_over(tmp_path):
    """One ``.ckpt`` link to nothing had emptied the whole list of the folder's checkpoints."""
    from multigpu.storage.ckpt_path import checkpoint_in

    (tmp_path / "epoch=2.ckpt").write_bytes(b"x")
    (tmp_path / "gone.ckpt").symlink_to(tmp_path / "nowhere.ckpt")
    assert checkpoint_in(tmp_path) == tmp_path / "epoch=2.ckpt"


def test_a_refused_checkpoint_is_said_of_its_key_advice_and_all(tmp_path):
    """A damaged ``init_from`` had been told to use the one before it as ``ckpt_path=...``,
    which, followed, resumed the old run instead of starting from its weights; the refusal
    keeps its parts through a copy or a pickle (a process's error sent to another)."""
    import copy
    import pickle

    from multigpu.config.errors import add_note, message
    from multigpu.storage.ckpt_path import BadCheckpoint

    last, previous = tmp_path / "a run" / "last.ckpt", tmp_path / "a run" / "previous.ckpt"
    refused = BadCheckpoint(last, "is damaged", previous=previous).said_of("init_from")
    quoted = "'init_from=\"" + str(previous) + "\"'"  # Hydra's quotes, in the shell's
    assert str(refused) == f"init_from={last} is damaged; use the one before it, {quoted}"
    add_note(refused, "resume with ...")
    for again in (copy.copy(refused), pickle.loads(pickle.dumps(refused))):
        assert str(again) == str(refused) and again.problem == "is damaged"
        assert message(again) == message(refused)  # its notes kept
