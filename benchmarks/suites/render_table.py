"""The leaderboard as Markdown and CSV: its columns and cells, the tables beside the main one
(per-layer fusion, against the papers, evaluation time) and the preamble that says what the
numbers are. ``leaderboard.md``, ``clusterbench report``'s pages and the HTML page
(:mod:`benchmarks.suites.render_html`) all draw these same tables.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from benchmarks.infra.statistics import format_mean_std
from benchmarks.run.result_schema import PER_LAYER_STATISTICS
from benchmarks.run.spec import PAPER_TUNED_KEY, PER_LAYER_PAPER_KEY
from benchmarks.suites import rankings as ranking_section
from benchmarks.suites.rankings import SuiteRanking
from benchmarks.suites.results import (
    display_scale,
    metric_columns,
    metric_digits,
    metric_label,
)


def _fmt(stat: dict[str, Any] | None, metric: str = "linear_probe_top1") -> str:
    if stat is None:
        return "n/a"
    scale, digits = display_scale(metric), metric_digits(metric)
    std = None if stat["std"] is None else scale * stat["std"]
    return format_mean_std(scale * stat["mean"], std, f".{digits}f")


def columns(rows: list[dict[str, Any]], headline: str) -> list[str]:
    """Metric columns: the headline, then in the order of :func:`metric_columns` (a family such
    as kNN by its k), then anything else by name."""
    described = metric_columns()

    def key(m: str) -> tuple:
        group = next((i for i, c in enumerate(described) if c.matches(m)), len(described))
        order = described[group].order(m) if group < len(described) else 0
        return (m != headline, group, order, m)

    return sorted({m for row in rows for m in row["metrics"]}, key=key)


def evaluation_time_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Each row's evaluation seconds per step (mean ± std over seeds), a column per step in the
    order the evaluation ran them; no table when no result recorded them."""
    steps = list(dict.fromkeys(step for row in rows for step in row.get("protocol_seconds", {})))
    if not steps:
        return [], []
    header = ["Run", *(f"{step} (s)" for step in steps)]
    body = []
    for row in rows:
        timed = row.get("protocol_seconds", {})
        if timed:
            body.append([row["run"], *(seconds_cell(timed.get(step)) for step in steps)])
    return header, body


#: What the "Evaluation time" table's cells are.
EVALUATION_TIME = ("Seconds of each evaluation step per seed (mean ± std over seeds) on the row's "
                   "machine: the frozen features' extraction (train and test split, once), then "
                   "each protocol on them.")


def seconds_cell(stat: tuple[float, float | None] | None) -> str:
    """``12.3 ± 0.5`` seconds (below a second to the hundredth), or ``—`` for a step a run did
    not take.

    >>> seconds_cell((12.25, 0.5)), seconds_cell((0.034, 0.002)), seconds_cell(None)
    ('12.2 ± 0.5', '0.03 ± 0.00', '—')
    """
    if stat is None:
        return "—"
    mean, std = stat
    digits = 2 if mean < 1 else 1
    return format_mean_std(mean, std, f".{digits}f")


#: What the "Per-layer fusion" table's columns are.
PER_LAYER_CAPTION = (
    "One row per layer X^ℓ, the input of block ℓ: X^0 the model's input, the last the embedding "
    "(TransFusion: \"the final embeddings are X^{d-1}\"). Silhouette (cosine) of the layer's "
    "test outputs; sharpness S(A) (TransFusion Definition 1: the least ratio of a same-class to "
    "a different-class affinity) of the affinity A^ℓ block ℓ computes on them, on the protocol's "
    "scores (ReLU(A) unless the settings say otherwise), median and minimum over the test "
    "batches; the same on the raw scores A (before ReLU); and, averaged over the batches, the "
    "share of same-class pairs with A ≤ 0 and of different-class pairs with A > 0. One pair of "
    "each makes S(ReLU(A)) = 0: the shares say how far the layer is from Theorem 2's premise "
    "(every same-class score positive). Mean ± std over seeds.")


