"""Keep the terminal about the user's run: silence what Lightning and torch print on every run
that asks nothing of the user and changes nothing in it.

- Lightning's advertisement for its cloud logger, printed at every start;
- torch's deprecation of ``LeafSpec``, which Lightning's own code triggers (not fixable here);
- the hint to prefix ``srun`` whenever Slurm is installed, also for runs that are not jobs
  (a run that is a Slurm job is checked against its tasks in ``multigpu.config.settings``);
- ``log_every_n_steps`` larger than an epoch: only epoch-level values are logged here;
- Lightning's device report (``GPU available: False, used: False``, ``TPU available: ...``,
  ``trainer/setup.py``): the run's own first line says what it runs on;
- the fit loop's "Trainer.fit stopped: max_epochs=2 reached" (or ``max_steps``): the closing
  lines say how the run ended, and this one was printed onto the progress bar's last line
  ("stopped: No training batches" stays: it says something is wrong);
- DDP's "Initializing distributed: GLOBAL_RANK ..." per process and its backend banner: the
  run's first line gives the processes and who started them;
- "Loading `train_dataloader` to estimate number of stepping batches.", printed when a
  scheduler stepped per optimizer step asks for the epoch's length;
- "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0]" on every CUDA run: the run's first line says
  which devices it uses;
- "`Trainer(limit_train_batches=1.0)` was configured so 100% of the batches ... will be used",
  for a config that spells out the default (``experiment=speedrun_gpu``: every batch); a
  limit below it is still said;
- the hint to call ``torch.set_float32_matmul_precision`` on a GPU with tensor cores: the
  config's ``float32_matmul_precision`` sets it for every run (``high`` by default), so the
  hint would only repeat a choice made there (or come from a spawned DDP worker, which checks
  before the run's setting reaches it);
- for the in-memory pipeline only, the hint to raise a loader's ``num_workers``: it cuts
  batches from a tensor in the training process, with no worker processes to raise (the
  torchvision pipeline keeps the hint: there it is good advice). That filter knows the run's
  pipeline, so the run sets it in each of its processes: ``multigpu.callbacks.process_setup``;
- "[rank: 0] Received SIGTERM: 15" from Lightning's signal handling, which every stop signal
  is handed to (a SIGHUP too): the run's closing line names the signal that came.
"""

from __future__ import annotations

import logging
import warnings

# (category, start of the message) of each warning left out.
WARNINGS = (
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated"),
    (UserWarning, r"The `srun` command is available on your system but is not used"),
    (UserWarning, r"The number of training batches \(\d+\) is smaller than the logging interval"),
)
SPLITS = ("train", "val", "test", "predict")
# The start of each Lightning info line left out ("GPU available but not used" is a warning,
# which stays: it asks something of the user).
LOG_MESSAGES = (
    "💡 Tip:",
    "GPU available: ",
    "TPU available: ",
    "`Trainer.fit` stopped: `max_epochs=",
    "`Trainer.fit` stopped: `max_steps=",
    "Initializing distributed: ",
    "Loading `train_dataloader` to estimate number of stepping batches",
    "-" * 100 + "\ndistributed_backend=",
    "You are using a CUDA device (",
    "LOCAL_RANK: ",
    *(f"`Trainer(limit_{split}_batches=1.0)` was configured so 100%" for split in SPLITS),
)
LIGHTNING_LOGGERS = (
    "pytorch_lightning.utilities.rank_zero",
    "lightning_fabric.utilities.rank_zero",
    "lightning_fabric.utilities.distributed",
    "pytorch_lightning.accelerators.cuda",
)


SIGNAL_LOGGER = "pytorch_lightning.trainer.connectors.signal_connector"
SIGNAL_MESSAGES = ("Received SIGTERM: ",)  # after a rank prefix ("[rank: 0] ")


class DropMessages(logging.Filter):
    def __init__(self, starts: tuple[str, ...]):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if message.startswith("[rank: "):
            message = message.partition("] ")[2]
        return not message.startswith(self.starts)


# torch's exit hook logs its compile cache's counts at INFO, which torch's own logging set-up
# (done as its import ends) keeps out: a stop during that import had printed them after the
# stop's one line.
TORCH_AT_EXIT = "torch._subclasses.fake_tensor"


def quiet() -> None:
    """Install the filters in this process (each entry point calls it, so spawned and
    re-launched DDP workers do too); idempotent."""
    if logging.getLogger(TORCH_AT_EXIT).level == logging.NOTSET:
        logging.getLogger(TORCH_AT_EXIT).setLevel(logging.WARNING)
    for category, message in WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    dropped = {name: LOG_MESSAGES for name in LIGHTNING_LOGGERS} | {SIGNAL_LOGGER: SIGNAL_MESSAGES}
    for name, messages in dropped.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropMessages) for f in logger.filters):
            logger.addFilter(DropMessages(messages))
