"""The data modules on the real offline Fashion-MNIST files, the synthetic set, and bad files."""

from __future__ import annotations

import errno
import gzip
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import copy_raw, examples, start_script, write_gz
from hypothesis import given
from hypothesis import strategies as st

from multigpu.config.errors import UserError
from multigpu.data import FashionMNISTDataModule, SyntheticDataModule
from multigpu.data.idx import ALL_RAW_FILES


def read_gz_labels(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=8)


def test_gz_files_are_unpacked_into_a_fresh_root(tmp_path, shared_data):
    before = sorted(p.name for p in (shared_data / "FashionMNIST" / "raw").iterdir())
    dm = FashionMNISTDataModule(
        root=str(tmp_path), source=str(shared_data), download=False, num_workers=0
    )
    dm.prepare_data()
    raw = tmp_path / "FashionMNIST" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == sorted(ALL_RAW_FILES)
    assert sorted(p.name for p in (shared_data / "FashionMNIST" / "raw").iterdir()) == before
    with gzip.open(shared_data / "FashionMNIST" / "raw" / "t10k-labels-idx1-ubyte.gz") as f:
        assert (raw / "t10k-labels-idx1-ubyte").read_bytes() == f.read()


def test_gz_files_inside_root_are_unpacked_in_place(tmp_path, shared_data):
    raw = tmp_path / "FashionMNIST" / "raw"
    shutil.copytree(shared_data / "FashionMNIST" / "raw", raw)
    FashionMNISTDataModule(root=str(tmp_path), download=False).prepare_data()
    assert all((raw / name).is_file() for name in ALL_RAW_FILES)


def test_fashion_mnist_sizes_labels_and_normalisation(data_root, shared_data):
    dm = FashionMNISTDataModule(root=str(data_root), download=False, batch_size=500, num_workers=0)
    dm.setup("fit")
    assert (len(dm.train_set), len(dm.test_set)) == (60_000, 10_000)
    raw = shared_data / "FashionMNIST" / "raw"
    for dataset, name in ((dm.train_set, "train"), (dm.test_set, "t10k")):
        expected = np.bincount(read_gz_labels(raw / f"{name}-labels-idx1-ubyte.gz"), minlength=10)
        assert torch.bincount(dataset.targets, minlength=10).tolist() == expected.tolist()
    assert torch.bincount(dm.test_set.targets).tolist() == [1000] * 10
    images, labels = next(iter(dm.test_dataloader()))
    assert images.shape == (500, 1, 28, 28) and labels.shape == (500,)
    assert abs(images.mean().item()) < 0.1 and abs(images.std().item() - 1) < 0.1


def test_subsets_and_validation_split_are_seeded_and_disjoint(data_root):
    def make(seed):
        dm = FashionMNISTDataModule(
            root=str(data_root),
            download=False,
            train_subset=1000,
            test_subset=300,
            val_size=200,
            seed=seed,
        )
        dm.setup("fit")
        return dm

    a, b, c = make(0), make(0), make(1)
    assert (len(a.train_set), len(a.val_set), len(a.test_set)) == (800, 200, 300)
    train_ids = {a.train_set.dataset.indices[i] for i in a.train_set.indices}
    val_ids = {a.val_set.dataset.indices[i] for i in a.val_set.indices}
    assert not train_ids & val_ids
    assert a.train_set.indices == b.train_set.indices != c.train_set.indices
    assert len(a.val_dataloader()) == 2  # test set first (as d2l), then the validation split


def test_synthetic_data_module():
    dm = SyntheticDataModule(num_train=96, num_test=40, batch_size=32, seed=3, num_workers=0)
    dm.setup("fit")
    images, labels = next(iter(dm.train_dataloader()))
    assert images.shape == (32, 1, 28, 28) and labels.max() < 10
    again = SyntheticDataModule(num_train=96, num_test=40, batch_size=32, seed=3, num_workers=0)
    again.setup("fit")
    assert torch.equal(dm.train_set.tensors[0], again.train_set.tensors[0])
    assert len(dm.test_set) == 40


def test_missing_files_name_folder_files_and_source(tmp_path):
    dm = FashionMNISTDataModule(root=str(tmp_path), download=False)
    with pytest.raises(UserError) as err:
        dm.prepare_data()
    message = str(err.value)
    assert str(tmp_path / "FashionMNIST" / "raw") in message and "\n" not in message
    assert all(f"{name}.gz" in message for name in ALL_RAW_FILES)
    assert "github.com/zalandoresearch/fashion-mnist" in message


