"""k-nearest-neighbour classification with cosine similarity on frozen features."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmarks.protocols.linear_probe import _as_tensors
from modules.ranges import check_count, check_positive


def check_knn_settings(k: int = 200, temperature: float | None = None) -> None:
    """At least one neighbour (at most the training size is checked on the features), and a
    positive temperature or none: a negative one turns the weighted vote upside down."""
    check_count("k", k)
    if temperature is not None:
        check_positive("temperature", temperature)


@torch.no_grad()
def knn_accuracy(train_x, train_y, test_x, test_y, k: int = 200, temperature: float | None = None,
                 chunk_size: int = 1024, device: torch.device | str | None = None) -> float:
    """Top-1 accuracy of a k-NN vote among the ``k`` training points of highest cosine similarity.

    ``temperature=None``: plain majority vote (ties go to the smallest label, as scikit-learn's
    ``KNeighborsClassifier`` does). A float: the weighted vote of Wu et al. 2018
    (arXiv:1805.01978), weights :math:`\\exp(s / T)` for similarity :math:`s`.
    TransFusion (its Table 3) reports k = 50 and k = 200.
    """
    train_x, train_y = _as_tensors(train_x, train_y)
    test_x, test_y = _as_tensors(test_x, test_y)
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= len(train_y):
        raise ValueError(f"k must be in [1, {len(train_y)}] (the training size), got {k!r}")
    check_knn_settings(k, temperature)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    num_classes = int(max(train_y.max(), test_y.max())) + 1
    train = F.normalize(train_x, dim=1).to(device)
    train_y_dev = train_y.to(device)
    correct = 0
    for start in range(0, len(test_y), chunk_size):
        query = F.normalize(test_x[start:start + chunk_size], dim=1).to(device)
        sims, idx = (query @ train.T).topk(k, dim=1)  # sims, idx: (q, k)
        weights = torch.ones_like(sims) if temperature is None else (sims / temperature).exp()
        votes = torch.zeros(len(query), num_classes, device=device)
        votes.scatter_add_(1, train_y_dev[idx], weights)
        correct += (votes.argmax(1).cpu() == test_y[start:start + chunk_size]).sum().item()
    return correct / len(test_y)
