"""Contrastive losses as pure functions of tensors (no Trainer, no gather, no memory bank).

NT-Xent and the Kernel-InfoNCE family share one code path: the two views are stacked into 2N
L2-normalised rows (:func:`_stack_normalised`), a (2N, 2N) logit matrix is built, and
:func:`_two_view_cross_entropy` masks the self-pair and scores each row against its other view.

Every loss here also takes ``queue=``, a (K, d) tensor of negatives held by the caller (MoCo's
queue): each row of ``z1`` is then a query, its row of ``z2`` its positive key, and the queue its
negatives (MoCo's eq. 1, :mod:`modules.losses.moco`). So one function serves SimCLR and MoCo,
and :data:`modules.losses.CONTRASTIVE_LOSSES` names it once for both.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from modules.losses._numerics import (
    _autocast_disabled,
    _compute_dtype,
    _distance_power,
    _unit_difference,
)
from modules.losses.moco import (
    _check_queue_shapes,
    _normalised_queue_inputs,
    _queue_cosine_infonce,
    _queue_kernel_infonce,
)
from modules.ranges import check_positive, check_weight


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


def nt_xent_loss(z1: Tensor, z2: Tensor, temperature: float = 0.5, *,
                 queue: Tensor | None = None) -> Tensor:
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
        queue: ``None``, or (K, d) negatives: then each row of ``z1`` is a query scored against
            its positive ``z2`` row and the K queued rows only, the InfoNCE of MoCo's eq. 1
            (:func:`modules.losses.moco_loss` with cosine logits).

    Returns:
        A scalar float32 (float64 for float64 inputs) tensor, differentiable; computed in that
        precision even under autocast.

    >>> z = torch.nn.functional.one_hot(torch.arange(4), 4).float()
    >>> round(nt_xent_loss(z, z, temperature=1.0).item(), 4)  # -log(e / (e + 6))
    1.1654
    """
    check_positive("temperature", temperature)
    with _autocast_disabled(z1):
        if queue is not None:
            _check_queue_shapes(z1, z2, queue)
            return _queue_cosine_infonce(z1, z2, queue, temperature)
        z = _stack_normalised(z1, z2)  # z: (2N, d)
        return _two_view_cross_entropy(z @ z.T / temperature)  # logits: (2N, 2N)


def _kernel_losses(z1: Tensor, z2: Tensor, queue: Tensor | None,
                   terms: list[tuple[float, float, float, slice]]) -> Tensor:
    r"""The weighted sum of Kernel-InfoNCE terms :math:`\sum w\, \mathcal{C}(\gamma, \tau)` on
    column blocks of the normalised embeddings, two-view (``queue=None``) or against a queue.

    ``terms`` lists ``(w, gamma, tau, columns)``; each term scores the ``columns`` of every
    normalised row (the whole row, or a half for the concatenation kernel). The rows are
    normalised and the positives' differences computed once, for all the terms.
    """
    with _autocast_disabled(z1):
        if queue is None:
            z = _stack_normalised(z1, z2)  # z: (2N, d)
            diff = _positive_differences(z1, z2)  # (N, d)

            def term(columns: slice, gamma: float, temperature: float) -> Tensor:
                return _kernel_infonce_normalised(z[:, columns], diff[:, columns], gamma,
                                                  temperature)
        else:
            _check_queue_shapes(z1, z2, queue)
            q, diff, negatives = _normalised_queue_inputs(z1, z2, queue)  # (N|N|K, d)

            def term(columns: slice, gamma: float, temperature: float) -> Tensor:
                return _queue_kernel_infonce(q[:, columns], diff[:, columns],
                                             negatives[:, columns], gamma, temperature)
        return sum(w * term(columns, gamma, temperature)
                   for w, gamma, temperature, columns in terms)


def _positive_differences(z1: Tensor, z2: Tensor) -> Tensor:
    """(N, d) differences of the L2-normalised positive pairs, in float32 or wider, computed
    by :func:`_unit_difference`. Call it with autocast disabled."""
    dtype = _compute_dtype(z1)
    return _unit_difference(z1.to(dtype), z2.to(dtype))


