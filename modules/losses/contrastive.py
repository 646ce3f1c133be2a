"""Contrastive losses as pure functions of tensors (no Trainer, no gather, no memory bank)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def _two_view_logits_targets(z1: Tensor, z2: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Stack two views, L2-normalise in float32, and build the self-pair mask and targets.

    Returns ``z`` (2N, d) normalised, ``self_mask`` (2N, 2N) True on the diagonal, and
    ``targets`` (2N,) the row index of each anchor's other view.
    """
    if z1.shape != z2.shape or z1.dim() != 2:
        raise ValueError(
            f"z1 and z2 must both have shape (N, d); got {tuple(z1.shape)} and {tuple(z2.shape)}"
        )
    n = z1.shape[0]
    # Always compute in float32 or wider, even under autocast.
    dtype = torch.float64 if z1.dtype == torch.float64 else torch.float32
    z = F.normalize(torch.cat([z1, z2], dim=0).to(dtype), dim=-1)  # z: (2N, d)
    self_mask = torch.eye(2 * n, dtype=torch.bool, device=z.device)
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return z, self_mask, targets


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
        A scalar float32 (float64 for float64 inputs) tensor, differentiable.

    >>> z = torch.nn.functional.one_hot(torch.arange(4), 4).float()
    >>> round(nt_xent_loss(z, z, temperature=1.0).item(), 4)  # -log(e / (e + 6))
    1.1654
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    z, self_mask, targets = _two_view_logits_targets(z1, z2)
    logits = z @ z.T / temperature  # logits: (2N, 2N)
    # Remove only the self-pair, by masking, so the positive stays in the denominator.
    logits = logits.masked_fill(self_mask, float("-inf"))
    return F.cross_entropy(logits, targets)
