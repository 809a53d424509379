"""What the package restates of Lightning, or reaches privately, is the source it was checked
against: a Lightning whose source of any of them differs fails here, naming the piece, so that
an upgrade is one file to read (``multigpu.callbacks.lightning_compat``)."""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect

import pytest

from multigpu.callbacks import lightning_compat


def located(path: str):
    """The object a dotted path names: the longest importable module, then attributes."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:]:
            found = getattr(found, name)
        return found
    raise ImportError(path)


PIECES = {**lightning_compat.RESTATED, **lightning_compat.PRIVATE, **lightning_compat.RELIED_ON}


@pytest.mark.parametrize("path", sorted(PIECES))
def test_every_piece_is_the_source_it_was_checked_against(path):
    pieces = PIECES
    source = inspect.getsource(located(path))
    assert hashlib.sha256(source.encode()).hexdigest() == pieces[path], (
        f"Lightning's {path} changed: read it against multigpu/callbacks/lightning_compat.py, then "
        "update the digest"
    )


def test_no_other_module_imports_a_private_name_of_lightning():
    from test_structure import SRC

    for path in (SRC / "multigpu").rglob("*.py"):
        if path.name == "lightning_compat.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and "lightning" in (node.module or ""):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path}: {node.module} {private}"
