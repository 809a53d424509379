"""``evaluate(cfg)``: test accuracy of a checkpoint, through the module's own test step.

The path and the settings are checked first, before torch is imported; then the network is
rebuilt from the checkpoint's stored settings (never from code in the file) and evaluated by
Lightning's test loop on one device, the first of ``trainer.devices``, so that evaluation
during training and here are the same computation. The data is read as the network was trained
(``normalize`` comes from the checkpoint). ``ckpt_path=latest`` is the newest
``checkpoints/last.ckpt`` under ``paths.runs_dir``, of any settings, as ``init_from=latest`` is
for training: evaluation continues no run, so there are no settings to match.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from multigpu.config.computation import same
from multigpu.config.errors import Interrupted, UserError, as_override
from multigpu.config.launch import check_launched, processes_started, slurm_started
from multigpu.config.names import MATMUL_PRECISIONS, SYNTHETIC
from multigpu.config.schema import Top, check_types, config_tree, default_of
from multigpu.config.settings import (
    Machine,
    check_evaluation,
    data_classes,
    data_sizes,
    loader_defaults,
    plain,
    resolve_hardware,
)
from multigpu.run.cli import hydra_runtime
from multigpu.run.command_line import check_evaluation_overrides
from multigpu.run.resume import find_checkpoint, settings_beside

# What eval.py reads of its config (a data set's option sets its _target_; paths, runs_dir).
EVALUATION_NEEDS = ("ckpt_path", "data._target_", "trainer", "paths.runs_dir")


def choices_of(cfg: DictConfig) -> dict[str, str]:
    """The group options chosen, for the messages; none known when called outside Hydra."""
    try:
        return hydra_runtime(cfg)[0]
    except ValueError:  # HydraConfig not set: a config composed by hand
        return {}


def trained_matmul_precision(checkpoint: dict[str, Any], path: Any) -> str:
    """The float32 matmul precision the checkpoint's run computed with, so that this pass is
    the computation of the run's own evaluations (a run recorded before the setting existed
    counts as its default, as a resume counts it)."""
    from multigpu.storage.checkpoint import stored_settings

    key = "float32_matmul_precision"
    value = (stored_settings(checkpoint) or {}).get(key, default_of(Top, key))
    if value not in MATMUL_PRECISIONS:
        raise UserError(
            f"ckpt_path={path} records {key}={value!r}, which is not one of "
            f"{', '.join(MATMUL_PRECISIONS)}: it was not written by train.py"
        )
    return value


def prefixed(prefix: str, values: dict[str, Any]) -> dict[str, Any]:
    return {f"{prefix}{key}": value for key, value in values.items()}


def check_same_data(data: dict[str, Any], option: str | None, trained: dict, path: Any) -> None:
    """The data's classes are the network's, and its test set the run's (``trained``: the
    settings of the checkpoint's run, from its record or from the checkpoint itself)."""
    outputs, classes = trained.get("model.net.num_classes", 10), data_classes(data)
    if classes is not None and outputs != classes:
        raise UserError(
            f"ckpt_path={path} was trained on {outputs} classes and the data has {classes}: "
            f"evaluate it on data with {outputs} classes (the data its run had)"
        )
    check_same_test_set(data, option, trained, path)


def check_same_test_set(data: dict[str, Any], option: str | None, trained: dict, path: Any) -> None:
    """The checkpoint is tested on the images its run was tested on (``trained``: its stored
    settings), or more or fewer of them, as far as they are chosen: the data set, and where the
    images are drawn (synthetic data; a ``data.test_subset`` of part of the set here and there)
    their number and seed. On others, its accuracy would be printed as its own, and unlike its
    record's. Every setting to pass is said at once."""
    target = data.get("_target_")
    then_target = trained.get("data._target_", target)
    if then_target != target:
        was = trained.get("defaults.data") or then_target
        keys = ("num_test", "seed") if then_target == SYNTHETIC else ()
        drawn = [
            f"data.{k}={as_override(trained[f'data.{k}'])}" for k in keys if f"data.{k}" in trained
        ]
        fix = [f"data={was}", *drawn]
        raise UserError(
            f"ckpt_path={path} was trained and tested on data={was}, and data={option or target} "
            f"here would test it on other images: pass {' '.join(fix)}"
        )
    size = (data_sizes(data) or (None, None))[1]
    parts = [part(data.get("test_subset"), size), part(trained.get("data.test_subset"), size)]
    drawn = ("num_test", "seed") if target == SYNTHETIC or all(parts) else ()
    changed = [k for k in drawn if not same(data.get(k), trained.get(f"data.{k}", data.get(k)))]
    if changed:
        then = " ".join(f"data.{k}={as_override(trained[f'data.{k}'])}" for k in changed)
        here = " ".join(f"data.{k}={as_override(data.get(k))}" for k in changed)
        raise UserError(
            f"ckpt_path={path} was tested with {then} during training, and {here} here would "
            f"draw other images: pass {then}"
        )


