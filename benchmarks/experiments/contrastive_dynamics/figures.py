"""The figures of the ``contrastive_dynamics`` experiment: snapshots of both dynamics on the
sphere (Figures 5-6), their silhouette and uniformity curves, the imbalanced clusters (Remark
4.4), the population cost (Figure 3), the kernel's convergence (Proposition 4.4) and the
spectral-clustering embeddings (arXiv:2303.15103, appendix C). Each returns PNG bytes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from torch import Tensor

from benchmarks.infra.plots import png_bytes, pyplot
from modules.theory.contrastive_dynamics import Trajectory


def scatter_on_sphere(ax, z: Tensor, labels: np.ndarray, velocity: Tensor | None, dim: int) -> None:
    z_np = z.numpy()
    if dim == 2:
        theta = np.linspace(0, 2 * np.pi, 200)
        ax.plot(np.cos(theta), np.sin(theta), color="0.85", lw=0.8, zorder=0)
        ax.scatter(z_np[:, 0], z_np[:, 1], c=labels, cmap="viridis", s=9, zorder=2)
        if velocity is not None and velocity.norm(dim=1).max() > 0:
            v = (velocity / velocity.norm(dim=1).max() * 0.35).numpy()  # longest arrow 0.35
            ax.quiver(z_np[:, 0], z_np[:, 1], v[:, 0], v[:, 1], angles="xy", scale_units="xy",
                      scale=1, width=0.004, color="0.3", zorder=1)
        ax.set_xlim(-1.3, 1.3)
        ax.set_ylim(-1.3, 1.3)
        ax.set_aspect("equal")
    else:
        ax.scatter(z_np[:, 0], z_np[:, 1], z_np[:, 2], c=labels, cmap="viridis", s=6)
        if velocity is not None and velocity.norm(dim=1).max() > 0:
            v = (velocity / velocity.norm(dim=1).max() * 0.35).numpy()
            ax.quiver(z_np[:, 0], z_np[:, 1], z_np[:, 2], v[:, 0], v[:, 1], v[:, 2],
                      color="0.3", linewidth=0.5)
        for setter in (ax.set_xlim, ax.set_ylim, ax.set_zlim):
            setter(-1.1, 1.1)
    ax.set_xticks([])
    ax.set_yticks([])


def snapshot_figure(title: str, result: dict[str, Any], dim: int) -> bytes:
    plt = pyplot()

    snaps = result["snaps"]
    cols = 1 + max(len(snaps["network"]), len(snaps["free"]))
    fig = plt.figure(figsize=(2.5 * cols, 5.4))
    projection = "3d" if dim == 3 else None
    x, labels = result["x"].numpy(), result["labels"]
    ax = fig.add_subplot(2, cols, 1, projection=projection)
    if dim == 2:
        ax.scatter(x[:, 0], x[:, 1], c=labels, cmap="viridis", s=9)
        ax.set_aspect("equal")
    else:
        ax.scatter(x[:, 0], x[:, 1], x[:, 2], c=labels, cmap="viridis", s=6)
    ax.set_title("input (clean coords)", fontsize=9)
    for row, name in enumerate(("network", "free")):
        trajectory: Trajectory = result[name]["trajectory"]
        at = dict(zip(trajectory.iterations, trajectory.embeddings, strict=True))
        for col, b in enumerate(snaps[name]):
            ax = fig.add_subplot(2, cols, row * cols + col + 2, projection=projection)
            scatter_on_sphere(ax, at[b], labels, trajectory.velocities.get(b), dim)
            ax.set_title(f"{'network' if row == 0 else 'free'}  it {b}", fontsize=9)
    fig.suptitle(title + " - row 1: network GD (eq. 15), row 2: free particles (eq. 14); "
                 "arrows: negative gradient (eq. 11 / eq. 13)", fontsize=9)
    fig.tight_layout()
    return png_bytes(fig)


def dynamics_curves_figure(summaries: list[dict[str, Any]], threshold: float) -> bytes:
    plt = pyplot()

    fig, axes = plt.subplots(len(summaries), 2, figsize=(10, 2.6 * len(summaries)), squeeze=False)
    for row, summary in enumerate(summaries):
        grid = np.asarray(summary["grid"])
        for col, metric in enumerate(("silhouette", "uniformity")):
            ax = axes[row, col]
            for name, colour in (("network", "tab:blue"), ("free", "tab:orange")):
                values = np.asarray([r[name][metric] for r in summary["runs"]])  # (seeds, T)
                mean = values.mean(axis=0)  # and the sample std over the seeds (0 for one)
                std = values.std(axis=0, ddof=1 if len(values) > 1 else 0)
                ax.plot(grid, mean, color=colour, label=f"{name} (band: ± sample std)")
                ax.fill_between(grid, mean - std, mean + std, color=colour, alpha=0.2)
            if metric == "silhouette":
                ax.axhline(threshold, color="0.5", ls="--", lw=0.8, label="high threshold")
            else:
                ax.axhline(summary["uniform_reference"], color="0.5", ls="--", lw=0.8,
                           label="uniform measure")
            ax.set_title(f"{summary['name']}: {metric}", fontsize=9)
            ax.set_xlabel("iteration")
            ax.legend(fontsize=7)
    fig.tight_layout()
    return png_bytes(fig)


def imbalanced_figure(grid: Sequence[int], per_cluster: np.ndarray, sizes: Sequence[int],
                      title: str) -> bytes:
    """Silhouette of the small cluster's points and of the large clusters' (mean) per iteration
    under both dynamics; ``per_cluster[name]``: (seeds, iterations, clusters)."""
    plt = pyplot()
    small = int(np.argmin(sizes))
    large = [q for q in range(len(sizes)) if q != small]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2), sharey=True)
    for ax, name in zip(axes, ("network", "free"), strict=True):
        values = per_cluster[name]
        ax.plot(grid, values[:, :, small].mean(axis=0), color="tab:red",
                label=f"small cluster ({sizes[small]} points)")
        ax.plot(grid, values[:, :, large].mean(axis=(0, 2)), color="tab:blue",
                label="large clusters (mean)")
        ax.set_title(f"{name} dynamics", fontsize=9)
        ax.set_xlabel("iteration")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("silhouette of the cluster's points")
    fig.suptitle(f"Remark 4.4, {title}", fontsize=9)
    fig.tight_layout()
    return png_bytes(fig)


def population_figure(counts: np.ndarray, min_sq: np.ndarray, temperatures: Sequence[float],
                      losses: list[np.ndarray], thresholds: Sequence[float],
                      fit: tuple[float, float, float], tolerance: float) -> bytes:
    """Figure 3: the population cost against K and against the atoms' squared distance, one
    curve per temperature, and the plateau's threshold against the temperature with its linear
    fit ``(slope, intercept, R^2)``."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    colours = plt.cm.viridis(np.linspace(0, 0.9, len(temperatures)))
    for tau, colour, loss in zip(temperatures, colours, losses, strict=True):
        axes[0].plot(counts, loss, color=colour, label=f"tau {tau:g}")
        axes[1].plot(min_sq[1:], loss[1:], color=colour)
    taus, ths = np.asarray(temperatures, dtype=float), np.asarray(thresholds)
    ok = ~np.isnan(ths)
    axes[2].plot(taus[ok], ths[ok], "o", color="tab:blue", label="threshold")
    slope, intercept, r2 = fit
    if ok.sum() >= 2:
        axes[2].plot(taus[ok], slope * taus[ok] + intercept, color="0.4", ls="--",
                     label=f"fit {slope:.2f} tau + {intercept:.3f} (R^2 {r2:.3f})")
    axes[0].set(xlabel="number of atoms K", ylabel="population NT-Xent (eq. 4)")
    axes[1].set(xlabel="min squared distance between atoms", ylabel="population NT-Xent")
    axes[2].set(xlabel="temperature tau", ylabel="threshold min squared distance")
    axes[0].legend(fontsize=6, ncol=2)
    axes[2].legend(fontsize=7)
    fig.suptitle("Figure 3: K atoms evenly spaced on S^1 (plateau: within "
                 f"{tolerance:g} of the way from K=1 to the uniform limit)", fontsize=9)
    fig.tight_layout()
    return png_bytes(fig)


