"""``metrics.json``, the run's record, declared once: each key's type and range, and its meaning
(the ``description``s, published with the JSON Schema in docs/records.md). Its writer
(``multigpu.storage.record.summarize``) builds it; its reader (``record_file``) checks by it.
A key may be left out (older versions) unless required; keys a newer version adds are kept."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, model_validator

from multigpu.config.computation import RESOLVED, same
from multigpu.storage.file_model import FileModel
from multigpu.storage.json_file import shown

SCHEMA = 3  # 3: epochs counted from 1; epoch_s and samples_per_s by ``record_file.speed``
ROUNDING = 1e-9  # how far a figure recomputed from the others may differ from the written one
MAX_DEVICES = 10**6
Status = Literal["running", "completed", "interrupted", "diverged", "failed"]
STATUSES = get_args(Status)
Count = Annotated[int, Field(ge=0)]
Devices = Annotated[int, Field(ge=0, le=MAX_DEVICES)]
Fraction = Annotated[float, Field(ge=0, le=1)]  # an accuracy
Amount = Annotated[float, Field(ge=0)]  # seconds, samples per second, megabytes
DevicesAsGiven = Count | list[Count] | str  # schema 1: trainer.devices as given
# The settings the run's resolved settings repeat (``multigpu.config.computation.RESOLVED`` and
# the values ``Run`` takes as they are): the two are written together and never differ.
REPEATED = {**RESOLVED, "seed": "seed", "defaults.data": "data"}
REPEATED |= {"model.net.width": "width", "model.net.norm": "norm"}


def timed_epochs(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The epochs speed is measured over: the whole ones (a partial epoch is shorter, not
    faster) but the first, which also pays for warm-up (data loading starts, allocator, cuDNN
    autotuning), unless it is the only one; with no whole epoch, the partial ones."""
    timed = [h for h in history if h.get("epoch_s") and h.get("samples_per_s")]
    timed = [h for h in timed if h.get("partial_batches") is None] or timed
    return timed[1:] if len(timed) > 1 else timed


