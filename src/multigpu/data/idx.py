"""Reading and checking IDX files (the MNIST format), and unpacking them from ``.gz``.

torchvision reads only the uncompressed files and checks downloads against the official
checksums; a folder holding only ``.gz`` files (the offline copy, a manual download) is made
usable here, without any checksum, and every file is checked for shape before training starts.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import math
import shutil
import struct
import zlib
from pathlib import Path
from typing import BinaryIO

from multigpu.config.errors import UserError
from multigpu.storage.atomic import atomic_file, write_failed

IMAGES_MAGIC = 0x00000803  # unsigned bytes, 3 dimensions
LABELS_MAGIC = 0x00000801  # unsigned bytes, 1 dimension
IMAGE_SHAPE = (28, 28)
NUM_CLASSES = 10

RAW_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
ALL_RAW_FILES = [name for pair in RAW_FILES.values() for name in pair]


def read_header(path: Path, f: BinaryIO | None = None) -> tuple[int, tuple[int, ...]]:
    """Return (magic, dims) of an IDX file (``f``: read from it, e.g. unpacking, instead)."""
    with open(path, "rb") if f is None else contextlib.nullcontext(f) as f:
        head = f.read(4)
        if len(head) < 4:
            raise UserError(
                f"{path}: file too short to be an IDX file; delete it and fetch it again"
            )
        magic = struct.unpack(">I", head)[0]
        ndim = magic & 0xFF
        if magic not in (IMAGES_MAGIC, LABELS_MAGIC):
            raise UserError(
                f"{path}: not an IDX file of unsigned bytes (magic number {magic:#010x}, "
                f"expected {IMAGES_MAGIC:#010x} or {LABELS_MAGIC:#010x}); fetch it again"
            )
        raw_dims = f.read(4 * ndim)
        if len(raw_dims) < 4 * ndim:
            raise UserError(f"{path}: truncated IDX header; delete it and fetch it again")
        return magic, struct.unpack(f">{ndim}I", raw_dims)


def unreadable(path: Path, error: OSError) -> UserError:
    """A data file the OS will not read (a folder in its place, no permission)."""
    reason = error.strerror or type(error).__name__
    return UserError(f"{path}: cannot be read ({reason}); delete it and fetch it again")


def check_idx(path: Path, kind: str) -> int:
    """Check magic number, dimensions and size of an images or labels file, unpacked or
    ``.gz`` (unpacked in memory); return its count."""
    try:
        if path.suffix != ".gz":
            return check_idx_file(path, kind)
        with gzip.open(path, "rb") as packed:
            return check_idx_file(path, kind, packed)
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise UserError(
            f"{path}: cannot be unpacked ({err}); the file is truncated or corrupt, "
            "delete it and fetch it again"
        ) from None
    except OSError as error:
        raise unreadable(path, error) from None


def check_idx_file(path: Path, kind: str, packed: BinaryIO | None = None) -> int:
    """``packed``: the file's contents, unpacked as they are read (nothing is written)."""
    magic, dims = read_header(path, packed)
    expected = IMAGES_MAGIC if kind == "images" else LABELS_MAGIC
    if magic != expected:
        raise UserError(
            f"{path}: magic number {magic:#010x} is not that of an IDX {kind} file "
            f"({expected:#010x}); the file is misnamed or corrupt, fetch it again"
        )
    if kind == "images" and tuple(dims[1:]) != IMAGE_SHAPE:
        raise UserError(f"{path}: images of size {dims[1:]}, expected {IMAGE_SHAPE}; wrong file?")
    header = 4 + 4 * len(dims)
    expected_size = header + math.prod(dims)
    if packed is None:
        actual_size = path.stat().st_size
        labels = path.read_bytes()[header:] if kind == "labels" else b""
    else:  # one byte a label: no numpy before the config is checked
        actual_size, labels = header, bytearray()
        while chunk := packed.read(1 << 20):
            actual_size += len(chunk)
            labels += chunk if kind == "labels" else b""
    if actual_size != expected_size:
        raise UserError(
            f"{path}: {actual_size} bytes, but its header announces {expected_size}; "
            "the file is truncated or corrupt, delete it and fetch it again"
        )
    if kind == "labels":
        if labels and max(labels) >= NUM_CLASSES:
            bad = max(labels)
            raise UserError(f"{path}: label {bad} outside 0-{NUM_CLASSES - 1}; the file is corrupt")
    return int(dims[0])


