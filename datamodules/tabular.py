"""Vector-valued (tabular) data, ``(n, d)`` float tensors: the shared base and two real sets that
work offline, scikit-learn's iris and the ``palmerpenguins`` package's penguins."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from datamodules.base import ClusterDataModule, TensorSplits

#: Neither set has an official test split; this one is fixed, whatever the run's seed (as for the
#: digits), so every run and seed is scored on the same rows.
TEST_FRACTION, TEST_SPLIT_SEED = 0.25, 0


def stratified_test_split(x: np.ndarray, y: np.ndarray, test_fraction: float,
                          seed: int) -> TensorSplits:
    """Split ``x`` (n, d) and integer labels ``y`` (n,) into float32 train and test tensors,
    stratified by label, deterministic given ``seed``.

    >>> s = stratified_test_split(np.zeros((8, 3)), np.array([0, 1] * 4), 0.25, seed=0)
    >>> tuple(s.train_x.shape), tuple(s.test_x.shape), s.test_y.tolist().count(0)
    ((6, 3), (2, 3), 1)
    """
    from sklearn.model_selection import train_test_split

    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    train_x, test_x, train_y, test_y = train_test_split(
        np.asarray(x, dtype=np.float32), np.asarray(y), test_size=test_fraction,
        random_state=seed, stratify=y)
    return TensorSplits(torch.from_numpy(train_x), torch.from_numpy(train_y).long(),
                        torch.from_numpy(test_x), torch.from_numpy(test_y).long())


class GaussianJitter(nn.Module):
    """Adds independent Gaussian noise of standard deviation ``std`` to every feature of every
    sample: ``x + std * N(0, I)``, with ``std`` a number or a per-feature ``(d,)`` tensor.

    >>> x = torch.zeros(4, 3)
    >>> y = GaussianJitter(0.1)(x)
    >>> y.shape == x.shape and bool((y[0] != y[1]).any())  # every row its own draw
    True
    """

    def __init__(self, std: float | Tensor = 0.1) -> None:
        super().__init__()
        self.std = std

    def forward(self, x: Tensor) -> Tensor:
        std = torch.as_tensor(self.std, dtype=x.dtype, device=x.device)
        return x + std * torch.randn_like(x)  # x: (B, d); std: () or (d,)


class VectorDataModule(ClusterDataModule):
    """Base of the ``(n, d)`` datasets: Gaussian-jitter views, and a per-dataset choice between
    per-feature standardisation with training statistics (the base's default, for real tables
    whose features have different units) and using the data as they are (``standardise =
    False``: the generated sets, whose geometry would be bent by per-feature scaling).

    Args:
        jitter_std: standard deviation of the :class:`GaussianJitter` that makes the training
            views; in units of each feature's training standard deviation when the dataset is
            standardised, in the data's own units otherwise.
        **kwargs: the :class:`~datamodules.base.ClusterDataModule` options.
    """

    #: Standardise every feature with the training split's mean and standard deviation.
    standardise: ClassVar[bool] = True

    def __init__(self, jitter_std: float = 0.1, **kwargs) -> None:
        if jitter_std < 0:
            raise ValueError(f"jitter_std must be non-negative, got {jitter_std}")
        self.jitter_std = jitter_std
        super().__init__(**kwargs)

    def train_augment(self) -> nn.Module:
        return GaussianJitter(self.jitter_std)

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        # The base always standardises; undoing it here keeps the base untouched.
        if not self.standardise:
            self.mean, self.std = torch.zeros_like(self.mean), torch.ones_like(self.std)
        # The jitter acts on raw features before normalisation: scaling it by the training
        # standard deviation makes it ``jitter_std`` in standardised units for every feature.
        self.augment.std = self.jitter_std * self.std


class IrisDataModule(VectorDataModule):
    """Fisher's iris (R. A. Fisher, Annals of Eugenics 1936) as bundled by scikit-learn
    (``load_iris``): 150 flowers, 4 measurements in cm, 3 species (50 each); the real set of the
    cluster-specific representation paper (Sabanayagam, Al-Dabooni & Esser, "Cluster Specific
    Representation Learning", appendix "Additional Datasets": d = 4, n = 150, C = 3).

    Test split: a fixed, stratified 25% (38 rows, independent of the run's seed); the rest is
    training, minus ``val_fraction`` for validation. Features are standardised with the training
    split's mean and standard deviation. Views: Gaussian jitter of ``jitter_std`` (0.1) in
    standardised units.
    """

    name = "iris"
    provenance = "real"
    source = "scikit-learn's bundled Fisher iris: 150 flowers, 4 features, 3 species"
    num_classes = 3
    input_shape = (4,)

    def load(self) -> TensorSplits:
        from sklearn.datasets import load_iris

        iris = load_iris()
        return stratified_test_split(iris.data, iris.target, TEST_FRACTION, TEST_SPLIT_SEED)


#: The numeric measurements of ``palmerpenguins`` (its ``year`` column is not a measurement).
PENGUIN_FEATURES = ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g")
PENGUIN_SPECIES = ("Adelie", "Chinstrap", "Gentoo")


class PenguinsDataModule(VectorDataModule):
    """Palmer penguins (K. B. Gorman, T. D. Williams, W. R. Fraser, PLOS ONE 2014) from the
    ``palmerpenguins`` package (``load_penguins``, bundled CSV, offline): the rows with any missing
    value are dropped, leaving 333 of 344 penguins; features are the 4 numeric measurements (bill
    length and depth, flipper length, body mass), standardised with the training split's mean and
    standard deviation; label = species (Adelie 0, Chinstrap 1, Gentoo 2).

    The cluster-specific representation paper (Sabanayagam, Al-Dabooni & Esser, "Cluster Specific
    Representation Learning", footnote 4) reports d = 4, n = 334, C = 3. The loader in the code of
    its reference [9] (github.com/mahalakshmi-sabanayagam/tensorized, ``data.py``) reads Kaggle's
    ``penguins_size.csv`` instead, whose one row with sex ``"."`` (not a missing value) survives
    ``dropna``; that would explain the one-row difference.

    Test split: a fixed, stratified 25% (84 rows); the rest is training, minus ``val_fraction``.
    Views: Gaussian jitter of ``jitter_std`` (0.1) in standardised units.
    """

    name = "penguins"
    provenance = "real"
    source = ("palmerpenguins package (Gorman et al. 2014): 333 complete rows, 4 numeric "
              "features, 3 species")
    num_classes = 3
    input_shape = (len(PENGUIN_FEATURES),)
    class_names = PENGUIN_SPECIES

    def load(self) -> TensorSplits:
        try:
            from palmerpenguins import load_penguins
        except ImportError as err:
            raise ImportError("the penguins dataset needs the palmerpenguins package: "
                              "pip install palmerpenguins") from err
        table = load_penguins().dropna()
        x = table[list(PENGUIN_FEATURES)].to_numpy(dtype=np.float64)
        y = table["species"].map({s: i for i, s in enumerate(PENGUIN_SPECIES)}).to_numpy()
        return stratified_test_split(x, y.astype(np.int64), TEST_FRACTION, TEST_SPLIT_SEED)