def _kernel_infonce_normalised(z: Tensor, positive_diff: Tensor, gamma: float,
                               temperature: float) -> Tensor:
    r"""Kernel-InfoNCE on already-stacked rows ``z`` (2N, d), used as given (no normalisation).

    Logits are :math:`-\lVert z_i - z_j\rVert^\gamma / \tau`. The rows need not have unit norm:
    ``concat_sum_kernel_loss`` passes halves of normalised vectors. The negatives' squared
    distances come from the Gram matrix; the positives' from ``positive_diff`` (N, d), the
    differences ``z[k] - z[N + k]`` computed directly (:func:`_positive_differences`), which stay
    accurate when a positive pair nearly coincides, where the Gram matrix has lost them.
    """
    two_n = z.shape[0]
    self_mask = torch.eye(two_n, dtype=torch.bool, device=z.device)
    sq_norms = (z * z).sum(dim=-1)  # (2N,)
    # Rounding can make a tiny squared distance negative; a negative base would give NaN.
    sq_dist = (sq_norms[:, None] + sq_norms[None, :] - 2 * z @ z.T).clamp_min(0)  # (2N, 2N)
    # The self-pair is masked before the power (its squared distance s is 0, where the slope
    # of s ** (gamma / 2) is infinite for gamma < 2), then its logit is masked to -inf.
    sq_dist = sq_dist.masked_fill(self_mask, 1.0)
    logits = -_distance_power(sq_dist, gamma, torch.finfo(z.dtype).eps) / temperature
    positive_sq = (positive_diff * positive_diff).sum(dim=-1)  # (N,), exact at coincidence
    positive_logits = -_distance_power(positive_sq, gamma) / temperature  # (N,)
    rows = torch.arange(two_n, device=z.device)
    # Row k's positive is column k + N for k < N, k - N for k >= N; both see the same pair.
    logits = logits.index_put((rows, (rows + two_n // 2) % two_n),
                              torch.cat([positive_logits, positive_logits]))
    return _two_view_cross_entropy(logits)


def kernel_infonce_loss(z1: Tensor, z2: Tensor, gamma: float, temperature: float, *,
                        queue: Tensor | None = None) -> Tensor:
    r"""Kernel-InfoNCE with the exponential kernel exp(-||x - y||^gamma / tau).

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
    ``nt_xent_loss(z1, z2, temperature / 2)`` (up to rounding).

    Precision. Each positive pair's distance is computed directly from the difference of its
    two normalised rows (``_unit_difference``), so a positive pair that nearly coincides, as
    training drives it to, keeps an accurate value and gradient: in float32 at a relative
    distance of :math:`10^{-4}` both agree with float64 to about :math:`10^{-6}`, where the
    Gram-matrix expansion :math:`\lVert a\rVert^2 + \lVert b\rVert^2 - 2a^\top b` is off by
    about 1% in value and up to 100% in gradient for :math:`\gamma < 2` (whose slope
    :math:`\gamma d^{\gamma - 1}` grows without bound as :math:`d \to 0`). The negatives'
    squared distances s come from the Gram matrix (one matmul); for :math:`\gamma < 2`, a
    negative pair with s at or below the dtype's machine epsilon (the resolution of that
    formula) is taken to coincide: distance 0, zero gradient. A coinciding positive pair also
    gets zero gradient (the subgradient at the cusp), so values and gradients stay finite.

    Args:
        z1: (N, d) embeddings of the first view (normalised here, whatever the caller did).
        z2: (N, d) embeddings of the second view; row i is the positive of ``z1[i]``.
        gamma: :math:`\gamma > 0`, the exponent of the distance.
        temperature: :math:`\tau > 0`.
        queue: ``None``, or (K, d) negatives: MoCo's eq. 1 with this kernel, each row of ``z1``
            scored against its ``z2`` row and the queue (:func:`modules.losses.moco_loss`).

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
    return _kernel_losses(z1, z2, queue, [(1.0, gamma, temperature, slice(None))])


def sum_kernel_loss(z1: Tensor, z2: Tensor, tau1: float, tau2: float, lam: float, *,
                    queue: Tensor | None = None) -> Tensor:
    r"""Kernel-InfoNCE with the Simple Sum kernel: Laplacian and Gaussian losses, weighted.

    Tan et al., "Contrastive Learning is Spectral Clustering on Similarity Graph"
    (arXiv:2303.15103), section 5.2 "Simple Sum Kernel" and Table 2 ("Sum"), built from the
    core loss :math:`\mathcal{C}` of Algorithm 2 (``kernel_infonce_loss``):

    .. math::
        \mathcal{L} = \lambda\, \mathcal{C}(z, z', \gamma = 1, \tau_1)
        + (1 - \lambda)\, \mathcal{C}(z, z', \gamma = 2, \tau_2)

    The paper defines "Sum" twice, and the two are different objectives. Section 5.2 sums the
    two *kernels* and puts the sum inside eq. 8, :math:`-\log K(q, p_1) / \sum_i K(q, p_i)` with
    :math:`K = e^{-\lVert\cdot\rVert^2/\tau_2} + e^{-\lVert\cdot\rVert/\tau_1}` (no
    :math:`\lambda`); Table 2, the definition its experiments use, sums the two *losses*, weighted
    by :math:`\lambda`. We follow Table 2. On the same input (two views of 32 standard-normal
    16-dimensional rows, seed 0, :math:`\tau_1 = \tau_2 = 0.5`, :math:`\lambda = 0.5`) Table 2's
    loss is 4.464 and the summed kernel inside eq. 8 gives 4.324. The authors' released code
    shares one temperature between the two terms and searches :math:`\gamma`; we keep the
    paper's two temperatures :math:`\tau_1, \tau_2` (Table 2, and Table 3's search space).

    Args:
        z1: (N, d) embeddings of the first view (normalised here, once, for both terms).
        z2: (N, d) embeddings of the second view; row i is the positive of ``z1[i]``.
        tau1: :math:`\tau_1 > 0`, temperature of the Laplacian (:math:`\gamma = 1`) term.
        tau2: :math:`\tau_2 > 0`, temperature of the Gaussian (:math:`\gamma = 2`) term.
        lam: :math:`\lambda \in [0, 1]`, weight of the Laplacian term.
        queue: ``None``, or (K, d) negatives: both terms against a queue, as MoCo's eq. 1.

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
    whole = slice(None)
    return _kernel_losses(z1, z2, queue, [(lam, 1.0, tau1, whole), (1 - lam, 2.0, tau2, whole)])


def concat_sum_kernel_loss(z1: Tensor, z2: Tensor, tau1: float, tau2: float,
                           lam: float, *, queue: Tensor | None = None) -> Tensor:
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
        queue: ``None``, or (K, d) negatives, split into halves like the embeddings.

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
    d = z1.shape[-1]
    if d % 2:
        raise ValueError(
            f"concat_sum_kernel_loss splits each embedding into two halves, so d must be "
            f"even; got d={d}"
        )
    # each full row is normalised once, then split; the halves are not re-normalised
    return _kernel_losses(z1, z2, queue, [(lam, 1.0, tau1, slice(None, d // 2)),
                                          (1 - lam, 2.0, tau2, slice(d // 2, None))])


def generalised_nt_xent_loss(z: Tensor, z_prime: Tensor,
                             temperature: float = 0.5) -> Tensor:
    r"""Generalised NT-Xent of a finite sample, one draw of the augmentation pair :math:`T, T'`.

    Calder & Lee, "Understanding Contrastive Learning through Variational Analysis and Neural
    Network Optimization Perspectives" (arXiv:2503.10812), eq. 4-5 with
    :math:`\Psi(t) = \log(1+t)`, :math:`\eta(t) = e^{-t/\tau}`, the measure :math:`\mu` the
    empirical one of :math:`x_1, \dots, x_n`, :math:`z_i = f(T(x_i))`,
    :math:`z'_i = f(T'(x_i))`, both projected onto :math:`\mathbb{S}^{d-1}`:

    .. math::
        L = \frac{1}{n} \sum_{i=1}^n \log\Big(1 + \frac{\frac{1}{n} \sum_{j=1}^n
            e^{-\lVert z_i - z'_j\rVert^2 / (2\tau)}}{e^{-\lVert z_i - z'_i\rVert^2 / (2\tau)}}\Big)

    (the sum over :math:`j` includes :math:`j = i`, as eq. 4 drops the indicator of eq. 1).
    Unlike :func:`nt_xent_loss`, only the rows of ``z`` are anchors, their negatives are the
    rows of ``z_prime`` only, and the mean over them, not the sum, sits beside the positive:
    the population cost whose dynamics the paper studies, not SimCLR's batch loss. It is the
    cost of :mod:`modules.theory.contrastive_dynamics` (as ``nt_xent_cost``).

    Args:
        z: (n, d) embeddings of the first views, any norm (normalised here).
        z_prime: (n, d) embeddings of the second views; row i is the positive of ``z[i]``.
        temperature: :math:`\tau > 0`.

    Returns:
        A differentiable scalar in the inputs' dtype.

    >>> z = torch.eye(2, dtype=torch.float64)  # two orthogonal points, both views equal
    >>> value = generalised_nt_xent_loss(z, z, temperature=1.0)  # log(1 + (1 + e^{-1}) / 2)
    >>> round(value.item(), 6) == round(math.log(1 + (1 + math.exp(-1)) / 2), 6)
    True
    """
    check_positive("temperature", temperature)
    if z.shape != z_prime.shape or z.dim() != 2:
        raise ValueError(f"z and z_prime must both be (n, d); got {tuple(z.shape)} and "
                         f"{tuple(z_prime.shape)}")
    u, v = F.normalize(z, dim=-1), F.normalize(z_prime, dim=-1)  # (n, d) on the sphere
    # On the sphere ||u_i - v_j||^2 - ||u_i - v_i||^2 = 2 (u_i . v_i - u_i . v_j).
    cross = u @ v.T  # (n, n)
    # log of the ratio in eq. 4, row by row, as a log-mean-exp (stable for small tau).
    logits = (cross - cross.diagonal()[:, None]) / temperature  # (n, n)
    log_ratio = torch.logsumexp(logits, dim=1) - math.log(z.shape[0])  # (n,)
    return F.softplus(log_ratio).mean()  # log(1 + ratio)


def gaussian_infonce_loss(z1: Tensor, z2: Tensor, temperature: float = 0.5) -> Tensor:
    r"""InfoNCE with the Gaussian kernel on unconstrained embeddings.

    Tan et al., "Contrastive Learning is Spectral Clustering on Similarity Graph"
    (arXiv:2303.15103), eq. 1 with :math:`k(z_i - z_j) = \exp(-\lVert z_i - z_j\rVert^2 / (2\tau))`,
    the kernel of Theorem 3.1. The two views are stacked into 2N rows :math:`z_k`; each row's
    positive :math:`p(k)` is its other view, and the denominator runs over the other 2N - 1
    rows:

    .. math::
        \mathcal{L} = \frac{1}{2N} \sum_{k=1}^{2N} -\log
            \frac{\exp(-\lVert z_k - z_{p(k)}\rVert^2 / (2\tau))}
                 {\sum_{j \ne k} \exp(-\lVert z_k - z_j\rVert^2 / (2\tau))}

    This is :func:`kernel_infonce_loss` with :math:`\gamma = 2` and temperature :math:`2\tau`
    on embeddings that are *not* normalised (the free embeddings :math:`Z` of Theorem 3.1), with
    every squared distance taken from explicit differences, exact at coinciding rows: meant for
    the small batches of that experiment (it holds a (2N, 2N, d) tensor).

    Args:
        z1, z2: (N, d) anchors and their positives (not normalised).
        temperature: :math:`\tau > 0`.

    >>> z = torch.zeros(2, 2, dtype=torch.float64)  # four coinciding rows: -log(1 / 3)
    >>> round(gaussian_infonce_loss(z, z).item(), 6) == round(float(torch.log(torch.tensor(3.))), 6)
    True
    """
    check_positive("temperature", temperature)
    z = torch.cat([z1, z2], dim=0)  # (2N, d)
    sq = (z[:, None, :] - z[None, :, :]).pow(2).sum(dim=-1)  # (2N, 2N)
    return _two_view_cross_entropy(-sq / (2 * temperature))