def kernel_convergence_figure(widths: np.ndarray, means: np.ndarray, stds: np.ndarray,
                              slope: float) -> bytes:
    """Proposition 4.4: the width-M kernel's relative error to the limit (mean ± sample std over
    seeds) against M, beside the Monte-Carlo rate M^(-1/2)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.errorbar(widths, means, yerr=stds, fmt="o-",
                label="||K_M - K_inf|| / ||K_inf|| (± sample std)")
    ax.plot(widths, means[0] * (widths / widths[0]) ** -0.5, "--", color="0.5", label="M^(-1/2)")
    ax.set(xscale="log", yscale="log", xlabel="width per output M",
           ylabel="relative Frobenius error", title=f"Prop. 4.4 (ReLU), slope {slope:.3f}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return png_bytes(fig)


def spectral_figure(panels: list[dict[str, Any]], clusters: int) -> bytes:
    """The first seed's InfoNCE embedding and a PCA view of the spectral embedding, one row per
    graph; each panel ``{"p", "q", "z", "view", "truth"}``."""
    plt = pyplot()
    fig, axes = plt.subplots(len(panels), 2, figsize=(8, 3.8 * len(panels)), squeeze=False)
    for row, panel in zip(axes, panels, strict=True):
        for ax, points, title in ((row[0], panel["z"], "InfoNCE, free 2-D"),
                                  (row[1], panel["view"],
                                   f"spectral ({clusters} eigenvectors, PCA view)")):
            ax.scatter(points[:, 0], points[:, 1], c=panel["truth"], cmap="tab10", s=5)
            ax.set_title(f"p={panel['p']}, q={panel['q']}: {title}", fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
    fig.tight_layout()
    return png_bytes(fig)
