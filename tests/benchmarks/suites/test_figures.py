"""The figures a reader reads: t-SNE panels large enough, with a legend of the classes, and the
search's trial curves with labelled axes and a legend naming each trial."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from benchmarks.infra.plots import (
    LEGEND_MAX_CLASSES,
    class_colours,
    tsne_panels_figure,
    tsne_panels_png,
)


def png_size(png: bytes) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk."""
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    return struct.unpack(">II", png[16:24])


def blobs(classes: int, n: int = 60, dim: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % classes
    return rng.normal(size=(n, dim)) + 3 * np.eye(dim)[labels % dim], labels


class FirstTwoColumns:
    """A stand-in for scikit-learn's t-SNE (seconds a panel on a busy machine): these tests are
    about the figure's layout and legend, not the embedding."""

    def __init__(self, **kwargs) -> None:
        pass

    def fit_transform(self, x):
        return np.asarray(x)[:, :2]


@pytest.fixture(autouse=True)
def quick_tsne(monkeypatch):
    import sklearn.manifold

    monkeypatch.setattr(sklearn.manifold, "TSNE", FirstTwoColumns)


def legend_texts(fig) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def test_tsne_legend_names_every_class_drawn() -> None:
    x, labels = blobs(3)
    fig = tsne_panels_figure([x, 2 * x], labels, ["a", "b"], class_names=["zero", "one", "two"])
    assert legend_texts(fig) == ["zero", "one", "two"]
    assert fig.legends[0].get_title().get_text() == "class"
    fig = tsne_panels_figure([x], labels, ["a"])  # no names: the labels themselves
    assert legend_texts(fig) == ["0", "1", "2"]


def test_tsne_without_a_legend_says_how_many_classes() -> None:
    x, labels = blobs(LEGEND_MAX_CLASSES + 1, n=3 * (LEGEND_MAX_CLASSES + 1))
    fig = tsne_panels_figure([x], labels, ["a"])
    assert fig.legends == []
    assert f"{LEGEND_MAX_CLASSES + 1} classes" in fig._suptitle.get_text()


def test_tsne_panels_are_large_enough_to_read_and_wrap_into_rows() -> None:
    x, labels = blobs(3)
    width, height = png_size(tsne_panels_png([x], labels, ["one panel"]))
    assert width >= 450 and height >= 400  # about 4.5 inches a panel at 100 dpi, plus the legend
    fig = tsne_panels_figure([x] * 5, labels, [f"layer {i}" for i in range(5)])
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 5 and fig.axes[0].get_gridspec().ncols == 3  # 3 + 2, not 1 x 5
    assert all(ax.get_position().width * fig.get_figwidth() >= 3.0 for ax in visible)


@pytest.mark.parametrize("n", [3, 10, 12, 20, 40])
def test_class_colours_are_distinct(n: int) -> None:
    assert len(set(class_colours(list(range(n))).values())) == n


def test_trial_curves_label_the_axes_and_name_every_trial() -> None:
    from tune.outputs import trial_curves_figure

    rows = [{"trial_id": "a1", "model.lr": 0.001, "model.temperature": 0.5, "online_val_acc": 0.6,
             "epochs": 4, "devices": 1, "status": "completed", "error": ""},
            {"trial_id": "b2", "model.lr": 0.01, "model.temperature": 0.1, "online_val_acc": 0.3,
             "epochs": 1, "devices": 1, "status": "stopped early by ASHA", "error": ""}]
    curves = {"a1": ([1, 2, 3, 4], [0.2, 0.4, 0.5, 0.6]), "b2": ([1], [0.3])}
    fig = trial_curves_figure(curves, rows, "online_val_acc", max_epochs=4)
    (ax,) = fig.axes
    assert ax.get_xlabel().startswith("epoch") and "online_val_acc" in ax.get_ylabel()
    legends = [a for a in ax.get_children() if type(a).__name__ == "Legend"]
    texts = [t.get_text() for legend in legends for t in legend.get_texts()]
    assert "a1 (lr=0.001, temperature=0.5)" in texts and "b2 (lr=0.01, temperature=0.1)" in texts
    assert {"stopped early by ASHA", "completed", "failed"} <= set(texts)
    titles = {legend.get_title().get_text() for legend in legends}
    assert titles == {"trial", "last point"}
