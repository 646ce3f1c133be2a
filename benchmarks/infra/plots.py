"""Figures of a run's representations: t-SNE panels coloured by label, with a class legend; and
what every figure the project draws shares (the backend, the PNG, text drawn as it is)."""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

from benchmarks.infra.errors import control_free

if TYPE_CHECKING:  # numpy is imported where a figure is drawn: a table of results needs none
    import numpy as np

#: Above this many classes a legend would be a wall of swatches: the panel says the count instead.
LEGEND_MAX_CLASSES = 20


#: matplotlib's warning that a font has no glyph for a control character: it quotes the character
#: itself ("Glyph 27 (\x1b) missing from font(s)"), an ESC that would reach the terminal.
CONTROL_GLYPH_WARNING = r"Glyph \d+ \([\x00-\x1f\x7f-\x9f]\) missing from font"


def pyplot():
    """matplotlib's pyplot on the Agg backend (PNG files, no display), chosen here once for
    every figure the project draws; its warning of a control character's missing glyph is kept
    off the console (:data:`CONTROL_GLYPH_WARNING`: text drawn by :func:`plain_text` has none)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    warnings.filterwarnings("ignore", message=CONTROL_GLYPH_WARNING, category=UserWarning)
    return plt


def plain_text(text: object) -> str:
    r"""``text`` as matplotlib draws it literally: a ``$`` escaped, so that a run's name from a
    result file is never parsed as mathtext (``$\frac{a$`` broke the figure), and each control
    character a ``?`` (:func:`~benchmarks.infra.errors.control_free`), which no font draws and
    whose missing glyph matplotlib's warning would print raw.

    >>> plain_text("a$b$\x1b[31m")
    'a\\$b\\$?[31m'
    """
    return control_free(str(text)).replace("$", r"\$")


def png_bytes(fig, dpi: int = 110) -> bytes:
    """A matplotlib figure as PNG bytes; the figure is closed."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def class_colours(classes: Sequence) -> dict:
    """One distinct colour per class: tab10 up to 10 classes, tab20 up to 20, then a sampled
    continuous map (colours repeat no more, but neighbours get close).

    >>> len(set(class_colours(range(12)).values()))
    12
    """
    import numpy as np

    plt = pyplot()
    n = len(classes)
    if n <= 10:
        cmap, positions = plt.get_cmap("tab10"), range(n)
    elif n <= 20:
        cmap, positions = plt.get_cmap("tab20"), range(n)
    else:
        cmap, positions = plt.get_cmap("turbo"), np.linspace(0, 1, n)
    return {c: tuple(cmap(p)) for c, p in zip(classes, positions, strict=True)}


#: OpenMP threads of one t-SNE (scikit-learn's Barnes-Hut gradient). One: a 1,000-point panel
#: takes about 3 s on one thread, and the spin-waiting OpenMP pool collapses when processes
#: share the cores (on a 16-core H200 host, 1.4 s alone on 16 threads, but five processes at
#: once on 16 threads each had not finished in 25 s; on one thread each they took 3.2-4.0 s).
TSNE_THREADS = 1
#: scikit-learn's default number of t-SNE iterations, and its least: the first 250 are the
#: early-exaggeration phase, so 300 keeps 50 of plain descent (a --fast budget's figure, about
#: a third of the time: t-SNE was most of a --fast run's evaluation).
TSNE_ITERATIONS, TSNE_LEAST_ITERATIONS, TSNE_MOST_ITERATIONS = 1000, 250, 100_000


def check_tsne_iterations(name: str, value: object) -> None:
    if (isinstance(value, bool) or not isinstance(value, int)
            or not TSNE_LEAST_ITERATIONS <= value <= TSNE_MOST_ITERATIONS):
        raise ValueError(f"{name} must be a whole number from {TSNE_LEAST_ITERATIONS} to "
                         f"{TSNE_MOST_ITERATIONS}, got {value!r}")


def tsne_panels_png(arrays: list[np.ndarray], labels: np.ndarray, titles: list[str],
                    seed: int = 0, max_points: int = 1000,
                    class_names: Sequence[str] | None = None, columns: int = 3,
                    iterations: int = TSNE_ITERATIONS) -> bytes:
    """:func:`tsne_panels_figure` as PNG bytes."""
    return png_bytes(tsne_panels_figure(arrays, labels, titles, seed=seed, max_points=max_points,
                                        class_names=class_names, columns=columns,
                                        iterations=iterations), dpi=100)


def tsne_panels_figure(arrays: list[np.ndarray], labels: np.ndarray, titles: list[str],
                       seed: int = 0, max_points: int = 1000,
                       class_names: Sequence[str] | None = None, columns: int = 3,
                       iterations: int = TSNE_ITERATIONS):
    """One 2-D t-SNE panel per array (scikit-learn, cosine metric, fixed seed), points coloured
    by label, with one legend of the classes beside the panels (``class_names[label]`` when
    given, else the label); above ``max_points`` the same deterministic subsample is drawn in
    every panel. Panels are 4.5 inches square, at most ``columns`` a row, so a page shows them
    large enough to read."""
    import numpy as np

    plt = pyplot()
    from matplotlib.lines import Line2D
    from sklearn.manifold import TSNE
    from threadpoolctl import threadpool_limits

    rows = np.random.default_rng(seed).permutation(len(labels))[:max_points]
    shown = np.asarray(labels)[rows]
    classes = sorted(np.unique(shown).tolist())
    colours = class_colours(classes)
    ncols = min(columns, len(arrays))
    nrows = math.ceil(len(arrays) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.5 * ncols, 4.5 * nrows), squeeze=False)
    for ax in axes.flat[len(arrays):]:
        ax.set_visible(False)
    for ax, array, title in zip(axes.flat, arrays, titles, strict=False):
        points = array[rows]
        perplexity = min(30.0, max(2.0, (len(points) - 1) / 3))
        with threadpool_limits(TSNE_THREADS):
            embedded = TSNE(n_components=2, metric="cosine", init="random",
                            random_state=seed, perplexity=perplexity,
                            max_iter=iterations).fit_transform(points)
        ax.scatter(embedded[:, 0], embedded[:, 1], c=[colours[c] for c in shown.tolist()],
                   s=10, linewidths=0)
        ax.set_title(plain_text(title), fontsize=11)
        ax.set_xticks([])
        ax.set_yticks([])

    def name(c) -> str:
        return plain_text(class_names[c] if class_names is not None else c)

    if len(classes) <= LEGEND_MAX_CLASSES:
        handles = [Line2D([], [], marker="o", linestyle="", markersize=7, color=colours[c],
                          label=name(c)) for c in classes]
        fig.legend(handles=handles, title="class", loc="center left",
                   bbox_to_anchor=(1.0, 0.5), fontsize=10, title_fontsize=10, frameon=False)
    else:
        fig.suptitle(f"colour = class ({len(classes)} classes; too many for a legend)",
                     fontsize=10)
    fig.tight_layout()
    return fig
