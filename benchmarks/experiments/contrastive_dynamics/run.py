"""Contrastive-learning training dynamics: Calder & Lee, "Understanding Contrastive Learning
through Variational Analysis and Neural Network Optimization Perspectives" (arXiv:2503.10812),
Figures 3, 5 and 6, Propositions 4.3-4.4 and Remark 4.4; with the spectral-clustering experiment of
Tan et al., "Contrastive Learning is Spectral Clustering on Similarity Graph" (arXiv:2303.15103),
appendix C. Offline, CPU-only, on generated data.

Sections of :func:`run` (each returns tables, figures and notes):

- dynamics (Figures 5-6): 2-D/3-D Gaussian clusters centred on the x-axis, an invariant
  initialisation (eq. 17), then gradient descent on the network (eq. 15) and on free particles
  (eq. 14) from the same initial embedding; silhouette (w.r.t. the input clusters) and Wang &
  Isola's uniformity per iteration; snapshots with the negative gradient as arrows;
- imbalanced clusters (Remark 4.4): one small cluster; its silhouette against the large ones';
- population cost (Figure 3): K atoms evenly spaced on the circle;
- kernel: Proposition 4.3 against autograd, and the width-M kernel against Proposition 4.4;
- spectral clustering (arXiv:2303.15103, appendix C).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from benchmarks.experiments.contrastive_dynamics.figures import (
    dynamics_curves_figure,
    imbalanced_figure,
    kernel_convergence_figure,
    population_figure,
    snapshot_figure,
    spectral_figure,
)
from benchmarks.experiments.kit import TorchThreads, add_mean_std, ari, section
from benchmarks.infra.errors import ConfigError
from benchmarks.infra.statistics import mean_std
from benchmarks.suites.experiment import ExperimentOutput
from modules.theory.contrastive_dynamics import (
    OneHiddenLayerEmbedding,
    closed_form_kernel,
    empirical_neural_kernel,
    evenly_spaced_circle,
    free_particle_descent,
    infinite_width_kernel,
    infonce_graph_embedding,
    invariant_initialisation_,
    mlp_embedding,
    network_descent,
    nt_xent_cost,
    orthogonal_noise_augmentation,
    population_nt_xent,
    spectral_embedding,
    stochastic_block_graph,
    uniform_sphere_uniformity,
    uniformity,
)

DTYPE = torch.float64

#: The keys of the suite's nested settings (every one set by the suite file).
DATA_KEYS = ("centres", "points_per_cluster", "cluster_std", "noise_dims", "augmentation_std")
MAP_KEYS = {"one_hidden_layer": ("name", "kind", "activation", "width_per_output", "bias", "dim",
                                 "steps"),
            "mlp": ("name", "kind", "hidden", "layers", "dim", "steps")}
NETWORK_KEYS = ("figure", "network_snapshots", "free_snapshots")
IMBALANCED_KEYS = ("sizes", "checkpoints")
POPULATION_KEYS = ("temperatures", "max_atoms", "tolerance")
KERNEL_KEYS = ("dim", "points", "autograd_widths", "widths")
SPECTRAL_KEYS = ("clusters", "size", "graphs", "steps", "lr", "temperature", "batch_size")


# ----------------------------------------------------------------------------------------------
# Data, maps and metrics


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


def _embedding_map(spec: dict[str, Any], in_dim: int, generator: torch.Generator) -> nn.Module:
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


def _silhouette(z: Tensor, labels: np.ndarray) -> float:
    from sklearn.metrics import silhouette_score

    return float(silhouette_score(z.numpy(), labels))


def _per_cluster_silhouette(z: Tensor, labels: np.ndarray) -> np.ndarray:
    from sklearn.metrics import silhouette_samples

    values = silhouette_samples(z.numpy(), labels)
    return np.array([values[labels == q].mean() for q in np.unique(labels)])


def _longest_stretch(iterations: Sequence[int], values: Sequence[float], threshold: float
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


def _scaled(iterations: Sequence[int], scale: float) -> list[int]:
    return sorted({int(round(b * scale)) for b in iterations})


def _uniform_arcs_silhouette(sizes: Sequence[int]) -> float:
    """Silhouette of n points evenly spaced on the circle, the clusters contiguous arcs in
    proportion to ``sizes``: the best a uniform embedding of S^1 scores when the dynamics keep
    the clusters' order (free particles do, in 2-D)."""
    labels = np.repeat(np.arange(len(sizes)), sizes)
    return _silhouette(evenly_spaced_circle(len(labels)), labels)


