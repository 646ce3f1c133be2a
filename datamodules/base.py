"""The common DataModule interface every dataset implements.

Training batches are ``(views, y)``: ``views`` a list of ``n_views`` augmented, normalised
``(B, C, H, W)`` float tensors, made batch-wise on the batch's device in
``on_after_batch_transfer`` (every sample gets its own random draw), so CPU workers only collate.
The training loader itself yields the raw images: float in [0, 1], or ``uint8`` (0-255 standing
for [0, 1]) for datasets stored that way, which also makes the host-to-device copy four times
smaller; the hook converts them to float on the device. Evaluation loaders (validation, test,
and the training split for feature extraction) yield normalised, un-augmented float ``(x, y)``,
unshuffled, converted and normalised one batch at a time.

A dataset provides only :meth:`ClusterDataModule.load` (its official train and test splits) and
:meth:`ClusterDataModule.train_augment`; the options (class subsets, tiny training subsets, the
validation split, views, seed) and the statistics live here, shared by all; what the loaders are
made of (the split's rows, the collation, the sampler, the batches kept on the device, the
statistics) is :mod:`datamodules.loaders`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import lightning.pytorch as pl
import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader

from datamodules.loaders import (
    BatchCollate,
    DeviceBatches,
    EpochSampler,
    SplitDataset,
    WorkerLoader,
    channel_statistics,
    to_unit,
)
from modules.ranges import check_count, check_settings


def default_data_dir() -> Path:
    """``$CLUSTERBENCH_DATA``, else ``~/.cache/clusterbench``."""
    return Path(os.environ.get("CLUSTERBENCH_DATA", Path.home() / ".cache" / "clusterbench"))


def shown_path(path: str | Path) -> str:
    """A path as logs and results show it: under the home folder as ``~/...``, the way the
    default data root is written whatever the machine's user.

    >>> shown_path(Path.home() / ".cache" / "clusterbench"), shown_path("/usr/share/datasets")
    ('~/.cache/clusterbench', '/usr/share/datasets')
    """
    try:
        return str(Path("~") / Path(path).relative_to(Path.home()))
    except ValueError:
        return str(path)


@dataclass
class TensorSplits:
    """A dataset's official train and test splits as tensors.

    Images are float in [0, 1], or ``uint8`` in 0-255: large image sets (CIFAR, TinyImageNet)
    stay ``uint8`` in memory and are converted to float one batch at a time.
    """

    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor


class ClusterDataModule(pl.LightningDataModule):
    """Base of every DataModule: class and size subsets, validation split, normalisation,
    loaders and on-device views.

    Args:
        data_dir: root of the on-disk datasets (torchvision's ``root``); default
            ``$CLUSTERBENCH_DATA`` or ``~/.cache/clusterbench``.
        batch_size: the global training batch, as papers state it (Kernel-InfoNCE: 256): under
            DDP each of the N devices takes ``batch_size / N`` of it (``batch_size`` must be a
            multiple of N, see :meth:`per_device_batch_size`), so the batch, and the learning
            rate scaled by it, do not change with the number of devices. Also the evaluation
            batch (per device).
        num_workers: DataLoader workers.
        val_fraction: share of the training split held out for validation, stratified by label
            and deterministic given ``seed``; the test split is never touched. (When a tiny
            subset leaves too few images per class to stratify, the split is a plain seeded
            random split.)
        n_views: augmented views per training image (2 for contrastive methods, 1 for
            supervised and autoencoder methods).
        seed: seed of the training subset, the validation split and the training shuffle (the
            shuffle of epoch k depends on ``seed`` and k only, on any number of devices).
        download: fetch the data when missing (needs a network); never done unless asked.
        train_fraction: keep this share, in (0, 1], of each class of the training split (at
            least one image per class), chosen at random given ``seed``, before the validation
            split is held out. For tiny smoke benchmarks; the test split is untouched.
        limit_per_class: keep at most this many images of each class of the training split
            (chosen as for ``train_fraction``, which it excludes).
        classes: keep only these class labels (original label numbers, e.g. ``[0, 1, 2, 3,
            4]`` of MNIST) in every split; they are renumbered ``0..k-1`` in increasing order
            of the original label, ``class_mapping`` records ``{original: new}``, and
            ``num_classes`` becomes ``k``.
        on_device: keep the training split's raw images on the training device and draw the
            shuffled batches there (:class:`DeviceBatches`): no loader, no copy of images per
            step. For a dataset that fits in the device's memory beside the model (CIFAR:
            150 MB); the batches are the same as without it.
        augmentation: the training augmentation recipe, one of the class's ``augmentations``
            (``"default"`` unless a dataset offers more, as MNIST's ``"elastic"``), or ``"none"``
            for every dataset: views are the normalised images themselves (TransFusion trains
            without augmentation).

    After :meth:`setup`, ``mean`` and ``std`` hold the normalisation statistics of the training
    part (after the subsets and the validation split), and ``split_indices[split]`` the
    positions of that split's samples in the official training split (``"train"``, ``"val"``)
    or test split (``"test"``), in the order of the evaluation loaders.

    Subclasses whose number of classes depends on their own arguments set ``num_classes``
    before calling ``super().__init__``.
    """

    #: Registered name, as in ``datamodules.DATAMODULES``.
    name: ClassVar[str]
    #: ``"real"`` or ``"generated"``: every report names generated data as such.
    provenance: ClassVar[str]
    #: One line: where the data come from.
    source: ClassVar[str]
    #: The training augmentation recipes ``train_augment`` knows, ``"default"`` among them.
    augmentations: ClassVar[tuple[str, ...]] = ("default",)
    num_classes: int
    input_shape: tuple[int, ...]

    def __init__(self, data_dir: str | None = None, batch_size: int = 128, num_workers: int = 0,
                 val_fraction: float = 0.1, n_views: int = 2, seed: int = 0,
                 download: bool = False, train_fraction: float | None = None,
                 limit_per_class: int | None = None, classes: list[int] | None = None,
                 augmentation: str = "default", on_device: bool = False) -> None:
        super().__init__()
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
        if train_fraction is not None and not 0.0 < train_fraction <= 1.0:
            raise ValueError(f"train_fraction must be in (0, 1], got {train_fraction}")
        if limit_per_class is not None and limit_per_class < 1:
            raise ValueError(f"limit_per_class must be at least 1, got {limit_per_class}")
        if train_fraction is not None and limit_per_class is not None:
            raise ValueError("give train_fraction or limit_per_class, not both "
                             f"(got {train_fraction} and {limit_per_class})")
        if n_views < 1:
            raise ValueError(f"n_views must be at least 1, got {n_views}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        check_count("num_workers", num_workers, low=0)  # a DataLoader fails on -1 only later
        # and the maxima: 10**30 workers fork without end, a batch of 10**30 fails in the loader
        check_settings({"batch_size": batch_size, "num_workers": num_workers,
                        "val_fraction": val_fraction, "n_views": n_views, "seed": seed,
                        "train_fraction": train_fraction, "limit_per_class": limit_per_class})
        if augmentation not in (*self.augmentations, "none"):
            raise ValueError(f"unknown augmentation {augmentation!r} for {type(self).__name__}; "
                             f"available: {', '.join((*self.augmentations, 'none'))}")
        self.data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        self.batch_size, self.num_workers = batch_size, num_workers
        self.val_fraction, self.n_views, self.seed = val_fraction, n_views, seed
        self.download = download
        self.train_fraction, self.limit_per_class = train_fraction, limit_per_class
        self.augmentation, self.on_device = augmentation, on_device
        self.classes: list[int] | None = None
        self.class_mapping: dict[int, int] | None = None
        if classes is not None:
            self._select_classes(classes)
        self.augment = nn.Identity() if augmentation == "none" else self.train_augment()
        # (mean, std, {(device, dtype): their copies there}), see statistics_on.
        self._statistics_copies: tuple[Tensor | None, Tensor | None, dict] = (None, None, {})
        self._splits: dict[str, SplitDataset] | None = None
        self.split_indices: dict[str, Tensor] = {}
        self._start_within: tuple[int, int] | None = None  # see start_within

    def _select_classes(self, classes: list[int]) -> None:
        chosen = sorted({int(c) for c in classes})
        if not chosen:
            raise ValueError("classes must name at least one class")
        if len(chosen) != len(list(classes)):
            raise ValueError(f"classes lists a class twice: {list(classes)}")
        total = getattr(self, "num_classes", None)
        if total is not None:
            self._check_classes_exist(chosen, range(total))
        self.classes = chosen
        self.class_mapping = {original: new for new, original in enumerate(chosen)}
        self.num_classes = len(chosen)

    def _check_classes_exist(self, chosen: list[int], available: Iterable[int]) -> None:
        available = sorted(int(c) for c in available)
        unknown = [c for c in chosen if c not in set(available)]
        if unknown:
            listed = (f"{available[0]}..{available[-1]}"
                      if available == list(range(available[0], available[-1] + 1))
                      else ", ".join(map(str, available)))
            raise ValueError(f"unknown class {unknown[0]} in classes for {type(self).__name__}; "
                             f"available classes: {listed}")

    # -- what a dataset provides ---------------------------------------------------------------
    def load(self) -> TensorSplits:
        """The official train and test splits (images float in [0, 1], or ``uint8``)."""
        raise NotImplementedError

    def train_augment(self) -> nn.Module:
        """The per-sample, batch-wise augmentation of training views (recipe
        ``self.augmentation``), on float images in [0, 1]."""
        raise NotImplementedError

    def check_files(self) -> None:
        """Raises what :meth:`load` would about a file it cannot read, before a suite's first
        run makes its folders. Nothing here: a dataset's files are checked as they load (an md5
        each) or it has none; an image folder decodes its images."""

    @property
    def dataset_label(self) -> str:
        """The dataset as a result and the leaderboard's Dataset column name it: the registered
        name, and for a dataset that reads the user's own folder, which folder."""
        return self.name

    # -- shared mechanics ----------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        if self._splits is not None:
            return
        data = self.load()
        train_y, test_y = data.train_y.long(), data.test_y.long()
        train_pool = torch.arange(len(train_y))
        test_idx = torch.arange(len(test_y))
        if self.classes is not None:
            self._check_classes_exist(self.classes, torch.unique(train_y).tolist())
            chosen = torch.tensor(self.classes)
            size = int(max(train_y.max(), test_y.max(), chosen.max())) + 1
            lookup = torch.full((size,), -1, dtype=torch.long)
            lookup[chosen] = torch.arange(len(chosen))
            train_pool = torch.nonzero(torch.isin(train_y, chosen)).flatten()
            test_idx = torch.nonzero(torch.isin(test_y, chosen)).flatten()
            train_y, test_y = lookup[train_y], lookup[test_y]  # -1 only on dropped samples
        if self.train_fraction is not None or self.limit_per_class is not None:
            train_pool = self._training_subset(train_pool, train_y[train_pool])
        train_idx, val_idx = self._validation_split(train_pool, train_y[train_pool])
        self.mean, self.std = channel_statistics(data.train_x, train_idx)
        self.split_indices = {"train": train_idx, "val": val_idx, "test": test_idx}
        self._splits = {
            "train": SplitDataset(data.train_x, train_y, train_idx),
            "val": SplitDataset(data.train_x, train_y, val_idx),
            "test": SplitDataset(data.test_x, test_y, test_idx),
        }

    def _training_subset(self, pool: Tensor, labels: Tensor) -> Tensor:
        """``train_fraction`` or ``limit_per_class`` of each class of ``pool``, given the seed."""
        rng = np.random.default_rng(self.seed)
        pool_np, labels_np = pool.numpy(), labels.numpy()
        kept = []
        for label in np.unique(labels_np):
            members = rng.permutation(pool_np[labels_np == label])
            if self.limit_per_class is not None:
                keep = min(len(members), self.limit_per_class)
            else:
                keep = max(1, round(self.train_fraction * len(members)))
            kept.append(members[:keep])
        return torch.as_tensor(np.sort(np.concatenate(kept)))

    def _validation_split(self, pool: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        from sklearn.model_selection import train_test_split

        if len(pool) < 2:
            raise ValueError(f"{type(self).__name__}: {len(pool)} training image(s) left after "
                             "classes/train_fraction/limit_per_class: too few to hold out a "
                             "validation split")
        index = pool.numpy()
        try:
            train_idx, val_idx = train_test_split(index, test_size=self.val_fraction,
                                                  random_state=self.seed, stratify=labels.numpy())
        except ValueError:  # too few images of some class to stratify (tiny subsets)
            train_idx, val_idx = train_test_split(index, test_size=self.val_fraction,
                                                  random_state=self.seed)
        return torch.as_tensor(np.sort(train_idx)), torch.as_tensor(np.sort(val_idx))

    def split_sizes(self) -> dict[str, int]:
        self.setup()
        return {name: len(split) for name, split in self._splits.items()}

    def normalise(self, x: Tensor) -> Tensor:
        mean, std = self.statistics_on(x.device, x.dtype)
        return (x - mean) / std

    def statistics_on(self, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``mean`` and ``std`` on ``device`` in ``dtype``, copied there once and then reused:
        a copy per batch would be a blocking host-to-device transfer in every training step.
        The copies follow ``mean`` and ``std`` when they are replaced (as a dataset's ``setup``
        may do)."""
        mean, std, copies = self._statistics_copies
        if mean is not self.mean or std is not self.std:
            copies = {}
            self._statistics_copies = (self.mean, self.std, copies)
        if (device, dtype) not in copies:
            copies[device, dtype] = (self.mean.to(device, dtype), self.std.to(device, dtype))
        return copies[device, dtype]

    def per_device_batch_size(self, world_size: int) -> int:
        """The training batch of each of ``world_size`` devices: ``batch_size`` is the global
        batch and must divide evenly over them.

        >>> ClusterDataModule(batch_size=256, augmentation="none").per_device_batch_size(8)
        32
        >>> ClusterDataModule(batch_size=250, augmentation="none").per_device_batch_size(4)
        ... # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: batch_size 250 is the global batch and must divide evenly over 4 devices; ...
        """
        if world_size < 1:
            raise ValueError(f"world_size must be at least 1, got {world_size}")
        if self.batch_size % world_size:
            raise ValueError(f"batch_size {self.batch_size} is the global batch and must divide "
                             f"evenly over {world_size} devices; use a multiple of {world_size}")
        return self.batch_size // world_size

    def _world(self) -> tuple[int, int]:
        """(world size, global rank) of the attached Trainer; (1, 0) without one."""
        trainer = self.trainer
        return (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)

    def _loader(self, split: str, train: bool) -> DataLoader:
        self.setup()
        # Evaluation batches are converted and normalised batch by batch, and never augmented;
        # training batches leave raw and become views on the device.
        collate = BatchCollate() if train else BatchCollate(self.mean, self.std)
        dataset = self._splits[split]
        # A loader's own generator: starting an epoch's iterator must not draw from the global
        # random stream the augmentations draw from (a resumed run starts its iterator at
        # another point of that stream than an uninterrupted one).
        generator = torch.Generator().manual_seed(self.seed)
        if not train:  # unshuffled; under DDP Lightning gives each rank its share
            return WorkerLoader(dataset, batch_size=self.batch_size, shuffle=False,
                                num_workers=self.num_workers, collate_fn=collate,
                                generator=generator, persistent_workers=self.num_workers > 0)
        world, rank = self._world()
        # A DistributedSampler even on one device: Lightning keeps it under DDP and calls its
        # set_epoch every epoch, so the shuffle of epoch k is a function of (seed, k) alone,
        # the same on 1 or N devices (rank r takes every N-th index of one permutation, so
        # the N per-device batches together are the one-device batch) and the same for a run
        # resumed at an epoch end as for an uninterrupted one.
        sampler = EpochSampler(dataset, num_replicas=world, rank=rank, shuffle=True,
                               seed=self.seed, drop_last=True)
        if self._start_within is not None:  # once, for the loader of the resumed fit
            (epoch, batches), self._start_within = self._start_within, None
            sampler.start_within(epoch, batches * self.per_device_batch_size(world))
        if self.on_device and self.trainer is not None:
            return DeviceBatches(dataset, sampler, self.per_device_batch_size(world),
                                 drop_last=len(dataset) > self.batch_size,
                                 device=self.trainer.strategy.root_device)
        return WorkerLoader(dataset, batch_size=self.per_device_batch_size(world), sampler=sampler,
                            drop_last=len(dataset) > self.batch_size,  # the incomplete global batch
                            num_workers=self.num_workers, collate_fn=collate, generator=generator,
                            persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def start_within(self, epoch: int, batches: int) -> None:
        """The next training loader starts in epoch ``epoch`` after its first ``batches``
        batches (of each device): a fit resumed from a checkpoint saved in the middle of that
        epoch trains the rest of it on the batches an uninterrupted run would
        (:class:`~benchmarks.run.checkpoint.EpochSeed` calls it as the checkpoint loads)."""
        self._start_within = (epoch, batches)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)

    def train_eval_dataloader(self) -> DataLoader:
        """The training split with the evaluation transform, for frozen-feature protocols."""
        return self._loader("train", train=False)

    def make_views(self, x: Tensor) -> list[Tensor]:
        """``n_views`` independently augmented, normalised float views of raw images ``x``
        (float in [0, 1] or ``uint8``), on ``x``'s device."""
        self.setup()  # the normalisation statistics come from the training split
        x = to_unit(x)
        # All views in one call: every sample draws its own parameters, so the n_views copies
        # of an image get independent views, for the device operations of one call.
        views = self.augment(torch.cat([x] * self.n_views)) if self.n_views > 1 else self.augment(x)
        return list(self.normalise(views).chunk(self.n_views))  # n_views of (B, ...)

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        # Training batches arrive raw and leave as views; evaluation batches pass through.
        # Without a Trainer (a notebook calling the hook on a training batch) views are made too.
        if self.trainer is not None and not self.trainer.training:
            return batch
        x, y = batch
        return self.make_views(x), y
