"""Figures of a run's representations: t-SNE panels coloured by label."""

from __future__ import annotations

import io

import numpy as np


def pyplot():
    """matplotlib's pyplot on the Agg backend (PNG files, no display), chosen here once for
    every figure the project draws."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig, dpi: int = 110) -> bytes:
    """A matplotlib figure as PNG bytes; the figure is closed."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    return buffer.getvalue()


def tsne_panels_png(arrays: list[np.ndarray], labels: np.ndarray, titles: list[str],
                    seed: int = 0, max_points: int = 1000) -> bytes:
    """One 2-D t-SNE panel per array (scikit-learn, cosine metric, fixed seed), points coloured
    by label; above ``max_points`` the same deterministic subsample is drawn in every panel."""
    plt = pyplot()
    from sklearn.manifold import TSNE

    rows = np.random.default_rng(seed).permutation(len(labels))[:max_points]
    fig, axes = plt.subplots(1, len(arrays), figsize=(3 * len(arrays), 3.2), squeeze=False)
    for ax, array, title in zip(axes[0], arrays, titles, strict=True):
        points = array[rows]
        perplexity = min(30.0, max(2.0, (len(points) - 1) / 3))
        embedded = TSNE(n_components=2, metric="cosine", init="random", random_state=seed,
                        perplexity=perplexity).fit_transform(points)
        ax.scatter(embedded[:, 0], embedded[:, 1], c=labels[rows], cmap="tab10", s=4)
        ax.set_title(title, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    return png_bytes(fig, dpi=100)
