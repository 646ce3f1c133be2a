"""One seed's draw of each part of the invariant-attention experiment
(:mod:`benchmarks.experiments.invariant_attention`): its images (scikit-learn's digits, or
MNIST's test 3s where they are on disk) and their random SE(2) transforms, the scores of a
weight matrix and of an image against the base shapes, Experiment 1, Experiment 2 and Figure 2
on one seed, and the wall time of one ``invariant_similarity`` call.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from benchmarks.experiments.kit import ari
from modules.theory.invariant_attention import (
    invariant_attention,
    invariant_mean,
    kernel_attention,
    register,
    se2_warp,
    unit_normalise,
)


# -- data ------------------------------------------------------------------------------------------
def place_digit(digits: Tensor, image_size: int, digit_size: int) -> Tensor:
    """Digits (n, h, w) in [0, 1] resized bicubically to ``digit_size`` and centred on a zero
    canvas of ``image_size``: (n, 1, image_size, image_size), clamped to [0, 1].

    >>> place_digit(torch.ones(2, 8, 8), 16, 10).shape
    torch.Size([2, 1, 16, 16])
    """
    up = F.interpolate(digits[:, None].float(), size=(digit_size, digit_size), mode="bicubic",
                       align_corners=False).clamp(0, 1)
    canvas = torch.zeros(digits.shape[0], 1, image_size, image_size)
    offset = (image_size - digit_size) // 2
    canvas[..., offset:offset + digit_size, offset:offset + digit_size] = up
    return canvas


def typical_digits(classes: Sequence[int]) -> Tensor:
    """For each class, the scikit-learn digit nearest its class mean (a deterministic, typical
    instance), as (len(classes), 8, 8) in [0, 1]."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images / 16.0
    picked = []
    for c in classes:
        members = images[digits.target == c]
        nearest = np.argmin(((members - members.mean(0)) ** 2).sum((1, 2)))
        picked.append(members[nearest])
    return torch.tensor(np.stack(picked), dtype=torch.float32)


def _mnist_digits(digit: int) -> Tensor | None:
    """MNIST's test images of ``digit``, central 20x20 box, (N, 20, 20) in [0, 1], or None when
    MNIST's files are not on disk (they are never downloaded here)."""
    from datamodules.base import default_data_dir

    raw = default_data_dir() / "MNIST" / "raw"
    if not (raw / "t10k-images-idx3-ubyte").is_file():
        return None
    try:
        from torchvision.datasets import MNIST

        data = MNIST(str(default_data_dir()), train=False, download=False)
    except Exception:  # a partial or unreadable copy: fall back to the shipped digits
        return None
    images = data.data[data.targets == digit].float() / 255.0
    return images[:, 4:24, 4:24]


def experiment2_digits(settings: dict[str, Any], rng: np.random.Generator
                       ) -> tuple[Tensor, str]:
    """``count`` images of the digit drawn by ``rng``: (count, 1, S, S), and the source name."""
    source = settings["source"]
    pool = _mnist_digits(settings["digit"]) if source in ("auto", "mnist") else None
    if pool is None and source == "mnist":
        raise FileNotFoundError("MNIST's test files are not in $CLUSTERBENCH_DATA/MNIST/raw")
    name = "MNIST test set"
    if pool is None:
        from sklearn.datasets import load_digits

        digits = load_digits()
        pool = torch.tensor(digits.images[digits.target == settings["digit"]] / 16.0,
                            dtype=torch.float32)
        name = "scikit-learn digits (8x8, upscaled bicubically)"
    chosen = rng.choice(len(pool), size=settings["count"], replace=False)
    return place_digit(pool[torch.as_tensor(chosen)], settings["image_size"],
                       settings["digit_size"]), name


def random_se2(count: int, rotation: tuple[float, float], shift: tuple[float, float],
               rng: np.random.Generator) -> tuple[Tensor, Tensor]:
    """``count`` angles uniform in ``rotation`` (degrees, returned in radians) and shifts uniform
    in ``[-shift[0], shift[0]] x [-shift[1], shift[1]]`` pixels."""
    angle = np.radians(rng.uniform(rotation[0], rotation[1], size=count))
    offsets = rng.uniform(-1, 1, size=(count, 2)) * np.asarray(shift)
    return (torch.tensor(angle, dtype=torch.float32),
            torch.tensor(offsets, dtype=torch.float32))


