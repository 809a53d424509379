"""What train.py, eval.py and Lightning read of a checkpoint, declared once: the check that
refuses a file and the readers of its values use these models. Strict (``'5'`` is no count,
``True`` no number); keys beyond those read are allowed; a field defaulting to ``None`` may be
absent, and is checked when present. ``explain`` says pydantic's first error in one line.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Generic, TypeVar

import torch
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    InstanceOf,
    JsonValue,
    ValidationInfo,
    WrapValidator,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError, ValidationError

HISTORY = "EpochHistory"  # the callback whose state holds the run's history
# Per-parameter optimizer state of the parameter's own shape (torch.optim's optimizers).
SHAPED = {"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "exp_inf", "square_avg"}
SHAPED |= {"acc_delta", "grad_avg", "sum", "ax", "prev", "step_size"}
WORDS = {"dict_type": "a dict", "model_type": "a dict", "list_type": "a list"}
WORDS |= {"string_type": "a name (str)", "invalid_key": "a name (str)"}  # a dict's keys
SAID = {"missing": "is missing", "too_short": "is empty, expected at least one"}
READ = {"checked": True}  # the validation context of ``read``


# Saying a place and a value ---------------------------------------------------------------------
def clip(text: str, limit: int = 200) -> str:
    """``text`` whole if short, else cut at a word boundary with an ellipsis: a reason is read,
    so it never ends mid-word."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 3]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "..."


