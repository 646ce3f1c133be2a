"""k-nearest-neighbour classification with cosine similarity on frozen features: the ``knn``
protocol.

References: Wu, Xiong, Yu and Lin, "Unsupervised Feature Learning via Non-Parametric Instance
Discrimination" (CVPR 2018), arXiv:1805.01978 (the weighted vote); TransFusion's Table 3 (Liu et
al., "TransFusion: Contrastive Learning with Attention Layers", no arXiv id) reports k = 50 and
k = 200, run "as recommended by Yeh et al. (2022)" (Yeh, Hong, Hsu, Liu, Chen and LeCun,
"Decoupled Contrastive Learning", ECCV 2022, arXiv:2110.06848), the weighted vote of the MoCo
CIFAR-10 demo's kNN monitor (k = 200, T = 0.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from benchmarks.protocols.linear_probe import _as_tensors
from benchmarks.protocols.protocol import (
    EvaluationInputs,
    EvaluationProtocol,
    Metric,
    ProtocolOutput,
)
from modules.methods.capabilities import Encoder
from modules.ranges import MAX_SAMPLES, MAX_TEMPERATURE, check_count, check_positive


def check_knn_settings(k: int = 200, temperature: float | None = None) -> None:
    """At least one neighbour (at most the training size is checked on the features), and a
    positive temperature or none: a negative one turns the weighted vote upside down."""
    check_count("k", k, high=MAX_SAMPLES)
    if temperature is not None:
        check_positive("temperature", temperature, high=MAX_TEMPERATURE)


@torch.no_grad()
def knn_accuracy(train_x, train_y, test_x, test_y, k: int = 200, temperature: float | None = None,
                 chunk_size: int = 1024, device: torch.device | str | None = None) -> float:
    """Top-1 accuracy of a k-NN vote among the ``k`` training points of highest cosine similarity.

    ``temperature=None``: plain majority vote (ties go to the smallest label, as scikit-learn's
    ``KNeighborsClassifier`` does). A float :math:`T`: the weighted vote of Wu et al. 2018
    (arXiv:1805.01978) over the neighbours :math:`N_k(q)` of query :math:`q`, with cosine
    similarities :math:`s_j` and labels :math:`y_j`,

    .. math::
        \\hat y(q) = \\arg\\max_c \\sum_{j \\in N_k(q)} [y_j = c] \\exp(s_j / T).

    TransFusion (its Table 3) reports k = 50 and k = 200; ``transfusion_table3`` votes at
    T = 0.1. One neighbour at similarity 1 outvotes two at 0.2 below T = 0.8 / ln 2:

    >>> train = [[1.0, 0.0], [0.2, 0.98], [0.2, -0.98]]
    >>> knn_accuracy(train, [0, 1, 1], [[1.0, 0.0]], [0], k=3, temperature=0.1, device="cpu")
    1.0
    >>> knn_accuracy(train, [0, 1, 1], [[1.0, 0.0]], [0], k=3, device="cpu")  # majority
    0.0
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


@dataclass(frozen=True)
class KnnSettings:
    """``k``: the number of neighbours, or a list of them (one metric each); ``temperature``:
    ``None`` for the majority vote, a positive float for the weighted vote of Wu et al."""

    k: int | list[int]
    temperature: float | None

    @property
    def sizes(self) -> list[int]:
        return self.k if isinstance(self.k, list) else [self.k]

    def __post_init__(self) -> None:
        for k in self.sizes or [self.k]:  # an empty list is refused as it is
            check_knn_settings(k, self.temperature)


def run_knn(settings: KnnSettings, inputs: EvaluationInputs) -> ProtocolOutput:
    train_x, train_y, test_x, test_y = inputs.features()
    out = ProtocolOutput()
    for k in settings.sizes:
        if k > len(train_y):
            out.notes[f"knn{k}_top1"] = f"skipped: k={k} > {len(train_y)} training points"
            continue
        out.metrics[f"knn{k}_top1"] = knn_accuracy(train_x, train_y, test_x, test_y, k=k,
                                                   temperature=settings.temperature)
    return out


KNN = EvaluationProtocol(
    name="knn",
    summary="the vote of the k training features of highest cosine similarity, scored on the "
            "test features",
    settings=KnnSettings, needs=Encoder, run=run_knn,
    example={"k": [50, 200], "temperature": None},
    metrics=(Metric("knn{k}_top1", "kNN@{k} top-1 (%)", percent=True),),
    metric_names=lambda settings: [f"knn{k}_top1" for k in settings.sizes],
)
