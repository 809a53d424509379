"""Every piece of Lightning this package restates, every private name of Lightning it uses, and
the order of hooks it relies on, in one place: after an upgrade of Lightning this is the one
file to read again.

``RESTATED``, ``PRIVATE`` and ``RELIED_ON`` give, for each original, the SHA-256 of its source as
installed when this file was last checked against it; ``tests/test_lightning_compat.py`` fails
as soon as the installed Lightning's source of any of them differs, naming it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from lightning_fabric.utilities.distributed import _set_num_threads_if_needed
from lightning_fabric.utilities.logger import _convert_params, _flatten_dict
from pytorch_lightning import Trainer
from pytorch_lightning.loops.fit_loop import _FitLoop
from pytorch_lightning.loops.loop import _Loop
from pytorch_lightning.strategies.launchers import _SubprocessScriptLauncher
from pytorch_lightning.trainer.connectors.signal_connector import _get_sigkill_signal
from typing_extensions import override

__all__ = [
    "SubprocessScriptLauncher",
    "convert_params",
    "flatten_dict",
    "get_sigkill_signal",
    "launch_children",
    "renew_training_iterator",
    "resume_epoch_ends_as_new_epochs",
    "stop_without_a_broadcast_in_the_handler",
    "strategy_backward",
]

SubprocessScriptLauncher = _SubprocessScriptLauncher  # one train.py per further device
convert_params, flatten_dict = _convert_params, _flatten_dict  # hparams as TensorBoard takes them
get_sigkill_signal = _get_sigkill_signal  # SIGKILL, or what Windows has instead

# The originals restated below, and the private names above: their sources' digests.
LAUNCHERS = "pytorch_lightning.strategies.launchers.subprocess_script"
SIGNALS = "pytorch_lightning.trainer.connectors.signal_connector"
RESTATED = {
    "pytorch_lightning.strategies.strategy.Strategy.backward": (
        "627cfe60660857e3f1bffeef34d5659ca31538c6c49962ac474608861634b3b9"
    ),
    f"{LAUNCHERS}._SubprocessScriptLauncher.launch": (
        "401529edcc28ddb32662124356c2ea1470ab07188418d708bfc82e773613ffd9"
    ),
    "pytorch_lightning.loggers.csv_logs.CSVLogger.experiment.fget": (  # csv_logger
        "75cf079b544bc3793af3af29474b51bc48001bbb9937b481f178c44f74c32d52"
    ),
    "pytorch_lightning.loops.fit_loop._FitLoop.restarting.fset": (
        "0e1fb8a761866ce82df80103ec97259b532385a94d134b95dc7985183f684fab"
    ),
    f"{SIGNALS}._SignalConnector._sigterm_notifier_fn": (  # without its broadcast
        "5f73424dfc7ee25a516a0b4cc29e5872550ea2f9b90490f508e6493364d4665b"
    ),
}
PRIVATE = {
    "lightning_fabric.loggers.csv_logs._ExperimentWriter._check_log_dir_exists": (  # csv_logger
        "e1857e769882eb8d184b77e87795d83ddecae24b4ff548a1d55b58c9e07a7c87"
    ),
    "lightning_fabric.utilities.distributed._set_num_threads_if_needed": (
        "3b275a72d03b92cdf54d903d84e8ee1e530ded48786e380eb1d6c1196fca971e"
    ),
    "lightning_fabric.utilities.logger._convert_params": (
        "c34757d6c25baed6b1aebcf301f9807897b77ba6994fed0510928f0d1c7e587d"
    ),
    "lightning_fabric.utilities.logger._flatten_dict": (
        "3d19375f760f98d1500e3ed186f9a80e7f2f545b7ccfce7d861499931c12b950"
    ),
    f"{LAUNCHERS}._SubprocessScriptLauncher": (
        "d8317c3c2b3fc7a8e1b74ad9b3a8bf53e55225c697ea764607388633834b4bf0"
    ),
    "pytorch_lightning.trainer.connectors.signal_connector._get_sigkill_signal": (
        "c74a43b1f37341350458f084e9b8947365a47048e0a46a78c4e68aab496d7885"
    ),
}


# Lightning's order of hooks the package relies on, by the sources that make it: the strategy's
# ``on_train_end`` comes once the fit loop is done, after the callbacks' (their last checkpoint
# saved) and before ``on_fit_end`` and teardown, which hold no collective
# (``multigpu.strategies.ddp.BoundedDDPStrategy.on_train_end`` stands its watch down there).
RELIED_ON = {
    "pytorch_lightning.loops.fit_loop._FitLoop.on_run_end": (
        "0c258126414d3c157ade735d00f6f09c30d369c79f6d0af1503dbc7e34d8191c"
    ),
    "pytorch_lightning.trainer.trainer.Trainer._run": (
        "6b7fa38f7340f413483b36b26c97aca83b5c6ca052bfc5eb7ed5475fc84956eb"
    ),
    # FitLoopFromEpochEnds: how the loops restart when it says they are not restarting.
    "pytorch_lightning.loops.fit_loop._FitLoop.__init__": (
        "8ccd903162543547d73e6288c5656f8ab80b28484caba46038c487a97dd85563"
    ),
    "pytorch_lightning.loops.fit_loop._FitLoop.reset": (
        "ee34bf3662fe2739345568109e2ad347fc26744ce26d9e2de781958903cb912e"
    ),
    "pytorch_lightning.loops.fit_loop._FitLoop.update_restart_stage": (
        "f0a84f5e08328f3153f358a0f8e099214c1f8d4d086caf72ba01621b8f14d829"
    ),
    # renew_training_iterator: a resumed run's first epoch reuses the iterator setup_data made.
    "pytorch_lightning.loops.training_epoch_loop._TrainingEpochLoop.on_run_start": (
        "4993b0dcc52bf919b152d978c2c4549f16acdac2a88db1bfbfdd8074720d45b8"
    ),
    "pytorch_lightning.loops.training_epoch_loop._TrainingEpochLoop.reset": (
        "0014631aabe0ac52616507e18cba98b09b720ff18538d08114265d5df142623a"
    ),
    # stop_without_a_broadcast_in_the_handler: the handler is the connector's attribute when
    # fit registers it, and every step starts with rank 0's stop broadcast to every process.
    f"{SIGNALS}._SignalConnector.register_signal_handlers": (
        "cd4b642fd86bfc6f4168728e74aff715aa7aad92efa61a0d6a25f21a42f955ab"
    ),
    "pytorch_lightning.loops.training_epoch_loop._TrainingEpochLoop._broadcast_sigterm_tensor": (
        "d4e504c3f7d8bcb54e4bd1c0689e6deedb222e676161d4da2f3ba55a4549da78"
    ),
}


def strategy_backward(
    strategy: Any, closure_loss: Any, optimizer: Any, between: Callable[[], None], *args, **kwargs
) -> Any:
    """``Strategy.backward`` as Lightning 2.6 has it, with ``between()`` called between the
    precision plugin's backward and its post-backward (which calls ``on_after_backward``): no
    hook of Lightning's sits at that point."""
    module = strategy.lightning_module
    strategy.pre_backward(closure_loss)
    closure_loss = strategy.precision_plugin.pre_backward(closure_loss, module)
    strategy.precision_plugin.backward(closure_loss, module, optimizer, *args, **kwargs)
    between()
    closure_loss = strategy.precision_plugin.post_backward(closure_loss, module)
    strategy.post_backward(closure_loss)
    return closure_loss


