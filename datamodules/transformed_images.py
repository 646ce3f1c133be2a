"""Base images under random SE(2) transformations (rotation and translation): the data of the
invariant-attention paper's clustering experiment, built offline from scikit-learn's digits."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from datamodules.augment import IntensityJitter, RandomAffine
from datamodules.base import ClusterDataModule, TensorSplits

#: The order in which digits become base images: the paper's clustering experiment has a
#: hand-made 7, its intra-class experiment 3s; the rest follow.
BASE_DIGITS = (7, 3, 0, 1, 2, 4, 5, 6, 8, 9)


def se2_warp(images: Tensor, angles_deg: Tensor, shifts: Tensor, mode: str = "bicubic") -> Tensor:
    r"""Each image resampled under its own SE(2) transformation, as the invariant-attention paper
    defines it (section 2.1): pixel :math:`(p, q)` (row, column) of the output is the input at

    .. math::

        \tau_{pq} = A \begin{bmatrix} p - c \\ q - c' \end{bmatrix}
        + \begin{bmatrix} c \\ c' \end{bmatrix} + b, \qquad
        A = \begin{bmatrix} \cos\theta & \sin\theta \\ -\sin\theta & \cos\theta \end{bmatrix},

    with the rotation about the image centre :math:`(c, c') = ((H-1)/2, (W-1)/2)` (the paper
    leaves the origin implicit) and :math:`b` = ``shifts`` in pixels (row, column). Bicubic
    interpolation (PyTorch's, Keys' kernel with a = -0.75; the paper uses Keys' cubic convolution)
    with zero padding outside the image.

    Args:
        images: (N, C, H, W).
        angles_deg: (N,) rotation angles :math:`\theta` in degrees.
        shifts: (N, 2) translations :math:`b` in pixels, (row, column).
        mode: ``grid_sample`` interpolation mode.

    Returns:
        (N, C, H, W) transformed images.

    >>> x = torch.zeros(1, 1, 5, 5); x[0, 0, 2, 3] = 1.0  # one pixel right of the centre
    >>> y = se2_warp(x, torch.tensor([0.0]), torch.tensor([[0.0, 1.0]]), mode="nearest")
    >>> y[0, 0].nonzero().tolist()  # the output at (2, 2) reads the input at (2, 3)
    [[2, 2]]
    """
    n, _, h, w = images.shape
    theta = angles_deg.to(images) * math.pi / 180
    cos, sin = torch.cos(theta).view(n, 1, 1), torch.sin(theta).view(n, 1, 1)
    rows = torch.arange(h, dtype=images.dtype, device=images.device).view(1, h, 1) - (h - 1) / 2
    cols = torch.arange(w, dtype=images.dtype, device=images.device).view(1, 1, w) - (w - 1) / 2
    shifts = shifts.to(images)
    src_row = cos * rows + sin * cols + (h - 1) / 2 + shifts[:, 0].view(n, 1, 1)  # (N, H, W)
    src_col = -sin * rows + cos * cols + (w - 1) / 2 + shifts[:, 1].view(n, 1, 1)
    # grid_sample with align_corners=False puts pixel i's centre at (2i + 1) / size - 1.
    grid = torch.stack([(2 * src_col + 1) / w - 1, (2 * src_row + 1) / h - 1], dim=-1)
    return F.grid_sample(images, grid, mode=mode, padding_mode="zeros", align_corners=False)


def base_digit_images(n_base: int, image_size: int) -> Tensor:
    """(n_base, 1, S, S) base images: the first scikit-learn digit of each of the first ``n_base``
    classes in :data:`BASE_DIGITS`, upsampled bicubically from 8x8 to ``3 * image_size // 8``
    pixels and centred on a black ``image_size`` canvas: at 64 pixels, a glyph turned by any angle
    and shifted by up to 10 pixels each way stays wholly in frame."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    glyphs = np.stack([digits.images[np.flatnonzero(digits.target == d)[0]]
                       for d in BASE_DIGITS[:n_base]]) / 16.0
    glyph_size = 3 * image_size // 8
    glyphs = F.interpolate(torch.from_numpy(glyphs).float()[:, None], size=glyph_size,
                           mode="bicubic", align_corners=False).clamp(0.0, 1.0)
    start = (image_size - glyph_size) // 2
    canvas = torch.zeros(n_base, 1, image_size, image_size)
    canvas[:, :, start:start + glyph_size, start:start + glyph_size] = glyphs
    return canvas


@dataclass
class TransformedImages:
    """One draw of :class:`TransformedImagesDataModule`'s data.

    Attributes:
        images: (n, 1, S, S) transformed copies, in [0, 1].
        labels: (n,) index of each copy's base image.
        angles_deg: (n,) rotation of each copy, degrees.
        shifts: (n, 2) translation of each copy, pixels (row, column); see :func:`se2_warp`.
        base_images: (n_base, 1, S, S) the base images.
    """

    images: Tensor
    labels: Tensor
    angles_deg: Tensor
    shifts: Tensor
    base_images: Tensor


