"""The one reader of each file a run leaves for others to read: ``metrics.json`` (the run's
record, ``record_model``) and ``phases.json`` (where its steps' time went, ``phases_model``).

Each reader checks the whole file before any field is used, so that a caller (the sweep
report, a resumed run) either gets a dict of the declared shape or one ``BadRecord`` whose
message names the file and the first problem in one line: first the file and its bounds
(``json_file``), then its declaration (``file_model``). Then an older record is upgraded.

Torch-free: the report imports it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from multigpu.storage.file_model import checked
from multigpu.storage.json_file import MAX_BYTES, MAX_STRING, BadRecord, read_json
from multigpu.storage.phases_model import Phases
from multigpu.storage.record_model import SCHEMA, STATUSES, declaration, speed

__all__ = ["MAX_BYTES", "MAX_STRING", "SCHEMA", "STATUSES", "BadRecord", "speed"]


def upgrade(record: dict[str, Any]) -> dict[str, Any]:
    """A record of an earlier schema as this one reads it: epochs counted from 1 (schema 3)
    and speed by ``speed`` (before: medians of per-epoch values)."""
    if record.get("schema", SCHEMA) >= SCHEMA:
        return record
    written = record.get("history") or []
    history = upgrade_history(written)
    epoch_s, samples_per_s = speed(history)
    best = record.get("best_epoch")
    shift = int(history != written)  # with its history: a record read, written back and read
    return {
        **record,
        "history": history,
        "best_epoch": None if best is None else best + shift,
        "epoch_s": epoch_s,
        "samples_per_s": samples_per_s,
    }


def upgrade_history(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Histories start at the first epoch: one starting at 0 counts from 0 (schema < 3, and
    checkpoints written by those versions)."""
    if not history or history[0].get("epoch") != 0:
        return list(history)
    return [{**h, "epoch": h["epoch"] + 1} for h in history]


def records_below(folder: str | Path) -> list[Path]:
    """Every ``metrics.json`` below ``folder``, whatever it is: a link that leads nowhere is
    one too (``Path.rglob`` leaves those out), for the reader to refuse by name."""
    found = []
    for parent, folders, files in os.walk(folder):  # a folder so named is a bad record too
        found.extend(Path(parent) / name for name in (*files, *folders) if name == "metrics.json")
        folders[:] = [name for name in folders if name != "metrics.json"]
    return sorted(found)


def read_record(path: str | Path) -> dict[str, Any]:
    """``metrics.json`` checked whole, then upgraded to the current schema."""
    data = read_json(Path(path))
    return upgrade(checked(Path(path), data, declaration(data)))


def read_phases(path: str | Path) -> dict[str, Any]:
    """``phases.json`` checked whole."""
    return checked(Path(path), read_json(Path(path)), Phases)
