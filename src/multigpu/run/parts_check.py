"""The run's parts built as its training will build them, before anything is written: the
Trainer, the module with its compiled network, optimizer and scheduler, the data module, the
strategy, the callbacks and the logger, reading no file and writing none. What torch or
Lightning refuses only when it builds a part is then one line naming the setting as it was
given, said before the run's folder exists (``multigpu.run.preflight`` calls it for a run and
for every job of a sweep).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from omegaconf import Container, DictConfig, OmegaConf

from multigpu.config.errors import RunStopped, UserError, summary_line
from multigpu.config.job_names import task_overrides
from multigpu.config.schema import compile_options
from multigpu.config.settings import Run, plain

log = logging.getLogger(__name__)

# The outcome of each part already checked in this process, by its inputs: None (built), or
# the refusal. A sweep's jobs that differ elsewhere build a part once (``check_run_objects``).
_checked: dict[str, UserError | None] = {}


class Refused(Exception):
    """A part of the run that torch or Lightning refused to build: the config ``node`` it was
    built from and what refused it."""

    def __init__(self, node: str, builder: str, cause: BaseException) -> None:
        super().__init__(node)
        self.node, self.builder, self.cause = node, builder, cause


def check_run_objects(cfg: DictConfig, run: Run) -> None:
    """Build what ``multigpu.run.fit`` builds from the config before the first step (the
    Trainer, the module with its compiled network, optimizer and scheduler, the data module,
    the strategy, the callbacks and the logger) and what Lightning hands torch at the first step
    (``trainer.detect_anomaly``), reading no file and writing none: what torch or Lightning
    refuses is a ``UserError`` naming the setting as it was given. Each part is built once per
    distinct inputs in this process (its outcome kept). Imports torch and Lightning."""
    from multigpu.run import fit  # torch and Lightning: what the run imports next
    from multigpu.run.lightning_arguments import check_trainer_arguments, turned_on

    trainer = plain(cfg["trainer"])
    callbacks = cfg.get("callbacks") or {}
    parts: list[tuple[Any, Callable[[], None]]] = [
        (("trainer", trainer, turned_on(cfg)), lambda: check_trainer_arguments(cfg, now=True)),
        (("detect_anomaly", trainer.get("detect_anomaly")), lambda: anomaly_mode(trainer)),
        (
            ("model", plain(cfg.model), run.lr, run.warmup_epochs, run.warmup_from),
            lambda: model_parts(cfg, run, fit),
        ),
        (
            ("data", plain(cfg.data), run.process_batch_size, run.num_workers, run.pin_memory),
            lambda: built("data", cfg.data, lambda: fit.build_datamodule(cfg.data, run)),
        ),
        (
            ("strategy", plain(cfg.strategy), run.placement, run.torch_devices, run.start_method),
            lambda: built("strategy", cfg.strategy, lambda: fit.build_strategy(cfg.strategy, run)),
        ),
        (("logger", plain(cfg.get("logger"))), lambda: built_node(cfg, "logger", fit.build)),
    ]
    for name in callbacks:
        key = ("callback", name, plain(callbacks[name]))
        parts.append((key, functools.partial(built_node, cfg, f"callbacks.{name}", fit.build)))
    for key, check in parts:
        seen = json.dumps(key, sort_keys=True, default=repr)
        if seen not in _checked:
            _checked[seen] = refusal_of(cfg, check)
        if _checked[seen] is not None:
            raise copy.copy(_checked[seen])


def refusal_of(cfg: DictConfig, check: Callable[[], None]) -> UserError | None:
    """None when ``check`` builds its part; else the one line saying what refused which
    setting, and that it can be fixed or dropped."""
    from multigpu.run.lightning_arguments import silenced

    try:
        with silenced():
            check()
    except UserError as err:  # a constructor's own, or Lightning's refusal made one line
        return err
    except Refused as err:
        log.debug("%s refused", err.node, exc_info=err.cause)
        reason = summary_line(err.cause)
        shown = given_as(cfg, err.node)
        return UserError(
            f"{shown}: {err.builder} refuses it ({reason}); pass a value it takes, or drop it"
        )
    return None


def built(node: str, config: Any, make: Callable[[], Any]) -> Any:
    """``make()``, whose failure is the refusal of ``node`` by the class it names."""
    try:
        return make()
    except (UserError, RunStopped):
        raise
    except Exception as err:
        raise Refused(node, target_of(config, node), cause_of(err)) from err


def cause_of(err: BaseException) -> BaseException:
    """The constructor's own error, out of Hydra's wrapping (which names the target and the
    config key on lines of its own)."""
    from hydra.errors import InstantiationException

    while isinstance(err, InstantiationException) and err.__cause__ is not None:
        err = err.__cause__
    return err


def built_node(cfg: DictConfig, node: str, build: Callable[[Any], Any]) -> None:
    config = OmegaConf.select(cfg, node)
    if config:
        built(node, config, lambda: build(config))


def target_of(config: Any, node: str) -> str:
    target = config.get("_target_") if isinstance(config, Mapping) else None
    return str(target) if target else node


def model_parts(cfg: DictConfig, run: Run, fit: Any) -> None:
    """The module as ``fit`` builds it, its network prepared (``channels_last``, compiled) as
    ``configure_model`` does, and its optimizer and scheduler (``configure_optimizers``,
    lengths left in epochs: a step scheduler's steps need the Trainer's data)."""
    from hydra.utils import instantiate

    model = cfg.model
    module = built(
        "model", model, lambda: on_meta_device(model, lambda: fit.build_module(model, run))
    )
    compiled = compile_options(plain(model.get("compile"))) is not None
    built(
        "model.compile" if compiled else "model.channels_last",
        {"_target_": "torch.compile"} if compiled else None,
        module.configure_model,
    )
    optimizer = built(
        "model.optimizer",
        model.optimizer,
        lambda: instantiate(module.hparams.optimizer)(module.parameter_groups()),
    )
    if module.hparams.scheduler:
        module.scheduler_interval = "epoch"
        built("model.scheduler", model.scheduler, lambda: module.build_scheduler(optimizer))


def on_meta_device(node: DictConfig, make: Callable[[], Any]) -> Any:
    """``make()`` with the tensors it makes on torch's meta device (no memory, no
    initialisation: a full-size network in milliseconds); if it fails there, again on the
    CPU, whose answer stands (a constructor may compute with its tensors). The classes it
    names are imported first, outside: a module's tensors made on import stay real."""
    import torch
    from hydra.utils import get_object

    for target in targets(plain(node)):
        with contextlib.suppress(Exception):  # one that cannot be found: the build says so
            get_object(target)
    try:
        with torch.device("meta"):
            return make()
    except (UserError, RunStopped):
        raise
    except Exception:  # noqa: BLE001 - decided on the CPU
        return make()


