"""The stop of a fit on a stop signal (:mod:`benchmarks.infra.stop_signals`): after the step in
flight, every rank together, its checkpoints saved (:class:`SavedOnStop`: a bench run's
``last.ckpt``, :class:`CheckpointOnStop` for ``clusterbench fit``), from which the fit resumes
where it stopped (:class:`benchmarks.run.checkpoint.EpochSeed`)."""

from __future__ import annotations

import logging
import os
import signal
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from benchmarks.infra import stop_signals
from benchmarks.infra.errors import Preempted


class StopAfterStep(pl.Callback):
    """A stop signal while a fit trains (:mod:`benchmarks.infra.stop_signals`) stops it after
    the step in flight and saves its checkpoints (each :class:`SavedOnStop`).

    In one process, by Lightning's own path for SIGTERM. In the processes a DDP fit spawns, where
    Lightning's handler would broadcast from inside the handler (a collective the other ranks
    are not in at that moment: gloo aborted the rank, "Received data size doesn't match
    expected size") and calls no ``on_exception``: each rank notes the signal, the ranks take
    rank 0's word at the end of every training step (one broadcast a step; a stop in a
    validation waits for its end) and stop together, saving first. A spawned rank also ends
    with the process that spawned it and leaves the signals a whole process group gets to it."""

    def __init__(self) -> None:
        self.builder = os.getpid()
        self.stop = ExitStack()
        self.requested = False  # a spawned rank's own signal
        # "Received SIGTERM: 15", even for the SIGHUP passed on to it: the command says in its
        # own line which signal stopped it
        logging.getLogger("lightning.pytorch.trainer.connectors.signal_connector").setLevel(
            logging.WARNING)

    def spawned_rank(self, trainer: pl.Trainer) -> bool:
        return os.getpid() != self.builder and trainer.world_size > 1

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if os.getpid() != self.builder:  # a spawned rank
            stop_signals.end_with_parent(self.builder)
            for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
                signal.signal(signum, signal.SIG_IGN)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.stop.enter_context(stop_signals.graceful_stop(stop_fit))
        if self.spawned_rank(trainer):
            signal.signal(signal.SIGTERM, self.note)

    def note(self, signum: int, frame: Any) -> None:
        self.requested = True

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        if not self.spawned_rank(trainer):
            return
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        word = torch.tensor([int(self.requested)], device=trainer.strategy.root_device)
        torch.distributed.broadcast(word, src=0)
        if word.item():
            for callback in trainer.callbacks:
                if isinstance(callback, SavedOnStop):
                    callback.save_on_stop(trainer)
            raise SIGTERMException

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.stop.close()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        self.stop.close()


class SavedOnStop(pl.Callback):
    """A checkpoint saved when a stop signal stops a fit after the step in flight: from
    Lightning's ``on_exception`` in one process, from :class:`StopAfterStep` in each rank of a
    spawned DDP fit."""

    def save_on_stop(self, trainer: pl.Trainer) -> None:
        raise NotImplementedError

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        if isinstance(exception, SIGTERMException):
            self.save_on_stop(trainer)


def stop_fit(signum: int) -> None:
    """The graceful stop of a fit: Lightning's SIGTERM handler, which the fit installed, flags
    the stop for the end of the step in flight (and forwards it to the processes of a DDP fit).
    A SIGTERM came through that handler already; another signal is passed on to it."""
    if signum == signal.SIGTERM and stop_signals.handled_by_another(signal.SIGTERM):
        return
    if signum != signal.SIGTERM and stop_signals.call_handler(signal.SIGTERM):
        return
    raise Preempted(f"stopped by {stop_signals.signal_name(signum)}", signum=signum)


class CheckpointOnStop(SavedOnStop):
    """``clusterbench fit``'s checkpoint on a stop signal: ``checkpoints/stopped.ckpt`` in the
    fit's log folder, saved after the step in flight (:class:`StopAfterStep`), from which
    ``--ckpt_path`` resumes the fit where it stopped (:class:`EpochSeed`: the batches and, on
    one device, the random streams an uninterrupted fit would have). ``path``: where it was
    written (None until then)."""

    def __init__(self) -> None:
        self.path: Path | None = None

    def save_on_stop(self, trainer: pl.Trainer) -> None:
        folder = Path(trainer.log_dir or trainer.default_root_dir) / "checkpoints"
        tmp = folder / ".stopped.ckpt.tmp"
        trainer.save_checkpoint(tmp, weights_only=False)
        if trainer.is_global_zero:
            os.replace(tmp, folder / "stopped.ckpt")
        trainer.strategy.barrier("stop checkpoint")
        self.path = folder / "stopped.ckpt"
