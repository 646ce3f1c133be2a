"""Checkpoints a run resumes from (``last.ckpt`` at epoch ends and on SIGTERM) and the per-epoch
seeding that makes a resumed CPU run end where an uninterrupted one does."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch

from benchmarks.infra.tensor_files import BadFile, load_tensors

#: The checkpoint a run resumes from, in its ``checkpoints/`` folder.
LAST = "last.ckpt"
#: The checkpoint key holding the logged values at the time of the save (``online_val_acc``...).
LOGGED = "clusterbench_logged_metrics"
#: What Lightning reads from a checkpoint to resume a fit, and the type each must have.
RESUME_FIELDS = {"epoch": int, "global_step": int, "state_dict": dict,
                 "optimizer_states": list, "loops": dict}


def resumable_checkpoint(path: str | Path, what: str) -> dict[str, Any]:
    """The checkpoint at ``path`` (read as tensors only, :func:`load_tensors`) when Lightning can
    resume a fit from it: each of :data:`RESUME_FIELDS` present with its type, ``epoch`` and
    ``global_step`` counts. A copied or edited file (``epoch: inf``, a string, a key missing)
    would otherwise fail every later run at the same place.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile(suffix=".ckpt") as f:
    ...     torch.save({"epoch": float("inf"), "global_step": 2}, f.name)
    ...     resumable_checkpoint(f.name, "checkpoint")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    benchmarks.infra.tensor_files.BadFile: checkpoint ....ckpt: epoch = inf is not a count ...

    Raises:
        BadFile: one line naming the file and the field.
    """
    saved = load_tensors(path, what, mmap=True)
    if not isinstance(saved, dict):
        raise BadFile(f"{what} {path} holds a {type(saved).__name__}, not the mapping of a "
                      "Lightning checkpoint")
    for key, kind in RESUME_FIELDS.items():
        if key not in saved:
            raise BadFile(f"{what} {path} has no {key!r}, which Lightning resumes from")
        value = saved[key]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise BadFile(f"{what} {path}: {key} = {str(value)[:40]} is not a count (an "
                          "integer of at least 0), so Lightning cannot resume from it")
        if not isinstance(value, kind):
            raise BadFile(f"{what} {path}: {key} is a {type(value).__name__}, not the "
                          f"{kind.__name__} Lightning resumes from")
    return saved


def epoch_seed(seed: int, epoch: int, rank: int) -> int:
    """The seed of one device's random streams in one epoch, a function of the run's seed, the
    epoch and the rank only: ranks draw different augmentations, and a resumed epoch draws the
    same ones as an uninterrupted run.

    >>> epoch_seed(0, 1, 0) == epoch_seed(0, 1, 0), epoch_seed(0, 1, 0) != epoch_seed(0, 1, 1)
    (True, True)
    """
    return int(np.random.SeedSequence([seed, epoch, rank]).generate_state(1, np.uint64)[0]
               % 2**63)


class EpochSeed(pl.Callback):
    """Seeds torch (CPU and CUDA), NumPy and Python at the start of every training epoch with
    :func:`epoch_seed`."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        value = epoch_seed(self.seed, trainer.current_epoch, trainer.global_rank)
        torch.manual_seed(value)
        np.random.seed(value % 2**32)
        random.seed(value)


def logged_metrics(trainer: pl.Trainer) -> dict[str, float]:
    """The scalar values logged so far (the last epoch's and the last validation's)."""
    return {k: float(v) for k, v in trainer.callback_metrics.items()
            if isinstance(v, (int, float)) or v.numel() == 1}


class EpochCheckpoint(pl.Callback):
    """Writes ``<dirpath>/last.ckpt`` atomically every ``every`` epochs, after the last, and on
    SIGTERM (a scheduler's preemption) after the step in flight.

    It holds Lightning's full state as plain tensors that ``torch.load(weights_only=True)`` reads.
    With :class:`EpochSeed`, a resume from an epoch-end checkpoint continues exactly as the
    uninterrupted run on the CPU; a mid-epoch (SIGTERM) one is close to it, not bit-identical.
    """

    def __init__(self, dirpath: str | Path, every: int = 1) -> None:
        if every < 1:
            raise ValueError(f"checkpoint_every must be at least 1 epoch, got {every}")
        self.dirpath, self.every = Path(dirpath), every

    @property
    def path(self) -> Path:
        return self.dirpath / LAST

    def save(self, trainer: pl.Trainer) -> None:
        for logger in trainer.loggers:  # the curves on disk reach as far as the checkpoint
            logger.save()
        tmp = self.dirpath / f".{LAST}.tmp"
        # every rank takes part, rank 0 writes; the full state (weights_only=False means
        # optimiser and loops too), which a resume needs
        trainer.save_checkpoint(tmp, weights_only=False)
        if trainer.is_global_zero:
            os.replace(tmp, self.path)
        trainer.strategy.barrier("checkpoint")

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        epoch = trainer.current_epoch + 1
        if epoch % self.every == 0 or epoch >= (trainer.max_epochs or epoch):
            self.save(trainer)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict) -> None:
        # A run killed after its last checkpoint resumes with nothing left to train, so no
        # validation runs again: the values of the last one travel with the weights.
        checkpoint[LOGGED] = logged_metrics(trainer)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        if isinstance(exception, SIGTERMException):
            self.save(trainer)
