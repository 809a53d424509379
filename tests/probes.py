"""Callbacks that tests attach through the config (``+callbacks.probe._target_=probes...``)."""

from __future__ import annotations

import json
import os
import signal
import time

import torch
from pytorch_lightning import Callback
from typing_extensions import override


class GradientProbe(Callback):
    """Saves the root network's gradients as ``on_after_backward`` sees them, first step only."""

    def __init__(self, path: str):
        self.path = path

    @override
    def on_after_backward(self, trainer, pl_module) -> None:
        if trainer.global_step == 0:
            grads = {n: p.grad.detach().clone() for n, p in pl_module.net.named_parameters()}
            torch.save(grads, self.path)


class FlatBufferProbe(Callback):
    """Records, every step of a ``scatter_allreduce`` run, where its transfer buffers live and
    whether every replica still computes with the root's parameters and buffers."""

    def __init__(self, path: str):
        self.path, self.steps = path, []

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        strategy = trainer.strategy
        root, *others = strategy.replicas
        buffers = [g.flat for g in strategy._grads]
        buffers += [b.flat for state in strategy._replica_states for b in state.buffers]
        root_grads = zip(root.parameters(), strategy._grads[0].views, strict=True)
        replica_states = zip(others, strategy._replica_states, strict=True)
        self.steps.append(
            {
                "buffers": [b.data_ptr() for b in buffers],
                "root_grads_in_flat": all(p.grad is view for p, view in root_grads),
                "replicas_in_flat": all(in_flat(state_of(r), s) for r, s in replica_states),
                "replicas_equal_root": all(
                    torch.equal(a, b)
                    for replica in others
                    for a, b in zip(state_of(replica), state_of(root), strict=True)
                ),
            }
        )

    @override
    def on_train_end(self, trainer, pl_module) -> None:
        torch.save(self.steps, self.path)


def state_of(net) -> list:
    return list(net.parameters()) + list(net.buffers())


def in_flat(tensors, state) -> bool:
    """Every tensor is the view its FlatBuffers holds for it."""
    return all(
        tensors[i].data_ptr() == view.data_ptr()
        for group, buffer in zip(state.groups, state.buffers, strict=True)
        for i, view in zip(group, buffer.views, strict=True)
    )


class RaiseOnRank(Callback):
    """Fails one process of a DDP run at a given step, as a crashing rank would."""

    def __init__(self, rank: int, step: int):
        self.rank, self.step = rank, step

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_rank == self.rank and trainer.global_step == self.step:
            raise RuntimeError(f"rank {self.rank} fails on purpose at step {self.step}")


class HangOnRank(Callback):
    """One DDP process stops answering at a given step, as a stuck rank would."""

    def __init__(self, rank: int, step: int, seconds: float = 600):
        self.rank, self.step, self.seconds = rank, step, seconds

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_rank == self.rank and trainer.global_step == self.step:
            time.sleep(self.seconds)


class SlowToFail(Callback):
    """Rank 0 takes ``seconds`` to handle an error, as a loaded machine's teardown can: longer
    than Lightning's observer waits before killing it."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    @override
    def on_exception(self, trainer, pl_module, exception) -> None:
        if trainer.global_rank == 0:
            time.sleep(self.seconds)


class SlowAfterEpoch(Callback):
    """Sleeps after every step from a given epoch on, so a test can signal mid-epoch."""

    def __init__(self, epoch: int, seconds: float):
        self.epoch, self.seconds = epoch, seconds

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.current_epoch >= self.epoch:
            time.sleep(self.seconds)


class CtrlCAfterEpochEntry(Callback):
    """Ctrl-C at the end of an epoch, after its history entry is made and before its
    checkpoint is written (Lightning runs checkpoint callbacks last)."""

    def __init__(self, epoch: int):
        self.epoch = epoch

    @override
    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if trainer.current_epoch == self.epoch:
            raise KeyboardInterrupt


class SignalWhenBuilt(Callback):
    """Sends this process ``signum`` (by name) as the run builds its callbacks: after the run
    claimed its record, while it is set up, before Lightning trains."""

    def __init__(self, signum: str):
        from multigpu.config.launch import Signal

        os.kill(os.getpid(), Signal[signum])


class HoldRank(Callback):
    """The DDP process of local rank ``rank`` waits ``seconds`` as the run builds its callbacks,
    before the rendezvous, having written its pid to ``marker``: the others wait for it there."""

    def __init__(self, rank: int, seconds: float, marker: str):
        if os.environ.get("LOCAL_RANK", "0") == str(rank):
            with open(marker, "w") as f:
                f.write(str(os.getpid()))
            time.sleep(seconds)


class LossLog(Callback):
    """Appends every step's training loss to a text file, one per line."""

    def __init__(self, path: str):
        self.path = path

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        with open(self.path, "a") as f:
            f.write(f"{float(outputs['loss'])}\n")


class BarLossLog(Callback):
    """Appends the loss the progress bar shows after every step, one per line (added after the
    project's callbacks: it reads what they set)."""

    def __init__(self, path: str):
        self.path = path

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        with open(self.path, "a") as f:
            f.write(f"{trainer.progress_bar_metrics.get('loss')}\n")