# ----------------------------------------------------------------------------------------------
# Figures 5-6: the two dynamics


def _dynamics_pair(spec: dict[str, Any], data: dict[str, Any], seed: int, temperature: float,
                   lr: float, metric_every: int, scale: float, keep: bool,
                   sizes: Sequence[int] | None, snapshots: dict[str, Sequence[int]]
                   ) -> dict[str, Any]:
    """Both dynamics from one invariant initialisation; metrics on the recorded grid, snapshots
    (with the velocity field) at ``snapshots["network"]`` and ``snapshots["free"]``; ``sizes``
    None: every cluster of ``data["points_per_cluster"]`` points."""
    generator = torch.Generator().manual_seed(seed)
    dim = spec["dim"]
    sizes = sizes or [data["points_per_cluster"]] * len(data["centres"])
    x, labels = clustered_samples(data["centres"], sizes, dim, data["noise_dims"],
                                  data["cluster_std"], generator)
    model = _embedding_map(spec, x.shape[1], generator)
    augment = orthogonal_noise_augmentation(dim, data["augmentation_std"])

    def cost(a: Tensor, b: Tensor) -> Tensor:
        return nt_xent_cost(a, b, temperature)

    steps = max(1, int(round(spec["steps"] * scale)))
    grid = sorted(set(range(0, steps + 1, metric_every)) | {steps})
    snaps_net = [b for b in _scaled(snapshots["network"], scale) if b <= steps]
    snaps_free = [b for b in _scaled(snapshots["free"], scale) if b <= steps]
    with torch.no_grad():
        z0 = model(x)  # (n, d): the shared initial embedding
    x_view = augment(x, generator)
    with torch.no_grad():  # eq. 17 holds at initialisation
        initial_gap = (model(x_view) - z0).norm(dim=1).max().item()
    net = network_descent(model, x, augment, cost, lr, steps, record=grid + snaps_net,
                          velocity_at=snaps_net + [0], generator=generator)
    free = free_particle_descent(z0, lambda z: cost(z, z), lr, steps, record=grid + snaps_free,
                                 velocity_at=snaps_free + [0])
    with torch.no_grad():  # Theorem 4.2, second claim: the network need not stay invariant
        a = torch.nn.functional.normalize(model(augment(x, generator)), dim=1)
        b = torch.nn.functional.normalize(model(augment(x, generator)), dim=1)
        final_gap = (a - b).norm(dim=1).mean().item()

    out: dict[str, Any] = {"x": x, "labels": labels, "grid": grid, "steps": steps,
                           "initial_invariance_gap": initial_gap, "final_invariance_gap": final_gap,
                           "orthant": min(float(z.min()) for z in net.embeddings) >= -1e-12,
                           "snaps": {"network": snaps_net, "free": snaps_free}}
    for name, trajectory in (("network", net), ("free", free)):
        at = dict(zip(trajectory.iterations, trajectory.embeddings, strict=True))
        out[name] = {
            "silhouette": [_silhouette(at[b], labels) for b in grid],
            "uniformity": [uniformity(at[b]).item() for b in grid],
            "speed0": trajectory.velocities[0].norm(dim=1),
        }
        if sizes is not None and len(set(sizes)) > 1:
            out[name]["per_cluster"] = [_per_cluster_silhouette(at[b], labels) for b in grid]
        if keep:
            out[name]["trajectory"] = trajectory
    return out


