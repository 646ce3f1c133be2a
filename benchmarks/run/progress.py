"""A progress bar that does not stop the device every step.

Lightning's Rich bar reads the logged values after every batch, one host-device synchronisation
per step; this one moves every batch but reads the values every ``metrics_every`` batches.
"""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.callbacks import RichProgressBar

#: Batches between two readings of the logged values (and between two divergence checks).
READ_EVERY = 25


class StepProgressBar(RichProgressBar):
    """Rich's progress bar, its logged values read every ``metrics_every`` batches (and at the
    end of every epoch and validation, as Lightning's does)."""

    def __init__(self, metrics_every: int = READ_EVERY) -> None:
        super().__init__()
        self.metrics_every = metrics_every
        self._hold_metrics = False

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule
                    ) -> dict[str, int | str | float | dict[str, float]]:
        """Lightning's progress-bar values, and the training loss, which the methods log without
        ``prog_bar`` (Lightning would read a ``prog_bar`` value on the host every step)."""
        metrics = super().get_metrics(trainer, pl_module)
        loss = trainer.callback_metrics.get("train_loss")
        if loss is not None:
            metrics["train_loss"] = float(loss)
        return metrics

    def _update_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._hold_metrics:
            super()._update_metrics(trainer, pl_module)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs,
                           batch, batch_idx: int) -> None:
        self._hold_metrics = (batch_idx + 1) % self.metrics_every != 0
        try:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        finally:
            self._hold_metrics = False


class CurveEveryEpoch(pl.Callback):
    """Lowers ``log_every_n_steps`` to one epoch's optimiser steps when the run did not set it
    (``explicit`` False): with Lightning's default of 50, an epoch of fewer steps logs no point of
    the training-loss curve at all. Set in ``setup``, before Lightning reads it."""

    def __init__(self, explicit: bool) -> None:
        self.explicit = explicit

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.explicit or stage != "fit" or trainer.datamodule is None:
            return
        batches = len(trainer.datamodule.train_dataloader())
        limit = trainer.limit_train_batches
        if isinstance(limit, int):
            batches = min(batches, limit)
        elif limit is not None:
            batches = int(batches * limit)
        steps = batches // max(1, trainer.accumulate_grad_batches)
        trainer.log_every_n_steps = max(1, min(trainer.log_every_n_steps, steps))
