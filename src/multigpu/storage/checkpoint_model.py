"""What train.py, eval.py and Lightning read of a checkpoint, declared once: the check that
refuses a file and the readers of its values use these models. Strict (``'5'`` is no count,
``True`` no number); keys beyond those read are allowed; a field defaulting to ``None`` may be
absent, and is checked when present. Broken rules are said by ``checkpoint_errors``.
"""

from __future__ import annotations

import importlib.metadata
import inspect
from collections.abc import Sequence
from typing import Annotated, Any, Generic, TypeVar

import torch
from packaging.version import InvalidVersion, Version
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    InstanceOf,
    JsonValue,
    ValidationInfo,
    field_validator,
    model_validator,
)

from multigpu.storage.checkpoint_errors import (
    EDITED,
    SHORT,
    Expected,
    describe,
    disagree,
    refused,
    wrong,
)

HISTORY = "EpochHistory"  # the callback whose state holds the run's history
VERSION = "pytorch-lightning_version"
OLDEST_LIGHTNING = Version("2.4")  # the oldest this project wrote (pyproject: >=2.4)
# What Lightning needs to continue training from a checkpoint, beyond the weights.
TRAINING_STATE = ("optimizer_states", "loops", "epoch", "global_step")
RESUME_STATE = (*TRAINING_STATE, "lr_schedulers", "callbacks", VERSION)
# Per-parameter optimizer state of the parameter's own shape (torch.optim's optimizers).
SHAPED = {"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "exp_inf", "square_avg"}
SHAPED |= {"acc_delta", "grad_avg", "sum", "ax", "prev", "step_size"}
# Validation contexts: a file's first check scans the weights; reading a checked one does not.
READ, RESUME = "read", "resume"


# Values -----------------------------------------------------------------------------------------
def scalar(value: Any) -> Any:
    """A 0-dim tensor counts as its value (torch keeps some hyperparameters as tensors); no other
    tensor does (pydantic's strict float takes one holding one value)."""
    if isinstance(value, torch.Tensor) and (value.dim() or value.is_complex()):
        raise ValueError("a tensor of more than one value")
    return value.item() if isinstance(value, torch.Tensor) else value


def finite(weights: torch.Tensor, info: ValidationInfo) -> torch.Tensor:
    """Never saved by train.py (its divergence guard stops before the checkpoint): resumed,
    such weights "diverge" at once; evaluated, they score chance."""
    if info.context is None and weights.is_floating_point():
        if not bool(torch.isfinite(weights).all()):
            raise wrong("holds NaN or infinite values")
    return weights


def lightning_version(tag: Any) -> Any:
    """Lightning migrates a checkpoint by this tag before reading it: a tag it cannot parse, or
    older than any this project wrote, ends in a traceback there; a newer one may hold state
    this Lightning does not know."""
    try:
        version = Version(tag)
    except (InvalidVersion, TypeError):
        raise refused(
            f"records {VERSION}={describe(tag)}, not a version number: {EDITED}"
        ) from None
    if version < OLDEST_LIGHTNING:
        raise refused(
            f"was written by Lightning {version}, older than {OLDEST_LIGHTNING} (the oldest this "
            f"project wrote with): {EDITED}"
        )
    installed = importlib.metadata.version("pytorch-lightning")  # not imported: a refusal is fast
    if version > Version(installed):
        raise refused(
            f"was written by Lightning {version}, newer than the installed {installed}: install "
            f"pytorch-lightning=={version} to read it, or train again"
        )
    return tag


def network_settings(hparams: Any) -> Any:
    """What eval.py builds and a resume is compared with: a file without it is no run's."""
    if hparams is None or isinstance(hparams, dict) and "net" not in hparams:
        raise refused(
            "records no network settings (hyper_parameters.net): it was not written by train.py"
        )
    return hparams


Count = Annotated[int, Field(ge=0), Expected("an integer >= 0")]  # Lightning computes with these
Flag = Annotated[bool, Expected("true or false")]
MaybeFlag = Annotated[bool | None, Expected("true, false or null")]
Number = int | InstanceOf[float]  # not a tensor (pydantic's strict float would take one)
Scalar = Annotated[float, BeforeValidator(scalar)]
Rate = Annotated[Scalar, Field(ge=0, allow_inf_nan=False), Expected("a number >= 0")]
Two = Annotated[Sequence[Any], Field(min_length=2, max_length=2)]
Pair = Annotated[Sequence[Rate], Expected("two numbers", Two)]
Plain = Annotated[None | bool | Number | str, Expected("a plain value")]
Loose = Annotated[Plain | Scalar | list | tuple, Expected("a plain value")]  # torch's own
Names = dict[str, Any]  # every dict Lightning and train.py write has names for keys (but one)
OptionalNames = Annotated[Names | None, Expected("a dict or null", dict | None)]
Name = Annotated[str | None, Expected("a name or null")]
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
    __pydantic_extra__: dict[str, Loose]

    def holds(self, key: str) -> bool:
        return key in self.model_fields_set or key in (self.model_extra or {})


class ParameterState(Strict):
    """Momentum, moments: tensors, or nothing yet; ``step`` may be a number (torch makes it a
    tensor when it loads)."""

    step: Annotated[torch.Tensor | Number | None, Expected("a tensor, a number or null")] = None
    __pydantic_extra__: dict[str, Annotated[torch.Tensor | None, Expected("a tensor or null")]]

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
            text = f"number the parameters {SHORT.repr(numbers)}, expected 0..{len(numbers) - 1}"
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
    __pydantic_extra__: dict[str, Annotated[Number | None, Expected("a number or null")]]


class History(Strict):
    """One entry per finished epoch, numbered 1..n (0..n-1 before record schema 3)."""

    history: list[Epoch]

    @field_validator("history")
    @classmethod
    def numbered(cls, history: list[Epoch]) -> list[Epoch]:
        epochs = [item.epoch for item in history]
        first = epochs[0] if epochs else 1
        if first not in (0, 1) or epochs != list(range(first, first + len(epochs))):
            raise wrong(f"numbers its epochs {SHORT.repr(epochs)}, expected 1 to {len(epochs)}")
        return history


class Callbacks(Strict):
    epoch_history: History = Field(alias=HISTORY)
    __pydantic_extra__: dict[str, Names]


class Scaler(Strict):  # fp16's loss scaler (GradScaler.load_state_dict)
    scale: Annotated[Scalar, Expected("a number")]
    growth_factor: Annotated[Scalar, Expected("a number")]
    backoff_factor: Annotated[Scalar, Expected("a number")]
    growth_interval: Annotated[Scalar, Expected("a number")]


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
    __pydantic_extra__: dict[str, Annotated[Plain | list[Plain], Expected("a plain value")]]


Weight = Annotated[torch.Tensor, Expected("a tensor"), AfterValidator(finite)]
DottedKey = Annotated[str, Field(min_length=1), Expected("dotted config keys")]
Json = Annotated[JsonValue, Expected("a plain value, or a list or dict of them")]
Settings = Annotated[
    dict[DottedKey, Json] | None, Expected("a dict of dotted keys or null", dict | None)
]


# The checkpoint ---------------------------------------------------------------------------------
class Checkpoint(Strict):
    """The Lightning version, the weights and the settings they were trained with; then what a
    resume reads, each part checked where present (eval.py needs none of it); then the rules
    between the parts. The first rule broken is the one said: the fields in this order."""

    version: Annotated[Any, AfterValidator(lightning_version)] = Field(None, alias=VERSION)
    hyper_parameters: Annotated[HyperParameters, BeforeValidator(network_settings)] = Field(
        None, validate_default=True
    )
    state_dict: Annotated[dict[str, Weight], Expected("a dict of tensors", dict)]
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

    @model_validator(mode="before")
    @classmethod
    def written_by_train_py(cls, checkpoint: Any) -> Any:
        """A dict with the weights under ``state_dict``: a bare state_dict is said to be one."""
        if isinstance(checkpoint, dict) and "state_dict" in checkpoint:
            return checkpoint
        bare = isinstance(checkpoint, dict) and all(
            isinstance(v, torch.Tensor) for v in checkpoint.values()
        )
        what = "a bare state_dict of tensors" if bare else f"a {type(checkpoint).__name__}"
        raise refused(f"is {what}, not a checkpoint written by train.py (no state_dict)")

    @model_validator(mode="after")
    def resumable_when_resuming(self, info: ValidationInfo) -> Checkpoint:
        """Training continues from all of its training state (the training state first: a file
        of weights alone is said to be that); eval.py needs none of it."""
        if info.context != RESUME:
            return self
        held = {
            f.alias or n for n, f in Checkpoint.model_fields.items() if n in self.model_fields_set
        }
        missing = [key for key in RESUME_STATE if key not in held]
        if missing:
            missing = [key for key in missing if key in TRAINING_STATE] or missing
            raise refused(
                f"holds weights but no training state ({', '.join(missing)}): training cannot "
                "continue from it; eval.py can still evaluate it"
            )
        return self

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
            said = f"holds {len(states)} state(s) but hyper_parameters.scheduler {says}"
            raise disagree(said, "lr_schedulers")
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
            said = f"is {self.epoch} but loops.fit_loop.epoch_progress has {completed} completed"
            raise disagree(said, "epoch")
        steps = {fit.manual_steps.total.completed}
        steps.add(fit.automatic_steps.optimizer.step.total.completed)
        if self.global_step not in (None, *steps):
            said = f"is {self.global_step} but the loop state counts {max(steps)} optimizer steps"
            raise disagree(said, "global_step")
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
            said = f"the history holds {len(history)} epoch(s) but {source} {max(counted)} finished"
            raise disagree(said)
        # A scheduler stepped with the optimizer (model.scheduler_interval=step) counts steps.
        per_step = (self.settings or {}).get("model.scheduler_interval") == "step"
        limit = self.global_step if per_step else finished
        unit = "optimizer step(s)" if per_step else "finished epoch(s)"
        for i, state in enumerate(self.lr_schedulers or []):
            if limit is not None and state.last_epoch > limit:
                said = f"is {state.last_epoch} after {limit} {unit}"
                raise disagree(said, "lr_schedulers", i, "last_epoch")
        return self