def describe(value: Any) -> str:
    """A value in a few words: its type, and its own text when short."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    if isinstance(value, Mapping):
        return f"a dict of {len(value)} key(s)"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    if value is None or isinstance(value, (bool, int, float, str)):
        return clip(repr(value), 60)
    return f"a {type(value).__name__}"


def place(loc: Sequence[Any]) -> str:
    """``loops.fit_loop['epoch_loop.state_dict']``: a place in the checkpoint, as code reads it."""
    where = ""
    for key in loc:
        name = isinstance(key, str) and re.fullmatch(r"[A-Za-z_]\w*", key, re.ASCII)
        where += (f".{key}" if where else key) if name else f"[{clip(repr(key), 60)}]"
    return where


def explain(err: ValidationError) -> str:
    """The first place pydantic found wrong: ``<where> is <value>, expected <...>``, or the
    words of the rule it breaks."""
    error = err.errors(include_url=False)[0]
    kind, words = error["type"], WORDS.get(error["type"], error["msg"])
    loc = [*error["loc"], *error.get("ctx", {}).get("at", ())]
    said = SAID.get(kind, f"is {describe(error['input'])}, expected {words}")
    if loc[-1:] == ["[key]"] or kind == "invalid_key":  # a dict's key: the place is the dict's
        loc = loc[:-1] if loc[-1] == "[key]" else loc
        said = f"has the key {describe(loc.pop())}, expected {words}"
    if kind == "malformed":  # a rule's own words, after the place it names, if any
        return f"{place(loc)} {words}".strip()
    return f"{place(loc) or 'it'} {said}"


def wrong(text: str, *at: Any) -> PydanticCustomError:
    """A rule broken at the place validated, or at ``at`` within it."""
    return PydanticCustomError("malformed", text, {"at": at})


def expect(words: str) -> WrapValidator:
    """The words an error says this type with: one error, where pydantic has one per member of
    a union; an error at one of the value's items is said where it is."""

    def wrap(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError as err:
            items = value if isinstance(value, dict) else ()
            items = range(len(value)) if isinstance(value, (list, tuple)) else items
            if all(e["loc"] and e["loc"][0] in items for e in err.errors()):
                raise
            raise PydanticCustomError("expected", words) from None

    return WrapValidator(wrap)


# Values -----------------------------------------------------------------------------------------
def scalar(value: Any) -> Any:
    """A 0-dim tensor counts as its value (torch keeps some hyperparameters as tensors); no other
    tensor does (pydantic's strict float takes one holding one value)."""
    if isinstance(value, torch.Tensor) and (value.dim() or value.is_complex()):
        raise PydanticCustomError("number", "a number")
    return value.item() if isinstance(value, torch.Tensor) else value


def finite(weights: torch.Tensor, info: ValidationInfo) -> torch.Tensor:
    """Never saved by train.py (its divergence guard stops before the checkpoint): resumed,
    such weights "diverge" at once; evaluated, they score chance. Scanned when a file is
    checked, not each time a value of a checked one is read (``read``)."""
    if info.context == READ or not weights.is_floating_point():
        return weights
    if not bool(torch.isfinite(weights).all()):
        raise wrong("holds NaN or infinite values")
    return weights


Count = Annotated[int, Field(ge=0), expect("an integer >= 0")]  # Lightning computes with these
Flag = Annotated[bool, expect("true or false")]
MaybeFlag = Annotated[bool | None, expect("true, false or null")]
Number = int | InstanceOf[float]  # not a tensor (pydantic's strict float would take one)
Scalar = Annotated[float, BeforeValidator(scalar)]
Rate = Annotated[Scalar, Field(ge=0, allow_inf_nan=False), expect("a number >= 0")]
Pair = Annotated[Sequence[Rate], Field(min_length=2, max_length=2), expect("two numbers")]
Plain = Annotated[None | bool | Number | str, expect("a plain value")]
Names = dict[str, Any]  # every dict Lightning and train.py write has names for keys (but one)
OptionalNames = Annotated[Names | None, expect("a dict or null")]
Name = Annotated[str | None, expect("a name or null")]
T = TypeVar("T")


class Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", arbitrary_types_allowed=True)


# The training state -----------------------------------------------------------------------------
class ParamGroup(Strict):
    """Its parameters' numbers, and hyperparameters: numbers where torch computes with them (>= 0
    and finite, as its optimizers require), flags where it branches on them, else plain."""

    params: list[Count]
    lr: Rate
    initial_lr: Rate = None
    momentum: Rate = None
    dampening: Rate = None
    weight_decay: Rate = None
    eps: Rate = None
    alpha: Rate = None
    betas: Pair = None
    nesterov: Flag = None
    maximize: Flag = None
    differentiable: Flag = None
    amsgrad: Flag = None
    capturable: Flag = None
    centered: Flag = None
    foreach: MaybeFlag = None
    fused: MaybeFlag = None
    __pydantic_extra__: dict[str, Annotated[Plain | Scalar | list | tuple, expect("a plain value")]]

    def holds(self, key: str) -> bool:
        return key in self.model_fields_set or key in (self.model_extra or {})


class ParameterState(Strict):
    """Momentum, moments: tensors, or nothing yet; ``step`` may be a number (torch makes it a
    tensor when it loads)."""

    step: Annotated[torch.Tensor | Number | None, expect("a tensor, a number or null")] = None
    __pydantic_extra__: dict[str, Annotated[torch.Tensor | None, expect("a tensor or null")]]

    def shaped(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in (self.model_extra or {}).items() if k in SHAPED and v is not None}


class OptimizerState(Strict):
    """As ``torch.optim.Optimizer.load_state_dict`` reads it: groups numbering the parameters
    0..n-1 in order, per-parameter state only for those."""

    param_groups: Annotated[list[ParamGroup], Field(min_length=1)]
    state: dict[Count, ParameterState]

    @model_validator(mode="after")
    def numbered(self) -> OptimizerState:
        numbers = [n for group in self.param_groups for n in group.params]
        if numbers != list(range(len(numbers))):
            text = f"number the parameters {clip(str(numbers), 60)}, expected 0..{len(numbers) - 1}"
            raise wrong(f"{text} in order", "param_groups")
        for key in (k for k in self.state if k >= len(numbers)):
            raise wrong("names no parameter of its param_groups", "state", key)
        return self


class SchedulerState(Strict):
    last_epoch: Count  # the module replays the schedule as configured up to it


class Ready(Strict):
    ready: Count
    completed: Count


class Started(Ready):
    started: Count


class Processed(Started):
    processed: Count


class Progress(Strict, Generic[T]):
    total: T
    current: T


class BatchProgress(Progress[Processed]):
    is_last_batch: Flag


class EpochProgress(Progress[Processed]):
    """Finished epochs as Lightning counts them: ``processed`` at an epoch's end (the checkpoint
    is written then), ``completed`` one less until Lightning resumes it. Any other combination
    restarts an epoch, and the history would repeat it."""

    @model_validator(mode="after")
    def at_an_epochs_end(self) -> EpochProgress:
        now, total, done = self.current.model_dump(), self.total.model_dump(), self.current
        if now != total:
            raise wrong(f"counts {now} this run and {total} in all, expected the same")
        if done.completed not in (done.processed - 1, done.processed) or not (
            done.ready == done.started == done.processed
        ):
            raise wrong(
                f"counts {now}, expected ready = started = processed and completed = "
                "processed - 1 (an epoch's end)"
            )
        return self


class LoaderState(Strict):
    combined_loader: list[Names] = []


class Stepped(Strict):
    batches_that_stepped: Count = Field(alias="_batches_that_stepped")


class Optimization(Strict):
    step: Progress[Ready]
    zero_grad: Progress[Started]


class AutomaticSteps(Strict):
    optimizer: Optimization


AUTOMATIC, MANUAL = "epoch_loop.automatic_optimization.", "epoch_loop.manual_optimization."


class FitLoop(Strict):
    """What Lightning restores of ``loops.fit_loop`` (pytorch_lightning.loops, 2.4 to 2.6): the
    epoch count, the step count, the restart stage; every key train.py writes is required."""

    state_dict: LoaderState
    epoch_progress: EpochProgress
    epoch_loop: Stepped = Field(alias="epoch_loop.state_dict")
    batch_progress: BatchProgress = Field(alias="epoch_loop.batch_progress")
    scheduler_progress: Progress[Ready] = Field(alias="epoch_loop.scheduler_progress")
    automatic_state: Names = Field(alias=AUTOMATIC + "state_dict")
    automatic_steps: AutomaticSteps = Field(alias=AUTOMATIC + "optim_progress")
    manual_state: Names = Field(alias=MANUAL + "state_dict")
    manual_steps: Progress[Ready] = Field(alias=MANUAL + "optim_step_progress")
    val_state: Names = Field(alias="epoch_loop.val_loop.state_dict")
    val_progress: BatchProgress = Field(alias="epoch_loop.val_loop.batch_progress")


class EvaluationLoop(Strict):  # restored only by validate/test from a checkpoint (never here)
    state_dict: Names
    batch_progress: BatchProgress


class PredictionLoop(Strict):
    state_dict: Names
    batch_progress: Progress[Processed]


class Loops(Strict):
    fit_loop: FitLoop
    validate_loop: EvaluationLoop = None
    test_loop: EvaluationLoop = None
    predict_loop: PredictionLoop = None
    __pydantic_extra__: dict[str, Names]


class Epoch(Strict):
    epoch: Count
    __pydantic_extra__: dict[str, Annotated[Number | None, expect("a number or null")]]


class History(Strict):
    """One entry per finished epoch, numbered 1..n (0..n-1 before record schema 3)."""

    history: list[Epoch]

    @field_validator("history")
    @classmethod
    def numbered(cls, history: list[Epoch]) -> list[Epoch]:
        epochs = [item.epoch for item in history]
        first = epochs[0] if epochs else 1
        if first not in (0, 1) or epochs != list(range(first, first + len(epochs))):
            raise wrong(f"numbers its epochs {clip(str(epochs), 60)}, expected 1 to {len(epochs)}")
        return history


class Callbacks(Strict):
    epoch_history: History = Field(alias=HISTORY)
    __pydantic_extra__: dict[str, Names]


class Scaler(Strict):  # fp16's loss scaler (GradScaler.load_state_dict)
    scale: Annotated[Scalar, expect("a number")]
    growth_factor: Annotated[Scalar, expect("a number")]
    backoff_factor: Annotated[Scalar, expect("a number")]
    growth_interval: Annotated[Scalar, expect("a number")]


# The weights and the settings -------------------------------------------------------------------
class HyperParameters(Strict):
    net: dict[str, Plain]  # what eval.py builds and a resume is compared with
    optimizer: OptionalNames = None
    scheduler: OptionalNames = None

    def group_keys(self) -> list[str]:
        """What every group of the optimizer's state must hold: the positional arguments of the
        torch optimizer ``optimizer`` names (looked up, never built), which every torch version
        writes (newer keyword-only ones get defaults)."""
        target, found = (self.optimizer or {}).get("_target_"), None
        if isinstance(target, str) and target.startswith("torch.optim."):
            found = torch.optim
            for part in target.split(".")[2:]:
                found = getattr(found, part, None)
        if not (isinstance(found, type) and issubclass(found, torch.optim.Optimizer)):
            return ["lr"]
        arguments = inspect.signature(found.__init__).parameters.values()
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        return [a.name for a in arguments if a.kind == kind and a.name not in ("self", "params")]


class DataSettings(Strict):
    normalize: Flag = None  # eval.py reads it
    __pydantic_extra__: dict[str, Annotated[Plain | list[Plain], expect("a plain value")]]


Weight = Annotated[torch.Tensor, expect("a tensor"), AfterValidator(finite)]
DottedKey = Annotated[str, Field(min_length=1), expect("dotted config keys")]
Json = Annotated[JsonValue, expect("a plain value, or a list or dict of them")]
Settings = Annotated[dict[DottedKey, Json] | None, expect("a dict of dotted keys or null")]


# The checkpoint ---------------------------------------------------------------------------------
class Checkpoint(Strict):
    """The weights, the settings they were trained with, the data's settings; then what a
    resume reads, each part checked where present (a part missing is for ``check_resumable`` to
    refuse: eval.py does not need it); then the rules between the parts."""

    state_dict: Annotated[dict[str, Weight], expect("a dict of tensors")]
    hyper_parameters: HyperParameters
    datamodule_hyper_parameters: DataSettings | None = None
    hparams_name: Name = None
    datamodule_hparams_name: Name = None
    legacy_version: Name = Field(None, alias="legacy_pytorch-lightning_version")
    settings: Settings = None  # the run's settings, dotted config key -> value
    epoch: Count = None
    global_step: Count = None
    optimizer_states: Annotated[list[OptimizerState], Field(min_length=1)] = None
    lr_schedulers: list[SchedulerState] = None
    loops: Loops = None
    callbacks: Callbacks = None
    mixed_precision: Scaler | None = Field(None, alias="MixedPrecision")

    @property
    def history(self) -> list[Epoch] | None:
        return None if self.callbacks is None else self.callbacks.epoch_history.history

    @property
    def finished_epochs(self) -> int:
        """The loop state's count (Lightning's ``epoch`` is the index of the epoch it was in,
        so one less), else the history's, else ``epoch + 1``."""
        if self.loops is not None:
            return self.loops.fit_loop.epoch_progress.current.processed
        if self.history is not None:
            return len(self.history)
        return 0 if self.epoch is None else self.epoch + 1

    @model_validator(mode="after")
    def groups_hold_their_settings(self) -> Checkpoint:
        """torch puts a loaded group in place of its own, and its step reads them."""
        keys = self.hyper_parameters.group_keys()
        for i, state in enumerate(self.optimizer_states or []):
            for j, group in enumerate(state.param_groups):
                for key in (k for k in keys if not group.holds(k)):
                    raise wrong("is missing", "optimizer_states", i, "param_groups", j, key)
        return self

    @model_validator(mode="after")
    def a_scheduler_state_if_configured(self) -> Checkpoint:
        """Lightning pairs states and schedulers by position and drops what does not pair."""
        states, configured = self.lr_schedulers, bool(self.hyper_parameters.scheduler)
        if states is not None and len(states) != configured:
            says = "names one" if configured else "is null"
            raise wrong(
                f"lr_schedulers holds {len(states)} state(s) but hyper_parameters.scheduler "
                f"{says}: the two disagree"
            )
        return self

    @model_validator(mode="after")
    def loop_counts_agree(self) -> Checkpoint:
        """The ``epoch`` and ``global_step`` Lightning wrote beside its loop state are the loop
        state's own counts."""
        fit = None if self.loops is None else self.loops.fit_loop
        if fit is None:
            return self
        completed = fit.epoch_progress.current.completed
        if self.epoch not in (None, completed):
            raise wrong(
                f"epoch is {self.epoch} but loops.fit_loop.epoch_progress has {completed} "
                "completed: the two disagree"
            )
        automatic = fit.automatic_steps.optimizer.step.total.completed
        steps = {automatic, fit.manual_steps.total.completed}
        if self.global_step not in (None, *steps):
            raise wrong(
                f"global_step is {self.global_step} but the loop state counts {max(steps)} "
                "optimizer steps: the two disagree"
            )
        return self

    @model_validator(mode="after")
    def history_and_schedule_agree(self) -> Checkpoint:
        """The history the record resumes from and the scheduler's epoch say what the counts
        Lightning resumes from say; else a resumed run repeats or skips epochs (a history 1, 1,
        2)."""
        epoch, history, finished = self.epoch, self.history, self.finished_epochs
        counted, source = {finished}, "the loop state counts"
        if self.loops is None and epoch is not None:  # the epoch it was in, or the next one
            counted, source = {epoch, epoch + 1}, "epoch says"
        if history is not None and len(history) not in counted:
            raise wrong(
                f"the history holds {len(history)} epoch(s) but {source} {max(counted)} "
                "finished: the two disagree"
            )
        # A scheduler stepped with the optimizer (model.scheduler_interval=step) counts steps.
        per_step = (self.settings or {}).get("model.scheduler_interval") == "step"
        limit = self.global_step if per_step else finished
        unit = "optimizer step(s)" if per_step else "finished epoch(s)"
        for i, state in enumerate(self.lr_schedulers or []):
            if limit is not None and state.last_epoch > limit:
                raise wrong(
                    f"lr_schedulers[{i}].last_epoch is {state.last_epoch} after {limit} {unit}: "
                    "the two disagree"
                )
        return self


def read(checkpoint: Mapping[str, Any]) -> Checkpoint:
    """The values of a checkpoint ``load_checkpoint`` returned, through the declarations that
    checked it (a reader of one value does not scan the weights again)."""
    return Checkpoint.model_validate(checkpoint, context=READ)
