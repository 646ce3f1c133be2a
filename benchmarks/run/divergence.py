"""A run whose training loss turns NaN or infinite stops at once, and says where.

Without this a diverged run trains on to its last epoch and is then scored on NaN features
(scikit-learn's "Input X contains NaN", or a chance-level accuracy saved as a result).
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch

from benchmarks.run.progress import READ_EVERY


class Diverged(FloatingPointError):
    """The training loss was not finite: ``diverged at epoch E, step S (loss nan)``."""

    def __init__(self, epoch: int, step: int, loss: float) -> None:
        self.epoch, self.step, self.loss = epoch, step, loss
        super().__init__(f"diverged at epoch {epoch}, step {step} (loss {loss})")

    def __reduce__(self):  # it crosses process boundaries (Ray tasks, DDP workers)
        return Diverged, (self.epoch, self.step, self.loss)


class StopOnDivergence(pl.Callback):
    """Raises :class:`Diverged` at the first non-finite training loss.

    The check itself runs on the device (no host synchronisation): the first bad step's epoch,
    step and loss are kept in a device tensor, which is read every ``read_every`` batches
    (:data:`benchmarks.run.progress.READ_EVERY` by default) and after every epoch's last batch.
    So the run stops at most ``read_every - 1`` batches late, and still names the step where the
    loss first went bad.

    >>> stop = StopOnDivergence(read_every=1)
    >>> stop.record(torch.tensor(1.0), epoch=0, step=0); stop.check()
    >>> stop.record(torch.tensor(float("nan")), epoch=0, step=1)
    >>> stop.record(torch.tensor(float("inf")), epoch=0, step=2)
    >>> stop.check()
    Traceback (most recent call last):
    ...
    benchmarks.run.divergence.Diverged: diverged at epoch 0, step 1 (loss nan)
    """

    def __init__(self, read_every: int = READ_EVERY) -> None:
        if read_every < 1:
            raise ValueError(f"read_every must be at least 1 batch, got {read_every}")
        self.read_every = read_every
        self.first: torch.Tensor | None = None  # (epoch, step, loss); step -1 while all finite
        self.batches = 0

    def record(self, loss: torch.Tensor, epoch: int, step: int) -> None:
        """Note ``loss`` of training step ``step`` (device operations only)."""
        loss = loss.detach().float().reshape(-1)[:1].squeeze(0)
        if self.first is None or self.first.device != loss.device:
            self.first = torch.tensor([0.0, -1.0, 0.0], device=loss.device)
        new = torch.stack([torch.full_like(loss, epoch), torch.full_like(loss, step), loss])
        take = (~torch.isfinite(loss)) & (self.first[1] < 0)
        self.first = torch.where(take, new, self.first)

    def check(self) -> None:
        """Raise :class:`Diverged` if a recorded loss was not finite (reads the device)."""
        if self.first is None:
            return
        epoch, step, loss = self.first.tolist()
        if step >= 0:
            raise Diverged(int(epoch), int(step), loss)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch,
                             batch_idx: int) -> None:
        self.step = trainer.global_step  # the optimiser step this batch's loss belongs to

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs,
                           batch, batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if not isinstance(loss, torch.Tensor):
            return
        self.record(loss, trainer.current_epoch, self.step)
        self.batches += 1
        # and after an epoch's last batch, before its validation reports anything (a search
        # trial would report a diverged epoch, and its last report ends it as completed)
        if self.batches % self.read_every == 0 or batch_idx + 1 >= trainer.num_training_batches:
            self.check()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.check()
