r"""MoCo's InfoNCE against a queue of negatives, with Kernel-InfoNCE's kernels on its logits.

The two-view losses of :mod:`modules.losses.contrastive` take ``queue=`` and then score each
query against its key and the queue with the functions here, so one loss function (and one line
of :data:`modules.losses.CONTRASTIVE_LOSSES`) serves SimCLR and MoCo alike.

Where the Kernel-InfoNCE paper and its authors' MoCo code differ (Tan et al., "Contrastive
Learning is Spectral Clustering on Similarity Graph", arXiv:2303.15103, Table 4 and its released
code), we follow the paper:

- the denominator holds the positive key and the K queued negatives (MoCo's eq. 1, the paper's
  eq. 8); the authors' MoCo code leaves the positive out of the denominator;
- the Simple Sum kernel weighs its Laplacian term by :math:`\lambda = 0.8` with one temperature
  0.1 for both terms ("For our simple sum kernel, we set :math:`\lambda = 0.8`"); the authors'
  MoCo code uses :math:`\lambda = 0.2` and a second temperature 0.3 for the Gaussian term. Both
  settings can be expressed (``lam``, ``tau1``, ``tau2`` of :class:`modules.methods.MoCo`);
  the positive in the denominator is fixed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from modules.losses._numerics import (
    _autocast_disabled,
    _compute_dtype,
    _distance_power,
    _unit_difference,
)
from modules.ranges import check_positive


def _check_queue_shapes(q: Tensor, k: Tensor, queue: Tensor) -> None:
    if q.shape != k.shape or q.dim() != 2 or queue.dim() != 2 or queue.shape[1] != q.shape[1]:
        raise ValueError(f"q and k must be (N, d) and queue (K, d); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)} and {tuple(queue.shape)}")


def _first_column_cross_entropy(logits: Tensor) -> Tensor:
    """Mean over the N rows of ``logits`` (N, 1 + K) of the cross-entropy against column 0, the
    positive; the K other columns are the negatives."""
    targets = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
    return F.cross_entropy(logits, targets)


def _queue_cosine_infonce(q: Tensor, k: Tensor, queue: Tensor, temperature: float) -> Tensor:
    """MoCo's eq. 1 with cosine logits on raw (N, d), (N, d), (K, d) inputs (normalised here).
    Call it with autocast disabled."""
    dtype = _compute_dtype(q)
    q, k, queue = (F.normalize(t.to(dtype), dim=-1) for t in (q, k, queue))
    positives = (q * k).sum(-1, keepdim=True)  # (N, 1) cosine similarities
    negatives = q @ queue.T  # (N, K)
    return _first_column_cross_entropy(torch.cat([positives, negatives], dim=1) / temperature)


def _queue_kernel_infonce(q: Tensor, positive_diff: Tensor, queue: Tensor, gamma: float,
                          temperature: float) -> Tensor:
    r"""MoCo's eq. 1 with logits :math:`-\lVert a - b\rVert^\gamma / \tau` on rows used as given.

    ``q`` (N, d) and ``queue`` (K, d) are (parts of) normalised rows; ``positive_diff`` (N, d)
    the matching parts of the query-key differences, computed directly
    (:func:`modules.losses._numerics._unit_difference`) so that a positive pair that nearly
    coincides keeps an accurate distance. The negatives' squared distances come from the Gram
    expansion, whose resolution is the dtype's machine epsilon.
    """
    sq_norms_q = (q * q).sum(-1, keepdim=True)  # (N, 1)
    sq_norms_queue = (queue * queue).sum(-1)  # (K,)
    negative_sq = (sq_norms_q + sq_norms_queue[None, :] - 2 * q @ queue.T).clamp_min(0)  # (N, K)
    positive_sq = (positive_diff * positive_diff).sum(-1, keepdim=True)  # (N, 1)
    distances = torch.cat([_distance_power(positive_sq, gamma),
                           _distance_power(negative_sq, gamma, torch.finfo(q.dtype).eps)], dim=1)
    return _first_column_cross_entropy(-distances / temperature)


def _normalised_queue_inputs(q: Tensor, k: Tensor, queue: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The unit queries (N, d), the query-key differences (N, d) and the unit queue (K, d), in
    float32 or wider. Call it with autocast disabled."""
    dtype = _compute_dtype(q)
    q, k, queue = (t.to(dtype) for t in (q, k, queue))
    return F.normalize(q, dim=-1), _unit_difference(q, k), F.normalize(queue, dim=-1)


def moco_loss(q: Tensor, k: Tensor, queue: Tensor, temperature: float = 0.1,
              gamma: float | None = None) -> Tensor:
    r"""InfoNCE of MoCo (He et al., "Momentum Contrast for Unsupervised Visual Representation
    Learning", arXiv:1911.05722, eq. 1), optionally with an exponential kernel on its logits (Tan
    et al., "Contrastive Learning is Spectral Clustering on Similarity Graph", arXiv:2303.15103,
    eq. 7-8 and its Table 4).

    Each query :math:`q_i` has one positive key :math:`k_i` and the :math:`K` queued negatives
    :math:`n_j`; all are L2-normalised here. With ``gamma=None`` the logits are cosine
    similarities, else :math:`-\lVert q - k\rVert^\gamma`; the positive stays in the
    denominator, as eq. 1 writes it (the Kernel-InfoNCE authors' MoCo code leaves it out; see
    the module docstring):

    .. math::
        \mathcal{L} = \frac{1}{N}\sum_i -\log \frac{\exp(s(q_i, k_i)/\tau)}
        {\exp(s(q_i, k_i)/\tau) + \sum_{j=1}^{K} \exp(s(q_i, n_j)/\tau)}

    The positive's distance is computed from the difference of the two normalised vectors, so it
    stays accurate when query and key nearly coincide; the negatives' from the Gram matrix.
    ``nt_xent_loss(q, k, temperature, queue=queue)`` and ``kernel_infonce_loss(q, k, gamma,
    temperature, queue=queue)`` are this function.

    Args:
        q: (N, d) queries (gradients flow through them).
        k: (N, d) positive keys from the momentum encoder.
        queue: (K, d) negative keys.
        temperature: :math:`\tau > 0` (0.1 in Kernel-InfoNCE's MoCo runs).
        gamma: ``None`` for cosine logits, or :math:`\gamma > 0` (1: Laplacian kernel).

    Computed in float32 (float64 for float64 inputs) with autocast off.

    >>> q = torch.eye(2, 4)
    >>> round(moco_loss(q, q, torch.eye(4)[2:], temperature=1.0).item(), 4)  # -log(e/(e+2))
    0.5514
    """
    check_positive("temperature", temperature)
    if gamma is not None and not gamma > 0:
        raise ValueError(f"gamma must be > 0 or None, got {gamma}")
    _check_queue_shapes(q, k, queue)
    with _autocast_disabled(q):  # float32 matmuls even under bf16/fp16 autocast
        if gamma is None:
            return _queue_cosine_infonce(q, k, queue, temperature)
        unit_q, diff, unit_queue = _normalised_queue_inputs(q, k, queue)
        return _queue_kernel_infonce(unit_q, diff, unit_queue, gamma, temperature)
