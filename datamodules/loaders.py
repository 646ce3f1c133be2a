"""What every DataModule's loaders are made of (:class:`datamodules.base.ClusterDataModule`): a
split's rows without a copy (:class:`SplitDataset`), fetched a batch at a time and collated raw
for training or converted and normalised for evaluation (:class:`BatchCollate`); the sampler
whose every pass is the next epoch (:class:`EpochSampler`), the training batches from a copy of
the split kept on the device (:class:`DeviceBatches`), workers that leave the stop signals to
the training process and end with it, and the
per-channel statistics the normalisation divides by. An epoch a fit stopped in can be started
again where it stopped (:meth:`EpochSampler.start_within`).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import sys

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, DistributedSampler


def to_unit(x: Tensor) -> Tensor:
    """Images as float in [0, 1]: ``uint8`` pixels are divided by 255, anything else passes.

    >>> to_unit(torch.tensor([0, 51, 255], dtype=torch.uint8))
    tensor([0.0000, 0.2000, 1.0000])
    """
    return x.float().div_(255.0) if x.dtype == torch.uint8 else x



class SplitDataset(Dataset):
    """The rows ``index`` of ``x`` and ``y``, without copying them.

    ``__getitems__`` lets the DataLoader fetch a whole batch with one indexing operation
    instead of indexing and stacking sample by sample (the collate function receives the
    batched ``(x, y)``).
    """

    def __init__(self, x: Tensor, y: Tensor, index: Tensor) -> None:
        self.x, self.y, self.index = x, y, index

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        row = self.index[i]
        return self.x[row], self.y[row]

    def __getitems__(self, indices: list[int]) -> tuple[Tensor, Tensor]:
        rows = self.index[torch.as_tensor(indices, dtype=torch.long)]
        return self.x[rows], self.y[rows]


class BatchCollate:
    """``collate_fn`` of :class:`SplitDataset` batches: with statistics, converts the images to
    float and normalises them (evaluation); without, passes the raw batch through (training)."""

    def __init__(self, mean: Tensor | None = None, std: Tensor | None = None) -> None:
        self.mean, self.std = mean, std

    def __call__(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        x, y = batch
        if self.mean is not None:
            x = (to_unit(x) - self.mean) / self.std
        return x, y


class WorkerLoader(DataLoader):
    """A ``DataLoader`` whose workers start with the stop signals blocked
    (:func:`~benchmarks.infra.stop_signals.signals_blocked`) until their ``worker_init_fn``
    (:func:`leave_stop_signals_to_trainer`) has set them aside: a whole process group's SIGTERM
    that came as they started (at the start of an epoch or of the evaluation) killed one
    through torch's own worker handler, and the training process raised "DataLoader worker is
    killed" from wherever it stood. The loader's pin-memory thread never takes a stop signal
    either: the training process's main thread does.

    On Linux its workers are forked, in every process. In the ranks a DDP fit spawns
    (``ddp_spawn``), ``multiprocessing``'s default is to spawn as the rank was: each worker then
    started a fresh Python that imported torch, Lightning and the datamodule again and was sent
    the dataset pickled (on a 2-core CPU, seed 0, one run each: 2 epochs of digits on 2 ranks
    with one worker each trained in 18.1 s, 6.7 s forked, 7.3 s without workers). A forked
    worker shares the rank's memory, as in one process; it never touches the GPU (batches are
    collated on the CPU and pinned by the rank's own thread), which is what keeps forking a
    process that uses CUDA safe.

    Its workers run :func:`leave_stop_signals_to_trainer` unless ``worker_init_fn`` is given
    (one given must call it: it takes the blocked signals back), and this process ends them
    before its own exit (:func:`~benchmarks.infra.stop_signals.end_helpers_at_exit`: they ignore
    the SIGTERM that ``multiprocessing``'s exit sends them)."""

    def __init__(self, *args, **kwargs) -> None:
        if kwargs.get("num_workers", 0) > 0:
            from benchmarks.infra.stop_signals import end_helpers_at_exit

            kwargs.setdefault("worker_init_fn", leave_stop_signals_to_trainer)
            if kwargs.get("multiprocessing_context") is None and sys.platform.startswith("linux"):
                kwargs["multiprocessing_context"] = "fork"
            end_helpers_at_exit()
        super().__init__(*args, **kwargs)

    def _get_iterator(self):
        if self.num_workers == 0:
            return super()._get_iterator()
        from benchmarks.infra.stop_signals import signals_blocked

        with signals_blocked():
            return super()._get_iterator()


def leave_stop_signals_to_trainer(worker_id: int) -> None:
    """``worker_init_fn`` of every loader: the worker leaves the stop signals to the training
    process and ends with it.

    ``timeout``, SLURM and ``kill -TERM -PGID`` signal a whole process group, loader workers
    included (a terminal's Ctrl-C and SLURM's SIGUSR1 too). A worker killed by it makes the
    training process raise "DataLoader worker is killed" wherever it stands, in the middle of
    writing the checkpoint the signal asked for. Ignoring them, the workers go on serving until
    the training process stops them (its own handling finishes the step and saves); they end
    with it however it ends, SIGKILL included
    (:func:`~benchmarks.infra.stop_signals.end_with_parent`), and say nothing of a batch the
    stopped process no longer took (:func:`quiet_when_the_trainer_left`)."""
    from benchmarks.infra.stop_signals import end_with_parent, leave_stop_signals_to_parent

    leave_stop_signals_to_parent(sigterm=True)
    end_with_parent()
    # the training process may have gone between the worker's start and the line above
    parent = multiprocessing.parent_process()
    if parent is not None and not parent.is_alive():
        os._exit(1)
    sys.excepthook = functools.partial(quiet_when_the_trainer_left, sys.excepthook)


def quiet_when_the_trainer_left(hook, kind: type, value: BaseException, traceback) -> None:
    """A loader worker's ``sys.excepthook``: the thread that hands a batch's tensors to the
    training process (``multiprocessing``'s resource sharer) printed a whole ``EOFError``
    traceback when that process stopped in the middle of taking them (a stop signal during an
    evaluation), after the command's last line. A connection the training process left is said
    by nothing; anything else as before."""
    if not issubclass(kind, (EOFError, ConnectionError)):
        hook(kind, value, traceback)


class EpochSampler(DistributedSampler):
    """A :class:`~torch.utils.data.DistributedSampler` (so Lightning keeps it under DDP and calls
    its ``set_epoch`` every epoch) whose every pass also counts as the next epoch: a loader
    iterated by hand reshuffles each pass, and the order of epoch k is a function of the seed and
    k only, however it was reached.

    >>> sampler = EpochSampler(range(6), num_replicas=1, rank=0, seed=0)
    >>> first, second = list(sampler), list(sampler)
    >>> sampler.set_epoch(1)
    >>> first != second and list(sampler) == second
    True
    """

    #: Indices the next pass leaves out at its start (:meth:`start_within`).
    skip = 0

    def __iter__(self):
        indices = list(super().__iter__())[self.skip:]  # computed now, from (seed, epoch)
        self.skip = 0
        self.epoch += 1  # the next pass is the next epoch, unless set_epoch says otherwise
        return iter(indices)

    def start_within(self, epoch: int, done: int) -> None:
        """The next pass is epoch ``epoch`` without its first ``done`` indices (of this
        replica): the rest of an epoch a fit stopped in, the batches an uninterrupted run would
        train next.

        >>> sampler = EpochSampler(range(6), num_replicas=1, rank=0, seed=0)
        >>> sampler.set_epoch(3)
        >>> whole = list(sampler)
        >>> sampler.start_within(3, 4)
        >>> list(sampler) == whole[4:]
        True
        """
        self.set_epoch(epoch)
        self.skip = done


class DeviceBatches:
    """The training split's raw ``uint8`` batches from a copy of the split kept on ``device``,
    shuffled there: no DataLoader, no host-to-device copy of images per step (CIFAR's 50,000
    training images are 150 MB). The order is :class:`EpochSampler`'s, so batches are those of
    the DataLoader path, on one device or N (Lightning calls ``sampler.set_epoch`` each epoch).
    """

    def __init__(self, split: SplitDataset, sampler: EpochSampler, batch_size: int,
                 drop_last: bool, device: torch.device) -> None:
        self.x = split.x[split.index].to(device)  # x: (N, ...) uint8, on the device
        self.y = split.y[split.index].to(device)
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        order = torch.as_tensor(list(self.sampler), device=self.x.device)  # once an epoch
        # an epoch started where a fit stopped has fewer (EpochSampler.start_within)
        n = len(order)
        batches = n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        for i in range(batches):
            rows = order[i * self.batch_size:(i + 1) * self.batch_size]
            yield self.x[rows], self.y[rows]


def channel_statistics(x: Tensor, index: Tensor, chunk: int = 4096) -> tuple[Tensor, Tensor]:
    """Per-channel mean and (unbiased) standard deviation of the rows ``index`` of ``x``, in
    float64 and in chunks, so a ``uint8`` image set is never converted to float all at once.

    Images ``(N, C, H, W)`` give ``(C, 1, 1)`` statistics; other shapes ``(N, *F)`` give
    per-feature ``F`` statistics.

    >>> x = torch.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
    >>> mean, std = channel_statistics(x, torch.arange(3), chunk=2)
    >>> mean, std
    (tensor([2., 3.]), tensor([2., 2.]))
    """
    dims = [0, 2, 3] if x.dim() == 4 else [0]
    total, count = 0.0, 0
    for rows in index.split(chunk):
        part = to_unit(x[rows]).double()
        part_sum = part.sum(dims, keepdim=True)
        total, count = total + part_sum, count + part.numel() // part_sum.numel()
    mean = total / count
    squares = 0.0
    for rows in index.split(chunk):  # a second pass: no cancellation in sum(x^2) - n mean^2
        squares = squares + ((to_unit(x[rows]).double() - mean) ** 2).sum(dims, keepdim=True)
    std = (squares / max(count - 1, 1)).sqrt()
    return mean[0].float(), std[0].float().clamp_min(1e-6)
