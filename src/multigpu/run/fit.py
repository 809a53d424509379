"""Training itself, once the run is resolved: the strategy, data, module and ``Trainer`` built
from the ``Run``, and Lightning's fit. ``multigpu.run.training.train`` calls it; it is the part that
imports torch and Lightning."""

from __future__ import annotations

import atexit
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import torch.distributed as dist
from lightning_fabric.plugins.environments import SLURMEnvironment
from omegaconf import DictConfig
from pytorch_lightning.callbacks import Checkpoint, ProgressBar
from pytorch_lightning.strategies import SingleDeviceStrategy, Strategy

from multigpu.callbacks import (
    BarLoss,
    DivergenceGuard,
    EpochHistory,
    EpochTimer,
    HParamsSummary,
    PhaseTimer,
)
from multigpu.callbacks.interrupts import (
    after_training_notice,
    note_stop_signal,
    run_stop_signal,
    stop_signal,
    stop_signal_within,
)
from multigpu.callbacks.lightning_compat import (
    resume_epoch_ends_as_new_epochs,
    stop_without_a_broadcast_in_the_handler,
)
from multigpu.callbacks.process_setup import EveryProcess
from multigpu.callbacks.resumed_order import ResumedEpochOrder
from multigpu.callbacks.worker_stop import WorkerStopsAtOnce
from multigpu.config.errors import (
    Interrupted,
    PeerFailed,
    RunStopped,
    UserError,
    WriteFailed,
    add_note,
    summary_line,
)
from multigpu.config.launch import (
    Signal,
    answering_stops,
    requeue_on_warning,
    slurm_started,
    stop_signals,
    torchrun_started,
)
from multigpu.config.schema import Top, default_of
from multigpu.config.settings import IN_PROCESS, ONE_DEVICE, Run, plain
from multigpu.models.classifier import ImageClassifier
from multigpu.run.admission import Admission
from multigpu.run.build import build
from multigpu.run.lightning_arguments import lightning_refusal
from multigpu.run.quiet import quiet
from multigpu.run.resume import check_same_run, resume_hint
from multigpu.storage.checkpoint import (
    check_fits,
    check_resumable,
    load_checkpoint,
    network_state,
    stored_settings,
)
from multigpu.storage.checkpoint_io import AtomicCheckpointIO
from multigpu.storage.record import RunRecord
from multigpu.strategies.ddp import BoundedDDPStrategy

log = logging.getLogger(__name__)


def build_strategy(node: DictConfig, run: Run) -> Strategy:
    """The ``strategy`` group's class with the run's devices: Lightning's single-device
    strategy takes one, ours a list; for DDP, Lightning places one process per device."""
    devices = [torch.device(d) for d in run.torch_devices]
    if run.placement == ONE_DEVICE:  # strategy=single, or auto on one device
        return SingleDeviceStrategy(device=devices[0])
    if run.placement == IN_PROCESS:
        return build(node, parallel_devices=devices)
    return build(node, start_method=run.start_method)


def build_module(node: DictConfig, run: Run) -> ImageClassifier:
    """The model group as configured, with the learning rate the run resolved."""
    model = plain(node)
    model.pop("lr_scaling", None)  # already applied: run.lr, run.warmup_*
    model["optimizer"]["lr"], model["optimizer"]["fused"] = run.lr, run.fused
    if run.warmup_epochs:
        model["warmup"] = {"epochs": run.warmup_epochs, "start_factor": run.warmup_from / run.lr}
    return build(model, _recursive_=False)


def build_datamodule(node: DictConfig, run: Run) -> pl.LightningDataModule:
    """The data group as configured, loading the share of the global batch each process loads."""
    data = plain(node)
    data.pop("batch_size_per_device", None)  # already applied: run.batch_size
    data["batch_size"] = run.process_batch_size
    data["num_workers"], data["pin_memory"] = run.num_workers, run.pin_memory  # the machine's
    return build(data)


def build_callbacks(node: DictConfig | None, checkpoints: Path) -> list[Any]:
    """The configured callbacks; the checkpoint callback writes in the checkpoint folder the run
    was admitted with and owns (``Admission.checkpoints``: canonical, so ``~/ck`` is ``$HOME``'s,
    not a folder named ``~`` here)."""
    built = []
    for name, callback in (node or {}).items():
        if not callback:
            continue
        if name == "checkpoint" and callback.get("dirpath") is not None:
            built.append(build(callback, dirpath=str(checkpoints)))
        else:
            built.append(build(callback))
    return built


