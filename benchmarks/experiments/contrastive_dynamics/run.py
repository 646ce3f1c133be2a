"""Contrastive-learning training dynamics: Calder & Lee, "Understanding Contrastive Learning
through Variational Analysis and Neural Network Optimization Perspectives" (arXiv:2503.10812),
Figures 3, 5 and 6, Propositions 4.3-4.4 and Remark 4.4; with the spectral-clustering experiment of
Tan et al., "Contrastive Learning is Spectral Clustering on Similarity Graph" (arXiv:2303.15103),
appendix C. Offline, CPU-only, on generated data.

Sections of :func:`run` (each returns tables, figures and notes; the data, maps and measures are
in :mod:`.samples`, the two dynamics and the imbalanced clusters in :mod:`.dynamics`):

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

from benchmarks.experiments.contrastive_dynamics.dynamics import (
    dynamics_section,
    imbalanced_section,
)
from benchmarks.experiments.contrastive_dynamics.figures import (
    kernel_convergence_figure,
    population_figure,
    spectral_figure,
)
from benchmarks.experiments.contrastive_dynamics.samples import DTYPE, clustered_samples
from benchmarks.experiments.kit import TorchThreads, add_mean_std, ari, section
from benchmarks.infra.errors import ConfigError
from benchmarks.infra.statistics import mean_std
from benchmarks.suites.experiment import ExperimentOutput
from modules.theory.contrastive_dynamics import (
    OneHiddenLayerEmbedding,
    closed_form_kernel,
    empirical_neural_kernel,
    evenly_spaced_circle,
    infinite_width_kernel,
    infonce_graph_embedding,
    orthogonal_noise_augmentation,
    population_nt_xent,
    spectral_embedding,
    stochastic_block_graph,
)

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
            timed("dynamics", dynamics_section, seeds, networks, data, temperature, lr,
                  metric_every, iteration_scale, high_silhouette, output)
        if imbalanced:
            timed("imbalanced", imbalanced_section, seeds, imbalanced, data, temperature, lr,
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
