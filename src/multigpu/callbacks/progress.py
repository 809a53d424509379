"""The terminal's progress bar, named for this project's loops: ``Epoch 3/10`` with the loss
and the last test accuracy, ``Test set`` for the pass over the test set after each epoch.

The bar's line never has another line glued to its end: while it is shown, log lines are
written above it (tqdm clears and redraws the bar), and it is closed, ending its line, when
training ends or fails, before whatever is printed next.

Where stdout is not a terminal (a file, a pipe: a GPU job's or Slurm's log, ``| tee``), frames
redrawn with carriage returns would make the whole run one long line there; the same facts
are logged instead, as plain lines (so ``train.log`` has them too): one when each epoch ends,
and one every ``lines_every_s`` seconds within a long epoch.
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import ExitStack
from typing import Any, TextIO

from pytorch_lightning import LightningModule, Trainer
from pytorch_lightning.callbacks import TQDMProgressBar
from pytorch_lightning.callbacks.progress.tqdm_progress import Tqdm, convert_inf
from tqdm.contrib.logging import logging_redirect_tqdm
from typing_extensions import override

# The module's evaluation loaders, in order (ImageClassifier.validation_step).
EVALUATION_NAMES = ("Test set", "Validation set")

log = logging.getLogger(__name__)


def epoch_description(trainer: Trainer) -> str:
    """The epoch counted from 1, as ``metrics.json`` counts, out of the run's last."""
    total = f"/{trainer.max_epochs}" if trainer.max_epochs and trainer.max_epochs > 0 else ""
    return f"Epoch {trainer.current_epoch + 1}{total}"


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` shows a redrawn line as one (a terminal), not as every frame."""
    try:
        return stream.isatty()
    except (AttributeError, OSError, ValueError):  # no descriptor, or a closed one
        return False


def progress_line(
    description: str, done: int, total: int | None, seconds: float, metrics: dict[str, Any]
) -> str:
    """What the bar shows, as one line: ``Epoch 2/10: 117/235 steps in 00:05 (23.4 steps/s),
    loss=0.512, test_acc=0.871``."""
    steps = f"{done}/{total}" if total is not None else str(done)
    rate = f" ({done / seconds:.3g} steps/s)" if seconds > 0 and done else ""
    facts = [f"{description}: {steps} steps in {Tqdm.format_interval(seconds)}{rate}"]
    facts += [f"{name}={Tqdm.format_num(value)}" for name, value in metrics.items()]
    return ", ".join(facts)


def logs_to_console() -> bool:
    """Whether the root logger writes to the terminal (else tqdm's redirect would add a
    console handler where there was none)."""
    streams = (sys.stdout, sys.stderr)
    return any(getattr(h, "stream", None) in streams for h in logging.getLogger().handlers)


class ProgressBar(TQDMProgressBar):
    """Lightning's tqdm bar on a terminal; elsewhere, a plain line per epoch and one every
    ``lines_every_s`` seconds within an epoch. ``lines``: ``None`` decides by stdout, ``True``
    or ``False`` chooses lines or the bar wherever the output goes."""

    def __init__(
        self, *args: Any, lines: bool | None = None, lines_every_s: float = 60.0, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lines, self.lines_every_s = lines, lines_every_s
        self._logs_above_bar: ExitStack | None = None  # made in on_train_start: picklable
        self._as_lines = False  # decided when training starts, where the bar would be drawn
        self._epoch_started = self._last_line = self._step_ended = 0.0
        self._steps = 0  # of the epoch, done

    @override
    def on_train_start(self, *args: Any) -> None:
        """Lightning's, and the console's log lines written through tqdm from now on; where
        stdout (the bar's stream) is no terminal, lines instead of the bar."""
        lines = not is_terminal(sys.stdout) if self.lines is None else self.lines
        if self.is_enabled and lines:
            self._as_lines = True
            self.disable()  # Lightning's bars are made, but draw nothing
        super().on_train_start(*args)
        if self.is_enabled and self._logs_above_bar is None and logs_to_console():
            self._logs_above_bar = ExitStack()
            self._logs_above_bar.enter_context(logging_redirect_tqdm(tqdm_class=Tqdm))

    @override
    def on_train_end(self, *args: Any) -> None:
        """Lightning's (the bar's line ended), then the log lines back to the console."""
        super().on_train_end(*args)
        self._restore_logging()

    @override
    def on_exception(self, *args: Any) -> None:
        """A failed run's error line starts on a line of its own."""
        for bar in (self._val_progress_bar, self._train_progress_bar):
            if bar is not None:
                bar.close()
        self._restore_logging()

    @override
    def teardown(self, *args: Any, **kwargs: Any) -> None:
        self._restore_logging()
        super().teardown(*args, **kwargs)

    def _restore_logging(self) -> None:
        if self._logs_above_bar is not None:
            self._logs_above_bar.close()
            self._logs_above_bar = None

    @override
    def on_train_epoch_start(self, trainer: Trainer, *args: Any) -> None:
        """Lightning's, with the epoch described as above."""
        if self._leave:
            self.train_progress_bar = self.init_train_tqdm()
        bar = self.train_progress_bar
        bar.reset()
        bar.total = convert_inf(self.total_train_batches)
        bar.initial = 0
        bar.set_description(epoch_description(trainer))
        self._epoch_started = self._last_line = self._step_ended = time.monotonic()
        self._steps = 0

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:  # fmt: skip
        """Lightning's; in lines, one every ``lines_every_s`` seconds (not on the epoch's
        last step, which the epoch's line reports)."""
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self._steps, self._step_ended = batch_idx + 1, time.monotonic()
        total = convert_inf(self.total_train_batches)
        last = total is not None and self._steps >= total
        if self._as_lines and not last and time.monotonic() - self._last_line >= self.lines_every_s:
            self._log_line(trainer, pl_module)

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Lightning's; in lines, the epoch's: its steps, time, loss and test accuracy."""
        super().on_train_epoch_end(trainer, pl_module)
        if self._as_lines:
            self._log_line(trainer, pl_module)

    def _log_line(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._last_line = time.monotonic()
        seconds = self._step_ended - self._epoch_started  # the steps', not the test set's
        total = convert_inf(self.total_train_batches)
        metrics = self.get_metrics(trainer, pl_module)
        line = progress_line(epoch_description(trainer), self._steps, total, seconds, metrics)
        log.info("%s", line)

    @property
    @override
    def validation_description(self) -> str:
        return EVALUATION_NAMES[0]

    @override
    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        """Lightning's, with each loader named rather than numbered."""
        if not self.has_dataloader_changed(dataloader_idx):
            return
        bar = self.val_progress_bar
        bar.reset()
        bar.total = convert_inf(self.total_val_batches_current_dataloader)
        bar.initial = 0
        name = EVALUATION_NAMES[min(dataloader_idx, len(EVALUATION_NAMES) - 1)]
        bar.set_description(self.sanity_check_description if trainer.sanity_checking else name)

    @override
    def get_metrics(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, Any]:
        """The logged progress-bar values, without the logger's version number."""
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics
