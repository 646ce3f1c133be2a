r"""Kernel attention (mean shift), the invariant mean (Algorithm 1) and invariant attention.

"Invariant Attention: Provable Clustering Under Transformations" (anonymous ICLR submission, no
arXiv id).

Kernel attention (eq. 2.1) replaces every point by a kernel-weighted average,
:math:`\mathbf{v}_j^+ = \sum_i \mathbf{v}_i W_{ij}` with :math:`W_{ij} = \Gamma_{ij} / \sum_l
\Gamma_{lj}`. Invariant attention computes :math:`\Gamma = \kappa^{\max}` (eq. 2.2,
:func:`~modules.theory.invariant_attention.registration.invariant_similarity`)
and replaces every image
by its invariant mean (eq. 2.3),

.. math::
    \boldsymbol\mu_j^\star = \arg\min_{\boldsymbol\mu} \min_{\tau_1, \dots, \tau_n}
    \sum_i W_{ij} \lVert \mathbf{v}_i \circ \tau_i - \boldsymbol\mu \rVert_2^2,

computed by Algorithm 1: gradient steps on the transformations of the Gaussian-smoothed
objective (eq. 2.6-2.7), each followed by the closed-form mean (eq. 2.5), with the smoothing
level of every step chosen greedily (section 5, "Greedy search for the smoothing parameter").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from modules.theory.invariant_attention.registration import invariant_similarity
from modules.theory.invariant_attention.warp import (
    gaussian_smooth,
    se2_warp_values,
    se2_warp_with_jacobian,
    tap_table,
)


class AttentionResult(NamedTuple):
    """What :func:`kernel_attention` and :func:`invariant_attention` return."""

    points: Tensor  # the final points or images, shaped as the input
    weights: Tensor  # (iterations, n, n): W of every iteration, columns summing to 1
    history: list[Tensor]  # the points before the first and after every iteration


def column_normalise(similarity: Tensor) -> Tensor:
    r""":math:`W_{ij} = \Gamma_{ij} / \sum_l \Gamma_{lj}` (eq. 2.1): every column sums to 1.

    >>> column_normalise(torch.tensor([[1.0, 1.0], [3.0, 1.0]]))
    tensor([[0.2500, 0.5000],
            [0.7500, 0.5000]])
    """
    return similarity / similarity.sum(0, keepdim=True)


def rbf_similarity(x: Tensor, bandwidth: float = 2.0, normalize: bool = False) -> Tensor:
    r"""The RBF kernel matrix :math:`\Gamma_{ij} = \exp(-\beta \lVert x_i - x_j\rVert_2^2)`
    between the n points (each point's entries flattened).

    Args:
        x: (n, ...) points (vectors or images).
        bandwidth: :math:`\beta > 0`.
        normalize: compute it on copies scaled to unit L2 norm (as invariant attention does).

    Returns:
        (n, n), symmetric, 1 on the diagonal.

    >>> rbf_similarity(torch.tensor([[0.0], [1.0]]), bandwidth=1.0)
    tensor([[1.0000, 0.3679],
            [0.3679, 1.0000]])
    """
    if not bandwidth > 0:
        raise ValueError(f"bandwidth must be > 0, got {bandwidth}")
    flat = x.reshape(x.shape[0], -1)
    if normalize:
        flat = flat / flat.norm(dim=1, keepdim=True).clamp_min(1e-12)
    sq_norms = flat.square().sum(1)
    sq_dist = (sq_norms[:, None] + sq_norms[None, :] - 2 * flat @ flat.T).clamp_min(0)
    sq_dist.fill_diagonal_(0)
    return torch.exp(-bandwidth * sq_dist)


def kernel_attention(x: Tensor, iterations: int, bandwidth: float = 2.0,
                     normalize: bool = False) -> AttentionResult:
    r"""Kernel attention, i.e. blurring mean shift (eq. 2.1), ``iterations`` times:

    .. math::
        \mathbf{v}_j^+ = \sum_i \mathbf{v}_i W_{ij}, \qquad
        W_{ij} = \frac{\exp(-\beta\lVert\mathbf{v}_i - \mathbf{v}_j\rVert^2)}
        {\sum_l \exp(-\beta\lVert\mathbf{v}_l - \mathbf{v}_j\rVert^2)}.

    Args:
        x: (n, d) vectors or (n, C, H, W) images.
        iterations: how many times to average.
        bandwidth: :math:`\beta > 0`.
        normalize: the kernel on unit-norm copies of the points (the averages are of the points
            themselves), the normalisation :func:`invariant_attention` uses.

    Returns:
        :class:`AttentionResult`: final points shaped as ``x``, the (iterations, n, n) weights
        and the points before and after every iteration.

    >>> x = torch.tensor([[0.0], [0.1], [5.0], [5.1]])
    >>> out = kernel_attention(x, iterations=3, bandwidth=1.0)
    >>> [round(v, 4) for v in out.points.squeeze(1).tolist()]  # each cluster onto its mean
    [0.05, 0.05, 5.05, 5.05]
    """
    history = [x]
    weights = []
    for _ in range(iterations):
        w = column_normalise(rbf_similarity(x, bandwidth, normalize))  # (n, n)
        x = torch.einsum("ij,i...->j...", w, x)
        weights.append(w)
        history.append(x)
    empty = torch.zeros(0, x.shape[0], x.shape[0], dtype=x.dtype, device=x.device)
    return AttentionResult(x, torch.stack(weights) if weights else empty, history)


#: The smoothing levels (pixels) of the greedy search: ours, the paper does not list them.
DEFAULT_SIGMAS = (0.0, 1.0, 2.0, 4.0)


class InvariantMean(NamedTuple):
    """What :func:`invariant_means` (m weight columns) and :func:`invariant_mean` (one column,
    the leading m axis dropped) return. ``se2_warp(images[i], angle[j, i], shift[j, i])`` is
    image i aligned to mean j."""

    mean: Tensor  # (m, C, H, W)
    angle: Tensor  # (m, n) radians
    shift: Tensor  # (m, n, 2) pixels
    objective: Tensor  # (iterations + 1, m): eq. 2.3's objective (no smoothing) per iteration
    sigma: Tensor  # (iterations, m): the smoothing level chosen at each step (nan: no step)
    snapshots: dict[int, Tensor]  # iteration -> (m, C, H, W) means, for the requested ones


def gyration_radius(images: Tensor) -> float:
    """The root-mean-square distance of the images' energy from the image centre, in pixels:
    the lever arm that converts a rotation into pixel displacements, used to scale the angle's
    gradient steps against the shift's.

    >>> x = torch.zeros(1, 1, 9, 9); x[0, 0, 4, 7] = 1.0; x[0, 0, 4, 1] = 1.0
    >>> gyration_radius(x)
    3.0
    """
    height, width = images.shape[-2:]
    mass = images.square().sum(1)  # (n, H, W)
    rows = torch.arange(height, dtype=images.dtype, device=images.device) - (height - 1) / 2
    cols = torch.arange(width, dtype=images.dtype, device=images.device) - (width - 1) / 2
    sq_radius = rows[:, None] ** 2 + cols[None, :] ** 2
    total = mass.sum()
    if total <= 0:
        return 1.0
    return max(1.0, math.sqrt(float((mass * sq_radius).sum() / total)))


def invariant_means(images: Tensor, weights: Tensor, iterations: int = 30,
                    step_size: float = 1.0, sigmas: Sequence[float] = DEFAULT_SIGMAS,
                    init_angle: Tensor | None = None, init_shift: Tensor | None = None, *,
                    preconditioner: str = "gauss-newton", tolerance: float = 0.0,
                    snapshots: Sequence[int] = ()) -> InvariantMean:
    r"""Algorithm 1 for every column of ``weights`` at once: the invariant means (eq. 2.3).

    For column j, starting from the given transformations (identity by default, as in
    Algorithm 1) and the weighted mean (eq. 2.5), each iteration

    1. for every smoothing level :math:`\sigma` in ``sigmas``, takes one step on the
       transformations along the gradient of the smoothed objective (eq. 2.7, the mean held
       fixed), :math:`\nabla_{\tau_i} \lVert g_\sigma * (\mathbf{v}_i\circ\tau_i -
       \boldsymbol\mu)\rVert^2` (line 5), and recomputes the mean
       :math:`\boldsymbol\mu = \sum_i W_{ij} \mathbf{v}_i\circ\tau_i` (line 6);
    2. keeps the level whose step lowers the unsmoothed objective
       :math:`f = \sum_i W_{ij}\lVert\mathbf{v}_i\circ\tau_i - \boldsymbol\mu\rVert^2` the
       most (the greedy choice of section 5); if none lowers it, no step is taken and the
       column's step size is halved, and it doubles back (up to ``step_size``) after each
       step taken (a safeguard the paper does not describe).

    For a fixed mean the objective is a sum of independent terms in the :math:`\tau_i`, and
    each step uses its term's own gradient :math:`g_i` (the paper's weighted gradient divided by
    :math:`W_{ij}`: the same fixed points, but images with small weights are not frozen). The
    step is :math:`-t\,P_i g_i` with the preconditioner

    - ``"gauss-newton"`` (default): :math:`P_i = (J_i^\top J_i + \epsilon)^{-1}`, :math:`J_i` the
      Jacobian of :math:`g_\sigma * (\mathbf{v}_i\circ\tau_i)` in :math:`(\theta, b)`; this
      makes a step independent of the image's contrast and of :math:`\sigma`, which is what
      lets the greedy search pick large :math:`\sigma` early (with plain steps the smoothed
      gradients are small and :math:`\sigma = 0` always wins);
    - ``"none"``: the plain gradient, the angle's component divided by :math:`R^2`, :math:`R`
      the images' :func:`gyration_radius`, so that rotation and translation move pixels alike.

    Args:
        images: (n, C, H, W).
        weights: (n, m) non-negative; every column is normalised to sum to 1.
        iterations: N, the most steps.
        step_size: t, the initial step size of every column.
        sigmas: the smoothing levels (pixels) of the greedy search; 0 is no smoothing.
        init_angle: (m, n) starting angles (default 0: Algorithm 1's identity fields).
        init_shift: (m, n, 2) starting shifts (default 0).
        preconditioner: ``"gauss-newton"`` or ``"none"``.
        tolerance: stop early once no column's objective fell by more than this fraction in the
            last step (0: always run ``iterations`` steps).
        snapshots: iterations at which to keep a copy of the means (0 = the start).

    Returns:
        :class:`InvariantMean`.

    >>> from modules.theory.invariant_attention.warp import se2_warp
    >>> x = torch.zeros(1, 1, 16, 16); x[0, 0, 4:12, 7:10] = 1.0
    >>> copies = se2_warp(x.expand(3, -1, -1, -1), torch.tensor([0.0, 0.3, -0.2]),
    ...                   torch.tensor([[0.0, 0.0], [1.5, 0.0], [0.0, -1.0]]))
    >>> out = invariant_means(copies, torch.ones(3, 1), iterations=10)
    >>> bool(out.objective[-1, 0] < 0.05 * out.objective[0, 0])  # the copies get aligned
    True
    """
    if preconditioner not in ("gauss-newton", "none"):
        raise ValueError(f"preconditioner must be 'gauss-newton' or 'none', got {preconditioner!r}")
    n, channels, height, width = images.shape
    m = weights.shape[1]
    dtype, device = images.dtype, images.device
    w = weights.to(dtype) / weights.to(dtype).sum(0, keepdim=True)  # (n, m)
    w_jn = w.T.contiguous()  # (m, n)
    angle = (torch.zeros(m, n, dtype=dtype, device=device) if init_angle is None
             else init_angle.to(dtype).clone())
    shift = (torch.zeros(m, n, 2, dtype=dtype, device=device) if init_shift is None
             else init_shift.to(dtype).clone())
    image_index = torch.arange(n, device=device).repeat(m)  # row j * n + i warps image i
    radius = gyration_radius(images)
    scale = torch.tensor([1.0 / radius**2, 1.0, 1.0], dtype=dtype, device=device)
    levels, pixels = len(sigmas), channels * height * width
    # The smoothed images, one level per channel block, warped together in one pass.
    stacked_taps = tap_table(torch.cat([gaussian_smooth(images, s) for s in sigmas], dim=1))
    plain_taps = tap_table(images)

    def mean_and_objective(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        warped = se2_warp_values(plain_taps, a.reshape(-1), b.reshape(-1, 2), image_index)
        warped = warped.view(m, n, channels, height, width)
        mean = torch.einsum("jn,jnchw->jchw", w_jn, warped)  # eq. 2.5
        residual = (warped - mean[:, None]).square().sum((2, 3, 4))  # (m, n)
        return mean, (w_jn * residual).sum(1)

    mean, objective = mean_and_objective(angle, shift)
    step = torch.full((m,), float(step_size), dtype=dtype, device=device)
    history, chosen = [objective], []
    kept = {0: mean.clone()} if 0 in snapshots else {}
    for k in range(1, iterations + 1):
        warped, jac = se2_warp_with_jacobian(stacked_taps, angle.reshape(-1),
                                             shift.reshape(-1, 2), image_index)
        smoothed_mean = torch.cat([gaussian_smooth(mean, s) for s in sigmas], dim=1)
        residual = warped.view(m, n, levels * channels, height, width) - smoothed_mean[:, None]
        residual = residual.view(m, n, levels, 1, pixels)
        jac = jac.view(m, n, levels, pixels, 3)
        gradient = 2 * (residual @ jac)[..., 0, :]  # (m, n, L, 3)
        if preconditioner == "gauss-newton":
            curvature = 2 * jac.transpose(-1, -2) @ jac  # (m, n, L, 3, 3)
            diagonal = torch.diagonal(curvature, dim1=-2, dim2=-1)
            floor = 1e-3 * diagonal.mean(-1, keepdim=True) + 1e-12
            direction = torch.linalg.solve(curvature + torch.diag_embed(1e-3 * diagonal + floor),
                                           gradient)
        else:
            direction = gradient * scale
        best = (objective, angle, shift, mean, torch.full_like(objective, float("nan")))
        for level, sigma in enumerate(sigmas):
            delta = -step[:, None, None] * direction[:, :, level]  # (m, n, 3)
            trial_angle, trial_shift = angle + delta[..., 0], shift + delta[..., 1:]
            trial_mean, trial_objective = mean_and_objective(trial_angle, trial_shift)
            better = trial_objective < best[0]
            best = (torch.where(better, trial_objective, best[0]),
                    torch.where(better[:, None], trial_angle, best[1]),
                    torch.where(better[:, None, None], trial_shift, best[2]),
                    torch.where(better[:, None, None, None], trial_mean, best[3]),
                    torch.where(better, torch.full_like(objective, sigma), best[4]))
        previous = objective
        objective, angle, shift, mean, sigma_chosen = best
        step = torch.where(objective < previous, (2 * step).clamp_max(step_size), step / 2)
        history.append(objective)
        chosen.append(sigma_chosen)
        if k in snapshots:
            kept[k] = mean.clone()
        if tolerance > 0 and bool(((previous - objective) <= tolerance * previous).all()):
            break
    return InvariantMean(mean, angle, shift, torch.stack(history), torch.stack(chosen)
                         if chosen else torch.zeros(0, m, dtype=dtype, device=device), kept)


def invariant_mean(images: Tensor, weights: Tensor, iterations: int = 30, step_size: float = 1.0,
                   sigmas: Sequence[float] = DEFAULT_SIGMAS,
                   init_angle: Tensor | None = None, init_shift: Tensor | None = None,
                   **options) -> InvariantMean:
    r"""Algorithm 1, the invariant mean :math:`\boldsymbol\mu_j^\star` (eq. 2.3) of one column
    of weights: :func:`invariant_means` with m = 1, the leading axis dropped.

    Args:
        images: (n, C, H, W).
        weights: (n,) non-negative (normalised to sum to 1).
        iterations, step_size, sigmas: Algorithm 1's N, t and the greedy smoothing levels.
        init_angle, init_shift: (n,), (n, 2) starting transformations (default identity).
        **options: ``preconditioner``, ``tolerance``, ``snapshots`` of :func:`invariant_means`.

    Returns:
        :class:`InvariantMean` with ``mean`` (C, H, W), ``angle`` (n,), ``shift`` (n, 2),
        ``objective`` (steps + 1,), ``sigma`` (steps,) and snapshots of shape (C, H, W).

    >>> from modules.theory.invariant_attention.warp import se2_warp
    >>> from modules.theory.invariant_attention.warp import gaussian_smooth
    >>> x = torch.zeros(1, 1, 16, 16); x[0, 0, 4:12, 7:10] = 1.0
    >>> x = gaussian_smooth(x, 1.0)  # a soft bar
    >>> copies = se2_warp(x.expand(2, -1, -1, -1), torch.tensor([0.0, 0.2]), torch.zeros(2, 2))
    >>> out = invariant_mean(copies, torch.tensor([0.5, 0.5]), iterations=10)
    >>> out.mean.shape, round(abs(out.angle[1] - out.angle[0]).item(), 1)  # the 0.2 undone
    (torch.Size([1, 16, 16]), 0.2)
    """
    out = invariant_means(images, weights[:, None], iterations, step_size, sigmas,
                          None if init_angle is None else init_angle[None],
                          None if init_shift is None else init_shift[None], **options)
    return InvariantMean(out.mean[0], out.angle[0], out.shift[0], out.objective[:, 0],
                         out.sigma[:, 0], {k: v[0] for k, v in out.snapshots.items()})


def invariant_attention(images: Tensor, iterations: int, bandwidth: float = 2.0, *,
                        init: str = "identity", mean_iterations: int = 30,
                        step_size: float = 1.0, sigmas: Sequence[float] = DEFAULT_SIGMAS,
                        mean_options: dict | None = None, registration: dict | None = None
                        ) -> AttentionResult:
    r"""Invariant attention, ``iterations`` times: :math:`W` = column-normalised
    :math:`\kappa^{\max}` (eq. 2.2 with the RBF kernel on unit-norm images), then every image
    :math:`\mathbf{v}_j` replaced by its invariant mean :math:`\boldsymbol\mu_j^\star` (eq. 2.3,
    Algorithm 1, :func:`invariant_means`).

    Args:
        images: (n, C, H, W).
        iterations: rounds of invariant attention.
        bandwidth: :math:`\beta` of the RBF kernel.
        init: ``"identity"`` starts Algorithm 1 from identity transformations (the paper);
            ``"registration"`` starts the mean of column j with every image registered onto
            image j by the :math:`\kappa^{\max}` computation (so the mean is in image j's pose).
        mean_iterations, step_size, sigmas: Algorithm 1's N, t and smoothing levels.
        mean_options: more keyword arguments of :func:`invariant_means` (``preconditioner``,
            ``tolerance``).
        registration: keyword arguments of
            :func:`~modules.theory.invariant_attention.registration.register`.

    Returns:
        :class:`AttentionResult` with the final (n, C, H, W) images, the (iterations, n, n)
        weights and the images before and after every round.

    >>> from modules.theory.invariant_attention.warp import se2_warp
    >>> bar = torch.zeros(1, 1, 16, 16); bar[0, 0, 3:13, 7:9] = 1.0
    >>> ring = torch.zeros(1, 1, 16, 16); ring[0, 0, 4:12, 4:12] = 1.0; ring[0, 0, 6:10, 6:10] = 0
    >>> x = torch.cat([bar, se2_warp(bar, torch.tensor([0.9]), torch.zeros(1, 2)), ring, ring])
    >>> out = invariant_attention(x, iterations=1, mean_iterations=3)
    >>> w = out.weights[0]
    >>> bool(w[1, 0] > 2 * w[2, 0]), out.points.shape  # the two bars weigh each other most
    (True, torch.Size([4, 1, 16, 16]))
    """
    if init not in ("identity", "registration"):
        raise ValueError(f"init must be 'identity' or 'registration', got {init!r}")
    history = [images]
    weights = []
    x = images
    for _ in range(iterations):
        found = invariant_similarity(x, bandwidth, return_registration=True,
                                     **(registration or {}))
        w = column_normalise(found.similarity)  # (n, n)
        # found.angle[j, i] warps image i onto image j: the start of mean j's transformations.
        start = (found.angle, found.shift) if init == "registration" else (None, None)
        x = invariant_means(x, w, mean_iterations, step_size, sigmas, *start,
                            **(mean_options or {})).mean
        weights.append(w)
        history.append(x)
    empty = torch.zeros(0, images.shape[0], images.shape[0], dtype=images.dtype,
                        device=images.device)
    return AttentionResult(x, torch.stack(weights) if weights else empty, history)


__all__ = ["DEFAULT_SIGMAS", "AttentionResult", "InvariantMean", "column_normalise",
           "gyration_radius", "invariant_attention", "invariant_mean", "invariant_means",
           "kernel_attention", "rbf_similarity"]
