"""Clustering scores of frozen features, how well k-means recovers the labels: the ``cluster``
protocol.

References: Sabanayagam, Al-Dabooni and Esser, "Cluster Specific Representation Learning"
(preprint), arXiv:2412.03471 (k-means ARI of the embeddings); Liu et al., "TransFusion:
Contrastive Learning with Attention Layers" (a submission under double-blind review, no arXiv
id), the Silhouette Index of Rousseeuw 1987.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from benchmarks.protocols.linear_probe import _as_tensors
from benchmarks.protocols.protocol import (
    EvaluationInputs,
    EvaluationProtocol,
    Metric,
    ProtocolOutput,
)
from modules.methods.capabilities import Encoder
from modules.ranges import MAX_SAMPLES, check_count

#: Who runs k-means and the silhouette: torch on the device, or scikit-learn.
CLUSTER_BACKENDS = ("torch", "sklearn")


def check_cluster_settings(n_clusters: int | None = None, backend: str = "torch") -> None:
    """``n_clusters`` is at least 2 (one cluster scores 0 whatever the features), or ``None``
    for the number of distinct labels; ``backend`` is one of :data:`CLUSTER_BACKENDS`."""
    if n_clusters is not None:
        check_count("n_clusters", n_clusters, low=2, high=MAX_SAMPLES)
    if not isinstance(backend, str) or backend not in CLUSTER_BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(CLUSTER_BACKENDS)}, "
                         f"got {backend!r}")


def _squared_distances(x: Tensor, x_sq: Tensor, centres: Tensor) -> Tensor:
    """(n, k) squared Euclidean distances, :math:`\\lVert x\\rVert^2 - 2x^\\top c +
    \\lVert c\\rVert^2` (as scikit-learn computes them), clamped at 0."""
    return (x_sq[:, None] - 2 * x @ centres.T + (centres * centres).sum(1)[None]).clamp_min(0)


def _kmeans_plus_plus(x: Tensor, x_sq: Tensor, k: int, generator: torch.Generator) -> Tensor:
    """Greedy k-means++ (Arthur & Vassilvitskii 2007) as scikit-learn runs it: each new centre
    is the best (lowest potential) of ``2 + floor(ln k)`` candidates drawn proportionally to
    the squared distance to the nearest centre. The uniform draws come from ``generator`` on
    the CPU, so the device does not change them."""
    n = len(x)
    trials = 2 + int(math.log(k))
    first = int(torch.randint(n, (1,), generator=generator))
    centres = [x[first]]
    closest = _squared_distances(x, x_sq, x[first:first + 1])[:, 0]  # (n,)
    for _ in range(1, k):
        cumulative = closest.double().cumsum(0)
        draws = torch.rand(trials, generator=generator, dtype=torch.float64).to(x.device)
        candidates = torch.searchsorted(cumulative, draws * cumulative[-1]).clamp_max(n - 1)
        distances = torch.minimum(closest[None],
                                  _squared_distances(x, x_sq, x[candidates]).T)  # (trials, n)
        best = int(distances.sum(1).argmin())
        closest = distances[best]
        centres.append(x[candidates[best]])
    return torch.stack(centres)


def kmeans(x: Tensor, k: int, n_init: int = 10, max_iter: int = 300, tol: float = 1e-4,
           seed: int = 0) -> tuple[Tensor, float]:
    """k-means (Lloyd) from ``n_init`` k-means++ starts on ``x``'s device; the partition of
    lowest inertia. scikit-learn's ``KMeans(n_clusters=k, n_init=10)`` settings: at most
    ``max_iter`` iterations, stopped when the centres move by a squared total of at most
    ``tol`` times the features' mean variance, or when no point changes cluster; an emptied
    cluster is moved to the point farthest from its centre.

    Returns ``(labels (n,) int64 on the CPU, inertia)``.

    >>> x = torch.tensor([[0.0, 0.0], [0.0, 0.1], [5.0, 5.0], [5.1, 5.0]])
    >>> labels, _ = kmeans(x, 2)
    >>> bool(labels[0] == labels[1] != labels[2] == labels[3])
    True
    """
    generator = torch.Generator().manual_seed(seed)
    x = x - x.mean(0)  # as scikit-learn does: better conditioned distances
    x_sq = (x * x).sum(1)
    threshold = tol * float(x.var(0, correction=0).mean())
    best_labels, best_inertia = None, math.inf
    for _ in range(n_init):
        centres = _kmeans_plus_plus(x, x_sq, k, generator)
        labels = None
        for _ in range(max_iter):
            distances = _squared_distances(x, x_sq, centres)
            new_labels = distances.argmin(1)
            counts = torch.bincount(new_labels, minlength=k)
            sums = torch.zeros_like(centres).index_add_(0, new_labels, x)
            new_centres = sums / counts.clamp_min(1)[:, None].to(x.dtype)
            if bool((counts == 0).any()):
                far = distances.gather(1, new_labels[:, None])[:, 0].argsort(descending=True)
                empty = (counts == 0).nonzero()[:, 0]
                new_centres[empty] = x[far[:len(empty)]]
            shift = float(((new_centres - centres) ** 2).sum())
            unchanged = labels is not None and bool((new_labels == labels).all())
            centres, labels = new_centres, new_labels
            if unchanged or shift <= threshold:
                break
        distances = _squared_distances(x, x_sq, centres)
        labels = distances.argmin(1)
        inertia = float(distances.gather(1, labels[:, None]).sum())
        if inertia < best_inertia:
            best_labels, best_inertia = labels, inertia
    return best_labels.cpu(), best_inertia


def cosine_silhouette(x: Tensor, labels: Tensor) -> float:
    """The mean silhouette (Rousseeuw 1987) of ``labels`` with the cosine distance
    :math:`1 - \\cos(x_i, x_j)` (clipped to [0, 2], 0 on the diagonal), as scikit-learn's
    ``silhouette_score(metric="cosine")``: a point alone in its label scores 0."""
    unit = torch.nn.functional.normalize(x, dim=1)
    distance = (1 - unit @ unit.T).clamp(0, 2)
    distance.fill_diagonal_(0)
    _, index = torch.unique(labels.to(x.device), return_inverse=True)
    onehot = torch.nn.functional.one_hot(index).to(x.dtype)  # (n, L)
    counts = onehot.sum(0)
    totals = distance @ onehot  # (n, L): summed distance to each label's points
    own = counts[index]
    inside = totals.gather(1, index[:, None])[:, 0] / (own - 1).clamp_min(1)
    between = (totals / counts).masked_fill(onehot.bool(), math.inf).min(1).values
    scores = (between - inside) / torch.maximum(inside, between)
    scores = torch.where(own > 1, torch.nan_to_num(scores), 0.0)
    return float(scores.mean())


def cluster_scores(x, y, n_clusters: int | None = None, seed: int = 0,
                   max_silhouette_samples: int = 5000, backend: str = "torch",
                   device: torch.device | str | None = None) -> dict[str, float]:
    """k-means on the features, scored against the labels, and the silhouette of the labels.

    - ``ari``: adjusted Rand index (Hubert & Arabie 1985) of the k-means partition (k-means++
      with 10 restarts, seeded with ``seed``; ``n_clusters`` defaults to the number of
      distinct labels) against the labels; 1 is a perfect match, 0 is chance. The
      cluster-specific-representation paper reports ARI.
    - ``nmi``: normalised mutual information of the same partition.
    - ``silhouette``: the silhouette (Rousseeuw 1987) of the *true* labels with the cosine
      metric, in [-1, 1], on a deterministic subsample above ``max_silhouette_samples``
      (TransFusion's Silhouette Index).

    ``backend="torch"``: :func:`kmeans` and :func:`cosine_silhouette` on ``device`` (CUDA when
    there is one; float64 on the CPU, float32 on a GPU). ``backend="sklearn"``: scikit-learn's
    ``KMeans(n_init=10, random_state=seed)`` and ``silhouette_score``. The silhouette is the
    same number either way; k-means draws its starts from different random streams, so the two
    partitions agree in distribution, not draw for draw.

    >>> x = torch.tensor([[0.0, 1.0], [0.1, 1.0], [1.0, 0.0], [1.0, 0.1]])
    >>> scores = cluster_scores(x, torch.tensor([0, 0, 1, 1]))
    >>> round(scores["ari"], 3), round(scores["nmi"], 3)
    (1.0, 1.0)
    """
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    check_cluster_settings(n_clusters, backend)
    x, y = _as_tensors(x, y)
    labels = y.numpy()
    k = n_clusters or len(np.unique(labels))
    rows = np.random.default_rng(seed).permutation(len(labels))[:max_silhouette_samples]
    several = len(np.unique(labels[rows])) > 1
    if backend == "sklearn":
        from sklearn.cluster import KMeans
        from sklearn.metrics import silhouette_score

        features = x.numpy().astype(np.float64)
        assignment = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(features)
        silhouette = (float(silhouette_score(features[rows], labels[rows], metric="cosine"))
                      if several else float("nan"))
    else:
        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        features = x.to(device, torch.float64 if device.type == "cpu" else torch.float32)
        assignment = kmeans(features, k, seed=seed)[0].numpy()
        silhouette = (cosine_silhouette(features[torch.as_tensor(rows).to(device)],
                                        y[torch.as_tensor(rows)]) if several else float("nan"))
    return {"ari": float(adjusted_rand_score(labels, assignment)),
            "nmi": float(normalized_mutual_info_score(labels, assignment)),
            "silhouette": silhouette}


@dataclass(frozen=True)
class ClusterSettings:
    """``n_clusters``: k of k-means (at least 2), or ``None`` for the number of distinct test
    labels; ``backend``: one of :data:`CLUSTER_BACKENDS` (``torch``: :func:`kmeans` and
    :func:`cosine_silhouette` on the device; ``sklearn``: KMeans and silhouette_score)."""

    n_clusters: int | None
    backend: str

    def __post_init__(self) -> None:
        check_cluster_settings(self.n_clusters, self.backend)


def check_cluster_sizes(settings: ClusterSettings, sizes: dict[str, int]) -> None:
    """k-means finds at most as many clusters as there are test points.

    >>> check_cluster_sizes(ClusterSettings(100000, "torch"), {"test": 450})
    Traceback (most recent call last):
    ...
    ValueError: n_clusters must be at most the 450 test points, got 100000
    """
    if settings.n_clusters is not None and settings.n_clusters > sizes["test"]:
        raise ValueError(f"n_clusters must be at most the {sizes['test']} test points, got "
                         f"{settings.n_clusters}")


def run_cluster(settings: ClusterSettings, inputs: EvaluationInputs) -> ProtocolOutput:
    _, _, test_x, test_y = inputs.features()  # k-means on the test features against the labels
    scores = cluster_scores(test_x, test_y, n_clusters=settings.n_clusters, seed=inputs.seed,
                            backend=settings.backend)
    return ProtocolOutput(metrics={"kmeans_ari": scores["ari"], "kmeans_nmi": scores["nmi"],
                                   "silhouette": scores["silhouette"]})


CLUSTER = EvaluationProtocol(
    name="cluster",
    summary="k-means on the frozen test features against the labels (ARI, NMI), and the "
            "cosine silhouette of the labels",
    settings=ClusterSettings, needs=Encoder, run=run_cluster,
    example={"n_clusters": None, "backend": "torch"}, check_sizes=check_cluster_sizes,
    metrics=(Metric("kmeans_ari", "k-means ARI", percent=False, bounds=(-0.5, 1.0)),
             Metric("kmeans_nmi", "k-means NMI", percent=False, bounds=(0.0, 1.0)),
             Metric("silhouette", "Silhouette (cosine)", percent=False,
                    bounds=(-1.0, 1.0))),
)
