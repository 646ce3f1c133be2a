"""Learning curves for the leaderboard page: each trained run's training loss and online probe
accuracy by epoch, the mean over its seeds, read from the ``logs/metrics.csv`` each seed keeps
(Lightning's CSV logger). A results folder is data: the file is read as numbers, nothing else."""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.infra.plots import png_bytes, pyplot
from benchmarks.infra.read_back import Unreadable, regular_file_bytes
from benchmarks.suites.render_html import plain_text

#: The curves drawn, by the column of ``metrics.csv`` and what the panel says.
CURVES = {"train_loss": "training loss (mean over the epoch's logged steps)",
          "online_val_acc": "online probe accuracy, validation split"}
#: The title the page gives the figure.
TITLE = ("Learning curves: each trained run's mean over its seeds, by epoch (from each seed's "
         "logs/metrics.csv)")


def epoch_curves(path: Path) -> dict[str, dict[int, float]]:
    """Per column of :data:`CURVES`: epoch -> the mean of its finite values in that epoch;
    empty where the file is missing or not a CSV of numbers. Only a regular file of bounded size
    is read (:func:`~benchmarks.infra.read_back.regular_file_bytes`): a FIFO planted there
    would block the page's writer, which holds the folder's lock."""
    import sys

    sums: dict[str, dict[int, list[float]]] = {c: defaultdict(list) for c in CURVES}
    try:
        text = regular_file_bytes(path).decode("utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, Unreadable, UnicodeDecodeError) as err:
        print(f"clusterbench: warning: learning curves of {path} not drawn: {err}",
              file=sys.stderr)
        return {}
    try:
        with io.StringIO(text, newline="") as file:
            for row in csv.DictReader(file):
                for column in CURVES:
                    try:
                        epoch, value = int(row["epoch"]), float(row.get(column) or "nan")
                    except (KeyError, TypeError, ValueError):
                        continue
                    if math.isfinite(value):
                        sums[column][epoch].append(value)
    except csv.Error:
        return {}
    return {c: {e: statistics.fmean(v) for e, v in sorted(by.items())} for c, by in sums.items()}


def run_curves(results: list[dict[str, Any]]) -> dict[str, dict[str, dict[int, float]]]:
    """Run -> column -> epoch -> the mean over the run's seeds that logged that epoch."""
    seeds: dict[str, list[dict[str, dict[int, float]]]] = defaultdict(list)
    for result in results:
        curves = epoch_curves(Path(result["directory"]) / "logs" / "metrics.csv")
        if any(curves.values()):
            seeds[result["run"]].append(curves)
    out = {}
    for run, per_seed in sorted(seeds.items()):
        out[run] = {}
        for column in CURVES:
            epochs = sorted({e for c in per_seed for e in c.get(column, {})})
            out[run][column] = {e: statistics.fmean([c[column][e] for c in per_seed
                                                    if e in c.get(column, {})]) for e in epochs}
    return out


def learning_curves(results: list[dict[str, Any]]) -> dict[str, bytes]:
    """``{TITLE: png}`` where some run logged curves, else ``{}``: a panel per curve, a line
    per run (epochs counted from 1)."""
    curves = run_curves(results)
    if not curves:
        return {}
    plt = pyplot()
    fig, axes = plt.subplots(1, len(CURVES), figsize=(11, 4))
    for ax, (column, said) in zip(axes, CURVES.items(), strict=True):
        for run, by_column in curves.items():
            points = by_column.get(column) or {}
            if points:
                ax.plot([e + 1 for e in points], list(points.values()), marker="o",
                        markersize=2, linewidth=1.2, label=plain_text(run))
        ax.set_xlabel("epoch")
        ax.set_ylabel(said, fontsize=9)
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=8, loc="lower right", frameon=False)
    fig.tight_layout()
    return {TITLE: png_bytes(fig, dpi=100)}