def targets(tree: Any) -> Iterator[str]:
    """Every ``_target_`` in a plain config tree."""
    if isinstance(tree, Mapping):
        if isinstance(tree.get("_target_"), str):
            yield tree["_target_"]
        for value in tree.values():
            yield from targets(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from targets(value)


def anomaly_mode(trainer: Mapping[str, Any]) -> None:
    """What Lightning does with ``trainer.detect_anomaly`` at the first step: torch's anomaly
    mode, entered and left."""
    import torch

    if "detect_anomaly" not in trainer:
        return
    try:
        with torch.autograd.set_detect_anomaly(trainer["detect_anomaly"]):
            pass
    except Exception as err:
        raise Refused("trainer.detect_anomaly", "torch.autograd.set_detect_anomaly", err) from err


def given_as(cfg: DictConfig, node: str) -> str:
    """``node`` as the command line gave it (its overrides, or those of keys under it), else
    with its value from the config."""
    task = task_overrides(cfg.hydra) if "hydra" in cfg else []
    keys = [override_key(o) for o in task]
    given = [
        o for o, key in zip(task, keys, strict=True) if key == node or key.startswith(node + ".")
    ]
    if given:
        return ", ".join(given)
    value = OmegaConf.select(cfg, node, default=None, throw_on_resolution_failure=False)
    if isinstance(value, Container):
        return node
    return f"{node}={value}"


def override_key(override: str) -> str:
    """The config key an override sets: ``+trainer.x=1`` -> ``trainer.x``, a group
    ``model/scheduler=cosine`` -> ``model.scheduler``."""
    return override.lstrip("+~").split("=", 1)[0].replace("/", ".")
