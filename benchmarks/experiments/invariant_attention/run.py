r"""The experiments of "Invariant Attention: Provable Clustering Under Transformations"
(anonymous ICLR submission, no arXiv id).

- **Experiment 1** (section 5, Figures 3-4): three base images of different shapes, six random
  SE(2) transforms of each (rotation uniform in +-65 degrees, translation uniform in a box), two
  iterations of invariant attention (IA) and of kernel attention (KA, eq. 2.1) with
  :math:`\beta = 2`. Reported: the weight matrices, the means, the adjusted Rand index of
  spectral clustering (3 clusters) of each iteration's weights against the true classes, the
  ratio of within- to between-class weight, how close each final image is (up to SE(2)) to its
  class's base image, and how much :math:`\kappa^{\max}` moves when one input is transformed
  again. The seed draws the transforms.
- **Experiment 2** (Figure 5): ten handwritten 3s rotated uniformly in [0, 90] degrees and
  translated uniformly within (0.1, 0.2) of the width and height (torchvision ``RandomAffine``'s
  ``translate``: horizontal and vertical maxima); the invariant mean (Algorithm 1, uniform
  weights) at iterations 0, 25 and 50. The seed draws the ten 3s and their transforms.
- **Figure 2**: kernel attention on isotropic Gaussian blobs, iterations 0, 2 and 4.
- **Scaling**: wall time of :func:`~modules.theory.invariant_attention.invariant_similarity` against
  the number of images n (n(n-1)/2 registrations), on the CPU and, where there is one, the GPU.

Images are scikit-learn's 8x8 digits (real handwriting shipped with scikit-learn) upscaled
bicubically, or MNIST's test 3s for Experiment 2 when MNIST's files are on disk. The function
returns numbers and figures and writes nothing.
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

from benchmarks.experiments.invariant_attention.figures import (
    blobs_figure,
    image_rows_figure,
    scaling_figure,
    weights_figure,
)
from benchmarks.experiments.kit import TorchThreads, add_mean_std, ari, section
from benchmarks.infra.statistics import mean_std
from benchmarks.suites.experiment import ExperimentOutput
from modules.theory.invariant_attention import (
    invariant_attention,
    invariant_mean,
    kernel_attention,
    register,
    se2_warp,
    unit_normalise,
)

#: The keys of the suite's nested settings (every one set by the suite file).
REGISTRATION_KEYS = ("scan", "starts", "scan_sigma", "sigmas", "iterations")
EXPERIMENT1_KEYS = ("classes", "copies", "image_size", "digit_size", "max_rotation", "max_shift",
                    "iterations", "bandwidths", "mean_iterations", "mean_tolerance", "step_size",
                    "sigmas", "init", "registration", "invariance_rotation", "invariance_shift")
EXPERIMENT2_KEYS = ("digit", "count", "source", "image_size", "digit_size", "rotation",
                    "translate", "iterations", "snapshots", "step_size", "sigmas")
FIGURE2_KEYS = ("centers", "std", "per_blob", "bandwidth", "iterations", "merge_distance")
SCALING_KEYS = ("sizes", "gpu_sizes", "gpu_repeats")


def _resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


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


# -- the suite -------------------------------------------------------------------------------------
def run(seeds: Sequence[int], device: str, torch_threads: int | None,
        experiment1: dict[str, Any], experiment2: dict[str, Any], figure2: dict[str, Any],
        scaling: dict[str, Any]) -> ExperimentOutput:
    """Experiment 1, Experiment 2, Figure 2 and the scaling table (see the package docstring).
    Every setting comes from the suite file (``benchmarks/invariant_attention.yaml``).

    Args:
        seeds: one draw of the random transforms (and of Experiment 2's digits and Figure 2's
            points) per seed.
        device: ``"auto"`` (CUDA when available), ``"cpu"`` or ``"cuda"``; the scaling table
            times the CPU always and CUDA when available.
        torch_threads: CPU threads for torch during the run (restored afterwards); null leaves
            torch's setting. One thread: this code issues many small operations, and on a
            shared 2-core machine two threads measured several times slower than one.
        experiment1, experiment2, figure2, scaling: each part's settings (the keys of
            :data:`EXPERIMENT1_KEYS`, :data:`EXPERIMENT2_KEYS`, :data:`FIGURE2_KEYS` and
            :data:`SCALING_KEYS`; ``experiment1.registration``: :data:`REGISTRATION_KEYS`).
    """
    s1 = section(experiment1, EXPERIMENT1_KEYS, "settings: experiment1")
    s1["registration"] = section(s1["registration"], REGISTRATION_KEYS,
                                 "settings: experiment1: registration")
    s2 = section(experiment2, EXPERIMENT2_KEYS, "settings: experiment2")
    sf = section(figure2, FIGURE2_KEYS, "settings: figure2")
    sc = section(scaling, SCALING_KEYS, "settings: scaling")
    with TorchThreads(torch_threads):
        return _run(list(seeds), device, s1, s2, sf, sc)


def _run(seeds: list[int], device: str, s1: dict[str, Any], s2: dict[str, Any],
         sf: dict[str, Any], sc: dict[str, Any]) -> ExperimentOutput:
    from benchmarks.infra.environment import describe_machine, machine

    reg = s1["registration"]
    dev = _resolve_device(device)
    where = describe_machine(machine()) if dev.type == "cpu" else torch.cuda.get_device_name(dev)
    tables: dict[str, list[dict[str, Any]]] = {}
    figures: dict[str, bytes] = {}
    notes: list[str] = []
    clock: dict[str, float] = {}

    # Experiment 1 ------------------------------------------------------------------------------
    started = time.perf_counter()
    bases = unit_normalise(place_digit(typical_digits(s1["classes"]), s1["image_size"],
                                       s1["digit_size"]))
    draws = [experiment1_seed(seed, s1, bases, dev) for seed in seeds]
    clock["experiment 1"] = time.perf_counter() - started
    methods = (("IA", "invariant attention"), ("KA", "kernel attention"))
    rows = []
    for beta in s1["bandwidths"]:
        for name, label in methods:
            for k in range(s1["iterations"]):
                runs = [d["runs"][name, beta] for d in draws]
                ari = [r["ari"][k] for r in runs]
                ari_mean, ari_std = mean_std(ari, omit_nan=True, std_of_one=0.0)
                row = {"method": label, "beta": beta, "iteration": k + 1,
                       "ARI mean": ari_mean, "ARI std": ari_std,
                       "seeds with ARI 1": sum(a > 1 - 1e-9 for a in ari)}
                for key, column in (("contrast", "within/between weight"),
                                    ("own share", "own-class weight share"),
                                    ("effective images", "images per mean (1/sum W^2)")):
                    values = [r["profile"][k][key] for r in runs]
                    add_mean_std(row, column, values)
                row["seeds"] = len(seeds)
                rows.append(row)
    tables["Experiment 1: spectral clustering of the weights (ARI) and their structure"] = rows
    rows = []
    for beta in s1["bandwidths"]:
        for name, label in methods:
            runs = [d["runs"][name, beta] for d in draws]
            own, other = [r["own"] for r in runs], [r["other"] for r in runs]
            nearest = [r["nearest_is_own"] for r in runs]
            own_mean, own_std = mean_std(own, omit_nan=True, std_of_one=0.0)
            other_mean, other_std = mean_std(other, omit_nan=True, std_of_one=0.0)
            rows.append({"method": label, "beta": beta, "after iteration": s1["iterations"],
                         "d2 to own base mean": own_mean, "d2 to own base std": own_std,
                         "d2 to nearest other base mean": other_mean,
                         "d2 to nearest other base std": other_std,
                         "nearest base is own (fraction)": mean_std(nearest, omit_nan=True)[0],
                         "seeds": len(seeds)})
    tables["Experiment 1: final images against the base shapes (squared distance up to SE(2))"] \
        = rows
    rows = []
    for beta in s1["bandwidths"]:
        change = [d["runs"]["IA", beta]["invariance"] for d in draws]
        change_mean, change_std = mean_std(change, omit_nan=True, std_of_one=0.0)
        rows.append({"beta": beta, "max relative change of kmax mean": change_mean,
                     "max relative change of kmax std": change_std,
                     "worst seed": max(change), "pairs per seed": len(draws[0]["labels"]) - 1,
                     "seeds": len(seeds)})
    tables["Experiment 1: invariance of kmax to one more transform of an input"] = rows
    first = draws[0]
    for beta in s1["bandwidths"]:
        order = [("dataset (unit norm), ordered by class", first["images"])]
        for name, label in (("IA", "IA: invariant means"), ("KA", "KA: weighted means")):
            history = first["runs"][name, beta]["result"].history
            order += [(f"{label} after iteration {k}", history[k].cpu())
                      for k in range(1, s1["iterations"] + 1)]
        figures[f"experiment1_images_beta{beta:g}.png"] = image_rows_figure(
            order, f"Experiment 1, beta = {beta:g}, seed {seeds[0]}: scikit-learn digits "
                   f"{s1['classes']}, {s1['copies']} SE(2) copies each")
        figures[f"experiment1_weights_beta{beta:g}.png"] = weights_figure(first, beta, seeds[0])

    notes.append(
        f"Experiment 1: {len(seeds)} seeds of {len(s1['classes']) * s1['copies']} images "
        f"(scikit-learn digits {s1['classes']}, the instance nearest each class mean, 8x8 "
        f"upscaled bicubically to {s1['digit_size']} px on a {s1['image_size']} px canvas; the "
        f"paper drew a crab, a seven and Pikachu), rotations uniform in +-{s1['max_rotation']} "
        f"degrees, shifts uniform in +-{s1['max_shift']} px per axis (the paper's +-10 px at an "
        f"image size it does not state), {s1['iterations']} iterations, spectral clustering of "
        "(W + W^T) / 2 into 3 clusters.")
    for beta in s1["bandwidths"]:
        ia_ari = [d["runs"]["IA", beta]["ari"] for d in draws]
        ka_ari = [d["runs"]["KA", beta]["ari"] for d in draws]
        ia_perfect = sum(all(a > 1 - 1e-9 for a in row) for row in ia_ari)
        ka_any = sum(any(a > 1 - 1e-9 for a in row) for row in ka_ari)
        held = ia_perfect == len(seeds) and ka_any == 0
        notes.append(
            f"beta = {beta:g}: invariant attention's weights gave ARI 1 at every iteration in "
            f"{ia_perfect}/{len(seeds)} seeds, kernel attention's reached ARI 1 at some iteration "
            f"in {ka_any}/{len(seeds)} seeds (mean ARI {np.mean(ia_ari):.3f} vs "
            f"{np.mean(ka_ari):.3f}): the paper's claim that IA clusters the transformed images "
            f"and KA does not {'held' if held else 'did not fully hold'} here.")
    for beta in s1["bandwidths"]:
        ia_runs = [d["runs"]["IA", beta] for d in draws]
        share = [[p["own share"] for p in r["profile"]] for r in ia_runs]
        contrast = [[p["contrast"] for p in r["profile"]] for r in ia_runs]
        nearest = float(np.mean([r["nearest_is_own"] for r in ia_runs]))
        apart = nearest > 0.9
        notes.append(
            f"beta = {beta:g}, invariant attention: each mean drew "
            f"{np.mean([v[0] for v in share]):.0%} of its weight from its own class at iteration "
            f"1 and {np.mean([v[-1] for v in share]):.0%} at iteration {s1['iterations']}; the "
            f"within/between weight ratio went from {np.mean([v[0] for v in contrast]):.2f} to "
            f"{np.mean([v[-1] for v in contrast]):.2f}; the final images' nearest base shape "
            f"(up to SE(2)) was their own for {nearest:.0%} of them: the classes' means "
            + ("stayed apart." if apart else
               "drifted together (the kernel is wide for these digits, which overlap much more "
               "after alignment than the paper's drawings presumably did), although spectral "
               "clustering still read the classes off the weights. Theorem 4.1 concerns the "
               "images of one class (beta small against their spread); it does not bound the "
               "mixing between classes."))
    notes.append(
        "The paper saw an imperfect block matrix at iteration 1 because it deliberately ran few "
        "optimisation steps; here kappa_max comes from a multi-start registration (a scan of "
        f"{reg['scan']} angles with FFT translations, Levenberg-Marquardt from the best "
        f"{reg['starts']} on the objective smoothed by {reg['sigmas']} px in turn) "
        "whose same-class similarities are near 1, so iteration 1 is already block-diagonal.")
    worst = max(d["runs"]["IA", b]["invariance"] for d in draws for b in s1["bandwidths"])
    notes.append(
        f"Invariance (eq. 2.2): kappa_max of image 0's pairs moved by at most {worst:.2%} over "
        f"seeds and bandwidths when image 0 was rotated by up to +-{s1['invariance_rotation']} "
        f"degrees and shifted by up to +-{s1['invariance_shift']} px once more (interpolation "
        "and the image border make it inexact).")
    notes.append(
        "Algorithm 1 departures: each image's step uses its own term's gradient (the paper's "
        "weighted gradient divided by W_ij) preconditioned by Gauss-Newton (J^T J)^-1, which "
        "makes the greedy choice of the smoothing level meaningful (with plain gradient steps "
        "the smoothed gradients are smaller and no smoothing always wins); a column whose best "
        "step does not lower the objective takes no step and halves its step size. The "
        f"smoothing levels {s1['sigmas']} px are ours (the paper lists none). Means start from "
        f"identity transformations (init '{s1['init']}'), at most {s1['mean_iterations']} steps "
        f"per round, stopping once no column improves by {s1['mean_tolerance']:.1%}.")

    # Experiment 2 ------------------------------------------------------------------------------
    started = time.perf_counter()
    runs2 = [experiment2_seed(seed, s2, dev) for seed in seeds]
    clock["experiment 2"] = time.perf_counter() - started
    snapshots = runs2[0]["snapshots"]
    rows = []
    for i, k in enumerate(snapshots):
        objective = [float(r["objective"][min(k, len(r["objective"]) - 1)]) for r in runs2]
        distance = [float(r["distance"][i]) for r in runs2]
        objective_mean, objective_std = mean_std(objective, omit_nan=True, std_of_one=0.0)
        distance_mean, distance_std = mean_std(distance, omit_nan=True, std_of_one=0.0)
        rows.append({"iteration": k, "objective (eq. 2.3) mean": objective_mean,
                     "objective (eq. 2.3) std": objective_std,
                     "d2 to upright mean, mean": distance_mean,
                     "d2 to upright mean, std": distance_std, "seeds": len(seeds)})
    tables["Experiment 2: invariant mean of transformed 3s"] = rows
    r0 = runs2[0]
    figures["experiment2_invariant_mean.png"] = image_rows_figure(
        [(f"{s2['count']} transformed {s2['digit']}s", r0["images"]),
         ("invariant mean at iterations " + ", ".join(map(str, snapshots)), r0["means"]),
         (f"reference: mean of the untransformed {s2['digit']}s", r0["reference"])],
        f"Experiment 2 (seed {seeds[0]}, {r0['source']})")
    first_d, last_d = rows[0]["d2 to upright mean, mean"], rows[-1]["d2 to upright mean, mean"]
    notes.append(
        f"Experiment 2: {s2['count']} {s2['digit']}s from the {r0['source']} (the seed draws "
        f"which, and their transforms), rotations uniform in {s2['rotation']} degrees, shifts "
        f"uniform within +-{s2['translate'][0]} of the width and +-{s2['translate'][1]} of the "
        "height (torchvision RandomAffine's reading of the paper's tuple), uniform weights. The "
        f"objective fell from {rows[0]['objective (eq. 2.3) mean']:.3f} to "
        f"{rows[-1]['objective (eq. 2.3) mean']:.3f}, and the mean's squared distance up to "
        f"SE(2) from the mean of the untransformed {s2['digit']}s went from {first_d:.3f} to "
        f"{last_d:.3f}: the invariant mean "
        f"{'became' if last_d < first_d else 'did not become'} closer to an upright-average "
        f"{s2['digit']}, as the paper's Figure 5 shows.")

    # Figure 2 ------------------------------------------------------------------------------------
    started = time.perf_counter()
    blobs = [figure2_seed(seed, sf) for seed in seeds]
    clock["figure 2"] = time.perf_counter() - started
    rows = []
    for k in range(sf["iterations"] + 1):
        spread = [b["rows"][k]["spread"] for b in blobs]
        offset = [b["rows"][k]["offset"] for b in blobs]
        clusters = [b["rows"][k]["clusters"] for b in blobs]
        spread_mean, spread_std = mean_std(spread, omit_nan=True, std_of_one=0.0)
        rows.append({"iteration": k, "within-blob spread / initial mean": spread_mean,
                     "within-blob spread / initial std": spread_std,
                     "max distance to own blob mean": mean_std(offset, omit_nan=True)[0],
                     "clusters found mean": mean_std(clusters, omit_nan=True)[0],
                     "seeds": len(seeds)})
    tables["Figure 2: kernel attention on Gaussian blobs (generated)"] = rows
    shown = sorted({0, min(2, sf["iterations"]), sf["iterations"]})
    figures["figure2_blobs.png"] = blobs_figure(blobs[0], shown)
    last = rows[-1]
    collapsed = last["clusters found mean"] == len(sf["centers"])
    notes.append(
        f"Figure 2: {len(sf['centers'])} generated isotropic Gaussian blobs (std {sf['std']}, "
        f"{sf['per_blob']} points each), kernel attention with beta = {sf['bandwidth']} (ours; "
        f"the paper gives none). After {sf['iterations']} iterations the within-blob spread is "
        f"{last['within-blob spread / initial mean']:.2e} of the initial one, every point lies "
        f"within {last['max distance to own blob mean']:.3f} of its blob's sample mean and "
        f"{last['clusters found mean']:.1f} clusters remain (merge distance "
        f"{sf['merge_distance']}): the collapse onto the means "
        f"{'reproduced' if collapsed else 'did not reproduce'}.")

    # Scaling -----------------------------------------------------------------------------------
    started = time.perf_counter()
    rows = []
    devices = [(torch.device("cpu"), sc["sizes"], 1, describe_machine(machine()))]
    if torch.cuda.is_available():
        cuda = torch.device("cuda")
        devices.append((cuda, sc["gpu_sizes"], sc["gpu_repeats"], torch.cuda.get_device_name()))
    cpu_seconds = {}
    for device_, sizes, repeats, name in devices:
        time_similarity(min(sizes), device_, s1, bases, 1)  # warm-up
        for n in sizes:
            seconds = time_similarity(n, device_, s1, bases, repeats)
            pairs = n * (n - 1) // 2
            if device_.type == "cpu":
                cpu_seconds[n] = seconds
            rows.append({"device": device_.type, "device name": name, "n": n, "pairs": pairs,
                         "seconds": seconds, "pairs per second": pairs / seconds,
                         "speed-up over CPU": (cpu_seconds[n] / seconds
                                               if n in cpu_seconds else float("nan")),
                         "repeats (median)": repeats})
    clock["scaling"] = time.perf_counter() - started
    tables["Scaling: invariant_similarity wall time"] = rows
    figures["scaling.png"] = scaling_figure(rows)
    notes.append(
        f"Scaling: one invariant_similarity call on {s1['image_size']} px images "
        f"(a scan of {reg['scan']} angles, {reg['starts']} starts, {reg['iterations']} "
        "Levenberg-Marquardt steps per smoothing level), n(n-1)/2 registrations batched into "
        "one problem; CPU timed with "
        "perf_counter, CUDA with CUDA events after a warm-up call. torch "
        f"{torch.__version__}, {describe_machine(machine())}"
        f", {torch.get_num_threads()} CPU thread(s)"
        f"{'' if torch.cuda.is_available() else '; no GPU was present, so no GPU rows'}.")
    notes.append(f"Experiments 1 and 2 ran on {where} ({dev.type}). Wall seconds: "
                 + ", ".join(f"{k} {v:.1f}" for k, v in clock.items()) + ".")
    return ExperimentOutput(tables=tables, figures=figures, notes=notes)
