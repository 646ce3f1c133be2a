r"""SE(2) warps of image batches with Keys' cubic convolution, and Gaussian smoothing.

"Invariant Attention: Provable Clustering Under Transformations" (anonymous ICLR submission, no
arXiv id), section 2.1: an image
:math:`\mathbf{x}` is resampled on a transformation field :math:`\boldsymbol\tau`,

.. math::
    [\mathbf{x} \circ \boldsymbol\tau]_{pq} = \sum_{kl} \mathbf{x}_{kl}\,
    \phi(\boldsymbol\tau_{pq0} - k)\, \phi(\boldsymbol\tau_{pq1} - l),

with :math:`\phi` the cubic convolution kernel of Keys (IEEE TASSP 1981) and, for SE(2),
:math:`\boldsymbol\tau_{pq} = \mathbf{A}\,(p, q)^\top + \mathbf{b}`. Here the field is written
about the image centre so that ``angle`` rotates about it; everything is batched over images and
differentiable in the angle and the shift (the paper wrote these kernels in CuPy; here they are
plain torch, so they run on the CPU and on a GPU alike).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

#: Keys' free parameter; a = -1/2 is the value for which the kernel is third-order accurate.
KEYS_A = -0.5


def keys_cubic(s: Tensor, a: float = KEYS_A) -> Tensor:
    r"""Keys' cubic convolution interpolation kernel :math:`\phi` (Keys, 1981, eq. 15).

    .. math::
        \phi(s) = \begin{cases}
        (a + 2)|s|^3 - (a + 3)|s|^2 + 1 & |s| \le 1 \\
        a|s|^3 - 5a|s|^2 + 8a|s| - 4a & 1 < |s| < 2 \\
        0 & \text{otherwise}
        \end{cases}

    It interpolates (:math:`\phi(0) = 1`, :math:`\phi(k) = 0` at other integers) and is
    continuously differentiable, so warps built on it have gradients in their parameters.

    Args:
        s: any shape, distances in pixels.

    >>> keys_cubic(torch.tensor([0.0, 1.0, 2.0, 0.5]))
    tensor([1.0000, 0.0000, 0.0000, 0.5625])
    """
    t = s.abs()
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return torch.where(t <= 1, near, torch.where(t < 2, far, torch.zeros_like(t)))


def se2_source_coordinates(angle: Tensor, shift: Tensor, height: int, width: int
                           ) -> tuple[Tensor, Tensor]:
    r"""Where each output pixel of :func:`se2_warp` reads its input: column and row coordinates.

    The warp moves the input point :math:`x` (column, row) to :math:`A(x - c) + c + b` with
    :math:`A = \begin{bmatrix}\cos\theta & \sin\theta\\ -\sin\theta & \cos\theta\end{bmatrix}`
    (the paper's matrix; in (column, row) pixel coordinates with rows growing downwards it turns
    the picture counter-clockwise by :math:`\theta`), :math:`c` the image centre and :math:`b`
    the shift; so output pixel :math:`y` reads the input at :math:`A^\top(y - c - b) + c`.

    Args:
        angle: (n,) radians.
        shift: (n, 2) pixels, (dx, dy): dx to the right, dy downwards.

    Returns:
        ``(u, v)``, each (n, height * width): source column and row of every output pixel, in
        row-major order.
    """
    dtype, device = shift.dtype, shift.device
    rows = torch.arange(height, dtype=dtype, device=device) - (height - 1) / 2
    cols = torch.arange(width, dtype=dtype, device=device) - (width - 1) / 2
    y, x = torch.meshgrid(rows, cols, indexing="ij")
    x = x.reshape(1, -1) - shift[:, :1]  # (n, P)
    y = y.reshape(1, -1) - shift[:, 1:]  # (n, P)
    cos, sin = torch.cos(angle)[:, None], torch.sin(angle)[:, None]
    u = cos * x - sin * y + (width - 1) / 2
    v = sin * x + cos * y + (height - 1) / 2
    return u, v


def _keys_polynomials(a: float) -> tuple[Tensor, Tensor]:
    r"""(4, 4) matrices M, D with ``[1, t, t^2, t^3] @ M`` the weights
    :math:`\phi(t + 1), \phi(t), \phi(t - 1), \phi(t - 2)` of the 4 taps of a point at fraction
    ``t`` in [0, 1) past its pixel, and ``[1, t, t^2, t^3] @ D`` their derivatives in ``t``."""
    weights = torch.tensor([[0.0, 1.0, 0.0, 0.0],
                            [a, 0.0, -a, 0.0],
                            [-2 * a, -(a + 3), 2 * a + 3, a],
                            [a, a + 2, -(a + 2), -a]], dtype=torch.float64)
    slopes = torch.cat([weights[1:] * torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64),
                        torch.zeros(1, 4, dtype=torch.float64)])
    return weights, slopes


_KEYS_WEIGHTS, _KEYS_SLOPES = _keys_polynomials(KEYS_A)

#: Zero padding around the image so that every tap of a (clamped) source point is in range.
_PAD = 4


class TapTable(NamedTuple):
    """Every 4x4 neighbourhood of zero-padded images as one row, made once by
    :func:`tap_table` and reused by every warp of the same images (registration loops)."""

    table: Tensor  # (N * L, C, 4, 4)
    positions: int  # L, the neighbourhoods per image
    shape: torch.Size  # (N, C, H, W) of the images


def tap_table(images: Tensor) -> TapTable:
    """The :class:`TapTable` of (N, C, H, W) images (zero padding of ``_PAD`` pixels)."""
    n, channels, height, width = images.shape
    patches = F.unfold(F.pad(images, (_PAD,) * 4), 4)  # (N, C * 16, L)
    positions = patches.shape[-1]
    table = patches.view(n, channels, 16, positions).permute(0, 3, 1, 2)
    return TapTable(table.reshape(n * positions, channels, 4, 4), positions, images.shape)


def _sample(images: Tensor | TapTable, u: Tensor, v: Tensor, slopes: bool,
            image_index: Tensor | None = None):
    """Keys-cubic values (B, C, P) of ``images[image_index[b]]`` at the points ``(u[b], v[b])``
    and, if ``slopes``, their derivatives in ``u`` and ``v`` (each (B, C, P), else None).

    A source point more than 2 pixels outside the image reads only zeros, and so does its
    clamped point (where the slopes vanish too); clamping keeps every tap inside the padding.
    Each point's 16 taps are one row of a table of the images' 4x4 neighbourhoods
    (:func:`tap_table`), so images shared by many problems are gathered without copies.
    Also returns what a backward pass into the images needs: the rows and the tap weights.
    """
    taps = images if isinstance(images, TapTable) else tap_table(images)
    table, positions = taps.table, taps.positions
    n_images, channels, height, width = taps.shape
    batch, points = u.shape
    u = u.clamp(-2.0, width + 1.0)
    v = v.clamp(-2.0, height + 1.0)
    u0, v0 = torch.floor(u), torch.floor(v)
    table_width = width + 2 * _PAD - 3
    rows = (v0.long() + (_PAD - 1)) * table_width + (u0.long() + (_PAD - 1))  # (B, P)
    if image_index is not None:
        rows = rows + image_index.view(-1, 1) * positions
    elif n_images != batch:
        raise ValueError(f"{n_images} images for {batch} rows of points; pass image_index")
    else:
        rows = rows + torch.arange(batch, device=u.device).view(-1, 1) * positions
    values = table.index_select(0, rows.flatten()).view(batch, points, channels, 4, 4)

    def powers(t: Tensor) -> Tensor:  # (B, P, 4): [1, t, t^2, t^3]
        t2 = t * t
        return torch.stack([torch.ones_like(t), t, t2, t2 * t], dim=-1)

    weights_matrix = _KEYS_WEIGHTS.to(u.dtype).to(u.device)
    px, py = powers(u - u0), powers(v - v0)
    wx, wy = px @ weights_matrix, py @ weights_matrix  # (B, P, 4)
    if not slopes:
        along_rows = torch.einsum("bpclk,bpk->bpcl", values, wx)  # interpolate each tap row
        out = torch.einsum("bpcl,bpl->bcp", along_rows, wy)
        return out, None, None, rows, wx, wy
    slopes_matrix = _KEYS_SLOPES.to(u.dtype).to(u.device)
    dwx, dwy = px @ slopes_matrix, py @ slopes_matrix
    along_rows = torch.einsum("bpclk,bpkd->bpcld", values, torch.stack([wx, dwx], dim=-1))
    out = torch.einsum("bpcl,bpl->bcp", along_rows[..., 0], wy)
    d_v = torch.einsum("bpcl,bpl->bcp", along_rows[..., 0], dwy)
    d_u = torch.einsum("bpcl,bpl->bcp", along_rows[..., 1], wy)
    return out, d_u, d_v, rows, wx, wy


class _CubicSample(torch.autograd.Function):
    """Keys-cubic sampling at source points (u, v), with analytic gradients in the points (from
    the kernel's slopes) and in the images (tap weights added back into the 4x4 table)."""

    @staticmethod
    def forward(ctx, images: Tensor, u: Tensor, v: Tensor, image_index: Tensor | None):
        slopes = ctx.needs_input_grad[1] or ctx.needs_input_grad[2]
        out, d_u, d_v, rows, wx, wy = _sample(images, u, v, slopes, image_index)
        ctx.save_for_backward(*(t for t in (d_u, d_v, rows, wx, wy) if t is not None))
        ctx.slopes = slopes
        ctx.shape = images.shape
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        saved = ctx.saved_tensors
        d_u, d_v = saved[:2] if ctx.slopes else (None, None)
        rows, wx, wy = saved[-3:]
        grad_images = grad_u = grad_v = None
        if ctx.needs_input_grad[1]:
            grad_u = (grad_out * d_u).sum(1)
        if ctx.needs_input_grad[2]:
            grad_v = (grad_out * d_v).sum(1)
        if ctx.needs_input_grad[0]:
            n, channels, height, width = ctx.shape
            positions = (height + 2 * _PAD - 3) * (width + 2 * _PAD - 3)
            taps = torch.einsum("bcp,bpl,bpk->bpclk", grad_out, wy, wx)  # (B, P, C, 4, 4)
            table = grad_out.new_zeros(n * positions, channels, 4, 4)
            table.index_add_(0, rows.flatten(), taps.reshape(-1, channels, 4, 4))
            patches = table.view(n, positions, channels * 16).permute(0, 2, 1)
            padded = F.fold(patches, (height + 2 * _PAD, width + 2 * _PAD), 4)
            grad_images = padded[..., _PAD:-_PAD, _PAD:-_PAD]
        return grad_images, grad_u, grad_v, None


def cubic_sample(images: Tensor, u: Tensor, v: Tensor, image_index: Tensor | None = None
                 ) -> Tensor:
    r"""Sample each image at its own points with Keys' cubic convolution and zero padding:
    :math:`\sum_{k,l} \mathbf{x}_{lk}\,\phi(u - k)\,\phi(v - l)`.

    Args:
        images: (N, C, H, W).
        u: (B, P) column coordinates (pixel units, 0 = first column's centre).
        v: (B, P) row coordinates.
        image_index: (B,) which image row b samples; None: B = N and row b samples image b.

    Returns:
        (B, C, P), differentiable in ``images``, ``u`` and ``v``.

    >>> x = torch.arange(16.0).view(1, 1, 4, 4)
    >>> cubic_sample(x, torch.tensor([[1.0, 2.0]]), torch.tensor([[2.0, 0.0]]))  # on pixels
    tensor([[[9., 2.]]])
    """
    return _CubicSample.apply(images, u, v, image_index)


def se2_warp(images: Tensor, angle: Tensor, shift: Tensor, image_index: Tensor | None = None
             ) -> Tensor:
    r"""Rotate each image by ``angle[i]`` about its centre, then translate it by ``shift[i]``.

    Section 2.1 of the Invariant Attention paper: :math:`\mathbf{x} \circ \boldsymbol\tau` with
    Keys' cubic convolution :math:`\phi` (:func:`keys_cubic`) and zero padding outside the image,

    .. math::
        [\mathbf{x} \circ \boldsymbol\tau]_{y} = \sum_{k,l} \mathbf{x}_{lk}\,
        \phi(u_y - k)\,\phi(v_y - l), \qquad
        (u_y, v_y) = A^\top (y - c - b) + c,

    where :math:`A` is the rotation by :math:`\theta` (counter-clockwise on screen, rows going
    down), :math:`c` the centre and :math:`b = (dx, dy)` the shift
    (:func:`se2_source_coordinates`). A rotation by a multiple of 90 degrees of a square image,
    or an integer shift, lands on pixel centres, where :math:`\phi` interpolates exactly: the
    warp is then the exact pixel permutation (with zeros shifted in).

    Args:
        images: (n, C, H, W) floats.
        angle: (n,) radians (or a scalar, used for every image).
        shift: (n, 2) pixels (dx, dy) (or (2,), used for every image).
        image_index: optional (m,): warp ``images[image_index]`` by ``angle``, ``shift`` of
            length m, without copying the images (many transformations of a few images).

    Returns:
        (n, C, H, W) (or (m, C, H, W)), differentiable in ``images``, ``angle`` and ``shift``.

    >>> x = torch.zeros(1, 1, 5, 5); x[0, 0, 1, 2] = 1.0  # one bright pixel above the centre
    >>> y = se2_warp(x, torch.tensor([math.pi / 2]), torch.tensor([[1.0, 0.0]]))
    >>> (y[0, 0] > 0.5).nonzero().tolist()  # turned to the left of the centre, then moved right
    [[2, 2]]
    """
    n, channels, height, width = images.shape
    if image_index is not None:
        n = image_index.shape[0]
    angle = torch.as_tensor(angle, dtype=images.dtype, device=images.device).expand(n)
    shift = torch.as_tensor(shift, dtype=images.dtype, device=images.device).expand(n, 2)
    u, v = se2_source_coordinates(angle, shift, height, width)  # (n, P) each
    return cubic_sample(images, u, v, image_index).view(n, channels, height, width)


def se2_warp_with_jacobian(images: Tensor | TapTable, angle: Tensor, shift: Tensor,
                           image_index: Tensor | None = None) -> tuple[Tensor, Tensor]:
    r""":func:`se2_warp` and its Jacobian in the three parameters, without autograd.

    With :math:`(u, v)` the source point of an output pixel (:func:`se2_source_coordinates`)
    and :math:`\partial_u, \partial_v` the slopes of the interpolant there,

    .. math::
        \frac{\partial}{\partial\theta} = -(v - c_v)\,\partial_u + (u - c_u)\,\partial_v,\quad
        \frac{\partial}{\partial b_x} = -\cos\theta\,\partial_u - \sin\theta\,\partial_v,\quad
        \frac{\partial}{\partial b_y} = \sin\theta\,\partial_u - \cos\theta\,\partial_v.

    Registration (Gauss-Newton) and the invariant mean's gradient steps use it directly, which
    costs one interpolation pass instead of a forward and a backward one.

    Args:
        images: (N, C, H, W), or their :func:`tap_table` when the same images are warped often.
        angle: (n,) radians.
        shift: (n, 2) pixels (dx, dy).
        image_index: (n,) which image row i warps; None: n = N and row i warps image i.

    Returns:
        ``(warped, jacobian)``: (n, C, H, W) and (n, C, H, W, 3), the last axis being
        :math:`(\theta, b_x, b_y)`.

    >>> x = torch.rand(2, 1, 8, 8, dtype=torch.float64)
    >>> angle, shift = torch.tensor([0.3, -1.0], dtype=torch.float64), torch.zeros(2, 2).double()
    >>> y, jac = se2_warp_with_jacobian(x, angle, shift)
    >>> eps = 1e-6
    >>> numeric = (se2_warp(x, angle + eps, shift) - se2_warp(x, angle - eps, shift)) / (2 * eps)
    >>> torch.allclose(jac[..., 0], numeric, atol=1e-6)
    True
    """
    _, channels, height, width = images.shape
    n = angle.shape[0]
    u, v = se2_source_coordinates(angle, shift, height, width)  # (n, P) each
    out, d_u, d_v, *_ = _sample(images, u, v, True, image_index)  # (n, C, P) each
    cos, sin = torch.cos(angle)[:, None, None], torch.sin(angle)[:, None, None]
    du_dtheta = -(v - (height - 1) / 2)[:, None]
    dv_dtheta = (u - (width - 1) / 2)[:, None]
    jacobian = torch.stack([du_dtheta * d_u + dv_dtheta * d_v,
                            -cos * d_u - sin * d_v,
                            sin * d_u - cos * d_v], dim=-1)  # (n, C, P, 3)
    return out.view(n, channels, height, width), jacobian.view(n, channels, height, width, 3)


def se2_warp_values(images: Tensor | TapTable, angle: Tensor, shift: Tensor,
                    image_index: Tensor | None = None) -> Tensor:
    """:func:`se2_warp` without autograd, of images or their :func:`tap_table` (for loops that
    warp the same images many times); (n, C, H, W) for n = ``angle.shape[0]``.

    >>> x = torch.rand(3, 1, 6, 6)
    >>> a, b = torch.rand(2), torch.rand(2, 2)
    >>> index = torch.tensor([2, 0])
    >>> torch.allclose(se2_warp_values(tap_table(x), a, b, index), se2_warp(x[index], a, b))
    True
    """
    _, channels, height, width = images.shape
    n = angle.shape[0]
    u, v = se2_source_coordinates(angle, shift, height, width)  # (n, P) each
    out, *_ = _sample(images, u, v, False, image_index)
    return out.view(n, channels, height, width)


def gaussian_kernel1d(sigma: float, dtype: torch.dtype = torch.float32,
                      device: torch.device | str | None = None) -> Tensor:
    """A normalised 1-D Gaussian of standard deviation ``sigma`` pixels on ``[-r, r]``,
    ``r = ceil(3 sigma)``; ``sigma = 0`` gives the identity ``[1.]``.

    >>> gaussian_kernel1d(1.0).shape, round(float(gaussian_kernel1d(1.0).sum()), 6)
    (torch.Size([7]), 1.0)
    """
    if sigma < 0:
        raise ValueError(f"sigma must be >= 0, got {sigma}")
    if sigma == 0:
        return torch.ones(1, dtype=dtype, device=device)
    radius = max(1, math.ceil(3 * sigma))
    t = torch.arange(-radius, radius + 1, dtype=dtype, device=device)
    kernel = torch.exp(-0.5 * (t / sigma) ** 2)
    return kernel / kernel.sum()


def gaussian_smooth(images: Tensor, sigma: float) -> Tensor:
    r""":math:`g_{\sigma^2} * \mathbf{x}`: separable Gaussian smoothing with zero padding (the
    smoothing of the objective, eq. 2.6-2.7). ``sigma = 0`` returns the images unchanged.

    Smoothing commutes with rotations and translations (exactly in the continuum, up to
    interpolation and the image border on pixels), so the smoothed objective
    :math:`\lVert g * (\mathbf{v}\circ\tau - \mu)\rVert` is computed by warping pre-smoothed
    images, :math:`(g * \mathbf{v}) \circ \tau - g * \mu`.

    Args:
        images: (n, C, H, W).
        sigma: standard deviation in pixels, >= 0.

    Returns:
        (n, C, H, W).

    >>> x = torch.zeros(1, 1, 9, 9); x[0, 0, 4, 4] = 1.0
    >>> y = gaussian_smooth(x, 1.0)
    >>> round(float(y.sum()), 4), bool(y[0, 0, 4, 4] < 1)
    (1.0, True)
    """
    if sigma == 0:
        return images
    height, width = images.shape[-2:]
    kernel = gaussian_kernel1d(sigma, images.dtype, images.device)
    # Zero-padded convolution along an axis is a product with a banded (Toeplitz) matrix; two
    # small matrix products avoid the per-call set-up cost of a convolution primitive.
    rows = _convolution_matrix(kernel, height)  # (H, H)
    cols = _convolution_matrix(kernel, width)  # (W, W)
    return rows @ images @ cols.T


def _convolution_matrix(kernel: Tensor, size: int) -> Tensor:
    """The (size, size) matrix of a centred 1-D convolution with zero padding."""
    radius = kernel.numel() // 2
    offsets = torch.arange(size, device=kernel.device)
    lag = offsets[None, :] - offsets[:, None] + radius  # kernel index of input j at output i
    inside = (lag >= 0) & (lag < kernel.numel())
    return torch.where(inside, kernel[lag.clamp(0, kernel.numel() - 1)], kernel.new_zeros(()))


def unit_normalise(images: Tensor, eps: float = 1e-12) -> Tensor:
    """Each image (any trailing shape) divided by its L2 norm over all its entries.

    >>> unit_normalise(torch.full((2, 1, 2, 2), 3.0)).flatten(1).norm(dim=1)
    tensor([1., 1.])
    """
    norms = images.flatten(1).norm(dim=1).clamp_min(eps)
    return images / norms.view(-1, *([1] * (images.dim() - 1)))
