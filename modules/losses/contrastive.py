"""Contrastive losses as pure functions of tensors (no Trainer, no gather, no memory bank).

NT-Xent and the Kernel-InfoNCE family share one code path: the two views are stacked into 2N
L2-normalised rows (:func:`_stack_normalised`), a (2N, 2N) logit matrix is built, and
:func:`_two_view_cross_entropy` masks the self-pair and scores each row against its other view.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from modules.ranges import check_positive, check_weight


def _compute_dtype(t: Tensor) -> torch.dtype:
    """float64 stays float64; everything else (bf16, fp16, float32) is computed in float32."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _autocast_disabled(t: Tensor) -> torch.autocast:
    """A context that turns autocast off on ``t``'s device.

    Upcasting the inputs is not enough: under autocast a float32 matmul is still run in bf16 or
    fp16, which is too coarse for logits divided by a small temperature.
    """
    return torch.autocast(device_type=t.device.type, enabled=False)


def _stack_normalised(z1: Tensor, z2: Tensor) -> Tensor:
    """Stack two (N, d) views into (2N, d) rows, L2-normalised, in float32 or wider.

    Row k < N is ``z1[k]``, row N + k is ``z2[k]``. Call it with autocast disabled.
    """
    if z1.shape != z2.shape or z1.dim() != 2:
        raise ValueError(
            f"z1 and z2 must both have shape (N, d); got {tuple(z1.shape)} and {tuple(z2.shape)}"
        )
    return F.normalize(torch.cat([z1, z2], dim=0).to(_compute_dtype(z1)), dim=-1)  # z: (2N, d)


