"""Training monitors: cheap measures of a representation that a method logs as it trains, pure
functions of tensors that return tensors (no value is read on the host, so a step never waits
for the device).

* :func:`rankme`: the effective rank of a batch of embeddings (Garrido, Balestriero, Najman and
  LeCun, "RankMe: Assessing the Downstream Performance of Pretrained Self-Supervised
  Representations by Their Rank", ICML 2023, arXiv:2210.02885, eq. 1). It needs no labels, so a
  search can schedule on it where there are none.
* :func:`knn_vote_accuracy`: the accuracy of a cosine k-nearest-neighbour majority vote against a
  bank of training embeddings, the online kNN monitor of solo-learn and stable-pretraining.
* :class:`FeatureBank`: the last training embeddings and their labels, a ring of fixed size on
  the device, written without a host synchronisation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def rankme(z: Tensor, eps: float = 1e-7) -> Tensor:
    r"""RankMe of embeddings ``z`` ``(N, d)``, eq. 1 of arXiv:2210.02885: the exponential of the
    entropy of the normalised singular values,

    .. math::
        \operatorname{RankMe}(Z) = \exp\Big(-\sum_{k=1}^{\min(N, d)} p_k \log p_k\Big),
        \qquad p_k = \frac{\sigma_k(Z)}{\lVert \sigma(Z) \rVert_1} + \epsilon.

    It lies between 1 (every embedding on one line) and :math:`\min(N, d)` (singular values all
    equal). Computed in float32 at least (the singular values of a bf16 batch are too coarse);
    a 0-d tensor on ``z``'s device, NaN when ``z`` holds a non-finite value (a diverged run:
    the SVD itself would fail), decided on the device.

    >>> round(rankme(torch.eye(4)).item(), 4)
    4.0
    >>> round(rankme(torch.ones(8, 3)).item(), 4)
    1.0
    >>> rankme(torch.tensor([[1.0, float("nan")], [0.0, 1.0]])).isnan().item()
    True
    """
    z = z.float()
    finite = torch.isfinite(z).all()
    sigma = torch.linalg.svdvals(torch.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0))
    p = sigma / sigma.sum().clamp_min(torch.finfo(sigma.dtype).tiny) + eps  # p: (min(N, d),)
    return torch.where(finite, torch.exp(-(p * p.log()).sum()), torch.nan)


def knn_vote_accuracy(bank: Tensor, bank_labels: Tensor, queries: Tensor, labels: Tensor,
                      k: int, num_classes: int) -> Tensor:
    """The fraction of ``queries`` ``(Q, d)`` whose ``labels`` ``(Q,)`` win the majority vote of
    their ``k`` most cosine-similar rows of ``bank`` ``(M, d)`` (labels ``bank_labels``
    ``(M,)``); ties go to the smallest label. ``k`` is capped at ``M``; a 0-d tensor.

    >>> bank = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    >>> knn_vote_accuracy(bank, torch.tensor([0, 0, 1]), torch.tensor([[1.0, 0.05]]),
    ...                   torch.tensor([0]), k=2, num_classes=2).item()
    1.0
    """
    k = min(k, bank.shape[0])
    similarity = F.normalize(queries.float(), dim=1) @ F.normalize(bank.float(), dim=1).T
    nearest = similarity.topk(k, dim=1).indices  # nearest: (Q, k)
    votes = torch.zeros(queries.shape[0], num_classes, device=queries.device)
    votes.scatter_add_(1, bank_labels[nearest], torch.ones_like(nearest, dtype=votes.dtype))
    return (votes.argmax(1) == labels).float().mean()


class FeatureBank:
    """The last ``size`` training embeddings and their labels, on the device.

    :meth:`add` writes a batch at a position kept on the host (a Python integer), so it never
    reads the device; :meth:`filled` gives the rows written so far.

    >>> bank = FeatureBank(size=4)
    >>> for start in (0, 3):
    ...     bank.add(torch.arange(start, start + 3.0).unsqueeze(1), torch.zeros(3).long())
    >>> bank.filled()[0].flatten().tolist()
    [4.0, 5.0, 2.0, 3.0]
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.features: Tensor | None = None
        self.labels: Tensor | None = None
        self.position = 0  # the next row to write
        self.count = 0  # rows written, at most size

    def add(self, features: Tensor, labels: Tensor) -> None:
        features, labels = features.detach()[-self.size:], labels.detach()[-self.size:]
        if self.features is None or self.features.shape[1:] != features.shape[1:]:
            self.features = features.new_zeros(self.size, *features.shape[1:])
            self.labels = labels.new_zeros(self.size)
            self.position = self.count = 0
        elif self.features.device != features.device:  # restored from a checkpoint on the CPU
            self.features, self.labels = (self.features.to(features.device),
                                          self.labels.to(features.device))
        # made on the device: an index copied from the host would wait for the device's queue
        rows = (torch.arange(features.shape[0], device=features.device) + self.position) % self.size
        self.features.index_copy_(0, rows, features.to(self.features.dtype))
        self.labels.index_copy_(0, rows, labels)
        self.position = (self.position + features.shape[0]) % self.size
        self.count = min(self.size, self.count + features.shape[0])

    def state(self) -> dict[str, Tensor | int]:
        """What a checkpoint keeps of the bank, so that a resumed run's monitors read what an
        uninterrupted run's do (tensors and integers: a weights-only load reads them)."""
        if self.features is None:
            return {}
        return {"features": self.features, "labels": self.labels, "position": self.position,
                "count": self.count}

    def restore(self, state: dict[str, Tensor | int]) -> None:
        """The bank as :meth:`state` left it (an empty state: an empty bank)."""
        if state:
            self.features, self.labels = state["features"], state["labels"]
            self.position, self.count = int(state["position"]), int(state["count"])

    def filled(self) -> tuple[Tensor, Tensor]:
        """``(features, labels)`` of the rows written so far."""
        if self.features is None:
            raise ValueError("the bank is empty: nothing was added")
        return self.features[:self.count], self.labels[:self.count]