def check_classes(module: ImageClassifier, datamodule: pl.LightningDataModule) -> None:
    """The network's outputs must cover the data's labels; found now, not mid-epoch."""
    net, classes = module.hparams.net, len(datamodule.class_names)
    if net.get("num_classes", 10) != classes:
        raise UserError(
            f"model.net.num_classes={net.get('num_classes', 10)} but the data has {classes} "
            f"classes: set model.net.num_classes={classes}"
        )


def start_from(
    admission: Admission, module: ImageClassifier, cfg: DictConfig
) -> dict[str, Any] | None:
    """A checkpoint to resume from must be intact, of the same run, fit this network and carry
    training state; one to start from must fit this network, and gives it its weights. All
    checked before any training; the checkpoint to resume is returned, for Lightning to restore
    what was checked."""
    path = admission.ckpt_path or admission.init_from
    if path is None:
        return None
    read = admission.checked.take(path) if admission.checked else None
    checkpoint = read if read is not None else load_checkpoint(path)  # admission's, or read now
    check_fits(path, checkpoint, module.net, plain(cfg.model.net))
    if admission.init_from is not None:
        module.net.load_state_dict(network_state(checkpoint))
        log.info("starting from the weights of %s", path)
        return None
    allowed = list(admission.resume.changed) if admission.resume else []
    check_same_run(path, stored_settings(checkpoint), admission.settings, allowed)
    check_resumable(path, checkpoint)
    log.info("resuming from %s", path)
    return checkpoint


# How long a closed loader pipe waits for the stop signal that may have closed it (sent to the
# process group, it ends the worker first): a failure that is not a signal's waits this long.
LOADER_SIGNAL_WAIT_S = 1.0
# What a failed collective says, by backend: the peer closed its connections (it exited), or
# did not answer within the timeout (it hangs or was stopped).
COLLECTIVE_FAILURES = (
    "gloo", "nccl", "connection closed by peer", "connection reset by peer", "timed out",
    "processgroup", "broken pipe",
)  # fmt: skip


# How torch says a loader worker died: by a signal (its name, as strsignal gives it), or reaped
# before torch saw how.
WORKER_KILLED = re.compile(r"DataLoader worker \(pid.*\) is killed by signal: ([^.]+)\.")
WORKER_EXITED = re.compile(r"DataLoader worker \(pid\(s\) .*\) exited unexpectedly")


def signal_of_loader_workers(error: RuntimeError) -> Signal | None:
    """The signal that ended the data loader's workers, when that is the error: a stop signal
    (Ctrl-C's, or one of ``stop_signals``) sent to the whole process group reaches them too, and
    their death is reported before this process's own handler stops the run."""
    found = WORKER_KILLED.search(str(error))
    stops = (signal.SIGINT, *stop_signals(os.environ))
    names = {signal.strsignal(signum): signum for signum in stops}  # what torch says: strsignal
    if found:
        return names.get(found[1])
    if WORKER_EXITED.search(str(error)):
        return stop_signal_within(LOADER_SIGNAL_WAIT_S)  # reaped before torch saw the signal
    return None


def loader_worker_death(error: RuntimeError) -> str | None:
    """How a data loader worker died, where that is the error and no stop signal was it: by
    another signal (SIGKILL: the system's memory killer, as a rule), or unseen."""
    if found := WORKER_KILLED.search(str(error)):
        return f"was killed by signal: {found[1]}"
    return "exited unexpectedly" if WORKER_EXITED.search(str(error)) else None


def is_collective_failure(error: RuntimeError) -> bool:
    """Whether ``error`` is a collective's that failed because of another process."""
    text = str(error).lower()
    return isinstance(error, dist.DistBackendError) or any(m in text for m in COLLECTIVE_FAILURES)


def build_trainer(node: DictConfig, **kwargs: Any) -> pl.Trainer:
    """Lightning's ``Trainer``; an argument it refuses becomes one line (admission has built one
    from the same node already, so that is only what the run's own choices make of it)."""
    try:
        return build(node, _convert_="all", **kwargs)
    except Exception as err:
        refusal = lightning_refusal(err)
        if refusal is None:
            raise
        raise refusal from None


def plugins(checkpoint_io: AtomicCheckpointIO) -> list[Any]:
    """Atomic checkpoint files; under SLURM, requeueing on the warning signal is ours: a
    requeued job resumes from its last epoch's checkpoint, as any restart does."""
    cluster = without_lightnings_requeue()
    if cluster:
        requeue_on_warning(os.environ)
    return [checkpoint_io, *cluster]


