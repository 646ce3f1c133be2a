"""A progress bar that does not stop the device every step.

Lightning's Rich progress bar reads the logged values (``train_loss`` ...) after every batch,
and reading a value that lives on a GPU waits for the GPU to finish its queue: one host-device
synchronisation per step, which leaves a fast GPU idle while Python catches up. This one moves
the bar every batch (a host-side counter) and reads the values every ``metrics_every`` batches.
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
