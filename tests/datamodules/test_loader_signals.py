"""A loader's workers are forked, and start with the stop signals blocked until their
``worker_init_fn`` has set them aside: a whole process group's SIGTERM that reaches a worker as
it starts (the start of an epoch or of the evaluation) is dropped, where torch's own worker
handler used to kill it and the training process raised "DataLoader worker is killed"."""

from __future__ import annotations

import os
import signal

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from datamodules.loaders import WorkerLoader, leave_stop_signals_to_trainer


def sigterm_as_it_starts(worker_id: int) -> None:
    """A SIGTERM to the worker before it has set the stop signals aside (as ``kill -TERM
    -PGID`` sends one to every process of the group), then the loaders' own start."""
    os.kill(os.getpid(), signal.SIGTERM)
    leave_stop_signals_to_trainer(worker_id)


def batches(cls: type[DataLoader]) -> list[list[float]]:
    loader = cls(TensorDataset(torch.arange(8.0)), batch_size=4, num_workers=1,
                 worker_init_fn=sigterm_as_it_starts)
    return [batch.tolist() for (batch,) in loader]


def test_a_sigterm_as_a_loader_worker_starts_is_dropped_and_the_loader_serves():
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert batches(WorkerLoader) == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == mask  # this process's, as it was


def test_a_plain_loaders_worker_dies_of_it():
    """What the blocked start prevents (so the test above can fail)."""
    with pytest.raises(RuntimeError, match="DataLoader worker .* (exited unexpectedly|is killed)"):
        batches(DataLoader)


def test_workers_are_forked_even_where_the_process_default_is_to_spawn():
    """A DDP rank that ``ddp_spawn`` started spawns by default: its loader workers would each
    import torch again and be sent the dataset pickled."""
    data = TensorDataset(torch.arange(8.0))
    assert WorkerLoader(data, num_workers=1).multiprocessing_context.get_start_method() == "fork"
    assert WorkerLoader(data, num_workers=0).multiprocessing_context is None
