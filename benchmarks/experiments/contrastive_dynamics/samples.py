"""The generated data, the embedding maps and the measures of the contrastive-dynamics
experiment (:mod:`benchmarks.experiments.contrastive_dynamics`): clustered samples whose noise
coordinates the augmentations act on, the invariantly initialised network (eq. 17), and the
silhouettes and stretches its tables report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from modules.theory.contrastive_dynamics import (
    OneHiddenLayerEmbedding,
    evenly_spaced_circle,
    invariant_initialisation_,
    mlp_embedding,
)

#: The dtype of every tensor of the experiment (the kernel checks compare at float64's precision).
DTYPE = torch.float64


def clustered_samples(centres: Sequence[float], sizes: Sequence[int], clean_dim: int,
                      noise_dims: int, std: float, generator: torch.Generator
                      ) -> tuple[Tensor, np.ndarray]:
    """Generated clustered data: cluster q is Gaussian around ``(centres[q], 0, ..., 0)`` with
    standard deviation ``std`` in the ``clean_dim`` clean coordinates; the ``noise_dims``
    coordinates after them (where the augmentations act, section 4.2) are 0 in the clean sample.

    Returns:
        ``(x, labels)``: (n, clean_dim + noise_dims) float64 and (n,) cluster indices.

    >>> x, y = clustered_samples([-1.0, 1.0], [3, 2], 2, 1, 0.1, torch.Generator().manual_seed(0))
    >>> x.shape, y.tolist(), bool((x[:, 2] == 0).all())
    (torch.Size([5, 3]), [0, 0, 0, 1, 1], True)
    """
    labels = np.repeat(np.arange(len(sizes)), sizes)
    n = len(labels)
    x = torch.zeros(n, clean_dim + noise_dims, dtype=DTYPE)
    x[:, 0] = torch.tensor(centres, dtype=DTYPE)[torch.from_numpy(labels)]
    x[:, :clean_dim] += std * torch.randn(n, clean_dim, generator=generator, dtype=DTYPE)
    return x, labels


def embedding_map(spec: dict[str, Any], in_dim: int, generator: torch.Generator) -> nn.Module:
    dim = spec["dim"]
    if spec["kind"] == "one_hidden_layer":
        model = OneHiddenLayerEmbedding(in_dim, dim, spec["width_per_output"], spec["activation"],
                                        bias=spec["bias"], generator=generator, dtype=DTYPE)
    elif spec["kind"] == "mlp":
        model = mlp_embedding(in_dim, dim, spec["hidden"], spec["layers"], generator=generator,
                              dtype=DTYPE)
    else:
        raise ValueError(f"unknown network kind {spec['kind']!r}; one_hidden_layer or mlp")
    # eq. 17: the map sees only the d clean coordinates, so every augmentation leaves it unchanged.
    return invariant_initialisation_(model, clean_dim=dim)


def silhouette(z: Tensor, labels: np.ndarray) -> float:
    from sklearn.metrics import silhouette_score

    return float(silhouette_score(z.numpy(), labels))


def per_cluster_silhouette(z: Tensor, labels: np.ndarray) -> np.ndarray:
    from sklearn.metrics import silhouette_samples

    values = silhouette_samples(z.numpy(), labels)
    return np.array([values[labels == q].mean() for q in np.unique(labels)])


def longest_stretch(iterations: Sequence[int], values: Sequence[float], threshold: float
                     ) -> tuple[float, float, float]:
    """(first, last, length) of the longest run of consecutive recorded iterations whose value is
    at least ``threshold``; (nan, nan, 0) when there is none."""
    best: tuple[float, float, float] = (math.nan, math.nan, 0.0)
    start = None
    for it, value in zip(iterations, values, strict=True):
        if value >= threshold:
            start = it if start is None else start
            if math.isnan(best[0]) or it - start > best[2]:
                best = (float(start), float(it), float(it - start))
        else:
            start = None
    return best


def scaled(iterations: Sequence[int], scale: float) -> list[int]:
    return sorted({int(round(b * scale)) for b in iterations})


def uniform_arcs_silhouette(sizes: Sequence[int]) -> float:
    """Silhouette of n points evenly spaced on the circle, the clusters contiguous arcs in
    proportion to ``sizes``: the best a uniform embedding of S^1 scores when the dynamics keep
    the clusters' order (free particles do, in 2-D)."""
    labels = np.repeat(np.arange(len(sizes)), sizes)
    return silhouette(evenly_spaced_circle(len(labels)), labels)

