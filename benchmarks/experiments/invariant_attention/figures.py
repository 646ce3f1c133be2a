"""The figures of the ``invariant_attention`` experiment: rows of images, Experiment 1's
weight matrices, Figure 2's blobs and the scaling plot. Each returns PNG bytes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from torch import Tensor

from benchmarks.infra.plots import png_bytes, pyplot


def image_rows_figure(rows: list[tuple[str, Tensor]], title: str) -> bytes:
    plt = pyplot()
    columns = max(r[1].shape[0] for r in rows)
    fig, axes = plt.subplots(len(rows), columns, figsize=(0.8 * columns, 1.05 * len(rows) + 0.5),
                             squeeze=False)
    for (label, images), axes_row in zip(rows, axes, strict=True):
        for k, ax in enumerate(axes_row):
            ax.axis("off")
            if k < images.shape[0]:
                ax.imshow(images[k, 0].numpy(), cmap="gray")
        axes_row[0].set_title(label, fontsize=8, loc="left")
    fig.suptitle(title, fontsize=9)
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.01, top=1 - 0.45 / fig.get_figheight(),
                        wspace=0.05, hspace=0.35)
    return png_bytes(fig)


def weights_figure(draw: dict[str, Any], beta: float, seed: int) -> bytes:
    plt = pyplot()
    ia, ka = draw["runs"]["IA", beta], draw["runs"]["KA", beta]
    iterations = ia["result"].weights.shape[0]
    fig, axes = plt.subplots(2, iterations, figsize=(3.1 * iterations, 5.8), squeeze=False)
    for row, (name, run_) in enumerate((("invariant attention", ia), ("kernel attention", ka))):
        for k in range(iterations):
            ax = axes[row, k]
            image = ax.imshow(run_["result"].weights[k].cpu().numpy(), cmap="viridis")
            ax.set_title(f"{name}, iteration {k + 1}\nARI {run_['ari'][k]:.2f}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
            fig.colorbar(image, ax=ax, fraction=0.046)
    fig.suptitle(f"Experiment 1: weights W (columns sum to 1), beta = {beta:g}, seed {seed}; "
                 "images ordered by class", fontsize=9)
    fig.tight_layout()
    return png_bytes(fig)


def blobs_figure(first: dict[str, Any], iterations: Sequence[int]) -> bytes:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(iterations), figsize=(3.2 * len(iterations), 3.3),
                             sharex=True, sharey=True)
    for ax, k in zip(np.atleast_1d(axes), iterations, strict=True):
        pts = first["history"][k]
        ax.scatter(first["means"][:, 0], first["means"][:, 1], marker="o", s=160,
                   facecolors="none", edgecolors="k", label="blob sample means", zorder=2)
        ax.scatter(pts[:, 0], pts[:, 1], c=first["labels"], s=6, cmap="tab10", zorder=3)
        ax.set_title(f"iteration {k}", fontsize=9)
        ax.set_aspect("equal")
    np.atleast_1d(axes)[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Figure 2: kernel attention on isotropic Gaussian blobs (generated)",
                 fontsize=9)
    fig.tight_layout()
    return png_bytes(fig)


def scaling_figure(rows: list[dict[str, Any]]) -> bytes:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    for device in sorted({r["device"] for r in rows}):
        mine = [r for r in rows if r["device"] == device]
        ax.loglog([r["pairs"] for r in mine], [r["seconds"] for r in mine], "o-",
                  label=mine[0]["device name"])
    ax.set_xlabel("pairs n(n-1)/2")
    ax.set_ylabel("seconds per invariant_similarity")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return png_bytes(fig)