def _dynamics_section(seeds: Sequence[int], networks: list[dict[str, Any]],
                      data: dict[str, Any], temperature: float, lr: float, metric_every: int,
                      scale: float, threshold: float, output: ExperimentOutput) -> None:
    final_rows, stretch_rows, summaries, verdicts = [], [], [], []
    for spec in networks:
        snapshots = {"network": spec["network_snapshots"], "free": spec["free_snapshots"]}
        runs = [_dynamics_pair(spec, data, seed, temperature, lr, metric_every, scale,
                               keep=(k == 0), sizes=None, snapshots=snapshots)
                for k, seed in enumerate(seeds)]
        dim, steps, grid = spec["dim"], runs[0]["steps"], runs[0]["grid"]
        reference = uniform_sphere_uniformity(dim)
        summaries.append({"name": spec["name"], "grid": grid, "runs": runs,
                          "uniform_reference": reference})
        output.figures[f"{spec['figure']}.png"] = snapshot_figure(spec["name"], runs[0], dim)
        stretches, above = {}, {}
        for name, other in (("network", "free"), ("free", "network")):
            above[name] = [float(np.mean(np.asarray(r[name]["silhouette"][1:])
                                         > np.asarray(r[other]["silhouette"][1:])))
                           for r in runs]
            spans = [_longest_stretch(grid, r[name]["silhouette"], threshold) for r in runs]
            stretches[name] = spans
            row: dict[str, Any] = {"setting": spec["name"], "dynamics": name,
                                   "iterations": steps}
            for column, metric, at in (("silhouette it0", "silhouette", 0),
                                       ("silhouette final", "silhouette", -1),
                                       ("uniformity final", "uniformity", -1)):
                add_mean_std(row, column, [r[name][metric][at] for r in runs], digits=4)
            row["uniformity of uniform measure"] = round(reference, 4)
            add_mean_std(row, f"longest stretch sil>={threshold}", [s[2] for s in spans], digits=1)
            row["seeds"] = len(runs)
            final_rows.append(row)
            srow: dict[str, Any] = {"setting": spec["name"], "dynamics": name,
                                    "iterations": steps, "threshold": threshold}
            add_mean_std(srow, "stretch first it", [s[0] for s in spans], digits=1)
            add_mean_std(srow, "stretch last it", [s[1] for s in spans], digits=1)
            add_mean_std(srow, "fraction of run", [s[2] / steps for s in spans], digits=3)
            add_mean_std(srow, "peak silhouette", [max(r[name]["silhouette"]) for r in runs],
                         digits=4)
            add_mean_std(srow, "fraction of iterations above the other dynamics", above[name],
                         digits=3)
            srow["seeds with a stretch"] = sum(not math.isnan(s[0]) for s in spans)
            srow["seeds"] = len(runs)
            stretch_rows.append(srow)

        net_final = np.mean([r["network"]["silhouette"][-1] for r in runs])
        free_final = np.mean([r["free"]["silhouette"][-1] for r in runs])
        free_unif = np.mean([r["free"]["uniformity"][-1] for r in runs])
        net_unif = np.mean([r["network"]["uniformity"][-1] for r in runs])
        fraction = float(np.mean([s[2] / steps for s in stretches["network"]]))
        net_above = float(np.mean(above["network"]))
        free_spread = bool(free_unif <= reference + 0.05)
        holds = bool(free_spread and net_above >= 0.75 and fraction >= 0.5)
        verdicts.append(holds)
        gaps = [r["final_invariance_gap"] for r in runs]
        note = (f"{spec['name']} ({steps} iterations, {len(runs)} seeds, lr {lr}, tau "
                f"{temperature}): free particles spread toward uniform: {free_spread} (final "
                f"uniformity {free_unif:.3f} against {reference:.3f} for the uniform measure on "
                f"S^{dim - 1}; network {net_unif:.3f}); the network's silhouette was above the "
                f"free particles' at {net_above:.0%} of the recorded iterations and stayed >= "
                f"{threshold} over {fraction:.0%} of the run (longest stretch, mean over "
                f"seeds); final silhouette {net_final:.2f} (network) against {free_final:.2f} "
                f"(free). Claim {'held' if holds else 'did not hold'} here. Invariance: exact at "
                f"iteration 0 (max |f(T x) - f(x)| = "
                f"{max(r['initial_invariance_gap'] for r in runs):.1e}); after training the "
                f"network's two views of a sample lie {np.mean(gaps):.1e} apart on the sphere "
                f"(Theorem 4.2: network descent need not keep invariance).")
        if spec["kind"] == "one_hidden_layer" and spec["activation"] == "relu":
            inside = all(r["orthant"] for r in runs)
            note += (f" Every network embedding lay in the positive orthant: {inside} (eq. 18 "
                     "with ReLU has A >= 0 and sigma >= 0, so in 2-D it can use only a quarter "
                     "of the circle).")
        output.notes.append(note)

    output.tables["Final iteration: silhouette and uniformity (mean, sample std over seeds)"] = \
        final_rows
    output.tables["High-silhouette stretch"] = stretch_rows
    output.figures["dynamics_curves.png"] = dynamics_curves_figure(summaries, threshold)
    if any(spec["dim"] == 2 for spec in networks):
        sizes = [data["points_per_cluster"]] * len(data["centres"])
        output.notes.append(
            f"Reference: {len(sizes)} equal contiguous arcs of the uniform circle score a "
            f"silhouette of {_uniform_arcs_silhouette(sizes):.2f} (the best a uniform 2-D "
            "embedding can do); a collapsed or uniform-mixed one scores about 0.")
    output.notes.append(
        "Central claim, judged per setting from the numbers above: it holds when the free "
        "particles end within 0.05 of the uniform measure's uniformity, the network's "
        "silhouette is above theirs at >= 75% of the recorded iterations, and the network keeps "
        f"a silhouette >= {threshold} over >= 50% of the run. Held in {sum(verdicts)} of "
        f"{len(verdicts)} settings: " + ", ".join(
            f"{spec['name']}: {'yes' if v else 'no'}"
            for spec, v in zip(networks, verdicts, strict=True)) + ".")