class TransformedImagesDataModule(ClusterDataModule):
    """Copies of a few base images under random SE(2) transformations; label = base image. The
    data of the invariant-attention paper ("Invariant Attention: Provable Clustering under
    Transformations", section 5, Experiment 1): every copy is its base image rotated by an angle
    drawn uniformly from [-65, 65] degrees and translated by a vector whose two components are
    drawn uniformly from [-10, 10] pixels (exactly: :func:`se2_warp`, bicubic).

    What differs from the paper, and why:

    - Base images: the paper's are a hand-drawn crab, a hand-made 7 and a picture of Pikachu,
      which are not available offline; these are scikit-learn's 8x8 digits (the first 7, 3, 0,
      then 1, 2, 4, ... for more), upsampled bicubically to 24x24 and centred on a 64x64 black
      canvas, so every copy stays wholly in frame (the paper does not give its image size).
      Like the paper's, each class is one image, with no intra-class variation.
    - Copies: the paper has 6 per class (18 images); the default is 100 per class so that the
      stratified test and validation splits hold every class (``copies=6`` gives the paper's
      count, with ``test_fraction`` and ``val_fraction`` large enough to give each split at
      least one image per class).

    Test split: a stratified ``test_fraction`` (25%). Views: a further random SE(2)
    transformation of the same ranges (:class:`~datamodules.augment.RandomAffine` without
    scaling; a view may crop a corner of a glyph the data already moved) and
    :class:`~datamodules.augment.IntensityJitter`.

    Args:
        n_base: number of base images (classes), at most 10.
        copies: transformed copies of each base image.
        angle_range: rotation angles are uniform in [-angle_range, angle_range] degrees.
        shift_range: each translation component is uniform in [-shift_range, shift_range] px.
        image_size: side of the square images (the glyphs are 3/8 of it).
        data_seed: seed of the transformations and of the train/test split.
        test_fraction: stratified share of the copies in the test split.
        **kwargs: the :class:`~datamodules.base.ClusterDataModule` options.
    """

    name = "transformed_images"
    provenance = "generated"
    source = ("generated: 3 scikit-learn digits (7, 3, 0) upsampled to 64x64, 100 copies each "
              "under SE(2): rotation U[-65, 65] deg, shift U[-10, 10] px (invariant attention)")

    def __init__(self, n_base: int = 3, copies: int = 100, angle_range: float = 65.0,
                 shift_range: float = 10.0, image_size: int = 64, data_seed: int = 0,
                 test_fraction: float = 0.25, **kwargs) -> None:
        if not 2 <= n_base <= len(BASE_DIGITS):
            raise ValueError(f"n_base must be in [2, {len(BASE_DIGITS)}], got {n_base}")
        if copies < 2:
            raise ValueError(f"copies must be at least 2, got {copies}")
        if not 0.0 < test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
        if image_size < 16:
            raise ValueError(f"image_size must be at least 16, got {image_size}")
        self.n_base, self.copies = n_base, copies
        self.angle_range, self.shift_range, self.image_size = angle_range, shift_range, image_size
        self.data_seed, self.test_fraction = data_seed, test_fraction
        self.num_classes, self.input_shape = n_base, (1, image_size, image_size)
        digits = ", ".join(str(d) for d in BASE_DIGITS[:n_base])
        self.source = (f"generated: {n_base} scikit-learn digits ({digits}) upsampled to "
                       f"{image_size}x{image_size}, {copies} copies each under SE(2): rotation "
                       f"U[-{angle_range}, {angle_range}] deg, shift U[-{shift_range}, "
                       f"{shift_range}] px, data_seed {data_seed} (invariant attention)")
        self._sample: TransformedImages | None = None
        super().__init__(**kwargs)

    def generate(self) -> TransformedImages:
        """All the copies with their transformations and the base images (cached)."""
        if self._sample is not None:
            return self._sample
        generator = torch.Generator().manual_seed(self.data_seed)
        n = self.n_base * self.copies
        base = base_digit_images(self.n_base, self.image_size)
        labels = torch.arange(self.n_base).repeat_interleave(self.copies)
        uniform = torch.rand(n, 3, generator=generator, dtype=torch.float64) * 2 - 1  # U[-1, 1]
        angles, shifts = uniform[:, 0] * self.angle_range, uniform[:, 1:] * self.shift_range
        images = se2_warp(base[labels].double(), angles, shifts).clamp(0.0, 1.0).float()
        self._sample = TransformedImages(images=images, labels=labels, angles_deg=angles.float(),
                                         shifts=shifts.float(), base_images=base)
        return self._sample

    def load(self) -> TensorSplits:
        from sklearn.model_selection import train_test_split

        sample = self.generate()
        train_idx, test_idx = train_test_split(np.arange(len(sample.labels)),
                                               test_size=self.test_fraction,
                                               random_state=self.data_seed,
                                               stratify=sample.labels.numpy())
        train_idx, test_idx = np.sort(train_idx), np.sort(test_idx)
        return TensorSplits(sample.images[train_idx], sample.labels[train_idx],
                            sample.images[test_idx], sample.labels[test_idx])

    def train_augment(self) -> nn.Module:
        return nn.Sequential(RandomAffine(degrees=self.angle_range, scale=(1.0, 1.0),
                                          translate=self.shift_range), IntensityJitter())
