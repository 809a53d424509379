"""Where Fashion-MNIST's files are, judged from the folders alone (torch-free): the data module
reads them from there, and a run is admitted only if they can be found, so that a wrong
``data.source``, a ``data.root`` that cannot be written or files found nowhere are refused
before the run makes its folder."""

from __future__ import annotations

from pathlib import Path

from multigpu.config.errors import UserError, WriteFailed
from multigpu.data.idx import ALL_RAW_FILES, check_found, found_in, missing_files
from multigpu.storage.atomic import check_creatable

SOURCE_URL = "https://github.com/zalandoresearch/fashion-mnist#get-the-data"


def raw_folder(root: Path) -> Path:
    return root / "FashionMNIST" / "raw"


def source_folder(source: Path | None) -> Path | None:
    """``<source>/FashionMNIST/raw`` (or ``<source>`` itself when the files lie there)."""
    if source is None:
        return None
    nested = raw_folder(source)
    return nested if nested.is_dir() else source


def check_source(source: Path | None) -> None:
    if source is not None and not source.is_dir():
        raise UserError(
            f"data.source={source} is not a folder: point it (or MULTIGPU_DATA) at a "
            "folder holding FashionMNIST/raw/*.gz, or set it to null"
        )


def missing_data_message(raw: Path, source: Path | None = None) -> str:
    """Which files are missing, where they were looked for, and where to get them."""
    missing = missing_files(raw) or ALL_RAW_FILES
    looked = f" (unpacked or .gz, there or in data.source={source})" if source else " (or .gz)"
    names = ", ".join(f"{name}.gz" for name in ALL_RAW_FILES)
    return (
        f"Fashion-MNIST not found in {raw}: missing {', '.join(missing)}{looked}; put "
        f"{names} there (from {SOURCE_URL}), or point data.source (or MULTIGPU_DATA) at a "
        "folder holding FashionMNIST/raw/"
    )


def unwritable_root_message(root: Path, raw: Path, error: WriteFailed) -> str:
    return (
        f"data.root={root}: {error}; the data files are unpacked (or downloaded) there: pass "
        f"a writable data.root, or put the four unpacked IDX files in {raw} first"
    )


def check_reachable(root: str | Path, source: str | Path | None, download: bool) -> None:
    """The files can be had: a ``source`` that is a folder, each file in ``root`` or
    ``source`` (unless downloading), and ``root`` writable where a file is still to be put
    there; each refusal is the line the data module would give later."""
    root = Path(root).expanduser()
    source = Path(source).expanduser() if source else None
    check_source(source)
    raw, found = raw_folder(root), source_folder(source)
    check_found([raw, *([found] if found is not None else [])])  # each file where it is
    if not missing_files(raw):
        return  # all four unpacked already: nothing to write
    try:
        check_creatable(raw)
    except WriteFailed as err:
        raise UserError(unwritable_root_message(root, raw, err)) from None
    folders = [raw, *([found] if found is not None else [])]
    anywhere = all(any(found_in(f, name) for f in folders) for name in ALL_RAW_FILES)
    if not anywhere and not download:
        raise UserError(missing_data_message(raw, found) + " (data.download=false)")