# ----------------------------------------------------------------------------------------------
# Remark 4.4: imbalanced clusters


def _imbalanced_section(seeds: Sequence[int], spec: dict[str, Any], data: dict[str, Any],
                        temperature: float, lr: float, metric_every: int, scale: float,
                        output: ExperimentOutput) -> None:
    sizes = spec["sizes"]
    small = int(np.argmin(sizes))
    large = [q for q in range(len(sizes)) if q != small]
    runs = [_dynamics_pair(spec, data, seed, temperature, lr, metric_every, scale, keep=False,
                           sizes=sizes, snapshots={"network": [0], "free": [0]})
            for seed in seeds]
    grid = runs[0]["grid"]
    checkpoints = [b for b in _scaled(spec["checkpoints"], scale) if b <= runs[0]["steps"]]
    rows = []
    indices = sorted({int(np.argmin(np.abs(np.asarray(grid) - b))) for b in checkpoints})
    for k in indices:
        row: dict[str, Any] = {"iteration": grid[k]}
        for name in ("network", "free"):
            small_values = [r[name]["per_cluster"][k][small] for r in runs]
            add_mean_std(row, f"{name} small", small_values, digits=4)
            large_values = [r[name]["per_cluster"][k][large].mean() for r in runs]
            add_mean_std(row, f"{name} large", large_values, digits=4)
        row["seeds"] = len(runs)
        rows.append(row)
    output.tables[f"Imbalanced clusters (sizes {sizes}): per-cluster silhouette"] = rows

    def speed_ratio(name: str) -> float:
        ratios = []
        for r in runs:
            speed, labels = r[name]["speed0"], r["labels"]
            ratios.append(float(speed[labels == small].mean() / speed[labels != small].mean()))
        return float(np.mean(ratios))

    per_cluster = {name: np.asarray([r[name]["per_cluster"] for r in runs])  # (S, T, Q)
                   for name in ("network", "free")}
    output.figures["imbalanced_clusters.png"] = imbalanced_figure(grid, per_cluster, sizes,
                                                                  spec["name"])

    last = rows[-1]
    net_ratio, free_ratio = speed_ratio("network"), speed_ratio("free")
    large_mean = float(np.mean([sizes[q] for q in large]))
    output.notes.append(
        f"Imbalanced clusters (Remark 4.4, {spec['name']}, sizes {sizes}): at iteration 0 the "
        f"small cluster's points moved {net_ratio:.2f}x as fast as the large clusters' under "
        f"the network dynamics and {free_ratio:.2f}x under free particles, so the neural kernel "
        f"scaled the small cluster's motion by {net_ratio / free_ratio:.2f} relative to the "
        f"large ones' (Theorem 4.5's cluster-share factor alone is {sizes[small]}/"
        f"{large_mean:.0f} = {sizes[small] / large_mean:.2f}; its |xi_q|^2 and beta_q factors "
        f"differ between clusters too). At iteration {last['iteration']} the network's "
        f"silhouette was {last['network small mean']:.2f} on the small cluster against "
        f"{last['network large mean']:.2f} on the large ones (free particles: "
        f"{last['free small mean']:.2f} and {last['free large mean']:.2f}).")


