"""``metrics.json``, the run's record: its settings, one entry per finished epoch, and how it
ended. ``train()`` owns it; its keys are documented once, in docs/records.md.

The file is the record: it is rewritten whenever the history changes (at the start, when a
checkpoint restores earlier epochs, after every epoch, once that epoch's checkpoint is written)
and when the run ends, which then only sets the status on what the file holds. That works
whichever process trained: this one, or spawned DDP workers whose history never comes back to
this process.

It never holds fewer epochs than it did: a run that continues its folder from a checkpoint
behind the folder's record (``callbacks.checkpoint.every_n_epochs`` > 1) keeps the record's
later epochs until it has trained them again (``RunRecord.claim``'s ``recorded``).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import struct
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lightning_utilities.core.rank_zero import rank_zero_only

from multigpu.config.launch import launched_rank
from multigpu.config.schema import Top, default_of
from multigpu.storage.atomic import write_json
from multigpu.storage.outcome import Outcome
from multigpu.storage.record_file import (  # noqa: F401 (upgrade: this module's too)
    BadRecord,
    read_record,
    speed,
    upgrade,
    upgrade_history,
)
from multigpu.storage.record_model import SCHEMA, Record

RUNNING = "running"
# Where launchers put a process's rank, in the order Lightning reads them.


def is_rank_zero() -> bool:
    """This process's rank as Lightning knows it once it has set it (its strategies do), else
    as the launcher's environment says: torch-free, for the record written before training."""
    rank = getattr(rank_zero_only, "rank", None)
    if rank is None:
        rank = launched_rank(os.environ)
    return str(rank) == "0"  # a rank that is no number is refused by config.launch


TIME_TO_TARGETS = tuple(default_of(Top, "time_to_targets"))