def per_layer_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The "Per-layer fusion" table (:data:`PER_LAYER_CAPTION`): a line per run and layer, the
    paper's silhouette beside ours where the suite records it; no lines without per-layer
    results."""
    def cell(stat, digits=4):
        if stat is None:
            return "n/a"
        mean, std = stat
        return format_mean_std(mean, std, f".{digits}g", ".2g")

    def reported(row: dict[str, Any]) -> dict[str, float]:  # JSON made the layers strings
        return {str(k): v for k, v in (row["paper"].get(PER_LAYER_PAPER_KEY) or {}).items()}

    with_paper = any(reported(row) for row in rows)
    header = ["Method", "Dataset", "Layer", "Silhouette",
              *(["Paper silhouette"] if with_paper else []), "Sharpness (median)",
              "Sharpness (min)", "Raw sharpness (median)", "Raw sharpness (min)",
              "Same-class A ≤ 0 (share)", "Different-class A > 0 (share)"]
    body = [[row["run"], row["dataset"], layer.get("name") or str(layer["layer"]),
             cell(layer["silhouette"]),
             *([f"{reported(row).get(str(layer['layer']), '')}"] if with_paper else []),
             *(cell(layer.get(key)) for key in PER_LAYER_STATISTICS[1:])]
            for row in rows for layer in row["per_layer"]]
    return header, body


def paper_value(row: dict[str, Any], metric: str) -> tuple[float, float | None] | None:
    """The paper's (mean, std) for ``metric`` in percent, when the suite recorded one."""
    value = row["paper"].get(metric)
    if value is None:
        return None
    return (float(value[0]), float(value[1])) if isinstance(value, list) else (float(value), None)


def _paper_cells(row: dict[str, Any], headline: str) -> list[str]:
    reported = paper_value(row, headline)
    if reported is None:
        return ["", ""]
    mean, std = reported
    ours = row["metrics"].get(headline)
    text = format_mean_std(mean, std)
    source = row["paper"].get("source")
    delta = "n/a" if ours is None else f"{100 * ours['mean'] - mean:+.2f}"
    return [text + (f" ({source})" if source else ""), delta + untuned_mark(row)]


def untuned_mark(row: dict[str, Any]) -> str:
    """``" (untuned)"`` after a comparison with a paper that tuned the row (its suite says
    ``tuned: true``: Kernel-InfoNCE searched every case, its Table 3) when no search of ours
    chose the row's values: the paper's number is a tuned configuration's, ours is not. A paper
    that reports fixed settings (MoCo's, TransFusion's) is compared as it is."""
    return " (untuned)" if paper_tuned(row) and not row.get("searched") else ""


def paper_tuned(row: dict[str, Any]) -> bool:
    """Whether the suite records that the paper tuned this row (:data:`PAPER_TUNED_KEY`)."""
    return row["paper"].get(PAPER_TUNED_KEY) is True


def paper_metrics(rows: list[dict[str, Any]]) -> list[str]:
    """Every metric some row records a paper number for, in the leaderboard's column order."""
    recorded = {m for r in rows for m in r["paper"]
                if m not in ("source", PER_LAYER_PAPER_KEY, PAPER_TUNED_KEY)}
    measured = columns(rows, "")
    return [m for m in measured if m in recorded] + sorted(recorded - set(measured))


def paper_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """One line per row and metric the paper reports: ours, the paper's, the difference."""
    header = ["Method", "Dataset", "Metric", "Ours (%)", "Paper (%)", "Ours − paper", "Source",
              "Our settings"]
    body = []
    for row in rows:
        settings = (f"tuned: {searched_cell(row)}" if row.get("searched")
                    else "untuned: the suite's values" if paper_tuned(row)
                    else "the suite's values")
        for metric in paper_metrics([row]):
            mean, std = paper_value(row, metric)
            ours = row["metrics"].get(metric)
            body.append([row["run"], row["dataset"], metric_label(metric),
                         _fmt(ours, metric) if ours else "n/a",
                         format_mean_std(mean, std),
                         "n/a" if ours is None else f"{100 * ours['mean'] - mean:+.2f}",
                         row["paper"].get("source", ""), settings])
    return header, body


