"""scikit-learn's 8x8 handwritten digits: real data that ships with scikit-learn, offline."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from datamodules.augment import digits_augment
from datamodules.base import ClusterDataModule, TensorSplits

#: The digits have no official test split; this one is fixed, whatever the run's seed, so every
#: run and seed is scored on the same images.
TEST_FRACTION, TEST_SPLIT_SEED = 0.25, 0


class DigitsDataModule(ClusterDataModule):
    """UCI optical handwritten digits as bundled by scikit-learn (``load_digits``): 1,797
    grey-scale 8x8 images of 0-9, pixel values 0-16 scaled to [0, 1]. Test split: a fixed,
    stratified 25% (450 images); the rest is training, minus ``val_fraction`` for validation.
    Augmentation: :func:`datamodules.augment.digits_augment`.
    """

    name = "digits"
    provenance = "real"
    source = "scikit-learn's bundled UCI optical handwritten digits, 1,797 8x8 images"
    num_classes = 10
    input_shape = (1, 8, 8)

    def load(self) -> TensorSplits:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        digits = load_digits()
        images = (digits.images / 16.0).astype(np.float32)[:, None]  # (1797, 1, 8, 8)
        train_x, test_x, train_y, test_y = train_test_split(
            images, digits.target, test_size=TEST_FRACTION, random_state=TEST_SPLIT_SEED,
            stratify=digits.target)
        return TensorSplits(torch.from_numpy(train_x), torch.from_numpy(train_y).long(),
                            torch.from_numpy(test_x), torch.from_numpy(test_y).long())

    def train_augment(self) -> nn.Module:
        return digits_augment()