def single(value: float) -> float:
    """``value`` rounded to a float32, the precision test accuracy is computed in: a run at
    exactly 90% reads 0.8999999762, which is 0.9 as a float32 (a value beyond a float32's range
    stays as it is)."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except (OverflowError, struct.error):
        return value


def target_key(target: float) -> str:
    """A target as ``time_to`` names it: ``0.9`` -> ``"0.9"``."""
    return f"{target:g}"


def time_to(
    history: list[dict[str, Any]], targets: Iterable[float] = TIME_TO_TARGETS
) -> dict[str, dict[str, Any] | None]:
    """For each target test accuracy, the first epoch whose evaluation reached it (at or above
    it, both read as float32s), with its ``wall_s`` (the history's: since the run's start) and
    ``train_s`` (the training time up to the end of that epoch, the sum of ``epoch_s``; null if
    an epoch was not timed); null when no epoch reached it. A later dip below the target
    changes nothing. Keys in increasing order. A target is taken as its key names it (6
    significant digits): two that read alike are one (the second had overwritten the first's)."""
    found: dict[str, dict[str, Any] | None] = {}
    for target in sorted({float(target_key(float(t))) for t in targets}):
        found[target_key(target)] = None
        train_s: float | None = 0.0
        for entry in history:
            epoch_s = entry.get("epoch_s")
            train_s = None if train_s is None or epoch_s is None else train_s + epoch_s
            acc = entry.get("test_acc")
            if acc is not None and math.isfinite(acc) and single(acc) >= single(target):
                found[target_key(target)] = {
                    "epoch": entry.get("epoch"),
                    "train_s": train_s,
                    "wall_s": entry.get("wall_s"),
                }
                break
    return found


def summarize(history: list[dict[str, Any]], run: dict[str, Any], **start: Any) -> dict[str, Any]:
    """The record (``record_model.Record``, checked as it is built): final metrics from the
    per-epoch history (status ``running`` until the run ends); ``start``: the run's ``run_id``,
    ``settings``, ``resumed_from`` and ``init_from``, and ``time_to_targets`` (default
    ``TIME_TO_TARGETS``) for ``time_to``."""
    tested = [h for h in history if h.get("test_acc") is not None]
    best = max(tested, key=lambda h: h["test_acc"], default=None)
    last = history[-1] if history else {}
    epoch_s, samples_per_s = speed(history)
    return Record(
        schema=SCHEMA,
        status=RUNNING,
        reason=None,
        test_acc=last.get("test_acc"),
        best_test_acc=best["test_acc"] if best else None,
        best_epoch=best["epoch"] if best else None,
        train_loss=last.get("train_loss"),
        train_acc=last.get("train_acc"),
        val_acc=last.get("val_acc"),
        epoch_s=epoch_s,
        samples_per_s=samples_per_s,
        compile_s=compile_total(history),
        epochs=len(history),
        run=run,
        run_id=start.get("run_id"),
        settings=start.get("settings"),
        resumed_from=start.get("resumed_from"),
        init_from=start.get("init_from"),
        time_to=time_to(history, start.get("time_to_targets", TIME_TO_TARGETS)),
        history=history,
    ).model_dump(by_alias=True, exclude_unset=True)


# What tells one finished epoch from another: its number, when it ended and what it measured.
MARK_KEYS = ("epoch", "wall_s", "epoch_s", "train_loss", "train_acc", "test_acc")


def epoch_marks(history: list[dict[str, Any]]) -> list[str]:
    """Each epoch of ``history`` as its ``MARK_KEYS`` (NaN included, as JSON writes it): the
    record and the checkpoints of one run carry the same marks for the epochs they share; another
    run's epochs, or an epoch trained again, have others (their ``wall_s`` at least)."""
    return [json.dumps([number(h.get(k)) for k in MARK_KEYS], default=str) for h in history]


def number(value: Any) -> Any:
    """A number as a float (a checkpoint's model and a JSON file may keep ``1`` and ``1.0``)."""
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if is_number else value


def agree(history: list[dict[str, Any]], recorded: list[dict[str, Any]]) -> bool:
    """Whether two histories are of one run: the same epochs as far as both go (one continues
    the other, or they are equal)."""
    shared = min(len(history), len(recorded))
    return epoch_marks(history[:shared]) == epoch_marks(recorded[:shared])


def compile_total(history: list[dict[str, Any]]) -> float | None:
    """The seconds spent compiling over the epochs (null for a network not compiled): apart
    from ``epoch_s`` and so from ``time_to``'s ``train_s``; inside ``wall_s``."""
    found = [h["compile_s"] for h in history if h.get("compile_s") is not None]
    return sum(found) if found else None


class RunRecord:
    """Writes ``metrics.json``; every process keeps the history, only rank zero writes.

    A record moves forward only, and only by its own run: ``claim`` writes it first (the run
    was admitted and owns the folder, ``multigpu.run.admission``); every later write checks that the
    file is still this run's (its ``run_id``), and ``finish`` sets an end state only on a record
    that is ``running``. It never writes fewer epochs than the folder's record held when the run
    claimed it: epochs of that record beyond the run's own history stay until the run has
    trained that far again (``shown``).
    """

    def __init__(
        self,
        path: str | Path,
        run: dict[str, Any],
        settings: dict[str, Any] | None = None,
        started: float | None = None,
        **start: Any,
    ):
        self.path = Path(path)
        # When the run started (``time.monotonic``, the same clock in every process of this
        # machine): the history's ``wall_s`` counts from it (``EpochHistory``).
        self.started = time.monotonic() if started is None else started
        self.run = run
        self.settings = settings  # what the run computes (multigpu.config.computation)
        self.start = start  # resumed_from, init_from
        self.run_id = secrets.token_hex(8)
        self.claimed = False
        self.history: list[dict[str, Any]] = []  # what this run's state holds (its checkpoints')
        self.recorded: list[dict[str, Any]] = []  # the folder's record when the run claimed it
        self.kept: list[dict[str, Any]] = []  # ``recorded``, if the run's history continues it
        self.claimed_marks: list[str] = []  # the history written when the run claimed it

    @property
    def shown(self) -> list[dict[str, Any]]:
        """The history the file holds: the run's own, then the epochs of the record it claimed
        beyond it (the same run's, as its history was restored; trained again, they are
        replaced one by one)."""
        return [*self.history, *self.kept[len(self.history) :]]

    def _restored(self, history: list[dict[str, Any]]) -> None:
        """The run's history as it starts or a checkpoint restores it: the record it claimed
        is kept beyond it if the two are of one run."""
        self.history = upgrade_history(history)
        self.kept = self.recorded if agree(self.history, self.recorded) else []

    @property
    def current(self) -> dict[str, Any]:
        """The summary as it stands now."""
        return summarize(
            self.shown, self.run, run_id=self.run_id, settings=self.settings, **self.start
        )

    def claim(
        self, history: list[dict[str, Any]], recorded: list[dict[str, Any]] | None = None
    ) -> None:
        """Write the record of a run that starts now, with the history it continues;
        ``recorded``: the history of the folder's record it takes over (of the same run, which
        it continues), whose epochs beyond ``history`` are kept until trained again."""
        self.claimed = True
        self.recorded = upgrade_history(recorded or [])
        self._restored(history)
        self.claimed_marks = epoch_marks(self.shown)
        self._write(self.current, takeover=True)

    def trained(self) -> bool:
        """Whether the file's history holds an epoch this run trained (rank zero reads the
        file, which holds the history whichever process trained)."""
        on_disk = self.read() or {}
        return epoch_marks(on_disk.get("history") or []) != self.claimed_marks

    def set_history(self, history: list[dict[str, Any]]) -> None:
        """The history a checkpoint restored: the epochs the run resumed from (its own folder's
        record may have run ahead of its last checkpoint, or fallen behind it)."""
        self._restored(history)
        if self.start.get("resumed_from"):
            self.start["resumed_from"]["epochs"] = len(history)
        if self.claimed:
            self._write(self.current)

    def add_epoch(self, entry: dict[str, Any], write: bool = True) -> None:
        """The epoch's entry after the history; in place of its last entry when it continues
        that partial epoch (a run resumed from a checkpoint saved inside it, when Lightning
        goes on from that batch rather than from the next epoch). Written now, or by ``save``
        (``EpochHistory``: once the epoch's checkpoint is)."""
        before = self.history
        last = before[-1] if before else {}
        if last.get("partial_batches") is not None and last.get("epoch") == entry.get("epoch"):
            before = before[:-1]
        self.history = upgrade_history([*before, entry])
        if write:
            self.save()

    def save(self) -> None:
        """Write the record as it stands, once this run has claimed it."""
        if self.claimed:
            self._write(self.current)

    def finish(self, outcome: Outcome) -> dict[str, Any]:
        """Set how the run ended on what the file holds (written by whichever process
        trained) and return it; a record that is not this run's, or has already ended, is
        left as it is."""
        on_disk = self.read() if self.claimed else None
        if on_disk is None or on_disk.get("run_id") != self.run_id:
            return {**self.current, "status": outcome.status, "reason": outcome.reason}
        if on_disk.get("status") != RUNNING:
            return on_disk
        on_disk.update(status=outcome.status, reason=outcome.reason)
        self._write(on_disk)
        return on_disk

    def read(self) -> dict[str, Any] | None:
        """The record the file holds, checked whole (``multigpu.storage.record_file``); None when
        there is none, or none to trust: the run then writes its own over it."""
        if not self.path.exists():
            return None
        try:
            return read_record(self.path)
        except BadRecord:
            return None

    def _write(self, summary: dict[str, Any], takeover: bool = False) -> None:
        """Write on rank zero, only over this run's own record (or, when the run claims its
        folder, over the record it was admitted to continue)."""
        if not is_rank_zero():
            return
        on_disk = {} if takeover else (self.read() or {})
        if not takeover and (on_disk.get("run_id") != self.run_id or on_disk["status"] != RUNNING):
            return  # another run's record, or one that has ended: left as it is
        write_json(self.path, summary)


def record_ending(path: str | Path, outcome: Outcome) -> None:
    """How a run ended, recorded by the process that saw it end without being the run (a
    launcher whose job died): a ``running`` record gets the end state; a folder without a
    record gets one; an ended record stays as it is."""
    path = Path(path)
    if not path.exists():
        write_json(path, {**summarize([], {}), "status": outcome.status, "reason": outcome.reason})
        return
    try:
        on_disk = read_record(path)
    except BadRecord:
        return  # not readable: not ours to replace
    if on_disk["status"] == RUNNING:
        on_disk.update(status=outcome.status, reason=outcome.reason)
        write_json(path, on_disk)