def _two_view_cross_entropy(logits: Tensor) -> Tensor:
    """Mean over the 2N anchors of the cross-entropy of each row against its other view.

    ``logits`` is (2N, 2N) with rows and columns ordered as :func:`_stack_normalised` stacks
    them; its diagonal may hold anything. Only the self-pair is removed, by masking, so the
    positive stays in the denominator.
    """
    two_n = logits.shape[0]
    self_mask = torch.eye(two_n, dtype=torch.bool, device=logits.device)
    # The positive of row k is k + N for k < N and k - N for k >= N.
    targets = (torch.arange(two_n, device=logits.device) + two_n // 2) % two_n
    return F.cross_entropy(logits.masked_fill(self_mask, float("-inf")), targets)


def nt_xent_loss(z1: Tensor, z2: Tensor, temperature: float = 0.5) -> Tensor:
    r"""NT-Xent (normalised temperature-scaled cross-entropy), the SimCLR loss.

    Chen et al., "A Simple Framework for Contrastive Learning of Visual Representations"
    (arXiv:2002.05709), eq. 1; the InfoNCE loss of Tan et al., "Contrastive Learning is
    Spectral Clustering on Similarity Graph" (arXiv:2303.15103), eq. 1.

    The two views are stacked into 2N rows :math:`z_k`, L2-normalised. Every row is an anchor
    whose positive :math:`p(k)` is its other view; the denominator runs over all 2N - 1 rows
    except the anchor itself (the positive stays in it):

    .. math::
        \mathcal{L} = \frac{1}{2N} \sum_{k=1}^{2N} -\log
        \frac{\exp(z_k^\top z_{p(k)} / \tau)}{\sum_{j \ne k} \exp(z_k^\top z_j / \tau)}

    Args:
        z1: (N, d) embeddings of the first view (normalised here, whatever the caller did).
        z2: (N, d) embeddings of the second view; row i is the positive of ``z1[i]``.
        temperature: :math:`\tau > 0`.

    Returns:
        A scalar float32 (float64 for float64 inputs) tensor, differentiable; computed in that
        precision even under autocast.

    >>> z = torch.nn.functional.one_hot(torch.arange(4), 4).float()
    >>> round(nt_xent_loss(z, z, temperature=1.0).item(), 4)  # -log(e / (e + 6))
    1.1654
    """
    check_positive("temperature", temperature)
    with _autocast_disabled(z1):
        z = _stack_normalised(z1, z2)  # z: (2N, d)
        return _two_view_cross_entropy(z @ z.T / temperature)  # logits: (2N, 2N)


def _distance_power(sq_dist: Tensor, gamma: float) -> Tensor:
    r"""``sq_dist ** (gamma / 2)``, i.e. :math:`\lVert a - b\rVert^\gamma`, with finite gradients.

    For :math:`\gamma < 2` the slope of :math:`s^{\gamma/2}` is infinite at :math:`s = 0`
    (two coinciding embeddings). Squared distances at or below the dtype's machine epsilon are
    below the resolution of :math:`\lVert a\rVert^2 + \lVert b\rVert^2 - 2a^\top b` for unit
    vectors: such a pair cannot be told from a coinciding one, and is taken to coincide, with
    distance 0 and gradient 0 (the subgradient at the cusp, as ``torch.linalg.vector_norm``
    does at 0). Exact duplicates thus give exact values, whatever the rounding of the Gram
    matrix. Above the threshold the value and gradient are the exact ones.
    """
    half = gamma / 2
    if half >= 1:  # s ** half is differentiable at 0
        return sq_dist.pow(half)
    resolved = sq_dist > torch.finfo(sq_dist.dtype).eps
    safe = torch.where(resolved, sq_dist, torch.ones_like(sq_dist))  # no infinite slope
    return torch.where(resolved, safe.pow(half), torch.zeros_like(sq_dist))


def _kernel_infonce_normalised(z: Tensor, gamma: float, temperature: float) -> Tensor:
    r"""Kernel-InfoNCE on already-stacked rows ``z`` (2N, d), used as given (no normalisation).

    Logits are :math:`-\lVert z_i - z_j\rVert^\gamma / \tau`. The rows need not have unit norm:
    ``concat_sum_kernel_loss`` passes halves of normalised vectors.
    """
    self_mask = torch.eye(z.shape[0], dtype=torch.bool, device=z.device)
    sq_norms = (z * z).sum(dim=-1)  # (2N,)
    # Rounding can make a tiny squared distance negative; a negative base would give NaN.
    sq_dist = (sq_norms[:, None] + sq_norms[None, :] - 2 * z @ z.T).clamp_min(0)  # (2N, 2N)
    # The self-pair is masked before the power (its squared distance s is 0, where the slope
    # of s ** (gamma / 2) is infinite for gamma < 2), then its logit is masked to -inf.
    sq_dist = sq_dist.masked_fill(self_mask, 1.0)
    return _two_view_cross_entropy(-_distance_power(sq_dist, gamma) / temperature)


def kernel_infonce_loss(z1: Tensor, z2: Tensor, gamma: float, temperature: float) -> Tensor:
    r"""Kernel-InfoNCE with the exponential kernel :math:`\exp(-\lVert x - y\rVert^\gamma/\tau)`.

    Tan et al., "Contrastive Learning is Spectral Clustering on Similarity Graph"
    (arXiv:2303.15103), eq. 7-8 and Algorithm 2 (whose pseudo-code drops the minus sign of
    eq. 7; the kernel decreases with distance). The two views are stacked into 2N rows
    :math:`z_k`, L2-normalised; every row is an anchor whose positive :math:`p(k)` is its other
    view, and the denominator runs over the 2N - 1 rows other than the anchor:

    .. math::
        \mathcal{L} = \frac{1}{2N} \sum_{k=1}^{2N} -\log
        \frac{\exp(-\lVert z_k - z_{p(k)}\rVert_2^\gamma / \tau)}
        {\sum_{j \ne k} \exp(-\lVert z_k - z_j\rVert_2^\gamma / \tau)}

    :math:`\gamma = 1` is the Laplacian kernel, :math:`\gamma = 2` the Gaussian kernel: on unit
    vectors :math:`\lVert a - b\rVert^2 = 2 - 2a^\top b`, so it equals
    ``nt_xent_loss(z1, z2, temperature / 2)``. Squared distances s come from the Gram matrix,
    :math:`\lVert a\rVert^2 + \lVert b\rVert^2 - 2a^\top b`. For :math:`\gamma < 2`, where
    :math:`s^{\gamma/2}` has an infinite slope at 0, pairs with s at or below the dtype's
    machine epsilon (the resolution of that formula) are taken to coincide: distance 0 and
    zero gradient, so values and gradients stay finite (see ``_distance_power``). The same
    resolution limits any nearly coinciding pair: its :math:`d^\gamma` is known to about
    :math:`\epsilon_{mach}^{\gamma/2}` only (0.02 in float32 for :math:`\gamma = 0.5`), as in
    every matmul-based implementation.

    Args:
        z1: (N, d) embeddings of the first view (normalised here, whatever the caller did).
        z2: (N, d) embeddings of the second view; row i is the positive of ``z1[i]``.
        gamma: :math:`\gamma > 0`, the exponent of the distance.
        temperature: :math:`\tau > 0`.

    Returns:
        A scalar float32 (float64 for float64 inputs) tensor, differentiable; computed in that
        precision even under autocast.

    >>> z = torch.nn.functional.one_hot(torch.arange(4), 4).float()
    >>> # positive at distance 0, the 6 other rows at distance sqrt(2): log(1 + 6 exp(-sqrt(2)))
    >>> round(kernel_infonce_loss(z, z, gamma=1.0, temperature=1.0).item(), 4)
    0.8996
    """
    if not (gamma > 0 and math.isfinite(gamma)):
        raise ValueError(f"gamma must be a finite number > 0, got {gamma}")
    check_positive("temperature", temperature)
    with _autocast_disabled(z1):
        return _kernel_infonce_normalised(_stack_normalised(z1, z2), gamma, temperature)


def sum_kernel_loss(z1: Tensor, z2: Tensor, tau1: float, tau2: float, lam: float) -> Tensor:
    r"""Kernel-InfoNCE with the Simple Sum kernel: Laplacian and Gaussian losses, weighted.

    Tan et al., "Contrastive Learning is Spectral Clustering on Similarity Graph"
    (arXiv:2303.15103), section 5.2 "Simple Sum Kernel" and Table 2 ("Sum"), built from the
    core loss :math:`\mathcal{C}` of Algorithm 2 (``kernel_infonce_loss``):

    .. math::
        \mathcal{L} = \lambda\, \mathcal{C}(z, z', \gamma = 1, \tau_1)
        + (1 - \lambda)\, \mathcal{C}(z, z', \gamma = 2, \tau_2)

    The authors' released code shares one temperature between the two terms and searches
    :math:`\gamma`; we keep the paper's two temperatures :math:`\tau_1, \tau_2` (Table 2, and
    Table 3's search space).

    Args:
        z1: (N, d) embeddings of the first view (normalised here, once, for both terms).
        z2: (N, d) embeddings of the second view; row i is the positive of ``z1[i]``.
        tau1: :math:`\tau_1 > 0`, temperature of the Laplacian (:math:`\gamma = 1`) term.
        tau2: :math:`\tau_2 > 0`, temperature of the Gaussian (:math:`\gamma = 2`) term.
        lam: :math:`\lambda \in [0, 1]`, weight of the Laplacian term.

    Returns:
        A scalar float32 (float64 for float64 inputs) tensor, differentiable.

    >>> z = torch.nn.functional.one_hot(torch.arange(4), 4).float()
    >>> # 0.5 log(1 + 6 exp(-sqrt(2))) + 0.5 log(1 + 6 exp(-2))
    >>> round(sum_kernel_loss(z, z, tau1=1.0, tau2=1.0, lam=0.5).item(), 4)
    0.747
    """
    check_positive("tau1", tau1)
    check_positive("tau2", tau2)
    check_weight(lam)
    with _autocast_disabled(z1):
        z = _stack_normalised(z1, z2)  # z: (2N, d)
        return (lam * _kernel_infonce_normalised(z, 1.0, tau1)
                + (1 - lam) * _kernel_infonce_normalised(z, 2.0, tau2))


def concat_sum_kernel_loss(z1: Tensor, z2: Tensor, tau1: float, tau2: float,
                           lam: float) -> Tensor:
    r"""Kernel-InfoNCE with the Concatenation Sum kernel: one kernel per half of the embedding.

    Tan et al., "Contrastive Learning is Spectral Clustering on Similarity Graph"
    (arXiv:2303.15103), section 5.2 "Concatenation Sum Kernel" and Table 2 ("Concatenation
    Sum"). Each full d-dimensional embedding is L2-normalised once and split into halves
    :math:`z_L = z[0:d/2]`, :math:`z_R = z[d/2:d]` that are *not* re-normalised (as the authors'
    released code does), then

    .. math::
        \mathcal{L} = \lambda\, \mathcal{C}(z_L, z_L', \gamma = 1, \tau_1)
        + (1 - \lambda)\, \mathcal{C}(z_R, z_R', \gamma = 2, \tau_2)

    with :math:`\mathcal{C}` the core loss of Algorithm 2 (``kernel_infonce_loss`` without its
    normalisation). We follow Table 2, which puts the Laplacian kernel on the first half; the
    display in section 5.2 lists the halves the other way round. As the halves are not unit
    vectors, the :math:`\gamma = 2` term is not NT-Xent on :math:`z_R`.

    Args:
        z1: (N, d) embeddings of the first view, d even (the paper doubles the projector
            output to 2 x 128 for this loss).
        z2: (N, d) embeddings of the second view; row i is the positive of ``z1[i]``.
        tau1: :math:`\tau_1 > 0`, temperature of the Laplacian term on the first half.
        tau2: :math:`\tau_2 > 0`, temperature of the Gaussian term on the second half.
        lam: :math:`\lambda \in [0, 1]`, weight of the Laplacian term.

    Returns:
        A scalar float32 (float64 for float64 inputs) tensor, differentiable.

    >>> # each half of the normalised [e_i, e_i] is e_i / sqrt(2): other rows at distance 1
    >>> e = torch.nn.functional.one_hot(torch.arange(4), 4).float()
    >>> z = torch.cat([e, e], dim=1)
    >>> # 0.5 log(1 + 6 exp(-1 / 1)) + 0.5 log(1 + 6 exp(-1 / 0.5))
    >>> round(concat_sum_kernel_loss(z, z, tau1=1.0, tau2=0.5, lam=0.5).item(), 4)
    0.8799
    """
    check_positive("tau1", tau1)
    check_positive("tau2", tau2)
    check_weight(lam)
    with _autocast_disabled(z1):
        z = _stack_normalised(z1, z2)  # z: (2N, d), each full row normalised once
        d = z.shape[1]
        if d % 2:
            raise ValueError(
                f"concat_sum_kernel_loss splits each embedding into two halves, so d must be "
                f"even; got d={d}"
            )
        return (lam * _kernel_infonce_normalised(z[:, : d // 2], 1.0, tau1)
                + (1 - lam) * _kernel_infonce_normalised(z[:, d // 2 :], 2.0, tau2))
