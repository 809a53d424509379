"""A resumed run's first epoch in its own order.

Lightning makes the training iterator when something first sizes the training data, and a
resumed run reuses that iterator for its first epoch. A schedule stepped per optimizer step
sizes it in ``configure_optimizers``, before the checkpoint's loops are restored: a sampler read
then (the memory pipeline's, or a loader's workers, which fetch ahead as they start) took
epoch 0 for the epoch (``multigpu.data.base.EpochSampler``), and the resumed run drew epoch 0's
order. Once the loops are restored, the iterator is made anew.
"""

from __future__ import annotations

from pytorch_lightning import Callback, LightningModule, Trainer
from typing_extensions import override

from multigpu.callbacks.lightning_compat import renew_training_iterator


class ResumedEpochOrder(Callback):
    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.fit_loop.is_resuming:
            renew_training_iterator(trainer)
