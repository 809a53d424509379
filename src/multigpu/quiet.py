"""Keep the terminal about the user's run: silence what Lightning and torch print on every run
that asks nothing of the user and changes nothing in it.

- Lightning's advertisement for its cloud logger, printed at every start;
- torch's deprecation of ``LeafSpec``, which Lightning's own code triggers (not fixable here);
- the hint to prefix ``srun`` whenever Slurm is installed, also for runs that are not jobs
  (a run that is a Slurm job is checked against its tasks in ``multigpu.settings``);
- ``log_every_n_steps`` larger than an epoch: only epoch-level values are logged here.
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
LOG_MESSAGES = ("💡 Tip:",)  # the start of each Lightning info line left out
LIGHTNING_LOGGERS = (
    "pytorch_lightning.utilities.rank_zero",
    "lightning_fabric.utilities.rank_zero",
)


class DropMessages(logging.Filter):
    def __init__(self, starts: tuple[str, ...]):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.starts)


def quiet() -> None:
    """Install the filters in this process (each entry point calls it, so spawned and
    re-launched DDP workers do too); idempotent."""
    for category, message in WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropMessages) for f in logger.filters):
            logger.addFilter(DropMessages(LOG_MESSAGES))