# ----------------------------------------------------------------------------------------------
# Figure 3: the population cost of K atoms on the circle


def _population_section(temperatures: Sequence[float], max_atoms: int, tolerance: float,
                        output: ExperimentOutput) -> None:
    from scipy.special import ive

    counts = np.arange(1, max_atoms + 1)
    atoms = {k: evenly_spaced_circle(int(k)) for k in counts}
    min_sq = 4 * np.sin(np.pi / counts) ** 2  # K = 1 has no pair: its entry is unused
    rows, thresholds, curves, monotone = [], [], [], True
    for tau in temperatures:
        losses = np.array([population_nt_xent(atoms[k], temperature=tau).item() for k in counts])
        curves.append(losses)
        limit = math.log1p(float(ive(0, 1 / tau)))  # the uniform measure: log(1 + e^{-1/t} I0)
        gap = (losses - limit) / (losses[0] - limit)  # 1 at K = 1, -> 0 as K grows
        monotone &= bool(np.all(np.diff(losses) <= 1e-12))
        above = np.nonzero(gap > tolerance)[0]
        plateau = int(above[-1]) + 1 if above.size else 0  # index of the first K on the plateau
        if 1 <= plateau < len(counts):
            # interpolate log(gap) linearly in the squared distance between K and K + 1
            lo, hi = plateau - 1, plateau
            t = (math.log(gap[lo]) - math.log(tolerance)) / (math.log(gap[lo]) - math.log(gap[hi]))
            threshold = float(min_sq[lo] + t * (min_sq[hi] - min_sq[lo])) if lo >= 1 else math.nan
        else:
            threshold = math.nan
        thresholds.append(threshold)
        rows.append({"temperature": tau, "loss K=1": round(losses[0], 5),
                     "loss K=2": round(losses[1], 5) if max_atoms > 1 else math.nan,
                     "loss K=4": round(losses[3], 5) if max_atoms > 3 else math.nan,
                     f"loss K={max_atoms}": round(losses[-1], 5),
                     "uniform limit": round(limit, 5),
                     "plateau K": int(counts[plateau]) if plateau < len(counts) else math.nan,
                     "threshold min sq distance": round(threshold, 4)})
    taus, ths = np.asarray(temperatures, dtype=float), np.asarray(thresholds)
    ok = ~np.isnan(ths)
    slope = intercept = r2 = math.nan
    if ok.sum() >= 2:
        slope, intercept = np.polyfit(taus[ok], ths[ok], 1)
        fitted = slope * taus[ok] + intercept
        r2 = 1 - np.sum((ths[ok] - fitted) ** 2) / max(np.sum((ths[ok] - ths[ok].mean()) ** 2),
                                                         1e-300)
    output.figures["fig3_population_cost.png"] = population_figure(
        counts, min_sq, temperatures, curves, thresholds, (slope, intercept, r2), tolerance)
    output.tables["Figure 3: population NT-Xent of K atoms on the circle"] = rows
    output.notes.append(
        f"Figure 3: the population cost decreased monotonically in K for every tau: {monotone}; "
        f"it plateaus at log(1 + e^(-1/tau) I0(1/tau)), the uniform measure's value. The "
        f"threshold squared distance against tau fits {slope:.3f} tau + {intercept:.4f} with "
        f"R^2 = {r2:.4f} ({'linear, as the paper reports' if r2 >= 0.95 else 'not linear'}); "
        f"the threshold is where the excess over the limit falls below {tolerance:g} of its "
        f"K=1 value, interpolated between consecutive K.")