def searched_cell(row: dict[str, Any]) -> str:
    """``"6 configs (ASHA, ≤ 4 epochs, 1 failed)"`` for a retrained search winner, with ``"; won:
    simclr's settings, its results"`` where the winner was the run's own settings (not trained
    again), else ``"—"``."""
    searched = row.get("searched")
    if not searched:
        return "—"
    failed = searched.get("trials_failed", 0)
    configs, epochs = searched["configurations_searched"], searched["max_epochs"]
    return (f"{configs} config{'s' * (configs != 1)} (ASHA, ≤ {epochs} "
            f"epoch{'s' * (epochs != 1)}{f', {failed} failed' if failed else ''})"
            + (f"; won: {row['same_as']}'s settings, its results" if row.get("same_as") else ""))


def table(rows: list[dict[str, Any]], metrics: list[str], headline: str | None = None,
           metrics_first: bool = False) -> tuple[list[str], list[list[str]]]:
    """The leaderboard's header and rows: who (suite, method), what (dataset, backbone, budget),
    the scores (and the paper's), then the cost. ``metrics_first`` puts the scores right after
    the method (the HTML page: they stay in view on a narrow window)."""
    with_paper = headline is not None and any(paper_value(r, headline) for r in rows)
    with_search = any(r.get("searched") for r in rows)
    with_suite = len({r["suite"] for r in rows}) > 1  # merged suites may share run names
    with_status = any(r["status"] for r in rows)
    with_curve = any(r.get("curve") for r in rows)
    who = [*(["Suite"] if with_suite else []), "Method"]
    what = ["Dataset", "Backbone", "Epochs", "Batch", "Seeds",
            *(["Searched"] if with_search else [])]
    scores = [*[metric_label(m) for m in metrics],
              *(["Paper (%)", "Ours − paper"] if with_paper else []),
              *(["Curve"] if with_curve else [])]
    cost = ["Train time / seed (s)", "Device hours", "Machine",
            *(["Failed seeds"] if with_status else [])]

    def ordered(parts: tuple[list, list, list, list]) -> list:
        who_, what_, scores_, cost_ = parts
        return [*who_, *scores_, *what_, *cost_] if metrics_first else [
            *who_, *what_, *scores_, *cost_]

    body = []
    for row in rows:
        hours_unit = "GPU" if row["device"] == "gpu" else "CPU"
        body.append(ordered((
            [*([row["suite"]] if with_suite else []), row["run"]],
            [row["dataset"], row["backbone"], str(row["epochs"]), str(row["batch_size"]),
             str(len(row["seeds"])), *([searched_cell(row)] if with_search else [])],
            [*[_fmt(row["metrics"].get(m), m) for m in metrics],
             *(_paper_cells(row, headline) if with_paper else []),
             *([row["curve"].cell() if row.get("curve") else "n/a"] if with_curve else [])],
            [train_time_cell(row), f"{row['device_hours']:.4f} {hours_unit}",
             "; ".join(row["machines"]), *([row["status"] or "none"] if with_status else [])])))
    return ordered((who, what, scores, cost)), body


#: The leaderboard's columns that are not scores (:func:`table`'s header), as a console reads
#: them back from ``leaderboard.md`` (:func:`column_priority`).
NOT_SCORES = ("Suite", "Method", "Dataset", "Backbone", "Epochs", "Batch", "Seeds", "Searched",
              "Paper (%)", "Ours − paper", "Curve", "Train time / seed (s)", "Device hours",
              "Machine", "Failed seeds")


