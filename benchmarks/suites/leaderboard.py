"""A results folder's leaderboard files (Markdown, CSV, self-contained HTML with a chart per
metric, the suite's plots, and ``rankings.csv`` where the suite has a ranking section), rebuilt
from its per-run results and replaced together.

Everything is derived from the ``result.json`` files under a results directory, so results from
several machines can be copied into one directory and merged with ``clusterbench leaderboard``.
The results are read and aggregated by :mod:`benchmarks.suites.results`, drawn by
:mod:`benchmarks.suites.render_table` and :mod:`benchmarks.suites.render_html`.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.infra.atomic import write_atomic_together
from benchmarks.suites.curves import (
    attach_curves,
    learning_curves,
    run_curves,
    training_table,
    with_training_table,
)
from benchmarks.suites.rankings import suite_rankings
from benchmarks.suites.render_html import line_plot_png, plot_file_name, render_html
from benchmarks.suites.render_table import render_csv, render_markdown, render_rankings_csv
from benchmarks.suites.results import aggregate, load_results, run_figures

FILES = ("leaderboard.md", "leaderboard.csv", "leaderboard.html")
#: Beside them where the suite has a ``ranking`` section: each comparison of "Rankings beyond
#: the spread" (:func:`benchmarks.suites.render_table.render_rankings_csv`).
RANKINGS_CSV = "rankings.csv"

#: The record of the leaderboard files being renamed into place (a kill between two renames is
#: finished by the next write: :func:`benchmarks.infra.atomic.write_atomic_together`).
JOURNAL = ".leaderboard.journal"


def write_leaderboard(results_dir: str | Path, headline: str | None = None,
                      sources: list[Path] | None = None) -> list[Path]:
    """Rebuild ``leaderboard.{md,csv,html}`` (and :data:`RANKINGS_CSV`) in ``results_dir`` from
    its result files (or from those of the folders ``sources``: several suites side by side),
    atomically.

    With no result files nothing is written (an earlier leaderboard stays as it was)."""
    results_dir = Path(results_dir)
    results = [r for source in (sources or [results_dir]) for r in load_results(source)]
    if not results:
        return []
    if headline is None:
        headline = results[0]["config"].get("headline", "linear_probe_top1")
    rows = aggregate(results, headline)
    curves = run_curves(results)  # each run's metrics.csv read once
    attach_curves(rows, curves)
    plots = {plot_file_name(plot): line_plot_png(rows, plot)
             for plot in results[0]["config"].get("plots") or []}
    ranked = suite_rankings(results, rows)
    markdown = with_training_table(render_markdown(rows, headline, ranked),
                                   training_table(curves))
    texts = {"leaderboard.md": markdown,
             "leaderboard.csv": render_csv(rows, headline),
             "leaderboard.html": render_html(rows, headline, {
                 **plots, **learning_curves(curves), **run_figures(results)}, ranked),
             **({RANKINGS_CSV: render_rankings_csv(ranked)} if ranked else {})}
    # the plots, the Markdown, the CSVs and the HTML are replaced together or not at all
    written = write_atomic_together({results_dir / name: data
                                     for name, data in {**plots, **texts}.items()},
                                    journal=results_dir / JOURNAL)
    if not ranked:  # a ranking the suite no longer asks for is not left beside the board
        (results_dir / RANKINGS_CSV).unlink(missing_ok=True)
    return written