def gunzip(source: Path, target: Path) -> None:
    """Unpack ``source`` into ``target`` atomically, so a failure never leaves half a file."""
    try:
        with gzip.open(source, "rb") as packed, atomic_file(target) as unpacked:
            shutil.copyfileobj(packed, unpacked, 1 << 20)
    except (OSError, EOFError, zlib.error) as err:
        raise UserError(
            f"{source}: cannot be unpacked ({err}); the file is truncated or corrupt, "
            "delete it and fetch it again"
        ) from None


def _fill(target: Path, folders: list[Path]) -> None:
    """Put ``target`` in place from the first folder holding it, unpacked or as ``.gz``."""
    for folder in folders:
        plain, packed = folder / target.name, folder / (target.name + ".gz")
        if plain.exists() and plain != target:
            try:
                with open(plain, "rb") as source, atomic_file(target) as copy:
                    shutil.copyfileobj(source, copy, 1 << 20)
            except OSError as error:  # reading the source (writing is atomic_file's to say)
                raise unreadable(plain, error) from None
            return
        if packed.exists():
            gunzip(packed, target)
            return


def prepare_raw_folder(raw: Path, source: Path | None = None) -> bool:
    """Fill ``raw`` with the four IDX files, unpacking ``.gz`` found in ``raw`` or ``source``
    (a read-only offline copy stays untouched), then check them all.

    Returns False when some file is found nowhere (``missing_files`` names them), True when all
    four are usable; a folder that cannot be written raises ``WriteFailed`` naming it.
    """
    folders = [raw] + ([source] if source is not None else [])
    for name in ALL_RAW_FILES:
        target = raw / name
        if not target.exists() and any(found_in(folder, name) for folder in folders):
            make_folder(raw)
            _fill(target, folders)
    if missing_files(raw):
        return False
    check_found([raw])
    return True


@functools.cache
def checked(path: str, kind: str, size: int, mtime_ns: int) -> int:
    return check_idx(Path(path), kind)


def check_found(folders: list[Path]) -> None:
    """The checks of each file found, where it would be taken from (the first folder holding
    it, unpacked or as ``.gz``, read in memory: nothing is written), and of each pair's counts:
    a broken file is refused before a run's folder is made."""
    counts = {}
    for name in ALL_RAW_FILES:
        kind = "images" if "images" in name else "labels"
        found = [p for f in folders for p in (f / name, f / f"{name}.gz") if p.exists()]
        if found:
            stat = found[0].stat()  # a sweep checks every job's: each file once, as it is
            counts[name] = (found[0], checked(str(found[0]), kind, stat.st_size, stat.st_mtime_ns))
    for images, labels in RAW_FILES.values():
        if images in counts and labels in counts:
            (images_path, n_images), (labels_path, n_labels) = counts[images], counts[labels]
            if n_images != n_labels:
                raise UserError(
                    f"{images_path} holds {n_images} images but {labels_path} {n_labels} "
                    "labels; the pair does not belong together, fetch both again"
                )


def found_in(folder: Path, name: str) -> bool:
    """Whether ``folder`` holds the file ``name``, unpacked or as ``.gz``."""
    return (folder / name).exists() or (folder / f"{name}.gz").exists()


def missing_files(raw: Path) -> list[str]:
    """The IDX files ``raw`` does not hold (unpacked)."""
    return [name for name in ALL_RAW_FILES if not (raw / name).exists()]


def make_folder(raw: Path) -> None:
    """``raw`` and its parents; a folder that cannot be created is a ``WriteFailed`` naming it
    (read-only, no permission, a file in the way), as a file that cannot be written is."""
    try:
        raw.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise write_failed(raw, error) from None