class DieDuringCheckpointWrite(Callback):
    """Kills the process half-way through writing the checkpoint of a given epoch, as a
    power cut or ``kill -9`` would (``os._exit``: no cleanup, no exception handlers)."""

    def __init__(self, epoch: int):
        self.epoch = epoch

    @override
    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if trainer.current_epoch != self.epoch:
            return
        from multigpu.storage import checkpoint_io

        def write_half_then_die(file, data) -> None:
            file.write(bytes(data[: len(data) // 2]))
            file.flush()
            os._exit(9)

        checkpoint_io.write_bytes = write_half_then_die


class SlowAfterTraining(Callback):
    """Marks, then sleeps in, the end-of-training work: in ``on_train_end`` (before Lightning's
    teardown) or while the test figures are drawn (after it), so a test can signal there."""

    def __init__(self, where: str, marker: str, seconds: float = 60):
        self.where, self.marker, self.seconds = where, marker, seconds
        if where == "figures":
            from multigpu.callbacks import test_figures

            draw = test_figures.TestSetFigures.draw

            def slow_draw(figures, trainer) -> None:
                self.wait()
                draw(figures, trainer)

            test_figures.TestSetFigures.draw = slow_draw

    def wait(self) -> None:
        with open(self.marker, "w") as f:
            f.write("here\n")
        time.sleep(self.seconds)

    @override
    def on_train_end(self, trainer, pl_module) -> None:
        if self.where == "train_end":
            self.wait()


class FillDisk(Callback):
    """Fills the disk holding ``path`` when epoch ``epoch`` starts, leaving ``free`` bytes, as
    another program filling a shared disk would."""

    def __init__(self, path: str, epoch: int, free: int):
        self.path, self.epoch, self.free = path, epoch, free

    @override
    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch != self.epoch:
            return
        stats = os.statvfs(os.path.dirname(self.path))
        size = stats.f_bavail * stats.f_frsize - self.free
        with open(self.path, "wb") as filler:
            while size > 0:
                size -= filler.write(bytes(min(size, 1 << 20)))


class BatchDevice(Callback):
    """Writes the devices the training batches arrived on (a JSON list) when training ends."""

    def __init__(self, path: str):
        self.path, self.devices = path, set()

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.devices.add(str(batch[0].device))

    @override
    def on_train_end(self, trainer, pl_module) -> None:
        with open(self.path, "w") as f:
            json.dump(sorted(self.devices), f)


class DieOnFirstAttempt(Callback):
    """Rank ``rank`` dies (``os._exit``, as a crash would) when epoch ``epoch`` starts, on
    torchrun's first attempt only: the restarted run goes on."""

    def __init__(self, rank: int, epoch: int):
        self.rank, self.epoch = rank, epoch

    @override
    def on_train_epoch_start(self, trainer, pl_module) -> None:
        restarts = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        here = trainer.global_rank == self.rank and trainer.current_epoch == self.epoch
        if here and restarts == "0":
            os._exit(1)


class FailOnce(Callback):
    """The run fails as training starts unless ``flag`` exists, which it then creates: a
    failure that running the command again does not meet (a node lost, a full disk)."""

    def __init__(self, flag: str):
        self.flag = flag

    @override
    def on_train_start(self, trainer, pl_module) -> None:
        if not os.path.exists(self.flag):
            open(self.flag, "w").close()
            raise RuntimeError(f"fails on purpose once, before {self.flag} exists")


class RankBatch(Callback):
    """Each process writes ``rank<global rank>.json`` into ``folder``: its rank, the world size
    and the size of its first training batch."""

    def __init__(self, folder: str):
        self.folder, self.done = folder, False

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.done:
            return
        self.done = True
        found = {"rank": trainer.global_rank, "world": trainer.world_size, "batch": len(batch[1])}
        with open(os.path.join(self.folder, f"rank{trainer.global_rank}.json"), "w") as f:
            json.dump(found, f)


class StepLr(Callback):
    """Appends the learning rate each optimizer step uses (read just before the step) to a
    text file, one per line."""

    def __init__(self, path: str):
        self.path = path

    @override
    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        with open(self.path, "a") as f:
            f.write(f"{optimizer.param_groups[0]['lr']!r}\n")


class KillRank(Callback):
    """Signals one process of a DDP run at a given step (-1: as it sets up, before training
    and its handlers): SIGKILL, as the OOM killer would, or another signal (``signum``, by
    name), as ``kill`` would."""

    def __init__(self, rank: int, step: int, signum: str = "SIGKILL"):
        self.rank, self.step, self.signum = rank, step, signal.Signals[signum]

    @override
    def setup(self, trainer, pl_module, stage) -> None:
        if trainer.global_rank == self.rank and self.step == -1:
            os.kill(os.getpid(), self.signum)

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_rank == self.rank and trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


class ManyCores(Callback):
    """Lightning sees a machine of ``cores`` CPU cores: its hint to raise a loader's
    ``num_workers`` needs more than 2 (this machine's count)."""

    def __init__(self, cores: int):
        import lightning_fabric.utilities.data as data

        data._num_cpus_available = lambda: cores


class MatmulPrecisionProbe(Callback):
    """Writes torch's float32 matmul precision as training starts."""

    def __init__(self, path: str):
        self.path = path

    @override
    def on_train_start(self, trainer, pl_module) -> None:
        with open(self.path, "w") as f:
            f.write(torch.get_float32_matmul_precision())


class StopThenLoseALoader(Callback):
    """A stop signal to the process, then a loader's pipe closed under the next batch: what a
    scheduler's SIGTERM to the whole process group does when a loader worker dies of it first."""

    def __init__(self, step: int, signum: str = "SIGTERM"):
        self.step, self.signum = step, signal.Signals[signum]

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)
            raise ConnectionResetError(104, "Connection reset by peer")