def column_priority(header: list[str]) -> tuple[list[int], int]:
    """The columns of a table of ``leaderboard.md`` in the order a console too narrow for all of
    them keeps them, and how many of the first are kept whatever the width. The leaderboard
    (:func:`table`): the suite and method, the headline (its first score), then the dataset, the
    seeds, the other scores, the paper's number and ours less it, the curve, the failed seeds,
    and the rest as they stand; the first three kept (two without a suite column). Any other
    table (the training curves', say): its first column, kept, then a Curve column (the
    verdict the table is for), then left to right.

    >>> header = ["Method", "Dataset", "Seeds", "kNN@50 top-1 (%)", "SVM top-1 (%)", "Machine"]
    >>> order, kept = column_priority(header)
    >>> [header[i] for i in order], kept
    (['Method', 'kNN@50 top-1 (%)', 'Dataset', 'Seeds', 'SVM top-1 (%)', 'Machine'], 2)
    """
    if "Method" not in header or "Seeds" not in header or "Machine" not in header:
        order = [*range(min(1, len(header))), *(i for i, label in enumerate(header)
                                                 if i and label == "Curve")]
        return order + [i for i in range(len(header)) if i not in order], min(1, len(header))
    scores = [i for i, label in enumerate(header) if label not in NOT_SCORES]
    named = {label: i for i, label in enumerate(header)}
    who = [named[label] for label in ("Suite", "Method") if label in named]
    order = [*who, *scores[:1]]
    required = len(order)
    order += [named[label] for label in ("Dataset", "Seeds") if label in named]
    order += scores[1:]
    order += [named[label] for label in ("Paper (%)", "Ours − paper", "Curve", "Failed seeds")
              if label in named]
    order += [i for i in range(len(header)) if i not in order]
    return order, required


def train_time_cell(row: dict[str, Any]) -> str:
    """The mean training time a seed took (± its std), or "— (evaluated)" for a row that
    ``clusterbench evaluate`` scored: trained elsewhere, not in no time.

    >>> train_time_cell({"train_seconds": (12.25, 0.5), "evaluated": False})
    '12.2 ± 0.5'
    >>> train_time_cell({"train_seconds": (0.0, None), "evaluated": True})
    '— (evaluated)'
    """
    if row.get("evaluated"):
        return "— (evaluated)"
    mean, std = row["train_seconds"]
    return format_mean_std(mean, std, ".1f")


def preamble(rows: list[dict[str, Any]], headline: str) -> list[str]:
    """The lines above the table: what the numbers are, where and with what they were computed,
    and the notes a row's marks need."""
    budgets = sorted({r["budget"] for r in rows})
    torch_versions = sorted({v for r in rows for v in r["torch"]})
    commits = sorted({c for r in rows for c in r["commits"]})
    return [
        f"Suite: {', '.join(sorted({r['suite'] for r in rows}))}; budget: {', '.join(budgets)}"
        + (" (a tiny smoke budget: these numbers check the plumbing, not the methods)"
           if "fast" in budgets else "")
        + (" (the CI budget: short runs whose numbers compare commits, not the papers)"
           if "ci" in budgets else ""),
        "Metrics on the test split (the online probe's on the validation split): accuracies "
        "in percent, ARI, NMI and silhouette as they are; mean ± sample standard deviation over "
        f"the seeds counted in the Seeds column ({seed_list(rows)}); sorted by "
        f"{metric_label(headline)}.",
        f"torch {', '.join(torch_versions)}; clusterbench commit {', '.join(commits)}.",
        *([f"On the GPU: {gpu_speed_line(rows)}."] if any(r["gpu_speed"] for r in rows)
          else []),
        *(["A row marked [earlier configuration HASH] holds seeds trained before the run's "
           "settings changed; they are never averaged with the current ones (bench the suite "
           "again to retrain them)."] if any("[earlier configuration" in r["run"] for r in rows)
          else []),
        *(["A seed that diverged (non-finite training loss) has no numbers: the Failed seeds "
           "column says where it diverged, and the means are over the other seeds."]
          if any(r["status"] for r in rows) else []),
    ]


