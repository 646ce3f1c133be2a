r"""The generalised NT-Xent cost of Calder & Lee (arXiv:2503.10812), its population value for a
discrete embedded measure, the augmentations it averages over, and Wang & Isola's uniformity.

The paper's eq. 4 with :math:`\Psi(t) = \log(1 + t)`, :math:`\eta(t) = e^{-t/\tau}` and the
constraint set :math:`\mathcal{C} = \{f : \mathbb{R}^D \to \mathbb{S}^{d-1}\}` is NT-Xent up to
the indicator :math:`\mathbb{1}_{x \ne y}` (dropped in eq. 4) and a constant factor inside the
log. Raw embeddings are projected onto the sphere here, inside the cost, so that an unconstrained
map :math:`f` (the network of eq. 18, or free particles) is scored as :math:`f / \lVert f\rVert`.

The cost of one finite sample, ``nt_xent_cost``, is a loss and lives with the losses, as
:func:`modules.losses.generalised_nt_xent_loss`; it is imported here under the paper's name.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from modules.losses import generalised_nt_xent_loss as nt_xent_cost
from modules.ranges import check_positive


def _squared_distances(u: Tensor, v: Tensor) -> Tensor:
    """``(n, m)`` matrix of :math:`\\lVert u_i - v_j\\rVert^2`, by explicit differences (exact at
    coinciding points, unlike the Gram-matrix expansion)."""
    return (u[:, None, :] - v[None, :, :]).pow(2).sum(dim=-1)


def nt_xent_cost_over_views(z: Tensor, temperature: float = 0.5) -> Tensor:
    r"""Eq. 4 with the expectation over :math:`T, T' \sim \nu` taken exactly for a uniform
    :math:`\nu` on S augmentations: the mean of :func:`nt_xent_cost` over all S² ordered pairs
    of views (:math:`T = T'` included, as two independent draws can coincide).

    .. math::
        L = \frac{1}{S^2} \sum_{s, s'=1}^{S} L\big(z_{\cdot, s}, z_{\cdot, s'}\big)

    Args:
        z: (n, S, d); ``z[i, s]`` is :math:`f(T_s(x_i))`.
        temperature: :math:`\tau > 0`.

    >>> z = torch.randn(5, 1, 3, dtype=torch.float64)  # one view: T = T'
    >>> bool(torch.isclose(nt_xent_cost_over_views(z), nt_xent_cost(z[:, 0], z[:, 0])))
    True
    """
    if z.dim() != 3:
        raise ValueError(f"z must be (n, S, d), got {tuple(z.shape)}")
    views = z.shape[1]
    total = sum(nt_xent_cost(z[:, s], z[:, t], temperature)
                for s in range(views) for t in range(views))
    return total / views**2


def augmented_nt_xent_cost(embed: Callable[[Tensor], Tensor], x: Tensor,
                           augment: Callable[[Tensor, torch.Generator | None], Tensor],
                           temperature: float = 0.5, pairs: int = 1,
                           generator: torch.Generator | None = None) -> Tensor:
    r"""Eq. 4 for a finite sample with :math:`T, T'` drawn from :math:`\nu` by ``augment``: the
    Monte-Carlo mean of :func:`nt_xent_cost` over ``pairs`` independent draws of the two views.

    .. math::
        \hat L = \frac{1}{P} \sum_{p=1}^{P} L\big(f(T_p(x)), f(T'_p(x))\big),
        \qquad T_p, T'_p \sim \nu

    Args:
        embed: the map :math:`f`, (n, D) -> (n, d).
        x: (n, D) clean samples.
        augment: draws one :math:`T \sim \nu` per row, ``augment(x, generator) -> (n, D)``.
        temperature: :math:`\tau > 0`.
        pairs: number P of independent (T, T') draws averaged.
        generator: the random source passed to ``augment``.

    >>> x = torch.randn(6, 4, dtype=torch.float64)
    >>> aug = orthogonal_noise_augmentation(clean_dim=2, std=0.0)  # T = identity
    >>> cost = augmented_nt_xent_cost(lambda v: v[:, :2], x, aug)
    >>> bool(torch.isclose(cost, nt_xent_cost(x[:, :2], x[:, :2])))
    True
    """
    if pairs < 1:
        raise ValueError(f"pairs must be >= 1, got {pairs}")
    total = sum(nt_xent_cost(embed(augment(x, generator)), embed(augment(x, generator)),
                             temperature) for _ in range(pairs))
    return total / pairs


def orthogonal_noise_augmentation(clean_dim: int, std: float
                                  ) -> Callable[[Tensor, torch.Generator | None], Tensor]:
    r"""The perturbation model of section 4.2: :math:`\tilde\mu = \mu + \alpha` with
    :math:`\alpha` supported on :math:`\mathcal{M}^\perp`, i.e. Gaussian noise of standard
    deviation ``std`` added to the coordinates after the first ``clean_dim`` (the clean data live
    in the first ``clean_dim`` coordinates and are left untouched).

    .. math::
        T(x) = x + (0, \dots, 0, \epsilon^{d+1}, \dots, \epsilon^{D}),
        \qquad \epsilon^k \sim \mathcal{N}(0, s^2)

    Returns:
        ``augment(x, generator) -> (n, D)``, one independent draw per row.

    >>> x = torch.zeros(3, 4)
    >>> view = orthogonal_noise_augmentation(clean_dim=2, std=1.0)(x, torch.Generator())
    >>> bool((view[:, :2] == 0).all()), bool((view[:, 2:] != 0).all())
    (True, True)
    """
    if std < 0:
        raise ValueError(f"std must be >= 0, got {std}")

    def augment(x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        noise = torch.randn(x.shape, generator=generator, dtype=x.dtype) * std  # (n, D)
        noise[:, :clean_dim] = 0
        return x + noise.to(x.device)

    return augment


def population_nt_xent(atoms: Tensor, weights: Tensor | None = None,
                       temperature: float = 0.5) -> Tensor:
    r"""Population value of eq. 4 for an invariant map whose embedded measure is discrete,
    :math:`f_\# \mu = \sum_k w_k \delta_{a_k}` (Proposition 2.1: the cost then depends on
    :math:`f_\#\mu` only, and :math:`\eta_f(T(x), T'(x)) = \eta(0) = 1`):

    .. math::
        L = \sum_{k=1}^{K} w_k \log\Big(1 + \sum_{l=1}^{K} w_l\,
            e^{-\lVert a_k - a_l\rVert^2 / (2\tau)}\Big)

    arXiv:2503.10812, eq. 4 and Remark 3.1 / Figure 3 (atoms evenly spaced on
    :math:`\mathbb{S}^1`).

    Args:
        atoms: (K, d) atom positions, projected onto the sphere here.
        weights: (K,) non-negative masses summing to 1; uniform when None.
        temperature: :math:`\tau > 0`.

    >>> one = population_nt_xent(torch.tensor([[1.0, 0.0]], dtype=torch.float64))
    >>> round(one.item(), 6) == round(math.log(2), 6)  # all mass on one point: log(1 + 1)
    True
    """
    check_positive("temperature", temperature)
    a = F.normalize(atoms, dim=-1)  # (K, d)
    if weights is None:
        weights = torch.full((a.shape[0],), 1.0 / a.shape[0], dtype=a.dtype, device=a.device)
    if weights.shape != (a.shape[0],):
        raise ValueError(f"weights must be ({a.shape[0]},), got {tuple(weights.shape)}")
    kernel = torch.exp(-_squared_distances(a, a) / (2 * temperature))  # (K, K)
    return (weights * torch.log1p(kernel @ weights)).sum()


def evenly_spaced_circle(count: int, dtype: torch.dtype = torch.float64) -> Tensor:
    r"""``count`` atoms :math:`a_k = (\cos(2\pi k / K), \sin(2\pi k / K))` on :math:`\mathbb{S}^1`
    (the embedded measures of arXiv:2503.10812, Figure 3); minimum squared distance
    :math:`4 \sin^2(\pi / K)`.

    >>> evenly_spaced_circle(4).round().tolist()
    [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [-0.0, -1.0]]
    """
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    angle = 2 * math.pi * torch.arange(count, dtype=dtype) / count  # (K,)
    return torch.stack([angle.cos(), angle.sin()], dim=1)  # (K, 2)


def uniformity(z: Tensor, t: float = 2.0) -> Tensor:
    r"""Wang & Isola's uniformity (arXiv:2005.10242, eq. 5 on a finite sample): the log of the
    mean Gaussian potential over distinct pairs of the normalised embeddings,

    .. math::
        \mathcal{L}_{\mathrm{uniform}} = \log \frac{2}{n(n-1)} \sum_{i<j}
            e^{-t \lVert z_i - z_j\rVert^2}

    Lower is more uniform: 0 for a collapsed embedding, :math:`\log(e^{-2t} I_0(2t))` for the
    uniform measure on :math:`\mathbb{S}^1`.

    Args:
        z: (n, d) embeddings, n >= 2 (normalised here).
        t: the potential's scale, 2 as in Wang & Isola.

    >>> round(uniformity(torch.tensor([[1.0, 0.0], [1.0, 0.0]])).item(), 6)  # collapsed
    0.0
    """
    if z.dim() != 2 or z.shape[0] < 2:
        raise ValueError(f"z must be (n, d) with n >= 2, got {tuple(z.shape)}")
    u = F.normalize(z, dim=-1)  # (n, d)
    sq = torch.pdist(u).pow(2)  # (n (n - 1) / 2,)
    return torch.logsumexp(-t * sq, dim=0) - math.log(sq.numel())


def uniform_sphere_uniformity(dim: int, t: float = 2.0) -> float:
    r""":func:`uniformity` of the uniform measure on :math:`\mathbb{S}^{d-1}` (its population
    value, the lowest the metric reaches as the sample grows), for d = 2 and 3:

    .. math::
        d = 2: \log\big(e^{-2t} I_0(2t)\big), \qquad
        d = 3: \log \frac{1 - e^{-4t}}{4t}

    >>> round(uniform_sphere_uniformity(3), 4)  # log((1 - e^-8) / 8)
    -2.0798
    """
    if dim == 2:
        from scipy.special import ive  # ive(0, x) = exp(-x) I_0(x)

        return math.log(float(ive(0, 2 * t)))
    if dim == 3:
        return math.log(-math.expm1(-4 * t) / (4 * t))
    raise ValueError(f"only dim 2 and 3 are implemented, got {dim}")