def without_lightnings_requeue() -> list[Any]:
    """Under SLURM (one task or one per device), Lightning's SLURM environment without its own
    requeue on the warning signal, which saves a mid-epoch checkpoint (``hpc_ckpt_<n>.ckpt``)
    and resumes from it unchecked; none for torchrun inside a SLURM job, whose environment
    Lightning takes instead."""
    if not slurm_started(os.environ) or torchrun_started(os.environ):
        return []
    return [SLURMEnvironment(auto_requeue=False)]


def set_up(
    cfg: DictConfig, admission: Admission, record: RunRecord, output_dir: Path
) -> tuple[pl.Trainer, ImageClassifier, pl.LightningDataModule, Strategy]:
    """The trainer, module, data module and strategy of the admitted run, its checkpoint
    checked and handed over."""
    run, ckpt_path = admission.run, admission.ckpt_path
    checkpoints = admission.checkpoints
    quiet()
    matmul_precision = cfg.get(
        "float32_matmul_precision", default_of(Top, "float32_matmul_precision")
    )
    torch.set_float32_matmul_precision(matmul_precision)  # before the device is set up
    if run.seed is not None:
        pl.seed_everything(run.seed, workers=True, verbose=False)
    else:  # Lightning would seed DDP's processes from an earlier job's seed, or the shell's
        for name in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS"):
            os.environ.pop(name, None)
    strategy = build_strategy(cfg.strategy, run)
    if isinstance(strategy, BoundedDDPStrategy):  # if rank 0 gets stuck after a peer failed
        strategy.record_failure = record.finish  # a bound method: spawn pickles the strategy
        strategy.resume_hint = resume_hint(
            checkpoints, admission.ckpt_path, cfg.paths.runs_dir, admission.checkpoints_apart
        )
    datamodule = build_datamodule(cfg.data, run)
    module = build_module(cfg.model, run)
    checkpoint_io = AtomicCheckpointIO()
    checked = start_from(admission, module, cfg)
    if checked is not None and ckpt_path is not None:
        checkpoint_io.hand_over(ckpt_path, checked)
    check_classes(module, datamodule)
    callbacks = build_callbacks(cfg.get("callbacks"), checkpoints)
    if cfg.get("phases"):
        callbacks.append(PhaseTimer(output_dir / "phases.json"))
    # No bar configured: no bar, not Lightning's own (redrawn, reading the loss, every step).
    bar = cfg.trainer.get("enable_progress_bar")  # null: as the callbacks say
    bar = any(isinstance(c, ProgressBar) for c in callbacks) if bar is None else bar
    if not bar:  # +trainer.enable_progress_bar=false: the configured bar too (Lightning refused it)
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    trainer = build_trainer(
        cfg.trainer,
        accelerator=run.accelerator,
        devices=run.trainer_devices,
        num_nodes=run.num_nodes,
        precision=run.precision,
        strategy=strategy,
        callbacks=[
            EveryProcess(matmul_precision, cfg.data.get("pipeline", "torchvision"), quiet),
            WorkerStopsAtOnce(),
            EpochTimer(),
            EpochHistory(record),
            ResumedEpochOrder(),
            DivergenceGuard(cfg.check_finite_every_n_steps, checkpoints),
            HParamsSummary(record),
            *([BarLoss()] if bar else []),  # before the bar, which shows the loss it reads
            *callbacks,
        ],
        plugins=plugins(checkpoint_io),
        enable_checkpointing=any(isinstance(c, Checkpoint) for c in callbacks),
        enable_progress_bar=bar,
        use_distributed_sampler=False,  # the data modules shard for DDP themselves
        logger=build(cfg.logger) if cfg.get("logger") else False,
    )
    resume_epoch_ends_as_new_epochs(trainer)  # also under max_steps
    stop_without_a_broadcast_in_the_handler(trainer)
    return trainer, module, datamodule, strategy