def test_truncated_gz_names_the_file_and_leaves_no_partial(tmp_path, shared_data):
    raw = copy_raw(shared_data, tmp_path)
    bad = raw / "t10k-images-idx3-ubyte.gz"
    bad.write_bytes(bad.read_bytes()[:100_000])
    with pytest.raises(UserError, match="t10k-images-idx3-ubyte.gz.*truncated"):
        FashionMNISTDataModule(root=str(tmp_path), download=False).prepare_data()
    assert not (raw / "t10k-images-idx3-ubyte").exists()
    assert not list(raw.glob("*.partial"))


MALFORMED = [
    ("t10k-labels-idx1-ubyte", struct.pack(">II", 0x0803, 10_000) + bytes(10_000), "magic"),
    ("t10k-labels-idx1-ubyte", struct.pack(">II", 0x0801, 10_000) + bytes(9_000), "truncated"),
    ("t10k-labels-idx1-ubyte", struct.pack(">II", 0x0801, 3) + bytes([1, 12, 3]), "label 12"),
    ("t10k-images-idx3-ubyte", struct.pack(">IIII", 0x0803, 2, 32, 32) + bytes(2048), "size"),
    ("train-labels-idx1-ubyte", struct.pack(">II", 0x0801, 3) + bytes(3), "3 labels"),
]


@pytest.mark.parametrize("name,payload,message", MALFORMED)
def test_malformed_idx_files_name_the_file(tmp_path, shared_data, name, payload, message):
    raw = copy_raw(shared_data, tmp_path)
    write_gz(raw / f"{name}.gz", payload)
    with pytest.raises(UserError, match=message) as err:
        FashionMNISTDataModule(root=str(tmp_path), download=False).prepare_data()
    assert str(raw / name) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("name,payload,message", [*MALFORMED, ("t10k-labels-idx1-ubyte", None, "")])