def gpu_speed_line(rows: list[dict[str, Any]]) -> str:
    """Which speed settings the GPU runs had (:func:`benchmarks.run.trainer.gpu_speed_settings`).

    >>> gpu_speed_line([{"gpu_speed": {"precision": "bf16-mixed", "channels_last": True,
    ...                                "cudnn_benchmark": True, "tf32": True, "compile": False}}])
    'precision bf16-mixed, channels-last, cuDNN autotuning, TF32'
    """
    said = []
    distinct = {json.dumps(r["gpu_speed"], sort_keys=True): r["gpu_speed"]
                for r in rows if r["gpu_speed"]}
    for speed in distinct.values():
        on = [f"precision {speed['precision']}"] + [
            label for key, label in (("channels_last", "channels-last"),
                                     ("cudnn_benchmark", "cuDNN autotuning"), ("tf32", "TF32"),
                                     ("compile", "torch.compile")) if speed.get(key)]
        said.append(", ".join(on))
    return "; ".join(sorted(said))


def seed_list(rows: list[dict[str, Any]]) -> str:
    """``"seeds 0, 1"``, or per run where the runs ran different seeds.

    >>> seed_list([{"run": "a", "seeds": [0, 1]}, {"run": "b", "seeds": [0, 1]}])
    'seeds 0, 1'
    >>> seed_list([{"run": "a", "seeds": [0, 1]}, {"run": "b", "seeds": [2]}])
    'a: seeds 0, 1; b: seed 2'
    """
    def said(seeds: list[int]) -> str:
        return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))

    if len({tuple(r["seeds"]) for r in rows}) <= 1:
        return said(rows[0]["seeds"]) if rows else "no seeds"
    return "; ".join(f"{r['run']}: {said(r['seeds'])}" for r in rows)


def md_cell(value: Any) -> str:
    r"""A table cell's text that stays one cell and stays text: ``|`` escaped, ``<``, ``>`` and
    ``&`` as entities (a name from a result file is never markup), line breaks as spaces.

    >>> md_cell("a|b<script>")
    'a\\|b&lt;script&gt;'
    """
    text = str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return " ".join(text.replace("|", "\\|").splitlines())


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(md_cell(c) for c in cells) + " |"


def ranking_markdown(rankings: list[SuiteRanking]) -> list[str]:
    """The section "Rankings beyond the spread" (:mod:`benchmarks.suites.rankings`): per metric,
    every other row against the baselines, each claimed order pair by pair with its summary, and
    the other pairs beyond the spread; no lines without a ranking."""
    if not rankings:
        return []

    def tabled(header: list[str], body: list[list[str]]) -> list[str]:
        return ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                *(_row(cells) for cells in body)]

    lines = ["", f"## {ranking_section.TITLE}", "", ranking_section.CAPTION]
    for ranking in rankings:
        heading = ranking_section.ranking_heading(ranking, len(rankings) > 1)
        level = "####" if heading else "###"
        lines += ["", f"### {md_cell(heading)}"] if heading else []
        if ranking.margin is not None:
            lines += ["", ranking_section.margin_rule(ranking.margin)]
        for ranked in ranking.metrics:
            lines += ["", f"{level} {metric_label(ranked.metric)}"]
            if ranked.against_baselines:
                lines += ["", "Against the baselines:"]
                lines += tabled(*ranking_section.baseline_table(ranked, ranking.margin))
            for check in ranked.orderings:
                lines += ["", ranking_section.claim(check, md_cell)]
                lines += tabled(*ranking_section.ordering_table(check, ranked.metric))
            lead = ranking_section.pairs_lead(ranked)
            if lead:
                lines += ["", lead, *([""] if ranked.pairs else []),
                          *(f"- {ranking_section.pair_line(c, ranked.metric, md_cell)}"
                            for c in ranked.pairs)]
    return lines


