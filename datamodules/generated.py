"""Generated vector data: isotropic blobs, TransFusion's union of noisy low-rank subspaces and the
toy line sets of the cluster-specific representation paper. Every set is ``provenance =
"generated"``, deterministic given ``data_seed`` (separate from the run's ``seed``, which only
draws the validation split and the shuffle), and split into train and test by a stratified
``test_fraction`` drawn with the same ``data_seed``. The data are used as generated (no per-feature
standardisation: it would stretch the noise-only features of the line sets up to the scale of the
signal, bend the orthogonal set's directions, and change the subspace set's angles).

References:
    [CSRL] M. Sabanayagam, O. Al-Dabooni, P. Esser, "Cluster Specific Representation Learning".
    [TAE] P. Esser, S. Mukherjee, M. Sabanayagam, D. Ghoshdastidar, "Improved representation
        learning through tensorized autoencoders", AISTATS 2023, arXiv:2212.01046. [CSRL] cites
        it for the line sets but gives only their d, n and C; the means and covariances here are
        those of [TAE]'s code, github.com/mahalakshmi-sabanayagam/tensorized, ``data.py``.
    [TransFusion] "TransFusion: Contrastive learning with attention layers", section 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from datamodules.base import TensorSplits
from datamodules.tabular import VectorDataModule, stratified_test_split


def _check_fraction(test_fraction: float) -> None:
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")


def cluster_sizes(n_samples: int, n_clusters: int) -> list[int]:
    """``n_samples`` shared as evenly as possible among ``n_clusters`` (the first get one more).

    >>> cluster_sizes(10, 3)
    [4, 3, 3]
    """
    return [n_samples // n_clusters + (i < n_samples % n_clusters) for i in range(n_clusters)]


# -- blobs ---------------------------------------------------------------------------------------
class BlobsDataModule(VectorDataModule):
    """Isotropic Gaussian clusters, scikit-learn's ``make_blobs``: ``n_clusters`` centres drawn
    uniformly from the box [-10, 10]^d, each point its centre plus ``N(0, cluster_std^2 I)``;
    ``n_samples`` points shared evenly among the clusters, label = cluster.

    Not from one of the papers: the plainest clustered data, a sanity floor for every method.
    Test split: a stratified ``test_fraction`` (25%). Views: isotropic Gaussian jitter of
    ``jitter_std`` (0.1, a tenth of the default ``cluster_std``) in the data's units.
    """

    name = "blobs"
    provenance = "generated"
    source = ("generated: isotropic Gaussian blobs (sklearn make_blobs), n=1000, d=8, 5 clusters, "
              "std 1, centres in [-10, 10]^d")
    standardise = False

    def __init__(self, n_samples: int = 1000, n_features: int = 8, n_clusters: int = 5,
                 cluster_std: float = 1.0, data_seed: int = 0, test_fraction: float = 0.25,
                 jitter_std: float = 0.1, **kwargs) -> None:
        _check_fraction(test_fraction)
        if n_clusters < 2 or n_samples < 4 * n_clusters:
            raise ValueError(f"need n_clusters >= 2 and n_samples >= 4 * n_clusters, got "
                             f"n_clusters={n_clusters}, n_samples={n_samples}")
        self.n_samples, self.n_features, self.n_clusters = n_samples, n_features, n_clusters
        self.cluster_std, self.data_seed, self.test_fraction = cluster_std, data_seed, test_fraction
        self.num_classes, self.input_shape = n_clusters, (n_features,)
        self.source = (f"generated: isotropic Gaussian blobs (sklearn make_blobs), n={n_samples}, "
                       f"d={n_features}, {n_clusters} clusters, std {cluster_std}, centres in "
                       f"[-10, 10]^d, data_seed {data_seed}")
        super().__init__(jitter_std=jitter_std, **kwargs)

    def load(self) -> TensorSplits:
        from sklearn.datasets import make_blobs

        x, y = make_blobs(n_samples=self.n_samples, n_features=self.n_features,
                          centers=self.n_clusters, cluster_std=self.cluster_std,
                          center_box=(-10.0, 10.0), random_state=self.data_seed)
        return stratified_test_split(x, y, self.test_fraction, self.data_seed)


# -- union of subspaces (TransFusion) ------------------------------------------------------------
@dataclass
class SubspaceSample:
    """One draw of :class:`SubspacesDataModule`'s data, every row a unit vector.

    Attributes:
        x: (n, m) the noisy points :math:`\\tilde x_i`, the data the model sees.
        clean: (n, m) the clean points :math:`x_i`, each in its subspace.
        y: (n,) the subspace of each point.
        bases: (kappa, m, r) an orthonormal basis of each subspace.
        u_perp: (kappa, m) the unit vector :math:`u_i^\\perp`, orthogonal to subspace i, that
            attains ``rho`` (eq. 6).
        rho: the cross-subspace projection bound of eq. 6, measured on ``clean``.
    """

    x: np.ndarray
    clean: np.ndarray
    y: np.ndarray
    bases: np.ndarray
    u_perp: np.ndarray
    rho: float


def _max_min_abs_projection(y: np.ndarray, rng: np.random.Generator, candidates: int = 4096,
                            restarts: int = 32, rounds: int = 20) -> tuple[np.ndarray, float]:
    """A unit ``w`` with a large ``min_j |y_j . w|``, and that minimum (exact for this ``w``).

    For fixed signs ``s_j`` the best ``w`` is the direction of the minimum-norm point of the
    convex hull of the ``s_j y_j`` (the hard-margin separator through the origin), whose norm is
    the margin. Starting from ``w``, the signs of ``y . w`` give a hull whose margin is at least
    ``w``'s, so alternating never decreases it. The starts are the ``restarts`` best of the
    leading singular vectors of ``y`` and ``candidates`` random directions. A local search: a
    lower bound on the supremum, but one the returned ``w`` attains."""
    from scipy.optimize import nnls

    def margin(w: np.ndarray) -> float:
        return float(np.abs(y @ w).min())

    _, _, vt = np.linalg.svd(y, full_matrices=False)
    starts = np.concatenate([vt[:3], rng.standard_normal((candidates, y.shape[1]))])
    starts /= np.linalg.norm(starts, axis=1, keepdims=True)
    order = np.argsort(np.abs(y @ starts.T).min(0))[::-1]  # best margins first
    best_w, best = None, -1.0
    for w in starts[order[:restarts]]:
        for _ in range(rounds):
            signed = np.where(y @ w >= 0, 1.0, -1.0)[:, None] * y  # (n', d)
            # Minimum-norm point of conv(signed): nnls with a heavily weighted sum-to-one row.
            weight = 1e3
            a = np.vstack([signed.T, weight * np.ones((1, len(signed)))])
            b = np.concatenate([np.zeros(signed.shape[1]), [weight]])
            lam, _ = nnls(a, b, maxiter=50 * a.shape[1])
            point = signed.T @ lam
            if np.linalg.norm(point) < 1e-12:
                break
            new_w = point / np.linalg.norm(point)
            if margin(new_w) <= margin(w) + 1e-12:
                break
            w = new_w
        if margin(w) > best:
            best_w, best = w, margin(w)
    return best_w, best


def cross_subspace_projection_bound(points: np.ndarray, labels: np.ndarray, bases: np.ndarray,
                                    seed: int = 0) -> tuple[float, np.ndarray]:
    r"""TransFusion's :math:`\rho` (section 3, eq. 6) measured on ``points``, with the unit
    vectors :math:`u_i^\perp` that attain it.

    .. math::

        \forall\, x_j \notin \mathrm{Span}(\mathcal{U}_i):\quad
        |\hat x_j^\top u_i^\perp| \ge \rho, \qquad u_i^\perp \perp \mathcal{U}_i,\
        \|u_i^\perp\| = 1,

    with :math:`\hat x_j = x_j / \|x_j\|`. Eq. 6 is written without the absolute value, but a
    subspace holds :math:`-x` with :math:`x`, and the proofs use only
    :math:`(x_j^\top u_i^\perp)^2` (Theorem 1's entries :math:`2(x^\top u^\perp)^2 \ge 2\rho^2`).
    For each subspace, :math:`u_i^\perp` is sought in its orthogonal complement by a local
    max-min search, so the returned :math:`\rho` is attained (verifiable) and is a lower bound on
    the best one; it holds for every subset of ``points`` too.

    Args:
        points: (n, m) points, each in the subspace of its label.
        labels: (n,) subspace index of each point.
        bases: (kappa, m, r) orthonormal basis of each subspace.
        seed: seed of the random starting directions.

    Returns:
        ``rho`` and ``u_perp`` of shape (kappa, m).

    >>> bases = np.eye(2)[:, :, None]  # the two axes of the plane, rank 1
    >>> pts = np.array([[2.0, 0.0], [-1.0, 0.0], [0.0, 3.0]])
    >>> rho, u = cross_subspace_projection_bound(pts, np.array([0, 0, 1]), bases)
    >>> round(rho, 6), np.abs(u).round(6).tolist()
    (1.0, [[0.0, 1.0], [1.0, 0.0]])
    """
    rng = np.random.default_rng(seed)
    unit = points / np.linalg.norm(points, axis=1, keepdims=True)
    kappa, m, r = bases.shape
    u_perp, rhos = np.zeros((kappa, m)), []
    for i in range(kappa):
        q, _ = np.linalg.qr(bases[i], mode="complete")  # first r columns span U_i
        complement = q[:, r:]  # (m, m - r)
        w, rho_i = _max_min_abs_projection(unit[labels != i] @ complement, rng)
        u_perp[i] = complement @ w
        rhos.append(rho_i)
    return float(min(rhos)), u_perp


class SubspacesDataModule(VectorDataModule):
    r"""Points near a union of :math:`\kappa` subspaces of rank :math:`r` in :math:`\mathbb{R}^m`,
    the setting of TransFusion's section 3 (Theorems 1 and 2).

    Each subspace :math:`\mathcal{U}_k` has a random orthonormal basis :math:`B_k` (m, r) (QR of a
    Gaussian matrix). A clean point is :math:`x = B_k c / \|B_k c\|` with :math:`c \sim N(0, I_r)`;
    its noisy version turns it by an angle :math:`\theta \sim U[0, \arccos(1 - \varepsilon)]`
    towards a uniformly random unit direction :math:`z \perp x`:

    .. math::

        \tilde x = \cos\theta\, x + \sin\theta\, z, \qquad
        x^\top \tilde x = \cos\theta \ge 1 - \varepsilon,

    the noise model of section 3.2 (all vectors unit length, as there). The data are the
    :math:`\tilde x` (unit vectors, not standardised); ``n_samples`` are shared evenly among the
    subspaces, label = subspace. ``rho`` is eq. 6's :math:`\rho` measured on the clean points of
    the whole set (train and test; any subset's is at least as large), ``u_perp`` the vectors
    attaining it, ``bases`` the subspaces: see :func:`cross_subspace_projection_bound`. With
    ``epsilon`` they give Theorem 2's :math:`\delta = \sqrt{1 - (1-\varepsilon)^2}` and
    :math:`\Delta = (1-\varepsilon)\rho - \delta\sqrt{1-\rho^2}`.

    TransFusion states no numeric setting for this data; the defaults (m = 16, r = 1,
    :math:`\kappa` = 4, n = 400, :math:`\varepsilon` = 0.05) are ours. Rank 1 by default, as in
    the worked example of its appendices C and D (two rank-1 subspaces): for rank 2 and above,
    every :math:`u \perp \mathcal{U}_i` is nearly orthogonal to some point of a densely sampled
    other subspace, so the measured :math:`\rho` falls towards 0 as n grows (about 0.02 for
    r = 2 and 100 points a subspace) and Theorem 2 says nothing. Test split: a stratified
    ``test_fraction`` (25%). Views: isotropic Gaussian jitter of ``jitter_std`` (0.01 per
    coordinate) on the unit vectors.

    Args:
        n_samples: points in all (n).
        ambient_dim: m.
        rank: r, the rank of every subspace (below ``ambient_dim``).
        n_subspaces: :math:`\kappa`, the number of subspaces (clusters).
        epsilon: :math:`\varepsilon \in [0, 1]`, the noise level.
        data_seed: seed of the subspaces, the points and the train/test split.
        test_fraction: stratified share of the points in the test split.
        jitter_std: per-coordinate standard deviation of the training views' jitter.
        **kwargs: the :class:`~datamodules.base.ClusterDataModule` options.
    """

    name = "subspaces"
    provenance = "generated"
    source = ("generated: unit vectors near a union of 4 rank-1 subspaces of R^16, noise "
              "cos >= 1 - 0.05, n=400 (TransFusion sec. 3)")
    standardise = False

    def __init__(self, n_samples: int = 400, ambient_dim: int = 16, rank: int = 1,
                 n_subspaces: int = 4, epsilon: float = 0.05, data_seed: int = 0,
                 test_fraction: float = 0.25, jitter_std: float = 0.01, **kwargs) -> None:
        _check_fraction(test_fraction)
        if not 1 <= rank < ambient_dim:
            raise ValueError(f"rank must be in [1, ambient_dim), got rank={rank}, "
                             f"ambient_dim={ambient_dim}")
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        if n_subspaces < 2 or n_samples < 4 * n_subspaces:
            raise ValueError(f"need n_subspaces >= 2 and n_samples >= 4 * n_subspaces, got "
                             f"n_subspaces={n_subspaces}, n_samples={n_samples}")
        self.n_samples, self.ambient_dim, self.rank = n_samples, ambient_dim, rank
        self.n_subspaces, self.epsilon = n_subspaces, epsilon
        self.data_seed, self.test_fraction = data_seed, test_fraction
        self.num_classes, self.input_shape = n_subspaces, (ambient_dim,)
        self.source = (f"generated: unit vectors near a union of {n_subspaces} rank-{rank} "
                       f"subspaces of R^{ambient_dim}, noise cos >= 1 - {epsilon}, n={n_samples}, "
                       f"data_seed {data_seed} (TransFusion sec. 3)")
        self._sample: SubspaceSample | None = None
        super().__init__(jitter_std=jitter_std, **kwargs)

    def generate(self) -> SubspaceSample:
        """All the data, clean and noisy, with the subspaces and eq. 6's rho (cached)."""
        if self._sample is not None:
            return self._sample
        rng = np.random.default_rng(self.data_seed)
        m, r = self.ambient_dim, self.rank
        bases = np.stack([np.linalg.qr(rng.standard_normal((m, r)))[0]
                          for _ in range(self.n_subspaces)])  # (kappa, m, r)
        sizes = cluster_sizes(self.n_samples, self.n_subspaces)
        y = np.repeat(np.arange(self.n_subspaces), sizes)
        clean = np.einsum("nmr,nr->nm", bases[y], rng.standard_normal((self.n_samples, r)))
        clean /= np.linalg.norm(clean, axis=1, keepdims=True)
        # A uniformly random unit direction orthogonal to each clean point.
        z = rng.standard_normal((self.n_samples, m))
        z -= np.sum(z * clean, axis=1, keepdims=True) * clean
        z /= np.linalg.norm(z, axis=1, keepdims=True)
        theta = rng.uniform(0.0, math.acos(1.0 - self.epsilon), size=(self.n_samples, 1))
        noisy = np.cos(theta) * clean + np.sin(theta) * z
        rho, u_perp = cross_subspace_projection_bound(clean, y, bases, seed=self.data_seed)
        self._sample = SubspaceSample(x=noisy, clean=clean, y=y, bases=bases, u_perp=u_perp,
                                      rho=rho)
        return self._sample

    @property
    def rho(self) -> float:
        """TransFusion's eq. 6 bound, measured on the clean points (see the class docstring)."""
        return self.generate().rho

    @property
    def u_perp(self) -> np.ndarray:
        """(kappa, m) unit vectors orthogonal to each subspace that attain ``rho``."""
        return self.generate().u_perp

    @property
    def bases(self) -> np.ndarray:
        """(kappa, m, r) orthonormal bases of the subspaces."""
        return self.generate().bases

    def load(self) -> TensorSplits:
        sample = self.generate()
        return stratified_test_split(sample.x, sample.y, self.test_fraction, self.data_seed)


# -- the toy line sets of [CSRL] / [TAE] ---------------------------------------------------------
class GaussianLinesDataModule(VectorDataModule):
    r"""Elongated Gaussian clusters along lines, padded with noise-only features: the toy sets of
    [TAE] used by [CSRL]. Subclasses set the clusters' means :math:`\mu_k` and covariances
    :math:`\Sigma_k` in the first ``k`` (intrinsic) coordinates, taken from [TAE]'s code.

    With :math:`\Sigma_k = \sum_l \lambda_l v_l v_l^\top` (:math:`\lambda_1` largest), a point of
    cluster :math:`k` is

    .. math::

        x = \big(\mu_k + \sqrt{\lambda_1} a\, v_1 + s \textstyle\sum_{l>1} \sqrt{\lambda_l}
        b_l v_l,\ \ \sigma g\big), \qquad a, b_l \sim N(0, 1),\ g \sim N(0, I_{d-k}),

    which for ``off_line_scale`` s = 1 is exactly [TAE]'s :math:`N(\mu_k, \Sigma_k)` (sampled by
    its eigen-decomposition, so that the spread off the line :math:`\mu_k + t v_1` can be turned
    down: s = 0 and ``noise_std`` :math:`\sigma` = 0 put every point on its line), and
    :math:`\sigma` = 0.1 is [TAE]'s noise of the padding features. ``n_samples`` are shared
    evenly among the clusters, label = cluster. Test split: a stratified ``test_fraction`` (25%;
    the papers train and score on all n points). Views: isotropic Gaussian jitter of
    ``jitter_std`` (0.1, [CSRL]'s de-noising noise level) in the data's units.

    Args:
        n_samples: points in all (n, the paper's value by default).
        n_features: d, at least the intrinsic dimension ``k``; the rest are noise features.
        noise_std: standard deviation of the noise features.
        off_line_scale: scale of the spread off each cluster's line (1: [TAE]'s covariances).
        data_seed: seed of the points and of the train/test split.
        test_fraction: stratified share of the points in the test split.
        jitter_std: standard deviation of the training views' jitter.
        **kwargs: the :class:`~datamodules.base.ClusterDataModule` options.
    """

    provenance = "generated"
    standardise = False
    #: (C, k) cluster means and (C, k, k) covariances in the intrinsic coordinates.
    MEANS: ClassVar[tuple[tuple[float, ...], ...]]
    COVARIANCES: ClassVar[tuple[tuple[tuple[float, ...], ...], ...]]
    #: What the set is, for ``source``.
    DESCRIPTION: ClassVar[str]

    def __init__(self, n_samples: int, n_features: int, noise_std: float = 0.1,
                 off_line_scale: float = 1.0, data_seed: int = 0, test_fraction: float = 0.25,
                 jitter_std: float = 0.1, **kwargs) -> None:
        _check_fraction(test_fraction)
        means = np.asarray(self.MEANS, dtype=np.float64)
        n_clusters, intrinsic = means.shape
        if n_features < intrinsic:
            raise ValueError(f"{self.name} needs n_features >= {intrinsic}, got {n_features}")
        if n_samples < 4 * n_clusters:
            raise ValueError(f"{self.name} needs n_samples >= {4 * n_clusters}, got {n_samples}")
        if noise_std < 0 or off_line_scale < 0:
            raise ValueError("noise_std and off_line_scale must be non-negative")
        self.n_samples, self.n_features = n_samples, n_features
        self.noise_std, self.off_line_scale = noise_std, off_line_scale
        self.data_seed, self.test_fraction = data_seed, test_fraction
        self.num_classes, self.input_shape = n_clusters, (n_features,)
        self.source = (f"generated: {self.DESCRIPTION}, n={n_samples}, d={n_features} "
                       f"({intrinsic} intrinsic + {n_features - intrinsic} noise features, std "
                       f"{noise_std}), off-line scale {off_line_scale}, data_seed {data_seed}")
        super().__init__(jitter_std=jitter_std, **kwargs)

    def generate(self) -> tuple[np.ndarray, np.ndarray]:
        """All ``n_samples`` points (n, d) and their cluster labels (n,)."""
        rng = np.random.default_rng(self.data_seed)
        means = np.asarray(self.MEANS, dtype=np.float64)
        covariances = np.asarray(self.COVARIANCES, dtype=np.float64)
        n_clusters, k = means.shape
        xs, ys = [], []
        for c, size in enumerate(cluster_sizes(self.n_samples, n_clusters)):
            eigenvalues, eigenvectors = np.linalg.eigh(covariances[c])  # ascending
            scales = np.sqrt(np.clip(eigenvalues, 0.0, None))
            scales[:-1] *= self.off_line_scale  # all but the line's own direction
            intrinsic = means[c] + (rng.standard_normal((size, k)) * scales) @ eigenvectors.T
            padding = self.noise_std * rng.standard_normal((size, self.n_features - k))
            xs.append(np.concatenate([intrinsic, padding], axis=1))
            ys.append(np.full(size, c))
        return np.concatenate(xs), np.concatenate(ys)

    def load(self) -> TensorSplits:
        x, y = self.generate()
        return stratified_test_split(x, y, self.test_fraction, self.data_seed)


class ParallelLinesDataModule(GaussianLinesDataModule):
    """*Parallel lines*, the Simpson's-paradox toy set: two clusters along parallel lines whose
    within-cluster trend (direction (1, 1)) differs from the trend across clusters.

    Defaults d = 5, n = 150, C = 2: [CSRL] footnote 4. Means (-1, -1) and (4, -2), both
    covariances [[5, 4.95], [4.95, 5]] (variance 9.95 along (1, 1)/sqrt 2, 0.05 across), 3 noise
    features of std 0.1: [TAE]'s ``parallel_line``.
    """

    name = "parallel_lines"
    source = ("generated: 2 Gaussian clusters along parallel lines in 2-D + 3 noise features "
              "(d=5, n=150) [CSRL fn. 4, TAE]")
    DESCRIPTION = "2 Gaussian clusters along parallel lines (CSRL footnote 4; TAE)"
    MEANS = ((-1.0, -1.0), (4.0, -2.0))
    COVARIANCES = (((5.0, 4.95), (4.95, 5.0)),) * 2

    def __init__(self, n_samples: int = 150, n_features: int = 5, **kwargs) -> None:
        super().__init__(n_samples=n_samples, n_features=n_features, **kwargs)


class OrthogonalDataModule(GaussianLinesDataModule):
    """*Orthogonal*: two clusters along orthogonal lines, directions (1, 1) and (1, -1).

    Defaults d = 5, n = 150, C = 2: [CSRL] appendix "Additional Datasets". Means (-1, -1) and
    (7, 7), covariances [[5, 4.9], [4.9, 5]] and [[5, -4.9], [-4.9, 5]] (variance 9.9 along the
    line, 0.1 across), 3 noise features of std 0.1: [TAE]'s ``orthogonal``.
    """

    name = "orthogonal"
    source = ("generated: 2 Gaussian clusters along orthogonal lines in 2-D + 3 noise features "
              "(d=5, n=150) [CSRL app., TAE]")
    DESCRIPTION = "2 Gaussian clusters along orthogonal lines (CSRL appendix; TAE)"
    MEANS = ((-1.0, -1.0), (7.0, 7.0))
    COVARIANCES = (((5.0, 4.9), (4.9, 5.0)), ((5.0, -4.9), (-4.9, 5.0)))

    def __init__(self, n_samples: int = 150, n_features: int = 5, **kwargs) -> None:
        super().__init__(n_samples=n_samples, n_features=n_features, **kwargs)


class TriangleDataModule(GaussianLinesDataModule):
    """*Triangle*: three clusters at the corners of a triangle, elongated along three directions,
    (1, 1), (1, -1) and (1, 0).

    Defaults d = 6, n = 150, C = 3: [CSRL] appendix "Additional Datasets". Means (-1, -1), (6, 6)
    and (5, -5), covariances [[5, 4.9], [4.9, 5]], [[5, -4.5], [-4.5, 5]] and [[7, 0], [0, 1]]:
    [TAE]'s ``triangle``. [TAE]'s code pads the 2 intrinsic coordinates with 3 noise features
    (d = 5) where [CSRL] reports d = 6; the default follows the paper (4 noise features), and
    ``n_features=5`` gives the code's.
    """

    name = "triangle"
    source = ("generated: 3 elongated Gaussian clusters on a triangle in 2-D + 4 noise features "
              "(d=6, n=150) [CSRL app., TAE]")
    DESCRIPTION = "3 elongated Gaussian clusters on a triangle (CSRL appendix; TAE)"
    MEANS = ((-1.0, -1.0), (6.0, 6.0), (5.0, -5.0))
    COVARIANCES = (((5.0, 4.9), (4.9, 5.0)), ((5.0, -4.5), (-4.5, 5.0)), ((7.0, 0.0), (0.0, 1.0)))

    def __init__(self, n_samples: int = 150, n_features: int = 6, **kwargs) -> None:
        super().__init__(n_samples=n_samples, n_features=n_features, **kwargs)


class Lines3DDataModule(GaussianLinesDataModule):
    """*Axis-parallel lines in 3D*: three clusters, each along one coordinate axis of R^3.

    Defaults d = 6, n = 300, C = 3: [CSRL] footnote 4. Means (2, 0, 0), (0, 0, 4) and (2, 2, 3);
    covariances with variance 3 along the x, y and z axis respectively and 0.01 in every other
    entry; 3 noise features of std 0.1: [TAE]'s ``lines_3D``.
    """

    name = "lines3d"
    source = ("generated: 3 Gaussian clusters along the 3 axes of R^3 + 3 noise features "
              "(d=6, n=300) [CSRL fn. 4, TAE]")
    DESCRIPTION = "3 Gaussian clusters along the axes of R^3 (CSRL footnote 4; TAE)"
    MEANS = ((2.0, 0.0, 0.0), (0.0, 0.0, 4.0), (2.0, 2.0, 3.0))
    COVARIANCES = tuple(tuple(tuple(3.0 if i == j == axis else 0.01 for j in range(3))
                              for i in range(3)) for axis in range(3))

    def __init__(self, n_samples: int = 300, n_features: int = 6, **kwargs) -> None:
        super().__init__(n_samples=n_samples, n_features=n_features, **kwargs)