def fit(cfg: DictConfig, admission: Admission, record: RunRecord, output_dir: Path) -> None:
    """Train as admitted: fresh, resuming a checkpoint, or from a checkpoint's weights. How to
    go on after a stop is added where the run's ending is recorded (``resume.with_resume_hint``)."""
    run, ckpt_path = admission.run, admission.ckpt_path
    checkpoints = admission.checkpoints
    trainer, module, datamodule, strategy = set_up(cfg, admission, record, output_dir)
    sigint_handler = signal.getsignal(signal.SIGINT)  # Lightning ignores Ctrl-C after one
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    except SystemExit:  # Lightning's answer to Ctrl-C (exit 1) and to SIGTERM (SIGTERMException)
        if not trainer.interrupted:
            raise
        # The run's first stop signal, not the one Lightning saw last (a SIGTERM during its
        # answer to Ctrl-C sets received_sigterm too): multigpu.callbacks.interrupts.Ending
        signum = run_stop_signal() or (
            stop_signal(signal.SIGTERM) if trainer.received_sigterm else signal.SIGINT
        )
        if trainer.fit_loop.done:  # every epoch ran and its checkpoint is written
            skipped = "the end-of-training work (test figures)"
            print(after_training_notice(signum.name, skipped), file=sys.stderr)
            return
        raise Interrupted(f"interrupted by {signum.name}", exit_code=128 + signum) from None
    except WriteFailed as err:
        apart = admission.checkpoints_apart
        add_note(err, resume_hint(checkpoints, ckpt_path, cfg.paths.runs_dir, apart))
        raise
    except RuntimeError as err:  # a collective's, when the process that failed was another
        stopped = signal_of_loader_workers(err)
        if stopped is not None:  # a signal to the process group (timeout, Slurm, kill -PGID)
            stopped = note_stop_signal(stopped)  # the first, if another came before
            raise Interrupted(f"interrupted by {stopped.name}", exit_code=128 + stopped) from None
        if (death := loader_worker_death(err)) is not None:  # not a bug here: one line
            ended = RunStopped(
                f"a data loader worker {death} (out of memory, as a rule: fewer "
                "data.num_workers need less)"
            )
            apart = admission.checkpoints_apart
            add_note(ended, resume_hint(checkpoints, ckpt_path, cfg.paths.runs_dir, apart))
            raise ended from err
        peer = getattr(strategy, "peer_failure", None)
        peer_signal = getattr(strategy, "peer_signal", None)
        if peer_signal is not None:  # another process of the run was stopped by a signal
            stopped = note_stop_signal(peer_signal)
            message = f"interrupted by {stopped.name} ({peer})"
            raise Interrupted(message, exit_code=128 + stopped) from None
        if peer is None and not (run.processes > 1 and is_collective_failure(err)):
            raise
        cause = f"{type(err).__name__}: {summary_line(str(err))}"
        rank = trainer.global_rank
        if peer is None:
            peer = "a collective failed: another process of the run ended or stopped first"
        raise PeerFailed(f"{peer}; rank {rank} then stopped with {cause}") from err
    except (ConnectionError, EOFError) as err:  # a loader worker's pipe, closed by a signal
        stopped = stop_signal_within(LOADER_SIGNAL_WAIT_S)  # to the process group, which
        if stopped is None:  # ended the worker first
            raise
        log.warning("after %s: %s: %s", stopped.name, type(err).__name__, summary_line(str(err)))
        raise Interrupted(f"interrupted by {stopped.name}", exit_code=128 + stopped) from None
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, sigint_handler)
        workers = getattr(getattr(trainer.strategy, "launcher", None), "procs", None)
        if workers:  # an ending other than fit's own: a worker may be stuck in a collective
            wait_s = WORKERS_END_S if trainer.state.finished else WORKERS_STOP_S
            atexit.register(wait_for_workers, list(workers), wait_s)


WORKERS_END_S = 60  # after this process's end: then a worker still running is stuck
WORKERS_STOP_S = 10  # after a failure or a stop, which the workers end on as well


def wait_for_workers(workers: list[Any], wait_s: float) -> None:
    """The processes Lightning started for this run (``subprocess.Popen`` or, spawned,
    ``multiprocessing`` ones) end before this one, as this process exits: Lightning did not
    wait for them, and a command (or a Slurm step) ended while a worker was still shutting
    down. One still running after ``wait_s``, or when a stop signal comes meanwhile (Ctrl-C
    on a command that seems to hang), is killed."""
    deadline = time.monotonic() + wait_s
    try:
        with answering_stops(stopped):
            for worker in workers:
                left = max(0.0, deadline - time.monotonic())
                worker.wait(left) if hasattr(worker, "wait") else worker.join(left)
    except (subprocess.TimeoutExpired, Stopped):
        pass
    finally:
        for worker in workers:
            if worker.poll() is None if hasattr(worker, "poll") else worker.is_alive():
                worker.kill()


class Stopped(Exception):
    """A stop signal while the workers were waited for."""


def stopped(signum: Signal) -> None:
    raise Stopped(signum.name)
