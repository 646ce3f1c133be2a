r"""Batched SE(2) registration of image pairs and the invariant similarity :math:`\kappa^{\max}`.

"Invariant Attention: Provable Clustering Under Transformations" (anonymous ICLR submission, no
arXiv id), eq. 2.2:

.. math::
    \kappa^{\max}(\mathbf{v}_i, \mathbf{v}_j) = \max_{\tau_i, \tau_j \in \mathbb{T}}
    \kappa(\mathbf{v}_i \circ \tau_i, \mathbf{v}_j \circ \tau_j),
    \qquad \kappa(a, b) = \exp(-\beta \lVert a - b\rVert_2^2).

SE(2) is a group and its warps preserve the norm (up to the image border and interpolation), so
the maximum over the pair :math:`(\tau_i, \tau_j)` is the maximum over one relative
transformation: :math:`\tau_i` is held at the identity and :math:`\mathbf{v}_j` is registered
onto :math:`\mathbf{v}_i`. Every pair and every starting angle is one row of one batch, so all
:math:`n(n-1)/2` pairs are solved at once (the paper parallelised the same computation with
CuPy).

The solver, per pair: a scan of starting angles around the circle, each with the best integer
translation from one FFT cross-correlation; from the best few (angles at least 10 degrees
apart), Levenberg-Marquardt (damped Gauss-Newton) steps on the smoothed objective
:math:`\lVert g_\sigma * (\mathbf{v}_i - \mathbf{v}_j\circ\tau)\rVert^2` (the smoothing of
section 2.4, which widens the basin of attraction), from smooth to no smoothing; the best start
wins. Smoothing alone does not find the global optimum between images of different shapes (a
smoothed pair of digits has its minimum in another basin than the sharp pair), hence the scan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from modules.theory.invariant_attention.warp import (
    gaussian_smooth,
    se2_warp_values,
    se2_warp_with_jacobian,
    tap_table,
    unit_normalise,
)


class Registration(NamedTuple):
    """The transformation found for each pair: ``se2_warp(moving, angle, shift)`` is closest to
    ``fixed``, at squared distance ``sq_distance`` (no smoothing, full resolution)."""

    angle: Tensor  # (B,) radians
    shift: Tensor  # (B, 2) pixels (dx, dy)
    sq_distance: Tensor  # (B,)


def energy_centroids(images: Tensor) -> Tensor:
    """The centroid of each image's squared intensity, in (column, row) pixel coordinates.

    Args:
        images: (n, C, H, W).

    Returns:
        (n, 2); the image centre for an all-zero image.

    >>> x = torch.zeros(1, 1, 5, 7); x[0, 0, 1, 5] = 2.0
    >>> energy_centroids(x)
    tensor([[5., 1.]])
    """
    n, _, height, width = images.shape
    mass = images.square().sum(1)  # (n, H, W)
    total = mass.sum((1, 2))
    cols = torch.arange(width, dtype=images.dtype, device=images.device)
    rows = torch.arange(height, dtype=images.dtype, device=images.device)
    centre = torch.tensor([(width - 1) / 2, (height - 1) / 2], dtype=images.dtype,
                          device=images.device)
    col = (mass.sum(1) * cols).sum(1) / total.clamp_min(1e-30)
    row = (mass.sum(2) * rows).sum(1) / total.clamp_min(1e-30)
    out = torch.stack([col, row], dim=1)
    return torch.where((total > 0)[:, None], out, centre.expand(n, 2))


def rotate_vectors(angle: Tensor, vectors: Tensor) -> Tensor:
    r"""Apply the warp's rotation :math:`A(\theta)` (:func:`se2_warp`'s matrix
    :math:`[[\cos, \sin], [-\sin, \cos]]`) to (..., 2) pixel offsets (dx, dy)."""
    cos, sin = torch.cos(angle), torch.sin(angle)
    dx, dy = vectors[..., 0], vectors[..., 1]
    return torch.stack([cos * dx + sin * dy, -sin * dx + cos * dy], dim=-1)


def compose_inverse(angle: Tensor, shift: Tensor) -> tuple[Tensor, Tensor]:
    r"""The inverse SE(2) warp: :math:`x \mapsto A(x - c) + c + b` is undone by angle
    :math:`-\theta` and shift :math:`-A^\top b` (up to interpolation and the border).

    >>> a, b = torch.tensor([0.4]), torch.tensor([[2.0, -1.0]])
    >>> ai, bi = compose_inverse(a, b)
    >>> p = torch.tensor([[3.0, 5.0]])  # an offset from the centre, moved forth and back
    >>> torch.allclose(rotate_vectors(ai, rotate_vectors(a, p) + b) + bi, p, atol=1e-6)
    True
    """
    return -angle, -rotate_vectors(-angle, shift)


def _levenberg_marquardt(fixed: Tensor, taps, moving_index: Tensor, angle: Tensor,
                         shift: Tensor, iterations: int) -> tuple[Tensor, Tensor, Tensor]:
    r"""Levenberg-Marquardt steps on :math:`\lVert \mathbf{m}\circ\tau - \mathbf{f}\rVert^2` for
    every row at once; a step is kept only where it lowers that row's cost.

    Args:
        fixed: (B, C, H, W) targets, one per row.
        taps: :func:`tap_table` of the moving images; ``moving_index`` (B,) picks one per row.
        angle, shift: (B,), (B, 2) starting transformations.

    Returns:
        ``(angle, shift, cost)`` after ``iterations`` steps.
    """
    batch = angle.shape[0]
    params = torch.cat([angle[:, None], shift], dim=1)  # (B, 3)

    def evaluate(p: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        warped, jac = se2_warp_with_jacobian(taps, p[:, 0], p[:, 1:], moving_index)
        residual = (warped - fixed).reshape(batch, -1)  # (B, C*H*W)
        return residual, jac.reshape(batch, -1, 3), residual.square().sum(1)

    residual, jac, cost = evaluate(params)
    damping = torch.full((batch,), 1e-3, dtype=params.dtype, device=params.device)
    eye = torch.eye(3, dtype=params.dtype, device=params.device)
    for _ in range(iterations):
        hessian = jac.transpose(1, 2) @ jac  # (B, 3, 3), Gauss-Newton
        gradient = (jac.transpose(1, 2) @ residual[..., None])[..., 0]  # (B, 3)
        diagonal = torch.diagonal(hessian, dim1=1, dim2=2)
        floor = 1e-9 * diagonal.mean(1, keepdim=True) + 1e-12
        system = hessian + damping[:, None, None] * torch.diag_embed(diagonal + floor) \
            + floor[..., None] * eye
        step = -torch.linalg.solve(system, gradient)
        trial = params + step
        trial_residual, trial_jac, trial_cost = evaluate(trial)
        better = torch.isfinite(trial_cost) & (trial_cost < cost)
        params = torch.where(better[:, None], trial, params)
        residual = torch.where(better[:, None], trial_residual, residual)
        jac = torch.where(better[:, None, None], trial_jac, jac)
        cost = torch.where(better, trial_cost, cost)
        damping = torch.where(better, damping * 0.3, damping * 5.0).clamp(1e-6, 1e6)
    return params[:, 0], params[:, 1:], cost


def _scan(fixed: Tensor, moving: Tensor, fixed_index: Tensor, moving_index: Tensor,
          scan: int, sigma: float) -> tuple[Tensor, Tensor, Tensor]:
    r"""Candidate starts: for each of ``scan`` angles, the moving image is turned and the
    integer translation maximising its cross-correlation with the fixed image (zero padded, so
    every offset up to the image size) is read off one FFT, on images smoothed by ``sigma``.

    Returns:
        ``(angle, shift, score)``, each with a leading (B, scan): the angles, the translations
        (pixels) and :math:`\lVert m_\theta\rVert^2 - 2\max_b\langle f, m_\theta(\cdot -
        b)\rangle`, i.e. the squared distance up to the constant :math:`\lVert f\rVert^2` when
        no content leaves the frame.
    """
    batch = fixed_index.shape[0]
    dtype, device = fixed.dtype, fixed.device
    smooth_fixed, smooth_moving = gaussian_smooth(fixed, sigma), gaussian_smooth(moving, sigma)
    height, width = fixed.shape[-2:]
    angle = (torch.arange(scan, dtype=dtype, device=device) * (2 * math.pi / scan)).repeat(batch)
    rows = torch.arange(batch, device=device).repeat_interleave(scan)  # row b * scan + k
    zero = torch.zeros(len(angle), 2, dtype=dtype, device=device)
    turned = se2_warp_values(tap_table(smooth_moving), angle, zero, moving_index[rows])
    size = (2 * height, 2 * width)
    spectrum_fixed = torch.fft.rfft2(smooth_fixed, s=size)[fixed_index][rows]
    spectrum_moving = torch.fft.rfft2(turned, s=size)
    # correlation[b] = sum_y f[y] m[y - b]: the turned image translated by b against the fixed.
    correlation = torch.fft.irfft2(spectrum_fixed * spectrum_moving.conj(), s=size).sum(1)
    best, where = correlation.flatten(1).max(1)  # (B * scan,)
    dy, dx = where // size[1], where % size[1]
    dy = torch.where(dy >= height, dy - size[0], dy)
    dx = torch.where(dx >= width, dx - size[1], dx)
    score = turned.square().flatten(1).sum(1) - 2 * best
    shift = torch.stack([dx, dy], dim=1).to(dtype)
    return angle.view(batch, scan), shift.view(batch, scan, 2), score.view(batch, scan)


def _distinct_best(cost: Tensor, angle: Tensor, count: int, apart: float = math.radians(10)
                   ) -> Tensor:
    """Per row, the indices of ``count`` candidates: the cheapest, then repeatedly the cheapest
    whose angle is more than ``apart`` from every one taken (the cheapest left if none is).

    >>> _distinct_best(torch.tensor([[1.0, 1.1, 2.0]]), torch.tensor([[0.0, 0.01, 3.0]]), 2)
    tensor([[0, 2]])
    """
    taken: list[Tensor] = []
    blocked = torch.zeros_like(cost, dtype=torch.bool)
    used = torch.zeros_like(blocked)
    big = cost.abs().max() * 4 + 1
    for _ in range(min(count, cost.shape[1])):
        choice = (cost + big * blocked + 2 * big * used).argmin(1)
        taken.append(choice)
        used.scatter_(1, choice[:, None], True)
        gap = torch.remainder(angle - angle.gather(1, choice[:, None]) + math.pi,
                              2 * math.pi) - math.pi
        blocked |= gap.abs() <= apart
    return torch.stack(taken, dim=1)


def register(fixed: Tensor, moving: Tensor, pairs: Tensor | None = None, *, starts: int = 3,
             scan: int = 24, scan_sigma: float = 1.0, sigmas: Sequence[float] = (1.0, 0.0),
             iterations: int = 8) -> Registration:
    r"""Find, for each pair, the SE(2) warp of the moving image closest to the fixed one,

    .. math::
        \tau^\star = \arg\min_{\tau \in SE(2)}\;\lVert \mathbf{f} - \mathbf{m}\circ\tau
        \rVert_2^2,

    by multi-start Levenberg-Marquardt on the Gaussian-smoothed objective, coarse to fine
    (section 2.4 of the Invariant Attention paper; see the module docstring).

    Args:
        fixed: (N, C, H, W).
        moving: (M, C, H, W).
        pairs: (B, 2) long, rows ``(fixed index, moving index)``; None pairs row i with row i
            (then N = M = B).
        starts: how many starting transformations each pair runs Levenberg-Marquardt from.
        scan: candidate starting angles, evenly spaced over 360 degrees; each one's best
            integer translation comes from one FFT cross-correlation (:func:`_scan`), and the
            ``starts`` best candidates more than 10 degrees apart are the starts. 0: ``starts``
            evenly spaced angles with the translation that matches the energy centroids.
        scan_sigma: smoothing (pixels) of the images the scan compares.
        sigmas: smoothing levels (pixels) of the objective, run in turn from every start; end
            with 0 so that the distance returned is the unsmoothed one.
        iterations: Levenberg-Marquardt steps per level.

    Returns:
        :class:`Registration` with (B,) angles, (B, 2) shifts and (B,) squared distances.

    >>> from modules.theory.invariant_attention.warp import se2_warp
    >>> base = torch.zeros(1, 1, 24, 24); base[0, 0, 6:18, 9:13] = 1.0; base[0, 0, 6:9, 9:18] = 1.0
    >>> moved = se2_warp(base, torch.tensor([1.0]), torch.tensor([[2.0, -1.0]]))
    >>> found = register(moved, base)
    >>> round(found.angle.item(), 2), [round(s, 1) for s in found.shift[0].tolist()]
    (1.0, [2.0, -1.0])
    """
    if pairs is None:
        if fixed.shape[0] != moving.shape[0]:
            raise ValueError("without pairs, fixed and moving must have as many images")
        pairs = torch.arange(fixed.shape[0], device=fixed.device)[:, None].expand(-1, 2)
    fixed_index, moving_index = pairs[:, 0], pairs[:, 1]
    batch = pairs.shape[0]
    dtype, device = fixed.dtype, fixed.device
    height, width = fixed.shape[-2:]
    if scan:
        angle, shift, score = _scan(fixed, moving, fixed_index, moving_index, scan, scan_sigma)
        keep = _distinct_best(score, angle, starts)  # (B, K)
        angle, shift = angle.gather(1, keep), shift.gather(1, keep[..., None].expand(-1, -1, 2))
        angle, shift = angle.reshape(-1), shift.reshape(-1, 2)
    else:
        centre = torch.tensor([(width - 1) / 2, (height - 1) / 2], dtype=dtype, device=device)
        angle = (torch.arange(starts, dtype=dtype, device=device)
                 * (2 * math.pi / starts)).repeat(batch)
        rows = torch.arange(batch, device=device).repeat_interleave(starts)
        shift = (energy_centroids(fixed)[fixed_index][rows] - centre
                 - rotate_vectors(angle, energy_centroids(moving)[moving_index][rows] - centre))
    per_pair = angle.shape[0] // batch
    rows = torch.arange(batch, device=device).repeat_interleave(per_pair)  # row b * K + k
    levels = list(sigmas) if sigmas and sigmas[-1] == 0 else [*sigmas, 0.0]
    for level, sigma in enumerate(levels):
        steps = iterations if level < len(sigmas) else 0  # an appended 0 only scores
        angle, shift, cost = _levenberg_marquardt(
            gaussian_smooth(fixed, sigma)[fixed_index][rows], tap_table(gaussian_smooth(moving,
                                                                                        sigma)),
            moving_index[rows], angle, shift, steps)
    best = cost.view(batch, per_pair).argmin(1) + torch.arange(batch, device=device) * per_pair
    angle, shift, cost = angle[best], shift[best], cost[best]
    angle = torch.remainder(angle + math.pi, 2 * math.pi) - math.pi
    return Registration(angle, shift, cost)


class InvariantSimilarity(NamedTuple):
    r""":math:`\kappa^{\max}` and the registrations behind it: ``se2_warp(v[j], angle[i, j],
    shift[i, j])`` is the transformation of image j closest to image i (unit-normalised)."""

    similarity: Tensor  # (n, n)
    angle: Tensor  # (n, n)
    shift: Tensor  # (n, n, 2)


def invariant_similarity(images: Tensor, bandwidth: float = 2.0, *,
                         return_registration: bool = False, **registration
                         ) -> Tensor | InvariantSimilarity:
    r"""The (n, n) invariant similarity matrix :math:`\kappa^{\max}` (eq. 2.2) with the RBF
    kernel, on images scaled to unit L2 norm:

    .. math::
        \kappa^{\max}_{ij} = \max_{\tau \in SE(2)}
        \exp\!\big(-\beta\,\lVert \hat{\mathbf{v}}_i - \hat{\mathbf{v}}_j\circ\tau\rVert_2^2\big),
        \qquad \hat{\mathbf{v}} = \mathbf{v} / \lVert\mathbf{v}\rVert_2.

    Each unordered pair is registered once (:func:`register`, image j onto image i for
    i < j), so the matrix is exactly symmetric; its diagonal is 1 (the identity is optimal).

    Args:
        images: (n, C, H, W).
        bandwidth: :math:`\beta > 0`.
        return_registration: also return the transformations (:class:`InvariantSimilarity`).
        **registration: keyword arguments of :func:`register` (starts, smoothing levels, ...).

    Returns:
        (n, n) tensor, or an :class:`InvariantSimilarity`.

    >>> from modules.theory.invariant_attention.warp import se2_warp
    >>> x = torch.zeros(2, 1, 16, 16); x[:, 0, 4:12, 6:9] = 1.0
    >>> x[1] = se2_warp(x[1:], torch.tensor([0.7]), torch.tensor([[1.0, 2.0]]))[0]
    >>> k = invariant_similarity(x)
    >>> bool(k[0, 1] > 0.95), bool(k[0, 1] == k[1, 0]), k.diagonal().tolist()
    (True, True, [1.0, 1.0])
    """
    if not bandwidth > 0:
        raise ValueError(f"bandwidth must be > 0, got {bandwidth}")
    n = images.shape[0]
    x = unit_normalise(images)
    i, j = torch.triu_indices(n, n, offset=1, device=images.device)
    found = register(x, x, torch.stack([i, j], dim=1), **registration)
    similarity = torch.ones(n, n, dtype=x.dtype, device=x.device)
    kernel = torch.exp(-bandwidth * found.sq_distance)
    similarity[i, j] = kernel
    similarity[j, i] = kernel
    if not return_registration:
        return similarity
    angle = torch.zeros(n, n, dtype=x.dtype, device=x.device)
    shift = torch.zeros(n, n, 2, dtype=x.dtype, device=x.device)
    angle[i, j], shift[i, j] = found.angle, found.shift
    angle[j, i], shift[j, i] = compose_inverse(found.angle, found.shift)
    return InvariantSimilarity(similarity, angle, shift)