def render_rankings_csv(rankings: list[SuiteRanking]) -> str:
    """``rankings.csv``: every comparison of the section, one a line, in stored units (a
    fraction for an accuracy), for a program to read (:data:`rankings.CSV_HEADER`)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(ranking_section.CSV_HEADER)
    writer.writerows([csv_text(cell) for cell in line]
                     for line in ranking_section.csv_rows(rankings))
    return out.getvalue()


def render_markdown(rows: list[dict[str, Any]], headline: str,
                    rankings: list[SuiteRanking] | None = None) -> str:
    """``leaderboard.md``: the preamble, the table, and the tables beside it that have lines
    (``rankings``: the section "Rankings beyond the spread", where the suite asks for one)."""
    metrics = columns(rows, headline)
    header, body = table(rows, metrics, headline)
    lines = ["# Leaderboard", "", *[f"- {line}" for line in preamble(rows, headline)], "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += [_row(cells) for cells in body]
    layer_header, layer_body = per_layer_table(rows)
    if layer_body:
        lines += ["", "## Per-layer fusion", "", PER_LAYER_CAPTION, "",
                  "| " + " | ".join(layer_header) + " |", "|" + "---|" * len(layer_header)]
        lines += [_row(cells) for cells in layer_body]
    paper_header, paper_body = paper_table(rows)
    if paper_body:
        lines += ["", "## Against the papers", "",
                  "Every number the suite records from a paper, beside ours (mean over seeds).",
                  "", "| " + " | ".join(paper_header) + " |", "|" + "---|" * len(paper_header)]
        lines += [_row(cells) for cells in paper_body]
    lines += ranking_markdown(rankings or [])
    time_header, time_body = evaluation_time_table(rows)
    if time_body:
        lines += ["", "## Evaluation time", "", EVALUATION_TIME, "",
                  "| " + " | ".join(time_header) + " |", "|" + "---|" * len(time_header)]
        lines += [_row(cells) for cells in time_body]
    return "\n".join(lines) + "\n"


#: What a spreadsheet takes a cell starting with for a formula (OWASP's CSV injection list).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_text(value: Any) -> Any:
    """A CSV cell of text from a result file (a name, a machine) that a spreadsheet shows as
    text: one starting like a formula gets a leading ``'``; numbers are left as they are.

    >>> csv_text("=HYPERLINK(1)"), csv_text("simclr"), csv_text(-0.5)
    ("'=HYPERLINK(1)", 'simclr', -0.5)
    """
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def render_csv(rows: list[dict[str, Any]], headline: str) -> str:
    """``leaderboard.csv``: one line per row, every metric's mean and std in stored units (a
    fraction for an accuracy), the papers' numbers and the cost, for a program to read."""
    metrics = columns(rows, headline)
    reported = paper_metrics(rows)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["suite", "run", "method", "dataset", "backbone", "budget", "epochs",
                     "batch_size", "seeds", "configurations_searched", "same_as",
                     *[f"{m}_{s}" for m in metrics for s in ("mean", "std")],
                     "paper_mean", "paper_std", "paper_source",
                     *[f"paper_{m}_{s}" for m in reported for s in ("mean", "std")],
                     "train_seconds_mean", "device_hours", "device", "machines", "torch",
                     "commits", "config_hash", "failed_seeds"])
    for row in rows:
        cells = []
        for m in metrics:
            stat = row["metrics"].get(m)
            cells += ["" if stat is None else stat["mean"],
                      "" if stat is None or stat["std"] is None else stat["std"]]
        text = [csv_text(row[key]) for key in ("suite", "run", "method", "dataset", "backbone",
                                                "budget")]
        writer.writerow([*text, row["epochs"], row["batch_size"], len(row["seeds"]),
                         (row.get("searched") or {}).get("configurations_searched", ""),
                         csv_text(row.get("same_as") or ""), *cells,
                         *["" if v is None else v for v in paper_value(row, headline) or ("", "")],
                         csv_text(row["paper"].get("source", "")),
                         *["" if v is None else v for m in reported
                           for v in paper_value(row, m) or ("", "")],
                         row["train_seconds"][0],
                         row["device_hours"], csv_text(row["device"]),
                         *(csv_text("; ".join(row[key])) for key in ("machines", "torch",
                                                                     "commits")),
                         csv_text(row["config_hash"]), csv_text(row["status"])])
    return out.getvalue()
