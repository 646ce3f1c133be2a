"""A run whose training loss turns NaN or infinite stops at once, and says where, rather than
training on and being scored on NaN features.
"""

from __future__ import annotations

import math

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

    Each step's loss is copied into a device buffer read every ``read_every`` batches and at each
    epoch's end, so no step waits on the device; the run stops at most ``read_every - 1`` batches
    late and still names the first bad step.

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
        self.losses: torch.Tensor | None = None  # the unread losses, on their device
        self.pending: list[tuple[int, int]] = []  # their (epoch, step), on the host
        self.batches = 0

    def record(self, loss: torch.Tensor, epoch: int, step: int) -> None:
        """Note ``loss`` of training step ``step``: a copy on the device, nothing read. (It
        replaced a running first-bad-step tensor updated in about ten operations a step.)"""
        loss = loss.detach().reshape(-1)[0]
        if self.losses is None or self.losses.device != loss.device:
            if self.pending:  # what the earlier device holds is read before it is dropped
                self.check()
            self.losses = torch.empty(self.read_every, device=loss.device)
        elif len(self.pending) == len(self.losses):  # more records than checks: room for more
            self.losses = torch.cat([self.losses, torch.empty_like(self.losses)])
        self.losses[len(self.pending)].copy_(loss)
        self.pending.append((epoch, step))

    def check(self) -> None:
        """Raise :class:`Diverged` at the first recorded loss that was not finite (one read of
        the device for all the losses recorded since the last check)."""
        if not self.pending:
            return
        values = self.losses[:len(self.pending)].tolist()
        pending, self.pending = self.pending, []
        for (epoch, step), loss in zip(pending, values, strict=True):
            if not math.isfinite(loss):
                raise Diverged(epoch, step, loss)

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
