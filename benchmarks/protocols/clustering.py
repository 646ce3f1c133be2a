"""Clustering scores of frozen features: how well k-means recovers the labels."""

from __future__ import annotations

import numpy as np

from benchmarks.protocols.linear_probe import _as_tensors
from modules.ranges import check_count


def check_cluster_settings(n_clusters: int | None = None) -> None:
    """``n_clusters`` is at least 2 (one cluster scores 0 whatever the features), or ``None``
    for the number of distinct labels."""
    if n_clusters is not None:
        check_count("n_clusters", n_clusters, low=2)


def cluster_scores(x, y, n_clusters: int | None = None, seed: int = 0,
                   max_silhouette_samples: int = 5000) -> dict[str, float]:
    """k-means on the features, scored against the labels, and the silhouette of the labels.

    - ``ari``: adjusted Rand index (Hubert & Arabie 1985) of the k-means partition
      (scikit-learn's ``KMeans``, k-means++ with 10 restarts, ``random_state=seed``; ``n_clusters``
      defaults to the number of distinct labels) against the labels; 1 is a perfect match, 0 is
      chance. The cluster-specific-representation paper reports ARI.
    - ``nmi``: normalised mutual information of the same partition.
    - ``silhouette``: the silhouette (Rousseeuw 1987) of the *true* labels with the cosine
      metric, in [-1, 1], on a deterministic subsample above ``max_silhouette_samples``
      (TransFusion's Silhouette Index).

    >>> import torch
    >>> x = torch.tensor([[0.0, 1.0], [0.1, 1.0], [1.0, 0.0], [1.0, 0.1]])
    >>> scores = cluster_scores(x, torch.tensor([0, 0, 1, 1]))
    >>> round(scores["ari"], 3), round(scores["nmi"], 3)
    (1.0, 1.0)
    """
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score, silhouette_score

    check_cluster_settings(n_clusters)
    x, y = _as_tensors(x, y)
    features, labels = x.numpy().astype(np.float64), y.numpy()
    k = n_clusters or len(np.unique(labels))
    assignment = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(features)
    rows = np.random.default_rng(seed).permutation(len(labels))[:max_silhouette_samples]
    silhouette = (float(silhouette_score(features[rows], labels[rows], metric="cosine"))
                  if len(np.unique(labels[rows])) > 1 else float("nan"))
    return {"ari": float(adjusted_rand_score(labels, assignment)),
            "nmi": float(normalized_mutual_info_score(labels, assignment)),
            "silhouette": silhouette}
