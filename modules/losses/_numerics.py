"""Numerical helpers shared by the losses: compute precision, autocast, and distances that stay
accurate and differentiable where embeddings nearly coincide."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F
from torch import Tensor


def _compute_dtype(t: Tensor) -> torch.dtype:
    """float64 stays float64; everything else (bf16, fp16, float32) is computed in float32."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _autocast_disabled(t: Tensor) -> AbstractContextManager:
    """A context that turns autocast off on ``t``'s device (none on a device without autocast,
    such as ``meta``, where a step is traced to estimate its memory).

    Upcasting the inputs is not enough: under autocast a float32 matmul is still run in bf16 or
    fp16, which is too coarse for logits divided by a small temperature.
    """
    if not torch.amp.is_autocast_available(t.device.type):
        return nullcontext()
    return torch.autocast(device_type=t.device.type, enabled=False)


def _distance_power(sq_dist: Tensor, gamma: float, resolution: float = 0.0) -> Tensor:
    r"""``sq_dist ** (gamma / 2)``, i.e. :math:`\lVert a - b\rVert^\gamma`, with finite gradients.

    For :math:`\gamma < 2` the slope of :math:`s^{\gamma/2}` is infinite at :math:`s = 0`
    (two coinciding embeddings). Squared distances at or below ``resolution`` are taken to be 0,
    with gradient 0 (the subgradient at the cusp, as ``torch.linalg.vector_norm`` does at 0);
    above it the value and gradient are the exact ones. ``resolution`` is 0 for distances
    computed from differences (exact at coinciding points) and the dtype's machine epsilon for
    distances from the Gram matrix, :math:`\lVert a\rVert^2 + \lVert b\rVert^2 - 2a^\top b`, which
    cannot tell a squared distance below it from 0 for unit vectors.
    """
    half = gamma / 2
    if half >= 1:  # s ** half is differentiable at 0
        return sq_dist.pow(half)
    resolved = sq_dist > resolution
    safe = torch.where(resolved, sq_dist, torch.ones_like(sq_dist))  # no infinite slope
    return torch.where(resolved, safe.pow(half), torch.zeros_like(sq_dist))


def _unit_difference(a: Tensor, b: Tensor) -> Tensor:
    r"""Row-wise :math:`a / \lVert a\rVert - b / \lVert b\rVert` for (N, d) rows, accurate to a few
    units of the dtype's rounding *relative to the difference itself*, however close the rows.

    Normalising first and subtracting after loses the difference of nearly parallel rows to
    the rounding of each unit vector (about :math:`10^{-7}` in float32: a relative error of
    :math:`10^{-3}` at a distance of :math:`10^{-4}`). Here only exact differences of the
    inputs enter:

    .. math::
        \frac{a}{\lVert a\rVert} - \frac{b}{\lVert b\rVert}
        = \frac{a - b}{\lVert a\rVert}
        + b\,\frac{(b - a)^\top (b + a)}{\lVert a\rVert \lVert b\rVert
          (\lVert a\rVert + \lVert b\rVert)}

    using :math:`\lVert b\rVert^2 - \lVert a\rVert^2 = (b - a)^\top (b + a)`. A row whose norm
    is at most 1e-12 (``F.normalize``'s floor) takes ``F.normalize(a) - F.normalize(b)``, as the
    normalised rows elsewhere do (a zero row stays 0), with finite gradients.
    """
    floor = 1e-12
    norm_a = torch.linalg.vector_norm(a, dim=-1, keepdim=True)  # (N, 1)
    norm_b = torch.linalg.vector_norm(b, dim=-1, keepdim=True)
    regular = (norm_a > floor) & (norm_b > floor)  # (N, 1)
    # Unit norms where the row is degenerate, so that its unused branch stays finite.
    norm_a = torch.where(regular, norm_a, torch.ones_like(norm_a))
    norm_b = torch.where(regular, norm_b, torch.ones_like(norm_b))
    diff = a - b  # (N, d), each entry correctly rounded
    sq_norm_gap = ((b - a) * (b + a)).sum(dim=-1, keepdim=True)  # ||b||^2 - ||a||^2
    accurate = diff / norm_a + b * (sq_norm_gap / (norm_a * norm_b * (norm_a + norm_b)))
    fallback = F.normalize(a, dim=-1, eps=floor) - F.normalize(b, dim=-1, eps=floor)
    return torch.where(regular, accurate, fallback)