def part(subset: Any, size: int | None) -> bool:
    """Whether ``data.test_subset`` draws part of a test set of ``size`` images (not all)."""
    return subset is not None and (size is None or subset < size)


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    """The checkpoint's test accuracy (``measured``). Stopped by a signal (``eval.py`` runs it
    under ``sigterm_interrupts``), it ends by the first signal that came, with 128 + its number,
    whatever the signal's exception became on its way out."""
    from multigpu.callbacks.interrupts import by_first_signal, run_stop_signal

    try:
        return measured(cfg)
    except BaseException as error:
        stopped = by_first_signal(error, run_stop_signal())
        if stopped is error:
            raise
        raise stopped from None


def measured(cfg: DictConfig) -> dict[str, Any]:
    """Check the path and the settings, rebuild the network and run Lightning's test loop."""
    for key in EVALUATION_NEEDS:  # dropped: ~data, ~ckpt_path, ~paths
        node, _, name = key.rpartition(".")
        held = OmegaConf.select(cfg, node) if node else cfg
        if not OmegaConf.is_dict(held) or name not in held and not OmegaConf.is_missing(held, name):
            raise UserError(f"{key} is missing from the config: eval.py needs it")  # not ???
    if OmegaConf.is_missing(cfg, "ckpt_path"):
        raise UserError(
            "ckpt_path is required: python eval.py ckpt_path=<run>/checkpoints/last.ckpt "
            "(or ckpt_path=latest)"
        )
    if HydraConfig.initialized():  # a command line it was not checked on before (an append)
        check_evaluation_overrides(HydraConfig.get())
    path = find_checkpoint(cfg.ckpt_path, "ckpt_path", cfg.paths.runs_dir, None, [])
    check_types(cfg)
    check_evaluation(cfg, choices_of(cfg))
    check_launched(os.environ)  # what a launcher's variables promise, and Lightning's own
    rank, started = processes_started(os.environ)
    if rank > 0:  # the first (a batch script's own, say) evaluates; the others would repeat it
        raise UserError(
            f"eval.py runs in one process, but this is process {rank} of the {started} the "
            "launcher started: start it once (srun --ntasks=1, or python eval.py without torchrun)"
        )
    if started > 1 and slurm_started(os.environ) and "SLURM_NTASKS_PER_NODE" not in os.environ:
        raise UserError(  # Lightning's SLURM environment: a RuntimeError's traceback
            f"eval.py in a SLURM job of {started} tasks without --ntasks-per-node, which "
            "Lightning cannot read: run it as one task, srun --ntasks=1 python eval.py ..."
        )
    accelerator, ids, precision = resolve_hardware(config_tree(cfg)["trainer"], Machine.this(False))
    device = ids[0]  # evaluation runs on one device
    data = plain(cfg.data)
    data.pop("batch_size_per_device", None)  # a training-time scaling rule
    if (recorded := settings_beside(path)) is not None:  # its run's record: before torch
        check_same_data(data, choices_of(cfg).get("data"), recorded, path)

    from multigpu.storage.checkpoint import load_checkpoint, network

    checkpoint = load_checkpoint(path)  # torch alone: a file that is refused is refused fast
    net = network(checkpoint, path)

    import pytorch_lightning as pl  # the checks passed: now the heavy part
    import torch

    from multigpu.callbacks.interrupts import run_stop_signal
    from multigpu.callbacks.process_setup import EveryProcess
    from multigpu.run.build import build
    from multigpu.run.fit import without_lightnings_requeue
    from multigpu.storage.checkpoint import classifier, stored_settings

    module = classifier(checkpoint, path, net)
    trained_with = checkpoint.get("datamodule_hyper_parameters") or {}
    data.update({k: v for k, v in trained_with.items() if k in data})
    trained = {**(stored_settings(checkpoint) or {}), **prefixed("model.net.", module.hparams.net)}
    check_same_data(data, choices_of(cfg).get("data"), trained, path)  # a checkpoint anywhere
    machine = Machine.this(False)
    data["num_workers"], data["pin_memory"] = loader_defaults(
        data, accelerator, machine.cpu_cores, 1
    )
    datamodule = build(data)
    matmul_precision = trained_matmul_precision(checkpoint, path)
    torch.set_float32_matmul_precision(matmul_precision)  # before the device is set up
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices=[device] if accelerator == "cuda" else 1,
        precision=precision,
        callbacks=[EveryProcess(matmul_precision, data.get("pipeline", "torchvision"))],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        plugins=without_lightnings_requeue(),  # eval.py writes nothing, no hpc_ckpt either
    )
    try:
        (result,) = trainer.test(module, datamodule=datamodule, verbose=False)
    except SystemExit:  # Lightning's answer to Ctrl-C (exit 1) and SIGTERM (exit 0): no result
        if not trainer.interrupted:
            raise
        # The first stop signal (a SIGTERM during Lightning's answer to Ctrl-C sets
        # received_sigterm too): multigpu.callbacks.interrupts.Ending
        signum = run_stop_signal() or (
            signal.SIGTERM if trainer.received_sigterm else signal.SIGINT
        )
        raise Interrupted(
            f"interrupted by {signum.name}: no test accuracy was measured", 128 + signum
        ) from None
    return {
        "test_acc": result["test/acc"],
        "samples": len(datamodule.test_set),
        "epochs_trained": checkpoint.get("epoch", -1) + 1,  # Lightning stores the last index
        "checkpoint": str(path),  # which one ckpt_path=latest chose
    }
