"""The leaderboard as one self-contained HTML page: its tables (those of
:mod:`benchmarks.suites.render_table`) sortable and filterable, a dot chart per metric with the
papers' values marked, the suite's line plots (PNG) and each run's figures.
"""

from __future__ import annotations

from typing import Any

from benchmarks.infra import html_page
from benchmarks.infra.dot_chart import dot_chart_svg
from benchmarks.infra.plots import plain_text, png_bytes, pyplot
from benchmarks.infra.statistics import format_mean_std
from benchmarks.suites import rankings as ranking_section
from benchmarks.suites.rankings import SuiteRanking
from benchmarks.suites.render_table import (
    EVALUATION_TIME,
    PER_LAYER_CAPTION,
    columns,
    evaluation_time_table,
    paper_table,
    paper_value,
    per_layer_table,
    preamble,
    table,
)
from benchmarks.suites.results import display_scale, metric_digits, metric_label, metric_of


def bar_chart_data(rows: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """What the chart of ``metric`` draws, in the leaderboard's order and display units
    (percent for accuracies): per row its label, our mean and std over seeds (std None for one
    seed), and the paper's mean and std with its source where the suite records one."""
    scale = display_scale(metric)
    bars = []
    for r in rows:
        if metric not in r["metrics"]:
            continue
        stat = r["metrics"][metric]
        paper = paper_value(r, metric)
        label = f"{r['run']} ({r['dataset']})"
        bars.append({"label": label, "run": r["run"], "mean": scale * stat["mean"],
                     "std": None if stat["std"] is None else scale * stat["std"],
                     "paper_mean": paper[0] if paper else None,
                     "paper_std": paper[1] if paper else None,
                     "paper_source": r["paper"].get("source") if paper else None})
    return bars


def bar_chart_svg(rows: list[dict[str, Any]], metric: str) -> str:
    """``metric`` for every row as the page's chart (:mod:`benchmarks.infra.dot_chart`): a dot
    at the mean, whiskers of ± the std over seeds, the paper's value as a black diamond (with
    its std) where the suite records one, on an axis that spans the values shown (not from 0,
    so 99.1 and 99.9 stand apart), padded by a tenth of their spread (at least half a point of
    an accuracy, 0.005 of a score) and kept within the metric's bounds where they are closed."""
    described = metric_of(metric)
    low, high = described.range() if described is not None else (None, None)
    scale = display_scale(metric)
    marks = [{**bar, "text": f"{bar['mean']:.{metric_digits(metric)}f}"}
             for bar in bar_chart_data(rows, metric)]
    return dot_chart_svg(
        marks, low=None if low is None else low * scale,
        high=None if high is None else high * scale, min_pad=0.5 if scale == 100 else 0.005,
        axis_label=metric_label(metric),
        alt=bar_chart_alt(rows, metric))


def bar_chart_caption(rows: list[dict[str, Any]], metric: str) -> str:
    """What a chart shows, in words."""
    said = ("Dots: our mean over seeds; whiskers: the sample std over seeds. The axis spans the "
            "values shown, not from 0.")
    if any(b["paper_mean"] is not None for b in bar_chart_data(rows, metric)):
        said += (" Black diamonds: the paper's value (± its std), as in the table Against the "
                 "papers.")
    return said


def bar_chart_alt(rows: list[dict[str, Any]], metric: str) -> str:
    """The chart in words, for a reader who does not see it: every run and paper value."""
    return f"Chart of {metric_label(metric)}: " + "; ".join(
        f"{b['label']} {format_mean_std(b['mean'], b['std'])}"
        + (f" (paper: {format_mean_std(b['paper_mean'], b['paper_std'])})"
           if b["paper_mean"] is not None else "")
        for b in bar_chart_data(rows, metric))


def setting(row: dict[str, Any], path: str) -> Any:
    """A run's setting by dotted path, e.g. ``model.lr`` (None when the run does not set it)."""
    section, _, key = path.partition(".")
    return (row["run_config"].get(section) or {}).get(key)


def plot_file_name(plot: dict[str, Any]) -> str:
    """The file a suite's plot is written to beside the leaderboard."""
    return f"plot-{plot['y']}-vs-{plot['x']}.png".replace("/", "_")


def plot_series(rows: list[dict[str, Any]], plot: dict[str, Any]
                ) -> dict[Any, list[tuple[float, float, float]]]:
    """``{series value: [(x, mean %, std %), ...]}`` sorted by x: ``plot['y']`` over seeds
    against the run setting ``plot['x']``, one series per value of ``plot['series']`` (else per
    dataset); rows without the metric or the setting are left out."""
    series: dict[Any, list[tuple[float, float, float]]] = {}
    for row in rows:
        x, stat = setting(row, plot["x"]), row["metrics"].get(plot["y"])
        if x is None or stat is None:
            continue
        key = setting(row, plot["series"]) if "series" in plot else row["dataset"]
        scale = display_scale(plot["y"])
        series.setdefault(key, []).append((float(x), scale * stat["mean"],
                                           scale * (stat["std"] or 0)))
    return {key: sorted(points) for key, points in series.items()}


def line_plot_png(rows: list[dict[str, Any]], plot: dict[str, Any]) -> bytes:
    """The plot of :func:`plot_series` as a PNG."""
    plt = pyplot()

    series = plot_series(rows, plot)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for key, points in sorted(series.items(), key=lambda kv: str(kv[0])):
        xs, ys, errs = zip(*points, strict=True)
        ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=plain_text(key))
    if plot.get("log_x"):
        ax.set_xscale("log")
    # every text from a result file drawn as it is, never as mathtext
    ax.set_xlabel(plain_text(plot["x"]))
    ax.set_ylabel(plain_text(metric_label(plot["y"])))
    ax.set_title(plain_text(plot.get("title", "")))
    if len(series) > 1:
        ax.legend(title=plain_text(plot.get("series", "")), fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return png_bytes(fig, dpi=110)


def ranking_html(rankings: list[SuiteRanking]) -> str:
    """The section "Rankings beyond the spread" as the Markdown says it
    (:func:`benchmarks.suites.render_table.ranking_markdown`), its tables sortable."""
    if not rankings:
        return ""
    esc = html_page.esc
    parts = [f"<h2>{ranking_section.TITLE}</h2><p>{esc(ranking_section.CAPTION)}</p>"]
    for ranking in rankings:
        heading = ranking_section.ranking_heading(ranking, len(rankings) > 1)
        level = "h4" if heading else "h3"
        parts += [f"<h3>{esc(heading)}</h3>"] if heading else []
        if ranking.margin is not None:
            parts.append(f"<p>{esc(ranking_section.margin_rule(ranking.margin))}</p>")
        for ranked in ranking.metrics:
            parts.append(f"<{level}>{esc(metric_label(ranked.metric))}</{level}>")
            if ranked.against_baselines:
                parts.append("<p>Against the baselines:</p>" + html_page.table(
                    *ranking_section.baseline_table(ranked, ranking.margin), sortable=True))
            for check in ranked.orderings:
                parts.append(f"<p>{esc(ranking_section.claim(check))}</p>" + html_page.table(
                    *ranking_section.ordering_table(check, ranked.metric)))
            lead = ranking_section.pairs_lead(ranked)
            if lead:
                parts.append(f"<p>{esc(lead)}</p>" + (html_page.bullets(
                    ranking_section.pair_line(c, ranked.metric) for c in ranked.pairs)
                    if ranked.pairs else ""))
    return "".join(parts)


def render_html(rows: list[dict[str, Any]], headline: str,
                plots: dict[str, bytes] | None = None,
                rankings: list[SuiteRanking] | None = None) -> str:
    """The leaderboard as one self-contained page: its tables sort by a click on a header and
    filter per column, a dot chart per metric (the paper's value marked where the suite records
    one), the section "Rankings beyond the spread" where the suite asks for one, the suite's
    plots and each run's figures."""
    metrics = columns(rows, headline)
    header, body = table(rows, metrics, headline, metrics_first=True)
    parts = [html_page.bullets(preamble(rows, headline)),
             "<p>Click a column's header to sort by it; type in the box under a header to keep "
             "the rows whose cell contains that text (or, for numbers, <code>&gt;90</code>, "
             "<code>&lt;0.5</code>).</p>",
             html_page.table(header, body, sortable=True)]
    layer_header, layer_body = per_layer_table(rows)
    if layer_body:
        parts.append(f"<h2>Per-layer fusion</h2><p>{html_page.esc(PER_LAYER_CAPTION)}</p>"
                     + html_page.table(layer_header, layer_body, sortable=True))
    paper_header, paper_body = paper_table(rows)
    if paper_body:
        parts.append("<h2>Against the papers</h2>"
                     + html_page.table(paper_header, paper_body, sortable=True))
    if rankings:
        parts.append(ranking_html(rankings))
    time_header, time_body = evaluation_time_table(rows)
    if time_body:
        parts.append(f"<h2>Evaluation time</h2><p>{html_page.esc(EVALUATION_TIME)}</p>"
                     + html_page.table(time_header, time_body, sortable=True))
    # one chart per metric, the headline first
    parts.append(html_page.figures(
        html_page.chart_figure(metric_label(m), bar_chart_svg(rows, m),
                               caption=bar_chart_caption(rows, m))
        for m in (metrics if rows else [])))
    parts.append(html_page.figures(html_page.figure(name, png)
                                   for name, png in (plots or {}).items()))
    return html_page.page("clusterbench leaderboard", "Leaderboard", parts)
