"""MoCo's InfoNCE against a queue of negatives, with Kernel-InfoNCE's kernels on its logits."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from modules.losses.contrastive import (
    _autocast_disabled,
    _compute_dtype,
    _distance_power,
    check_positive,
)


def moco_loss(q: Tensor, k: Tensor, queue: Tensor, temperature: float = 0.1,
              gamma: float | None = None) -> Tensor:
    r"""InfoNCE of MoCo (He et al., arXiv:1911.05722, eq. 1), optionally with an exponential
    kernel on its logits (Tan et al., arXiv:2303.15103, eq. 7-8 and its Table 4).

    Each query :math:`q_i` has one positive key :math:`k_i` and the :math:`K` queued negatives
    :math:`n_j`; all are L2-normalised here. With ``gamma=None`` the logits are cosine
    similarities, else :math:`-\lVert q - k\rVert^\gamma`:

    .. math::
        \mathcal{L} = \frac{1}{N}\sum_i -\log \frac{\exp(s(q_i, k_i)/\tau)}
        {\exp(s(q_i, k_i)/\tau) + \sum_{j=1}^{K} \exp(s(q_i, n_j)/\tau)}

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
    if q.shape != k.shape or q.dim() != 2 or queue.dim() != 2 or queue.shape[1] != q.shape[1]:
        raise ValueError(f"q and k must be (N, d) and queue (K, d); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)} and {tuple(queue.shape)}")
    dtype = _compute_dtype(q)
    with _autocast_disabled(q):  # float32 matmuls even under bf16/fp16 autocast
        q, k, queue = (F.normalize(t.to(dtype), dim=-1) for t in (q, k, queue))
        positives = (q * k).sum(-1, keepdim=True)  # (N, 1) cosine similarities
        negatives = q @ queue.T  # (N, K)
        cosine = torch.cat([positives, negatives], dim=1)
        if gamma is None:
            logits = cosine / temperature
        else:  # ||a - b||^2 = 2 - 2 cos for unit vectors
            logits = -_distance_power((2.0 - 2.0 * cosine).clamp_min(0), gamma) / temperature
        targets = torch.zeros(len(q), dtype=torch.long, device=q.device)
        return F.cross_entropy(logits, targets)
