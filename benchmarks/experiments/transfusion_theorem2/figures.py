"""The figures of the ``transfusion_theorem2`` experiment: the map of the bound γ(ρ, ε)
(Figure 3) and the measured per-layer sharpness. Each returns PNG bytes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from benchmarks.experiments.transfusion_theorem2.measure import GENERATED, Theorem2Settings
from benchmarks.infra.plots import png_bytes, pyplot


def gamma_map_png(m: dict[str, np.ndarray]) -> bytes:
    """Figure 3: γ where Δ > 0 (left) and the bare formula everywhere (right, log scale)."""
    plt = pyplot()
    from matplotlib.colors import LogNorm

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    extent = dict(shading="auto")
    ax = axes[0]
    mesh = ax.pcolormesh(m["eps"], m["rho"], m["gamma"], cmap="viridis", **extent)
    fig.colorbar(mesh, ax=ax, label=r"$\gamma$")
    ax.contour(m["eps"], m["rho"], m["Delta"], levels=[0.0], colors="white", linewidths=1.2)
    if np.nanmax(m["gamma"]) >= 1:
        ax.contour(m["eps"], m["rho"], m["gamma"], levels=[1.0], colors="red")
    ax.set_title(r"Theorem 2's $\gamma(\rho,\varepsilon)$ where $\Delta>0$ (grey: vacuous)"
                 f"\nmax {np.nanmax(m['gamma']):.3f}: "
                 + (r"$\gamma\geq1$ nowhere" if np.nanmax(m["gamma"]) < 1 else r"red: $\gamma=1$"),
                 fontsize=10)
    ax.set_facecolor("0.8")
    positive = np.where(m["formula"] > 0, m["formula"], np.nan)
    ax = axes[1]
    mesh = ax.pcolormesh(m["eps"], m["rho"], positive, cmap="magma",
                         norm=LogNorm(vmin=1e-3, vmax=max(1.0, np.nanmax(positive))), **extent)
    fig.colorbar(mesh, ax=ax, label=r"bare formula $\gamma$ (log; white: $\leq 0$)")
    ax.contour(m["eps"], m["rho"], np.nan_to_num(m["formula"], nan=-1.0), levels=[1.0],
               colors="cyan", linewidths=1.5)
    ax.contour(m["eps"], m["rho"], m["Delta"], levels=[0.0], colors="lime", linewidths=1.2,
               linestyles="--")
    ax.set_title(r"the formula everywhere: cyan $\gamma=1$, dashed green $\Delta=0$"
                 "\n" r"($\gamma\geq1$ only where $\Delta\leq0$, i.e. where it is vacuous)",
                 fontsize=10)
    for ax in axes:
        ax.set_xlabel(r"noise $\varepsilon$")
        ax.set_ylabel(r"$\rho$ (eq. 6)")
    fig.suptitle("TransFusion Theorem 2 / Figure 3 (analytic, no data)", fontsize=11)
    return png_bytes(fig, dpi=120)


def sharpness_png(cfg: Theorem2Settings, rows: list[dict[str, Any]]) -> bytes:
    """Every block affinity's sharpness per layer (median over batches and seeds) with Theorem
    2's floor, and the cosine silhouette per layer, one row of panels per subspace count."""
    plt = pyplot()
    kappas = sorted({r["n_subspaces"] for r in rows})
    columns = [*cfg.scores, "silhouette"]
    fig, axes = plt.subplots(len(kappas), len(columns), squeeze=False,
                             figsize=(4.2 * len(columns), 3.4 * len(kappas)),
                             constrained_layout=True)
    colours = plt.cm.viridis(np.linspace(0, 0.85, len(cfg.eps)))
    for a, kappa in enumerate(kappas):
        for b, column in enumerate(columns):
            ax = axes[a, b]
            not_shown, any_shown = [], False
            for eps, colour in zip(cfg.eps, colours, strict=True):
                score = cfg.scores[0] if column == "silhouette" else column
                selected = [r for r in rows if r["n_subspaces"] == kappa and r["eps"] == eps
                            and r["scores"] == score]
                if not selected:
                    continue
                gamma = selected[0]["gamma"]
                if column == "silhouette":
                    layers = sorted({r["layer"] for r in selected})
                    values = [np.nanmean([r["silhouette_cosine"] for r in selected
                                          if r["layer"] == layer]) for layer in layers]
                    ax.plot(layers, values, "o-", color=colour, label=f"ε={eps}")
                    continue
                layers = sorted({r["layer"] for r in selected})
                # Median over seeds of each seed's median over batches (values span decades).
                values = np.array([np.nanmedian([r["sharpness_median"] for r in selected
                                                 if r["layer"] == layer]) for layer in layers])
                shown = values > 0  # a log axis; S <= 0 or undefined is listed instead
                not_shown += [f"ε={eps}: ℓ={layer}" for layer, ok in zip(layers, shown,
                                                                         strict=True) if not ok]
                any_shown = any_shown or bool(shown.any())
                ax.plot(np.array(layers)[shown], values[shown], "o-", color=colour,
                        label=f"ε={eps}, γ={gamma:.3g}")
                if not math.isnan(gamma) and shown[0]:
                    # Theorem 2's floor from the measured first affinity: S(A^0) gamma^l.
                    ax.plot(layers, [values[0] * gamma**layer for layer in layers], ":",
                            color=colour)
            if column == "silhouette":
                ax.set_title(f"κ={kappa}: cosine silhouette of X^ℓ (mean over seeds)",
                             fontsize=9)
                ax.set_xlabel("layer ℓ (0 = input)")
            else:
                ax.set_yscale("log")
                ax.set_title(f"κ={kappa}: S(A^ℓ), scores={column}, median over batches and "
                             "seeds\n(dotted: S(A^0) γ^ℓ, Theorem 2's floor)", fontsize=9)
                ax.set_xlabel("block affinity A^ℓ (on layer ℓ)")
                ax.set_xticks(range(cfg.num_blocks))
                if not any_shown:
                    ax.text(0.5, 0.5, "median S(A^ℓ) ≤ 0 or undefined\nat every layer and ε",
                            transform=ax.transAxes, ha="center", va="center", fontsize=9)
                elif not_shown:
                    ax.text(0.02, 0.02, "S ≤ 0 or undefined (not shown):\n"
                            + "\n".join(not_shown[:6]) + ("\n..." if len(not_shown) > 6 else ""),
                            transform=ax.transAxes, fontsize=6, va="bottom")
            if column == "silhouette" or any_shown:
                ax.legend(fontsize=7)
    fig.suptitle(f"Trained TransFusion on {GENERATED}; seeds {cfg.seeds}, {cfg.epochs} "
                 "epochs", fontsize=10)
    return png_bytes(fig, dpi=110)