def test_malformed_files_of_a_source_are_refused_before_a_run_writes(
    tmp_path, shared_data, name, payload, message
):
    """A broken ``.gz`` in ``data.source`` had been unpacked, and refused, only once the run's
    folder and record were made: ``check_reachable`` (the admission's) reads each file where
    it is, unpacking in memory, and writes nothing (None: a ``.gz`` cut short)."""
    from multigpu.data.locate import check_reachable

    source = copy_raw(shared_data, tmp_path / "source")
    packed = source / f"{name}.gz"
    if payload is None:
        packed.write_bytes(packed.read_bytes()[: packed.stat().st_size // 2])
        message = "cannot be unpacked .*truncated or corrupt"
    else:
        write_gz(packed, payload)
    with pytest.raises(UserError, match=message) as err:
        check_reachable(tmp_path / "root", source, False)
    said = str(err.value)
    assert said.startswith(str(source)) and f"{name}" in said and "\n" not in said
    assert not (tmp_path / "root").exists()


@pytest.mark.slow
def test_processes_preparing_one_fresh_folder_at_once_all_succeed(tmp_path, shared_data):
    """As the nodes of a multi-node run do on a shared data.root: each unpacks into a file of its
    own and renames it into place; whichever rename comes last, the files are whole."""
    script = tmp_path.parent / f"{tmp_path.name}-prepare.py"
    script.write_text(
        "import sys; from multigpu.data import FashionMNISTDataModule as D; "
        "D(root=sys.argv[1], source=sys.argv[2], download=False).prepare_data()"
    )
    args = (str(tmp_path), str(shared_data))
    processes = [start_script(str(script), *args, cwd=tmp_path) for _ in range(4)]
    for process in processes:
        stderr = process.communicate(timeout=300)[1]
        assert process.returncode == 0, stderr
    raw = tmp_path / "FashionMNIST" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == sorted(ALL_RAW_FILES)  # no .partial left
    for name in ALL_RAW_FILES:
        with gzip.open(shared_data / "FashionMNIST" / "raw" / f"{name}.gz") as f:
            assert (raw / name).read_bytes() == f.read()


def test_a_root_that_cannot_be_written_names_data_root_and_the_fix(tmp_path, shared_data):
    """The files are unpacked into data.root: one line naming it, not an OSError traceback."""
    blocked = tmp_path / "a-file"
    blocked.write_text("a file where the folder should be")
    dm = FashionMNISTDataModule(root=str(blocked), source=str(shared_data), download=False)
    with pytest.raises(UserError) as err:
        dm.prepare_data()
    message = str(err.value)
    assert message.startswith(f"data.root={blocked}: cannot write {blocked}/FashionMNIST/raw")
    assert "pass a writable data.root" in message and "\n" not in message


@pytest.mark.parametrize("source", [True, False], ids=["unpacked-from-source", "downloaded"])
def test_an_empty_read_only_root_names_data_root(source, tmp_path, shared_data, monkeypatch):
    """As on a read-only mount (simulated: the suite may run as root, which writes anyway)."""

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(Path, "mkdir", read_only)
    dm = FashionMNISTDataModule(
        root=str(tmp_path / "ro"), source=str(shared_data) if source else None, download=True
    )
    with pytest.raises(UserError) as err:
        dm.prepare_data()
    message = str(err.value)
    assert message.startswith(f"data.root={tmp_path / 'ro'}: cannot write ") and "\n" not in message
    assert "Read-only file system (the file system is read-only" in message
    assert "pass a writable data.root" in message


def test_a_missing_labels_file_is_named(tmp_path, shared_data):
    raw = copy_raw(shared_data, tmp_path)
    (raw / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(UserError) as err:
        FashionMNISTDataModule(root=str(tmp_path), download=False).prepare_data()
    message = str(err.value)
    assert f"Fashion-MNIST not found in {raw}: missing t10k-labels-idx1-ubyte (or .gz)" in message
    assert "missing t10k-images" not in message and "\n" not in message
    assert (raw / "t10k-images-idx3-ubyte").is_file()  # the others were unpacked


@pytest.mark.parametrize("where", ["unpacked", "packed", "in_the_source"])
def test_a_folder_in_place_of_a_data_file_is_named_in_one_line(tmp_path, shared_data, where):
    """Whatever the OS refuses to read (here a folder where a file should be) is a line
    naming the file, as a damaged file is."""
    name = "t10k-labels-idx1-ubyte"
    if where == "in_the_source":
        source = tmp_path / "source"
        source.mkdir()
        for other in ALL_RAW_FILES:
            (source / other).symlink_to(shared_data / "FashionMNIST" / "raw" / f"{other}.gz")
        (source / name).unlink()
        (source / name).mkdir()
        root, bad = tmp_path / "root", source / name
        module = FashionMNISTDataModule(root=str(root), source=str(source), download=False)
    else:
        raw = copy_raw(shared_data, tmp_path)
        bad = raw / (name if where == "unpacked" else f"{name}.gz")
        if where == "packed":
            bad.unlink()
        bad.mkdir()
        module = FashionMNISTDataModule(root=str(tmp_path), download=False)
    with pytest.raises(UserError) as err:
        module.prepare_data()
    assert str(bad) in str(err.value) and "\n" not in str(err.value), err.value


def test_where_the_files_are_is_checked_before_a_run_makes_its_folder(tmp_path, shared_data):
    """``check_reachable`` (run by the admission, torch-free) refuses what the data module
    would refuse later, with the same line; a root that already holds the files is fine even
    when it cannot be written."""
    from multigpu.data.locate import check_reachable

    (tmp_path / "a-file").write_text("")
    empty = tmp_path / "empty"
    for root, source, download, said in [
        (empty, tmp_path / "nowhere", True, "data.source="),
        (tmp_path / "a-file" / "root", shared_data, True, "a-file/root: cannot write"),
        (empty, None, False, "Fashion-MNIST not found in"),
    ]:
        with pytest.raises(UserError, match=said):
            check_reachable(root, source, download)
        module = FashionMNISTDataModule(root=str(root), source=source and str(source),
                                        download=download)  # fmt: skip
        with pytest.raises(UserError, match=said):
            module.prepare_data()
    check_reachable(empty, shared_data, False)  # from the source
    check_reachable(empty, None, True)  # downloaded later
    raw = copy_raw(shared_data, tmp_path / "ready")
    FashionMNISTDataModule(root=str(tmp_path / "ready"), download=False).prepare_data()
    raw.chmod(0o555)
    try:
        check_reachable(tmp_path / "ready", None, False)  # unpacked: nothing to write
    finally:
        raw.chmod(0o755)
    assert not empty.exists()


@examples(60)
@given(samples=st.integers(1, 200), processes=st.integers(1, 9), shuffle=st.booleans())
def test_evaluation_shards_hold_every_sample_once(samples, processes, shuffle):
    """Under DDP the processes' evaluation shards together hold each sample exactly once (a
    test set of 33 on 2 processes had been scored over 34, one image twice); training shards
    are evened out by repeating samples, as every process must take the same steps."""
    from multigpu.data.base import EpochSampler

    dataset = list(range(samples))
    shards = [
        list(EpochSampler(dataset, processes, rank, shuffle=shuffle, every_sample_once=True))
        for rank in range(processes)
    ]
    assert sorted(i for shard in shards for i in shard) == dataset
    lengths = [
        len(EpochSampler(dataset, processes, r, every_sample_once=True)) for r in range(processes)
    ]
    assert lengths == [len(shard) for shard in shards] and max(lengths) - min(lengths) <= 1
    training = [
        list(EpochSampler(dataset, processes, r, shuffle=shuffle)) for r in range(processes)
    ]
    assert len({len(shard) for shard in training}) == 1
    assert set(i for shard in training for i in shard) == set(dataset)