# ----------------------------------------------------------------------------------------------
# Propositions 4.3-4.4: the kernel


def _kernel_section(seeds: Sequence[int], spec: dict[str, Any], data: dict[str, Any],
                    output: ExperimentOutput) -> None:
    dim, points = spec["dim"], spec["points"]
    check_rows, errors = [], {m: [] for m in spec["widths"]}
    autograd_errors: dict[int, list[float]] = {m: [] for m in spec["autograd_widths"]}
    for seed in seeds:
        generator = torch.Generator().manual_seed(seed)
        sizes = [points // len(data["centres"])] * len(data["centres"])
        clean, _ = clustered_samples(data["centres"], sizes, dim, data["noise_dims"],
                                     data["cluster_std"], generator)
        # augmented inputs: the noise coordinates are non-zero, as in training
        x = orthogonal_noise_augmentation(dim, data["augmentation_std"])(clean, generator)
        for m in spec["autograd_widths"]:
            model = OneHiddenLayerEmbedding(x.shape[1], dim, m, "relu", generator=generator,
                                            dtype=DTYPE)
            empirical = empirical_neural_kernel(model, x)
            closed = closed_form_kernel(x, model.B.detach(), dim)
            autograd_errors[m].append((empirical - closed).abs().max().item()
                                      / closed.abs().max().item())
        limit = infinite_width_kernel(x, dim)
        for m in spec["widths"]:
            B = torch.randn(m * dim, x.shape[1], generator=generator, dtype=DTYPE)
            kernel = closed_form_kernel(x, B, dim)
            errors[m].append(((kernel - limit).norm() / limit.norm()).item())
    for m in spec["autograd_widths"]:
        row: dict[str, Any] = {"width M": m}
        add_mean_std(row, "max rel |K_autograd - K_prop4.3|", autograd_errors[m], digits=20)
        row["seeds"] = len(seeds)
        check_rows.append(row)
    conv_rows = []
    widths = np.asarray(spec["widths"], dtype=float)
    means = np.asarray([np.mean(errors[m]) for m in spec["widths"]])
    for m in spec["widths"]:
        row = {"width M": m}
        add_mean_std(row, "rel error to prop4.4", errors[m], digits=5)
        row["seeds"] = len(seeds)
        conv_rows.append(row)
    slope = float(np.polyfit(np.log(widths), np.log(means), 1)[0]) if len(widths) > 1 else math.nan
    output.tables["Kernel: autograd (eq. 12) against Proposition 4.3"] = check_rows
    output.tables["Kernel: width-M kernel against the limit of Proposition 4.4"] = conv_rows
    stds = np.asarray([mean_std(errors[m], omit_nan=True, std_of_one=0.0)[1]
                       for m in spec["widths"]])
    output.figures["kernel_convergence.png"] = kernel_convergence_figure(widths, means, stds,
                                                                         slope)
    worst = max(max(v) for v in autograd_errors.values()) if autograd_errors else math.nan
    output.notes.append(
        f"Kernel: Proposition 4.3's closed form matched autograd's Jacobian products (eq. 12, "
        f"ReLU, {points} augmented points in R^{dim + data['noise_dims']}) to a relative "
        f"{worst:.1e} at worst (float64). The width-M kernel approached Proposition 4.4's limit "
        f"with a log-log slope of {slope:.3f} (a Monte-Carlo average over M i.i.d. hidden "
        "units predicts -1/2).")


# ----------------------------------------------------------------------------------------------
# arXiv:2303.15103, appendix C: InfoNCE as spectral clustering


def _spectral_section(seeds: Sequence[int], spec: dict[str, Any],
                      output: ExperimentOutput) -> None:
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA

    clusters = spec["clusters"]
    rows, panels = [], []
    for p, q in spec["graphs"]:
        scores: dict[str, list[float]] = {"infonce": [], "spectral": [], "agreement": []}
        for k, seed in enumerate(seeds):
            generator = torch.Generator().manual_seed(seed)
            adjacency, labels = stochastic_block_graph(clusters, spec["size"], p, q, generator)
            z = infonce_graph_embedding(adjacency, 2, spec["steps"], spec["lr"],
                                        spec["temperature"], spec["batch_size"], generator)
            u = spectral_embedding(adjacency, clusters)  # (n, clusters)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                km_z = KMeans(clusters, n_init=10, random_state=seed).fit_predict(z.numpy())
                km_u = KMeans(clusters, n_init=10, random_state=seed).fit_predict(u.numpy())
            truth = labels.numpy()
            scores["infonce"].append(ari(truth, km_z))
            scores["spectral"].append(ari(truth, km_u))
            scores["agreement"].append(ari(km_z, km_u))
            if k == 0:
                panels.append({"p": p, "q": q, "z": z.numpy(), "truth": truth,
                               "view": PCA(2).fit_transform(u.numpy())})
        row: dict[str, Any] = {"p": p, "q": q, "steps": spec["steps"]}
        add_mean_std(row, "ARI InfoNCE vs truth", scores["infonce"], digits=4)
        add_mean_std(row, "ARI spectral vs truth", scores["spectral"], digits=4)
        add_mean_std(row, "ARI InfoNCE vs spectral", scores["agreement"], digits=4)
        row["seeds"] = len(seeds)
        rows.append(row)
    output.figures["spectral_clustering.png"] = spectral_figure(panels, clusters)
    output.tables["arXiv:2303.15103 appendix C: InfoNCE against spectral clustering"] = rows
    output.notes.append(
        f"Spectral clustering (arXiv:2303.15103, appendix C; {clusters} clusters of "
        f"{spec['size']} vertices, SGD lr {spec['lr']}, tau {spec['temperature']}, batch "
        f"{spec['batch_size']}, {spec['steps']} steps, one sampled out-edge per vertex per "
        "step): k-means on the InfoNCE embedding agreed with k-means on the spectral embedding "
        "with ARI " + ", ".join(f"{r['ARI InfoNCE vs spectral mean']:.2f} (p={r['p']}, "
                                f"q={r['q']})" for r in rows)
        + ". InfoNCE here uses the Gaussian kernel exp(-|z_i - z_j|^2 / (2 tau)) on "
        "unnormalised 2-D vectors, the kernel of the paper's Theorem 3.1.")


# ----------------------------------------------------------------------------------------------


def _map_keys(spec: Any, where: str) -> tuple[str, ...]:
    """The keys an embedding map's settings hold, by its ``kind``."""
    kind = spec.get("kind") if isinstance(spec, dict) else None
    if kind not in MAP_KEYS:
        raise ConfigError(f"{where}: unknown kind {kind!r}; accepted: {', '.join(MAP_KEYS)}")
    return MAP_KEYS[kind]


def run(seeds: Sequence[int], temperature: float, lr: float, metric_every: int,
        high_silhouette: float, iteration_scale: float, torch_threads: int,
        data: dict[str, Any], networks: list[dict[str, Any]], imbalanced: dict[str, Any] | None,
        population: dict[str, Any] | None, kernel: dict[str, Any] | None,
        spectral: dict[str, Any] | None) -> ExperimentOutput:
    """The suite ``contrastive_dynamics``: every section described in the package docstring.
    Every setting comes from the suite file (``benchmarks/contrastive_dynamics.yaml``).

    Args:
        seeds: one run of every section per seed (data, initialisation, augmentations).
        temperature: tau of the generalised NT-Xent (eq. 4) in the dynamics.
        lr: the step size sigma, the same for both dynamics (eq. 14 and eq. 15).
        metric_every: silhouette and uniformity are recorded every this many iterations.
        high_silhouette: the threshold of a "high" silhouette for the stretch.
        iteration_scale: multiplies every iteration count (1 for the paper's; the fast budget
            shrinks it).
        torch_threads: torch's CPU threads during the run (restored afterwards).
        data: the clustered sample (centres on the x-axis, points per cluster, cluster std,
            number of noise coordinates, augmentation std).
        networks: one entry per setting of Figures 5-6 (name, figure file, kind
            ``one_hidden_layer`` or ``mlp`` and its sizes, dim, steps, snapshot iterations).
        imbalanced, population, kernel, spectral: the other sections' settings; a section whose
            settings are null is skipped.

    Returns:
        The tables, figures and notes (see :class:`benchmarks.suites.experiment.ExperimentOutput`).
    """
    data = section(data, DATA_KEYS, "settings: data")
    networks = [section(spec, (*_map_keys(spec, f"settings: networks[{i}]"), *NETWORK_KEYS),
                        f"settings: networks[{i}]") for i, spec in enumerate(networks)]
    if imbalanced:
        imbalanced = section(imbalanced, (*_map_keys(imbalanced, "settings: imbalanced"),
                                          *IMBALANCED_KEYS), "settings: imbalanced")
    population = population and section(population, POPULATION_KEYS, "settings: population")
    kernel = kernel and section(kernel, KERNEL_KEYS, "settings: kernel")
    spectral = spectral and section(spectral, SPECTRAL_KEYS, "settings: spectral")
    output = ExperimentOutput()
    started = time.perf_counter()
    timings: dict[str, float] = {}

    def timed(name: str, part, *args) -> None:
        tic = time.perf_counter()
        part(*args)
        timings[name] = time.perf_counter() - tic

    with TorchThreads(torch_threads):  # tiny matrices: threads cost more than they gain
        if networks:
            timed("dynamics", _dynamics_section, seeds, networks, data, temperature, lr,
                  metric_every, iteration_scale, high_silhouette, output)
        if imbalanced:
            timed("imbalanced", _imbalanced_section, seeds, imbalanced, data, temperature, lr,
                  metric_every, iteration_scale, output)
        if population:
            timed("population", _population_section, population["temperatures"],
                  population["max_atoms"], population["tolerance"], output)
        if kernel:
            timed("kernel", _kernel_section, seeds, kernel, data, output)
        if spectral:
            steps = max(1, int(round(spectral["steps"] * iteration_scale)))
            timed("spectral", _spectral_section, seeds, {**spectral, "steps": steps}, output)
    output.notes.append(
        f"Generated data only (Gaussian clusters, random graphs); float64 on CPU, "
        f"{torch_threads} torch thread(s), "
        f"{len(seeds)} seeds; wall time {time.perf_counter() - started:.0f} s ("
        + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in timings.items()) + ").")
    return output


__all__ = ["clustered_samples", "run"]