# -- scores ----------------------------------------------------------------------------------------
def spectral_ari(weights: Tensor, labels: np.ndarray, n_clusters: int, seed: int) -> float:
    """Adjusted Rand index of spectral clustering of the symmetrised weights
    :math:`(W + W^\\top)/2` (a precomputed affinity) against ``labels``."""
    from sklearn.cluster import SpectralClustering

    affinity = ((weights + weights.T) / 2).double().cpu().numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        predicted = SpectralClustering(n_clusters, affinity="precomputed",
                                       random_state=seed).fit_predict(affinity)
    return ari(labels, predicted)


def se2_sq_distance(images: Tensor, references: Tensor, registration: dict[str, Any]) -> Tensor:
    r"""Squared distance up to SE(2), :math:`\min_\tau \lVert \hat a - \hat b\circ\tau\rVert^2`,
    of every image :math:`a` to every reference :math:`b` (unit norms, so in [0, 4]): (n, r)."""
    n, r = images.shape[0], references.shape[0]
    stacked = unit_normalise(torch.cat([references, images]))
    pairs = torch.stack(torch.meshgrid(torch.arange(r), torch.arange(r, r + n), indexing="ij"),
                        dim=-1).reshape(-1, 2).to(images.device)
    return register(stacked, stacked, pairs, **registration).sq_distance.view(r, n).T


def weight_profile(weights: Tensor, labels: np.ndarray) -> dict[str, float]:
    r"""Scores of one (n, n) column-normalised weight matrix against the classes: the ratio of
    mean within-class to mean between-class weight (off the diagonal), the share of each
    column's weight on its own class, and the effective number of images each column averages,
    :math:`1 / \sum_i W_{ij}^2`, all averaged over columns.

    >>> w = torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    >>> weight_profile(w, np.array([0, 0, 1]))["own share"]
    1.0
    """
    same = torch.as_tensor(labels[:, None] == labels[None, :], device=weights.device)
    off_diagonal = ~torch.eye(len(labels), dtype=torch.bool, device=weights.device)
    between = weights[~same].mean()
    return {"contrast": float(weights[same & off_diagonal].mean() / between)
            if between > 0 else float("inf"),
            "own share": float((weights * same).sum(0).mean()),
            "effective images": float((1 / weights.square().sum(0)).mean())}


# -- experiments -----------------------------------------------------------------------------------
def experiment1_seed(seed: int, s: dict[str, Any], bases: Tensor, device: torch.device
                     ) -> dict[str, Any]:
    """One draw of Experiment 1: the data, then IA and KA at every bandwidth, and their scores."""
    rng = np.random.default_rng(seed)
    n_classes, copies = bases.shape[0], s["copies"]
    labels = np.repeat(np.arange(n_classes), copies)
    angle, shift = random_se2(len(labels), (-s["max_rotation"], s["max_rotation"]),
                              (s["max_shift"], s["max_shift"]), rng)
    images = unit_normalise(se2_warp(bases[torch.as_tensor(labels)], angle, shift)).to(device)
    # The invariance check's extra transform of image 0.
    extra_angle, extra_shift = random_se2(1, (-s["invariance_rotation"],
                                              s["invariance_rotation"]),
                                          (s["invariance_shift"], s["invariance_shift"]), rng)
    moved = se2_warp(images[:1], extra_angle.to(device), extra_shift.to(device))
    before = se2_sq_distance(images[1:], images[:1], s["registration"])[:, 0]
    after = se2_sq_distance(images[1:], moved, s["registration"])[:, 0]
    rows = torch.arange(len(labels))
    out: dict[str, Any] = {"images": images.cpu(), "labels": labels, "runs": {}}
    for beta in s["bandwidths"]:
        ia = invariant_attention(images, s["iterations"], beta, init=s["init"],
                                 mean_iterations=s["mean_iterations"], step_size=s["step_size"],
                                 sigmas=tuple(s["sigmas"]),
                                 mean_options={"tolerance": s["mean_tolerance"]},
                                 registration=s["registration"])
        ka = kernel_attention(images, s["iterations"], beta, normalize=True)
        kernel_before, kernel_after = torch.exp(-beta * before), torch.exp(-beta * after)
        for name, result in (("IA", ia), ("KA", ka)):
            distance = se2_sq_distance(result.points, bases.to(device), s["registration"])
            own = distance[rows, torch.as_tensor(labels)]
            others = distance.clone()
            others[rows, torch.as_tensor(labels)] = float("inf")
            out["runs"][name, beta] = {
                "result": result,
                "ari": [spectral_ari(w, labels, n_classes, seed) for w in result.weights],
                "profile": [weight_profile(w, labels) for w in result.weights],
                "own": float(own.mean()), "other": float(others.min(1).values.mean()),
                "nearest_is_own": float((distance.argmin(1).cpu().numpy() == labels).mean()),
                "invariance": float(((kernel_after - kernel_before).abs()
                                     / kernel_before).max()),
            }
    return out