def speed(history: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    """(seconds per epoch, samples per second) over ``timed_epochs``: total time over epochs,
    total samples over total time. One definition, so two runs compare the same way by either.
    No seconds per epoch when no epoch ran whole (partial ones are all it has)."""
    timed = timed_epochs(history)
    if not timed:
        return None, None
    seconds = sum(float(h["epoch_s"]) for h in timed)  # floats: no integer overflows a division
    samples = sum(float(h["samples_per_s"]) * h["epoch_s"] for h in timed)
    whole = all(h.get("partial_batches") is None for h in timed)
    return (seconds / len(timed) if whole else None), samples / seconds


def about(description: str, **bounds: Any) -> Any:
    """A key that may be null or left out."""
    return Field(None, description=description, **bounds)


class Run(FileModel):
    """The run's resolved settings."""

    strategy: str | None = about("the strategy group's option, as resolved")
    accelerator: str | None = about("cpu or cuda")
    devices: Devices | None = about("all of the run's devices, over every node")
    device_ids: list[Count] | None = about("the devices it used on each node")
    num_nodes: Count | None = about("nodes")
    processes: Count | None = about("the world size: 1, or one process per device under DDP")
    launcher: str | None = about("who started the processes: none, popen, spawn or cluster")
    batch_size: Count | None = about(
        "global: what one training step loads, over every device (an update sums "
        "trainer.accumulate_grad_batches of them)"
    )
    process_batch_size: Count | None = about("what each process loads per step")
    lr: float | None = about("the learning rate after scaling (model.lr_scaling)")
    warmup_epochs: float | None = about("the lr rises to lr over these first epochs")
    warmup_from: float | None = about("the lr the warm-up starts from")
    precision: str | float | None = about("trainer.precision")
    width: int | None = about("model.net.width")
    norm: str | None = about("the network's normalization")
    max_epochs: int | None = about("trainer.max_epochs")
    seed: int | None = about("the seed")
    data: str | None = about("the data group's option")
    num_workers: Count | None = about(
        "the loader's processes, as the machine chose them when data.num_workers is null"
    )
    pin_memory: bool | None = about(
        "the loader's, as the machine chose it when data.pin_memory is null"
    )
    fused: bool | None = about(
        "whether SGD's update ran fused, as chosen when model.optimizer.fused is null"
    )


class CompletedRun(Run):
    """A completed run had all its settings: what the report compares and plots is there."""

    strategy: str
    devices: Annotated[int, Field(ge=1, le=MAX_DEVICES)]
    batch_size: Annotated[int, Field(ge=1)]
    lr: float


class RunV1(Run):
    devices: DevicesAsGiven | None = None


class CompletedRunV1(CompletedRun):
    devices: DevicesAsGiven  # type: ignore[assignment]


class Measured(FileModel):
    """What an epoch measured: a history's entry, and a bench's row (its last epoch)."""

    test_acc: Fraction | None = about("test accuracy after the epoch")
    epoch_s: Amount | None = about("the epoch's training time (compilation taken out)")
    peak_gpu_mb: Amount | None = about("peak GPU memory (null on the CPU)")


class Epoch(Measured):
    """One finished epoch."""

    epoch: Count = Field(description="the epoch, counted from 1 (from 0 before schema 3)")
    train_loss: float | None = about("the epoch's mean training loss")
    train_acc: Fraction | None = about("the epoch's training accuracy")
    lr: float | None = about(
        "the scheduled learning rate as the epoch starts (a warm-up scales each step's further)"
    )
    test_loss: float | None = about("test loss after the epoch")
    val_acc: Fraction | None = about("validation accuracy (null without a validation split)")
    samples_per_s: Amount | None = about("training samples per second over the epoch")
    compile_s: Amount | None = about(
        "seconds spent compiling in it, and in the first epoch the run trains, warming the "
        "compiled step up before it (null when not compiled)"
    )
    wall_s: Amount | None = about(
        "seconds since the run's start at the end of the epoch's evaluation"
    )
    partial_batches: Count | None = about(
        "the batches the run trained in it when fewer than the epoch holds (+trainer.max_steps "
        "or +trainer.max_time stopped it, or +trainer.fast_dev_run trained that many); null: "
        "the whole epoch"
    )


class Reached(FileModel):
    """The first epoch whose test accuracy reached a target."""

    epoch: Count = Field(description="the epoch")
    train_s: Amount | None = Field(description="the sum of epoch_s up to it")
    wall_s: Amount | None = Field(description="its wall_s")


class Record(FileModel):
    """A run's record, rewritten when it starts, after every epoch and when it ends."""

    version: int = Field(
        alias="schema",
        ge=1,
        description=f"{SCHEMA} (records of schema 2 are read as {SCHEMA}: epochs from 1, speed "
        "by its one definition)",
    )
    status: Status = Field(
        description="running, completed (also when its stdout or stderr went away), interrupted "
        "(Ctrl-C, SIGTERM, SIGHUP), diverged (NaN/inf loss) or failed"
    )
    reason: str | None = about("why the run did not complete (the error line), else null")
    test_acc: Fraction | None = about("test accuracy after the last epoch")
    best_test_acc: Fraction | None = about("the best test accuracy of any epoch")
    best_epoch: Count | None = about("the epoch of best_test_acc (from 1)")
    train_loss: float | None = about("of the last epoch")
    train_acc: Fraction | None = about("of the last epoch")
    val_acc: Fraction | None = about("of the last epoch (null without a validation split)")
    epoch_s: Amount | None = about(
        "the mean training time of an epoch, over every whole epoch but the first (or the only "
        "one); null when no epoch ran whole"
    )
    samples_per_s: Amount | None = about(
        "all samples over all the time of those epochs (of the partial ones when none ran whole)"
    )
    compile_s: Amount | None = about(
        "seconds spent compiling (model.compile) and warming the compiled step up, over all "
        "epochs; null when not compiled"
    )
    epochs: Count | None = about(
        "epochs run (a resumed run counts the epochs of the run it resumed)"
    )
    run: Run = Field(
        description="the resolved settings; a completed run's names at least strategy, devices "
        "(from 1), batch_size (from 1) and lr"
    )
    config: str | None = about("older versions: the config the run was composed from")
    run_id: str | None = about(
        "this run's id: only the run that wrote the record moves it, and only from running "
        "to an end state"
    )
    settings: dict[str, Any] | None = about(
        "what the run computes, as flat key: value (the keys a resume is checked against)"
    )
    resumed_from: dict[str, Any] | None = about(
        "null, or the checkpoint the run continued (its ckpt_path, or its own folder's last "
        "checkpoint, run again after a stop): checkpoint, epochs, and changed (the "
        "resume_changes it made, each from/to)"
    )
    init_from: str | None = about("null, or the checkpoint whose weights the run started from")
    time_to: dict[str, Reached | None] | None = about(
        'per target of time_to_targets, keyed as written ("0.9"): the first epoch whose test '
        "accuracy reached it, or null if none did"
    )
    history: list[Epoch] = Field(description="one entry per epoch")

    # What the writer derives from the history agrees with it (``record.summarize``): a
    # record that contradicts itself is refused whole, never reported as if true.
    @model_validator(mode="after")
    def epochs_count_the_history(self) -> Record:
        if self.epochs is not None and self.epochs != len(self.history):
            raise ValueError(
                f"epochs is {self.epochs}, but history holds {len(self.history)} epochs"
            )
        return self

    @model_validator(mode="after")
    def test_acc_is_the_last_epochs(self) -> Record:
        last = self.history[-1].test_acc if self.history else None
        if self.history and "test_acc" in self.model_fields_set and self.test_acc != last:
            where = f"history[{len(self.history) - 1}].test_acc"
            raise ValueError(f"test_acc is {shown(self.test_acc)}, but {where} is {shown(last)}")
        return self

    @model_validator(mode="after")
    def best_test_acc_is_the_best(self) -> Record:
        tested = {f"history[{i}].test_acc": h.test_acc for i, h in enumerate(self.history)}
        for where, acc in {"test_acc": self.test_acc, **tested}.items():
            if None not in (acc, self.best_test_acc) and acc > self.best_test_acc:
                best = shown(self.best_test_acc)
                raise ValueError(f"best_test_acc {best} is below {where} {shown(acc)}")
        return self

    @model_validator(mode="after")
    def epochs_follow_each_other(self) -> Record:
        first = 1 if self.version >= SCHEMA else self.history[0].epoch if self.history else 0
        for i, entry in enumerate(self.history):
            if entry.epoch != first + i or first not in (0, 1):
                said = f"history[{i}].epoch is {entry.epoch}, but "
                if i == 0:
                    raise ValueError(f"{said}a history starts at epoch 1")
                raise ValueError(f"{said}history[{i - 1}].epoch is {self.history[i - 1].epoch}")
        return self

    @model_validator(mode="after")
    def best_epoch_is_the_best_test_acc(self) -> Record:
        if self.best_epoch is None:
            return self
        entry = next((h for h in self.history if h.epoch == self.best_epoch), None)
        if entry is None or entry.test_acc != self.best_test_acc:
            has = "is not in history" if entry is None else f"has test_acc {shown(entry.test_acc)}"
            raise ValueError(
                f"best_epoch is {self.best_epoch}, but that epoch {has}, not best_test_acc "
                f"{shown(self.best_test_acc)}"
            )
        return self

    @model_validator(mode="after")
    def speed_is_the_historys(self) -> Record:
        """Records of an older schema are given this speed when read (``record_file.upgrade``)."""
        if self.version < SCHEMA:
            return self
        derived = speed([entry.model_dump() for entry in self.history])
        derived = [None if v is None or not math.isfinite(v) else v for v in derived]  # as written
        for key, value in zip(("epoch_s", "samples_per_s"), derived, strict=True):
            recorded = getattr(self, key)
            if key in self.model_fields_set and not same(recorded, value, ROUNDING):
                raise ValueError(
                    f"{key} is {shown(recorded)}, but the history's epochs give {shown(value)}"
                )
        return self

    @model_validator(mode="after")
    def run_agrees_with_itself_and_the_settings(self) -> Record:
        run = self.run
        if isinstance(run.devices, int) and None not in (run.device_ids, run.num_nodes):
            if run.devices != len(run.device_ids) * run.num_nodes:
                raise ValueError(
                    f"run.devices is {run.devices}, but run.device_ids {run.device_ids} on "
                    f"run.num_nodes {run.num_nodes} make {len(run.device_ids) * run.num_nodes}"
                )
        parts = (run.batch_size, run.process_batch_size, run.processes)
        if None not in parts and parts[0] != parts[1] * parts[2]:
            raise ValueError(
                f"run.batch_size is {parts[0]}, but run.process_batch_size {parts[1]} on "
                f"run.processes {parts[2]} make {parts[1] * parts[2]}"
            )
        settings = self.settings or {}
        for key, field in REPEATED.items():
            value = getattr(run, field)
            if key in settings and value is not None and not same(settings[key], value, ROUNDING):
                raise ValueError(
                    f"run.{field} is {shown(value)}, but settings {key} is {shown(settings[key])}"
                )
        return self


class CompletedRecord(Record):
    run: CompletedRun

    @model_validator(mode="after")
    def completed_with_an_epoch_and_no_reason(self) -> CompletedRecord:
        """A run completes when its last epoch is trained, and then nothing went wrong."""
        if not self.history:
            raise ValueError("status is completed, but history holds no epoch")
        if self.reason is not None:
            raise ValueError(f"status is completed, but reason is {shown(self.reason)}")
        if self.run.strategy == "single" and self.run.devices != 1:
            raise ValueError(f"run.strategy is single, but run.devices is {self.run.devices}")
        return self


class RecordV1(Record):
    run: RunV1


class CompletedRecordV1(Record):
    run: CompletedRunV1


# By (completed, schema 1): a completed run's record names all its settings, and records of
# schema 1 stored ``run.devices`` as given (a count, a list of ids or a word).
RECORDS = {(False, False): Record, (True, False): CompletedRecord}
RECORDS |= {(False, True): RecordV1, (True, True): CompletedRecordV1}


def declaration(record: Any) -> type[Record]:
    """The declaration ``record`` is read by."""
    if not isinstance(record, dict):
        return Record
    return RECORDS[record.get("status") == "completed", record.get("schema") == 1]
