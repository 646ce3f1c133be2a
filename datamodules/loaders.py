"""What every DataModule's loaders are made of (:class:`datamodules.base.ClusterDataModule`): a
split's rows without a copy (:class:`SplitDataset`), fetched a batch at a time and collated raw
for training or converted and normalised for evaluation (:class:`BatchCollate`); the sampler
whose every pass is the next epoch (:class:`EpochSampler`), the training batches from a copy of
the split kept on the device (:class:`DeviceBatches`), workers that outlive a SIGTERM, and the
per-channel statistics the normalisation divides by.
"""

from __future__ import annotations

import signal

import torch
from torch import Tensor
from torch.utils.data import Dataset, DistributedSampler


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


def outlive_sigterm(worker_id: int) -> None:
    """``worker_init_fn`` of every loader: the worker ignores SIGTERM.

    ``timeout``, SLURM and ``kill -TERM -PGID`` signal a whole process group, loader workers
    included. A worker killed by it makes the training process raise "DataLoader worker is
    killed" wherever it stands, in the middle of writing the checkpoint the SIGTERM asked for.
    Ignoring it, the workers go on serving until the training process stops them (its own
    SIGTERM handling finishes the step and saves); they still end with it, since PyTorch's
    workers exit when their parent dies."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


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

    def __iter__(self):
        indices = super().__iter__()  # computed now, from (seed, epoch)
        self.epoch += 1  # the next pass is the next epoch, unless set_epoch says otherwise
        return indices


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
        for i in range(len(self)):
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