def experiment2_seed(seed: int, s: dict[str, Any], device: torch.device) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    digits, source = experiment2_digits(s, rng)
    size = s["image_size"]
    angle, shift = random_se2(s["count"], tuple(s["rotation"]),
                              (s["translate"][0] * size, s["translate"][1] * size), rng)
    upright = unit_normalise(digits).to(device)
    images = unit_normalise(se2_warp(digits, angle, shift)).to(device)
    weights = torch.full((s["count"],), 1.0 / s["count"], device=device)
    snapshots = sorted({k for k in s["snapshots"] if k <= s["iterations"]} | {0})
    found = invariant_mean(images, weights, s["iterations"], s["step_size"],
                           tuple(s["sigmas"]), snapshots=snapshots)
    reference = upright.mean(0, keepdim=True)
    means = torch.stack([found.snapshots[k] for k in snapshots])
    distance = se2_sq_distance(means, reference, {})[:, 0]
    return {"images": images.cpu(), "snapshots": snapshots, "means": means.cpu(),
            "reference": reference.cpu(), "objective": found.objective.cpu(),
            "distance": distance.cpu(), "source": source}


def figure2_seed(seed: int, s: dict[str, Any]) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    centers = np.asarray(s["centers"], dtype=float)
    labels = np.repeat(np.arange(len(centers)), s["per_blob"])
    points = centers[labels] + s["std"] * rng.standard_normal((len(labels), centers.shape[1]))
    x = torch.tensor(points, dtype=torch.float64)
    result = kernel_attention(x, s["iterations"], s["bandwidth"])
    sample_means = torch.stack([x[torch.as_tensor(labels == c)].mean(0)
                                for c in range(len(centers))])
    rows = []
    initial_spread = None
    for k, pts in enumerate(result.history):
        spread = math.sqrt(float(np.mean([
            (pts[torch.as_tensor(labels == c)] - pts[torch.as_tensor(labels == c)].mean(0))
            .square().sum(1).mean() for c in range(len(centers))])))
        initial_spread = initial_spread or spread
        offset = float((pts - sample_means[torch.as_tensor(labels)]).norm(dim=1).max())
        rows.append({"iteration": k, "spread": spread / initial_spread, "offset": offset,
                     "clusters": count_clusters(pts, s["merge_distance"])})
    return {"points": points, "labels": labels, "history": [h.numpy() for h in result.history],
            "means": sample_means.numpy(), "rows": rows}


def count_clusters(points: Tensor, distance: float) -> int:
    """Connected components of the graph joining points closer than ``distance``.

    >>> count_clusters(torch.tensor([[0.0], [0.01], [1.0]]), 0.05)
    2
    """
    from scipy.sparse.csgraph import connected_components

    close = (torch.cdist(points, points) < distance).cpu().numpy()
    return int(connected_components(close, directed=False)[0])


def time_similarity(n: int, device: torch.device, s1: dict[str, Any], bases: Tensor,
                    repeats: int, seed: int = 0) -> float:
    """Median wall seconds of one ``invariant_similarity`` call on n transformed base images."""
    from modules.theory.invariant_attention import invariant_similarity

    rng = np.random.default_rng(seed)
    labels = torch.as_tensor(rng.integers(0, bases.shape[0], size=n))
    angle, shift = random_se2(n, (-s1["max_rotation"], s1["max_rotation"]),
                              (s1["max_shift"], s1["max_shift"]), rng)
    images = se2_warp(bases[labels], angle, shift).to(device)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            invariant_similarity(images, s1["bandwidths"][0], **s1["registration"])
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end) / 1000)
        else:
            started = time.perf_counter()
            invariant_similarity(images, s1["bandwidths"][0], **s1["registration"])
            times.append(time.perf_counter() - started)
    return float(np.median(times))