def launch_children(
    launcher: _SubprocessScriptLauncher, run: Callable[[], Any], watch: Callable[[], None]
) -> Any:
    """``_SubprocessScriptLauncher.launch`` as Lightning 2.6 has it, with ``watch()`` started
    in place of its process observer (which kills rank 0 while rank 0 records how the run
    ended)."""
    launcher.cluster_environment.validate_settings(launcher.num_processes, launcher.num_nodes)
    if not launcher.cluster_environment.creates_processes_externally:
        launcher._call_children_scripts()
        watch()
    _set_num_threads_if_needed(num_processes=launcher.num_processes)
    return run()


class FitLoopFromEpochEnds(_FitLoop):
    """Lightning's fit loop, which under ``max_steps`` treats every resume as one inside an
    epoch: from a checkpoint written at an epoch's end (the only kind a run resumes,
    ``multigpu.storage.checkpoint_model.EpochProgress``) it went on with that epoch, counting it
    twice (``processed`` one past ``started``) and repeating it in the run's history. Here, as
    without ``max_steps``, only an unfinished epoch is resumed, and an epoch's end starts the
    next epoch."""

    @_Loop.restarting.setter
    @override
    def restarting(self, restarting: bool) -> None:
        """``_FitLoop.restarting``'s setter as Lightning 2.6 has it, less its
        ``or self._iteration_based_training()``."""
        values = self.epoch_progress.current.ready, self.epoch_progress.current.started
        epoch_unfinished = any(v != self.epoch_progress.current.processed for v in values)
        _Loop.restarting.fset(self, restarting and epoch_unfinished)


def resume_epoch_ends_as_new_epochs(trainer: Trainer) -> None:
    """Gives ``trainer`` a ``FitLoopFromEpochEnds`` in place of its own (before ``fit``),
    built as ``Trainer.__init__`` builds its own, around the same epoch loop."""
    own = trainer.fit_loop
    loop = FitLoopFromEpochEnds(trainer, min_epochs=own.min_epochs, max_epochs=own.max_epochs)
    loop.epoch_loop = own.epoch_loop
    trainer.fit_loop = loop


def stop_without_a_broadcast_in_the_handler(trainer: Trainer) -> None:
    """Lightning's SIGTERM handler (2.6) broadcasts rank 0's stop from inside the handler, at
    whatever point each process was (in the middle of a gradient allreduce): the processes'
    collectives then mismatch, and gloo aborts one (SIGABRT, the run recorded failed) or they
    wait until the collective timeout. Its broadcast at the start of every step already shares
    rank 0's stop with every process, at the same step: the handler here only notes the signal
    and passes it on to the processes rank 0 started, as Lightning's does."""
    # What register_signal_handlers installs in fit; a partial, which spawn can pickle.
    trainer._signal_connector._sigterm_notifier_fn = functools.partial(stop_noted, trainer)


def stop_noted(trainer: Trainer, signum: int, frame: Any) -> None:
    """Lightning's SIGTERM notifier without its collective: pass the stop on once, note it."""
    connector, launcher = trainer._signal_connector, trainer.strategy.launcher
    if not connector.received_sigterm and launcher is not None:
        launcher.kill(signum)
    connector.received_sigterm = True


def renew_training_iterator(trainer: Trainer) -> None:
    """A new iterator over the training data, made as the epoch loop makes one at an epoch's
    start (``iter`` of the fit loop's fetcher)."""
    fetcher = trainer.fit_loop._data_fetcher
    if fetcher is not None:
        iter(fetcher)
