"""The common DataModule interface every dataset implements.

Training batches are ``(views, y)``: ``views`` a list of ``n_views`` augmented, normalised
``(B, C, H, W)`` tensors, made batch-wise on the batch's device in ``on_after_batch_transfer``
(every sample gets its own random draw), so CPU workers only collate. Evaluation loaders
(validation, test, and the training split for feature extraction) yield normalised,
un-augmented ``(x, y)``, unshuffled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import lightning.pytorch as pl
import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset


def default_data_dir() -> Path:
    """``$CLUSTERBENCH_DATA``, else ``~/.cache/clusterbench``."""
    return Path(os.environ.get("CLUSTERBENCH_DATA", Path.home() / ".cache" / "clusterbench"))


@dataclass
class TensorSplits:
    """A dataset's official train and test splits as tensors; images un-normalised in [0, 1]."""

    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor


class ClusterDataModule(pl.LightningDataModule):
    """Base of every DataModule: validation split, normalisation, loaders and on-device views.

    Args:
        data_dir: root of the on-disk datasets (torchvision's ``root``); default
            ``$CLUSTERBENCH_DATA`` or ``~/.cache/clusterbench``.
        batch_size: training and evaluation batch size.
        num_workers: DataLoader workers.
        val_fraction: share of the training split held out for validation, stratified by label
            and deterministic given ``seed``; the test split is never touched.
        n_views: augmented views per training image (2 for contrastive methods).
        seed: seed of the validation split and the training shuffle.
        download: fetch the data when missing (needs a network); never done unless asked.
    """

    #: Registered name, as in ``datamodules.DATAMODULES``.
    name: ClassVar[str]
    #: ``"real"`` or ``"generated"``: every report names generated data as such.
    provenance: ClassVar[str]
    #: One line: where the data come from.
    source: ClassVar[str]
    num_classes: int
    input_shape: tuple[int, ...]

    def __init__(self, data_dir: str | None = None, batch_size: int = 128, num_workers: int = 0,
                 val_fraction: float = 0.1, n_views: int = 2, seed: int = 0,
                 download: bool = False) -> None:
        super().__init__()
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
        if n_views < 1:
            raise ValueError(f"n_views must be at least 1, got {n_views}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        self.batch_size, self.num_workers = batch_size, num_workers
        self.val_fraction, self.n_views, self.seed = val_fraction, n_views, seed
        self.download = download
        self.augment = self.train_augment()
        self._splits: dict[str, tuple[Tensor, Tensor]] | None = None

    # -- what a dataset provides ---------------------------------------------------------------
    def load(self) -> TensorSplits:
        """The official train and test splits (images in [0, 1])."""
        raise NotImplementedError

    def train_augment(self) -> nn.Module:
        """The per-sample, batch-wise augmentation of training views."""
        raise NotImplementedError

    # -- shared mechanics ----------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        if self._splits is not None:
            return
        from sklearn.model_selection import train_test_split

        data = self.load()
        index = np.arange(len(data.train_y))
        train_idx, val_idx = train_test_split(index, test_size=self.val_fraction,
                                              random_state=self.seed,
                                              stratify=data.train_y.numpy())
        train_idx, val_idx = torch.as_tensor(np.sort(train_idx)), torch.as_tensor(np.sort(val_idx))
        train_x = data.train_x[train_idx]
        # Per-channel statistics of the training part only.
        dims = [d for d in range(train_x.dim()) if d != 1] if train_x.dim() == 4 else [0]
        self.mean = train_x.mean(dim=dims, keepdim=True)[0]
        self.std = train_x.std(dim=dims, keepdim=True)[0].clamp_min(1e-6)
        self._splits = {
            "train": (train_x, data.train_y[train_idx]),
            "val": (data.train_x[val_idx], data.train_y[val_idx]),
            "test": (data.test_x, data.test_y),
        }

    def split_sizes(self) -> dict[str, int]:
        self.setup()
        return {name: len(y) for name, (_, y) in self._splits.items()}

    def normalise(self, x: Tensor) -> Tensor:
        return (x - self.mean.to(x.device, x.dtype)) / self.std.to(x.device, x.dtype)

    def _loader(self, split: str, train: bool) -> DataLoader:
        self.setup()
        x, y = self._splits[split]
        if not train:  # evaluation batches are normalised once, here, and never augmented
            x = self.normalise(x)
        generator = torch.Generator().manual_seed(self.seed)
        return DataLoader(TensorDataset(x, y), batch_size=self.batch_size, shuffle=train,
                          drop_last=train and len(y) > self.batch_size,
                          num_workers=self.num_workers, generator=generator,
                          persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)

    def train_eval_dataloader(self) -> DataLoader:
        """The training split with the evaluation transform, for frozen-feature protocols."""
        return self._loader("train", train=False)

    def make_views(self, x: Tensor) -> list[Tensor]:
        """``n_views`` independently augmented, normalised views of raw images ``x``."""
        self.setup()  # the normalisation statistics come from the training split
        return [self.normalise(self.augment(x)) for _ in range(self.n_views)]

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        # Training batches arrive raw and leave as views; evaluation batches pass through.
        # Without a Trainer (a notebook calling the hook on a training batch) views are made too.
        if self.trainer is not None and not self.trainer.training:
            return batch
        x, y = batch
        return self.make_views(x), y
