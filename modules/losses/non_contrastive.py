r"""Non-contrastive losses as pure functions of tensors: no negatives; collapse is kept away by
a target network (BYOL) or by the statistics of the batch (Barlow Twins, VICReg).

Each takes the two views' embeddings as ``(N, d)`` rows, row ``i`` of each from image ``i``. It
gathers nothing: a method whose loss reads the batch's statistics gathers the embeddings across
devices first (:func:`modules.blocks.distributed.gather`), so they are the global batch's. Each
is computed in float32 (float64 for float64 inputs) even under autocast: a cross-correlation or
covariance of a few thousand dimensions in bf16 loses the small off-diagonal terms it penalises.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from modules.losses._numerics import _autocast_disabled, _compute_dtype
from modules.ranges import check_non_negative, check_positive

#: The ε of the authors' ``BatchNorm1d(affine=False)`` that standardises Barlow Twins'
#: embeddings (PyTorch's default).
BARLOW_TWINS_EPS = 1e-5


def _check_pair(z1: Tensor, z2: Tensor, name: str, least_rows: int = 1) -> None:
    if z1.shape != z2.shape or z1.dim() != 2:
        raise ValueError(f"{name} must both have shape (N, d); got {tuple(z1.shape)} and "
                         f"{tuple(z2.shape)}")
    if z1.shape[0] < least_rows:
        raise ValueError(f"{name} need at least {least_rows} rows: the loss reads the batch's "
                         f"statistics, got {z1.shape[0]}")


def byol_loss(p1: Tensor, p2: Tensor, z1: Tensor, z2: Tensor) -> Tensor:
    r"""BYOL's normalised mean squared error between each view's online prediction and the
    target's projection of the other view, symmetrised.

    Grill et al., "Bootstrap Your Own Latent: A New Approach to Self-Supervised Learning",
    NeurIPS 2020, arXiv:2006.07733, eq. 2 and its symmetrisation
    :math:`\mathcal{L}^{\text{BYOL}} = \mathcal{L} + \tilde{\mathcal{L}}` (§3.1), each term a mean
    over the batch:

    .. math::
        \mathcal{L}^{\text{BYOL}} = \frac{1}{N}\sum_{i=1}^{N}
        \big\lVert \bar p^{1}_i - \bar z^{2}_i \big\rVert_2^2
        + \big\lVert \bar p^{2}_i - \bar z^{1}_i \big\rVert_2^2, \qquad
        \lVert \bar p - \bar z \rVert_2^2
        = 2 - 2\,\frac{\langle p, z\rangle}{\lVert p\rVert_2\,\lVert z\rVert_2}

    with :math:`\bar x = x / \lVert x\rVert_2`.

    Args:
        p1, p2: ``(N, d)`` the online network's predictions :math:`q_\theta(z_\theta)` of views
            1 and 2.
        z1, z2: ``(N, d)`` the target network's projections :math:`z'_\xi` of views 1 and 2;
            detached here (BYOL's stop-gradient: the loss never trains the target).

    Returns:
        A scalar in [0, 8]: 0 when every prediction points the way of the other view's target.

    >>> z = torch.eye(3)
    >>> byol_loss(z, z, z, z).item(), byol_loss(z, -z, z, z).item()
    (0.0, 4.0)
    """
    _check_pair(p1, z2, "p1 and z2")
    _check_pair(p2, z1, "p2 and z1")
    with _autocast_disabled(p1):
        dtype = _compute_dtype(p1)

        def normalised_mse(p: Tensor, z: Tensor) -> Tensor:  # eq. 2, a mean over the N rows
            p, z = F.normalize(p.to(dtype), dim=1), F.normalize(z.detach().to(dtype), dim=1)
            return (2 - 2 * (p * z).sum(1)).mean()

        return normalised_mse(p1, z2) + normalised_mse(p2, z1)


def _standardised_columns(z: Tensor, eps: float) -> Tensor:
    """Each column of ``z`` (N, d) at mean 0 and variance 1 over the rows (the biased variance
    plus ``eps``): ``BatchNorm1d(affine=False)`` in training mode."""
    centred = z - z.mean(0)
    return centred / torch.sqrt(centred.pow(2).mean(0) + eps)


def barlow_twins_loss(z1: Tensor, z2: Tensor, off_diagonal_weight: float = 5e-3) -> Tensor:
    r"""Barlow Twins: the cross-correlation of the two views' standardised embeddings pulled
    towards the identity.

    Zbontar, Jing, Misra, LeCun, Deny, "Barlow Twins: Self-Supervised Learning via Redundancy
    Reduction", ICML 2021, arXiv:2103.03230, eq. 1-2:

    .. math::
        \mathcal{L} = \sum_i (1 - \mathcal{C}_{ii})^2
        + \lambda \sum_i \sum_{j \ne i} \mathcal{C}_{ij}^2, \qquad
        \mathcal{C}_{ij} = \frac{1}{N}\sum_{b=1}^{N} \hat z^{1}_{b,i}\, \hat z^{2}_{b,j}

    where :math:`\hat z` standardises each dimension of each view over the batch, as the
    authors' code does with ``BatchNorm1d(affine=False)``: mean 0, and the batch's biased
    variance plus :data:`BARLOW_TWINS_EPS` scaled to 1. Eq. 2 divides the centred columns by
    their norms instead, the same :math:`\mathcal{C}` up to that ε.

    Args:
        z1, z2: ``(N, d)`` the projector's embeddings of views 1 and 2 (the global batch), N >= 2.
        off_diagonal_weight: :math:`\lambda \ge 0`, the redundancy-reduction term's weight (the
            paper's :math:`5 \cdot 10^{-3}`; its code's 0.0051).

    Returns:
        A scalar; 0 exactly when :math:`\mathcal{C}` is the identity.

    >>> z = torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
    >>> round(barlow_twins_loss(z, z).item(), 6)  # uncorrelated dimensions: C is the identity
    0.0
    >>> z = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])  # two copies of one dimension: C all ones
    >>> round(barlow_twins_loss(z, z, off_diagonal_weight=0.5).item(), 4)  # 0 + 0.5 * 2
    1.0
    """
    check_non_negative("off_diagonal_weight", off_diagonal_weight)
    _check_pair(z1, z2, "z1 and z2", least_rows=2)
    with _autocast_disabled(z1):
        dtype = _compute_dtype(z1)
        n, d = z1.shape
        c = (_standardised_columns(z1.to(dtype), BARLOW_TWINS_EPS).T
             @ _standardised_columns(z2.to(dtype), BARLOW_TWINS_EPS)) / n  # c: (d, d)
        on_diagonal = (1 - torch.diagonal(c)).pow(2).sum()
        off_diagonal = c.pow(2).sum() - torch.diagonal(c).pow(2).sum()
        return on_diagonal + off_diagonal_weight * off_diagonal


def _variance_term(z: Tensor, target_std: float, eps: float) -> Tensor:
    """VICReg's eq. 1-2: the mean over the d dimensions of the hinge
    ``max(0, target_std - sqrt(Var + eps))``, Var the unbiased variance over the rows."""
    return F.relu(target_std - torch.sqrt(z.var(dim=0) + eps)).mean()


def _covariance_term(z: Tensor) -> Tensor:
    """VICReg's eq. 3-4: the squared off-diagonal entries of the covariance matrix (unbiased,
    ``(d, d)``), summed and divided by d."""
    n, d = z.shape
    centred = z - z.mean(0)
    covariance = centred.T @ centred / (n - 1)  # (d, d)
    return (covariance.pow(2).sum() - torch.diagonal(covariance).pow(2).sum()) / d


def vicreg_loss(z1: Tensor, z2: Tensor, invariance_weight: float = 25.0,
                variance_weight: float = 25.0, covariance_weight: float = 1.0,
                target_std: float = 1.0, eps: float = 1e-4) -> Tensor:
    r"""VICReg: the two views' embeddings pulled together (invariance), each dimension's spread
    held above ``target_std`` (variance) and the dimensions decorrelated (covariance).

    Bardes, Ponce, LeCun, "VICReg: Variance-Invariance-Covariance Regularization for
    Self-Supervised Learning", ICLR 2022, arXiv:2105.04906, eq. 1-6, as the authors' code
    weighs them (see below):

    .. math::
        \ell(Z, Z') = \lambda\, s(Z, Z') + \frac{\mu}{2}\,\big[v(Z) + v(Z')\big]
        + \nu\,\big[c(Z) + c(Z')\big]

    .. math::
        v(Z) = \frac{1}{d}\sum_{j=1}^{d} \max\!\big(0, \gamma - \sqrt{\mathrm{Var}(z^j)
        + \epsilon}\big), \qquad
        c(Z) = \frac{1}{d}\sum_{i \ne j} [C(Z)]_{ij}^2, \qquad
        C(Z) = \frac{1}{n-1}\sum_{i=1}^{n} (z_i - \bar z)(z_i - \bar z)^\top

    .. math::
        s(Z, Z') = \frac{1}{n d}\sum_{i=1}^{n} \lVert z_i - z'_i \rVert_2^2

    Where the paper's equations and its authors' code (``main_vicreg.py``) differ, this follows
    the code, with which the paper's :math:`\lambda = \mu = 25, \nu = 1` were chosen: the
    invariance is a mean over the dimensions too (eq. 5 divided by d, ``F.mse_loss``), and the
    variance term is the mean of the two views' (eq. 6 sums them).

    Args:
        z1, z2: ``(N, d)`` the expander's embeddings of views 1 and 2 (the global batch), N >= 2.
        invariance_weight, variance_weight, covariance_weight: :math:`\lambda, \mu, \nu \ge 0`.
        target_std: :math:`\gamma > 0`, the standard deviation each dimension is held at.
        eps: :math:`\epsilon \ge 0` under the square root (above 0, a dimension of zero
            variance keeps a finite gradient; the paper's :math:`10^{-4}`).

    Returns:
        A scalar.

    >>> z = torch.tensor([[2.0, 0.0], [-2.0, 0.0]])  # one dimension spread out, one collapsed
    >>> round(vicreg_loss(z, z, eps=0.0).item(), 4)  # mu/2 (v + v): the collapsed dimension
    12.5
    """
    for name, weight in (("invariance_weight", invariance_weight),
                         ("variance_weight", variance_weight),
                         ("covariance_weight", covariance_weight)):
        check_non_negative(name, weight)
    check_positive("target_std", target_std)
    check_non_negative("eps", eps)
    _check_pair(z1, z2, "z1 and z2", least_rows=2)
    with _autocast_disabled(z1):
        dtype = _compute_dtype(z1)
        z1, z2 = z1.to(dtype), z2.to(dtype)
        invariance = F.mse_loss(z1, z2)  # (1 / (n d)) sum ||z_i - z'_i||^2
        variance = (_variance_term(z1, target_std, eps) + _variance_term(z2, target_std, eps)) / 2
        covariance = _covariance_term(z1) + _covariance_term(z2)
        return (invariance_weight * invariance + variance_weight * variance
                + covariance_weight * covariance)
