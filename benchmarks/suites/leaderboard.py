"""Leaderboards (Markdown, CSV, self-contained HTML with a chart per metric) rebuilt from
per-run results.

Everything is derived from the ``result.json`` files under a results directory, so results from
several machines can be copied into one directory and merged with ``clusterbench leaderboard``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.infra import html_page
from benchmarks.infra.atomic import write_atomic_together
from benchmarks.infra.dot_chart import dot_chart_svg
from benchmarks.infra.environment import describe_machine
from benchmarks.infra.plots import png_bytes, pyplot
from benchmarks.protocols import PROTOCOLS, Metric
from benchmarks.run.cache import configuration_hash
from benchmarks.run.spec import PAPER_TUNED_KEY, PER_LAYER_PAPER_KEY
from benchmarks.suites.curves import learning_curves

FILES = ("leaderboard.md", "leaderboard.csv", "leaderboard.html")

#: The metrics a run records besides the protocols': the online probe's.
RUN_METRICS = (Metric("online_val_acc", "Online probe, val (%)", percent=True),)


def metric_columns() -> list[Metric]:
    """Every metric a result can hold, in the leaderboard's column order: the protocols' a
    suite names (in the registry's order), the online probe's, then the automatic protocols'."""
    named = [m for p in PROTOCOLS.values() if not p.automatic for m in p.metrics]
    automatic = [m for p in PROTOCOLS.values() if p.automatic for m in p.metrics]
    return [*named, *RUN_METRICS, *automatic]


def metric_of(name: str) -> Metric | None:
    """The description of the metric ``name`` (``None`` for a name no protocol writes)."""
    return next((m for m in metric_columns() if m.matches(name)), None)


def metric_label(name: str) -> str:
    """A column title: ``knn50_top1`` -> ``kNN@50 top-1 (%)``; the name itself for a metric no
    protocol describes."""
    metric = metric_of(name)
    return metric.label_of(name) if metric else name


def staging(part: str) -> bool:
    """A folder a run writes before its result is complete, or the earlier result it replaces
    (``seed-0.attempt``, ``seed-0.replaced``): never read as a result."""
    return part.endswith((".attempt", ".replaced")) or ".replaced-" in part


#: The record of the leaderboard files being renamed into place (a kill between two renames is
#: finished by the next write: :func:`benchmarks.infra.atomic.write_atomic_together`).
JOURNAL = ".leaderboard.journal"


def result_files(root: Path) -> list[Path]:
    """Every ``result.json`` below ``root``, sorted, outside Ray Tune's ``search`` folders and a
    run's staging folders (never entered). A folder gone by the time the walk comes to it is
    skipped: on a cluster the driver reads while other runs rename their folders into place."""
    import os
    import sys

    def unreadable(err: OSError) -> None:
        if not isinstance(err, (FileNotFoundError, NotADirectoryError)):
            print(f"clusterbench: warning: skipping {err.filename}: {err.strerror}",
                  file=sys.stderr)

    found = []
    for directory, folders, files in os.walk(root, onerror=unreadable):
        folders[:] = [f for f in folders if f != "search" and not staging(f)]
        if "result.json" in files:
            found.append(Path(directory) / "result.json")
    return sorted(found)


def load_results(results_dir: str | Path) -> list[dict[str, Any]]:
    """Every finished ``result.json`` below ``results_dir``; one that cannot be read (truncated
    by a crash, edited by hand) is skipped with a warning naming it."""
    import sys

    results = []
    for path in result_files(Path(results_dir)):
        try:
            result = json.loads(path.read_text())
            check_result(result)
        except FileNotFoundError:  # replaced since the walk found it: the next board has it
            continue
        except (OSError, ValueError) as err:
            print(f"clusterbench: warning: skipping {path}: cannot be read as a result ({err})",
                  file=sys.stderr)
            continue
        if result.get("kind") == "experiment":  # an experiment suite's report, not a run
            continue
        result["directory"] = str(path.parent)  # where its figures are (not stored)
        result.setdefault("config_hash", configuration_hash(result["config"]))
        results.append(result)
    return results


#: The longest run, suite or dataset name a result may carry (a run name is at most 150
#: characters a part, and names nest once or twice).
LONGEST_NAME = 500


def check_result(result: Any) -> None:
    """A ``result.json`` as the leaderboard reads it: every field it uses, of its type, names of
    plain length, metrics finite numbers (a file edited by hand or written by something else is
    data: one that is not a result is skipped with a warning, not a crash of every later
    ``bench``).

    Raises:
        ValueError: naming the first field that is missing or wrong.
    """
    if not isinstance(result, dict):
        raise ValueError("not a clusterbench result (not a mapping)")
    if result.get("kind") == "experiment":
        return
    for key, ok in RESULT_FIELDS.items():
        if key not in result:
            raise ValueError(f"not a clusterbench result: no {key!r}")
        if not ok(result[key]):
            raise ValueError(f"{key!r} is {str(result[key])[:80]!r}, not what a result holds")
    if result.get("status") == "diverged" and not isinstance(result.get("error"), str):
        raise ValueError("a diverged result without its error")
    if not isinstance(result.get("per_layer") or [], list):
        raise ValueError("'per_layer' is not a list of layers")


def is_finite_number(v: Any) -> bool:
    """An int or float that is finite (``True`` is no number, NaN no score)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_name(v: Any) -> bool:
    """A non-empty string of plain length (:data:`LONGEST_NAME`)."""
    return isinstance(v, str) and 0 < len(v) <= LONGEST_NAME


def is_text(v: Any) -> bool:
    """A string, possibly empty."""
    return isinstance(v, str)


def is_count(v: Any) -> bool:
    """A whole number (``True`` is not one)."""
    return isinstance(v, int) and not isinstance(v, bool)


#: Every field of a result the leaderboard reads, with the test its value must pass.
RESULT_FIELDS: dict[str, Callable[[Any], bool]] = {
    "run": is_name, "suite": is_name, "dataset": is_name, "method": is_name, "budget": is_name,
    "backbone": is_text, "data_provenance": is_text,
    "seed": is_count, "epochs": is_count, "batch_size": is_count,
    "train_seconds": is_finite_number, "wall_seconds": is_finite_number,
    "device": is_text,
    "metrics": lambda v: isinstance(v, dict) and all(
        isinstance(k, str) and is_finite_number(x) for k, x in v.items()),
    "config": lambda v: isinstance(v, dict) and isinstance(v.get("run"), dict),
    "machine": lambda v: isinstance(v, dict) and (bool(v.get("gpu")) or {
        "cpus", "processor"} <= set(v)),
    "versions": lambda v: isinstance(v, dict) and isinstance(v.get("torch"), str),
}


def run_figure(directory: str | Path, name: Any) -> Path | None:
    """The figure ``name`` a result lists, if it is a PNG file directly in the run's own
    ``directory`` (symbolic links resolved); else None, with a warning: a result file is data,
    and its list of figures must not make the HTML page embed any other file."""
    import sys

    folder = Path(directory).resolve()
    path = (folder / str(name)).resolve() if isinstance(name, str) else None
    if (path is None or path.parent != folder or path.suffix.lower() != ".png"
            or "/" in str(name) or "\\" in str(name)):
        print(f"clusterbench: warning: {Path(directory) / 'result.json'} lists the figure "
              f"{str(name)[:200]!r}, which is not a PNG file in its own folder: not shown",
              file=sys.stderr)
        return None
    return path


#: What each figure a run keeps shows, in words (a figure not listed is named by its file).
FIGURE_WORDS = {
    "tsne.png": "t-SNE of the test features, coloured by class",
    "per-layer-tsne.png": "t-SNE of each fusion layer's test features, coloured by class",
    "search-trials.png": "the search's trials: the metric ASHA scheduled on, by epoch",
}


def run_figures(results: list[dict[str, Any]]) -> dict[str, bytes]:
    """The figures each run saved beside its results, every seed's, for the HTML page, each
    titled in words (:data:`FIGURE_WORDS`); a figure every seed of a run shares (the search's
    trials) once. Only PNG files in the run's own folder (:func:`run_figure`)."""
    figures: dict[str, bytes] = {}
    shown: set[tuple[str, bytes]] = set()
    for r in sorted(results, key=lambda r: (r["run"], r["seed"])):
        listed = r.get("figures") or []
        for name in listed if isinstance(listed, list) else []:
            path = run_figure(r["directory"], name)
            if path is None or not path.is_file():
                continue
            try:
                png = path.read_bytes()
            except FileNotFoundError:  # its run replaced meanwhile (on a cluster): next board
                continue
            if (r["run"], png) in shown:
                continue
            shown.add((r["run"], png))
            words = FIGURE_WORDS.get(str(name), str(name))
            figures[f"{r['run']} ({r['dataset']}, seed {r['seed']}): {words}"] = png
    return figures


def _mean_std(values: list[float]) -> tuple[float, float | None]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def aggregate(results: list[dict[str, Any]], headline: str | None = None) -> list[dict[str, Any]]:
    """One row per (suite, run, dataset, budget, configuration): each metric's mean and sample
    std over seeds.

    A seed present twice (results merged from two machines) counts once: the newest result.
    Seeds trained with different configurations of one run (the suite was edited between two
    benches) are never averaged: the configuration of the newest result is the run's row, each
    other one gets a row of its own, its name marked ``[earlier configuration <hash>]``. A run
    that diverged keeps its row, which says so instead of showing numbers."""
    groups = configuration_groups(newest_per_seed(results))
    current = newest_configurations(groups)
    rows = []
    for group, members in groups.items():
        run, config_hash = group[1], group[4]
        if current[group[:4]] != config_hash:
            run = f"{run} [earlier configuration {config_hash}]"
        rows.append(aggregate_row(group, run, members))
    key = headline or "linear_probe_top1"
    rows.sort(key=lambda row: -row["metrics"].get(key, {"mean": -math.inf})["mean"])
    return rows


def newest_per_seed(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per (suite, run, dataset, budget, configuration, seed): the newest, so that a
    seed whose results were merged from two machines counts once."""
    newest: dict[tuple, dict] = {}
    for r in sorted(results, key=lambda r: r.get("finished_at", "")):
        newest[(r["suite"], r["run"], r["dataset"], r["budget"], r["config_hash"], r["seed"])] = r
    return list(newest.values())


def configuration_groups(results: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    """The results by (suite, run, dataset, budget, configuration hash): the seeds of one row."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in results:
        groups[(r["suite"], r["run"], r["dataset"], r["budget"], r["config_hash"])].append(r)
    return groups


def newest_configurations(groups: dict[tuple, list[dict[str, Any]]]) -> dict[tuple, str]:
    """(suite, run, dataset, budget) -> the hash of its configuration with the newest result:
    the run's own row; the others are earlier configurations."""
    current: dict[tuple, tuple[str, str]] = {}
    for key, members in groups.items():
        finished = max(r.get("finished_at", "") for r in members)
        if finished >= current.get(key[:4], ("", ""))[0]:
            current[key[:4]] = (finished, key[4])
    return {run: config_hash for run, (_, config_hash) in current.items()}


def aggregate_row(key: tuple, run: str, members: list[dict[str, Any]]) -> dict[str, Any]:
    """The row of the seeds ``members`` of one configuration (``key``, shown under the name
    ``run``): each metric over seeds, and the machines, versions and paper numbers beside them."""
    suite, _, dataset, budget, config_hash = key
    first = members[0]
    failures = sorted((r for r in members if r.get("status") == "diverged"),
                      key=lambda r: r["seed"])
    generated = first["data_provenance"] == "generated"
    return {
        "suite": suite, "run": run, "method": first["method"],
        "dataset": dataset + (" (generated)" if generated else ""),
        "backbone": first["backbone"], "budget": budget,
        "epochs": max(r["epochs"] for r in members),
        "batch_size": first["batch_size"], "seeds": sorted(r["seed"] for r in members),
        "metrics": metrics_over_seeds(members),
        "train_seconds": _mean_std([r["train_seconds"] for r in members]),
        "protocol_seconds": protocol_seconds_over_seeds(members),
        # scored by `clusterbench evaluate`: trained elsewhere, its training time unknown here
        "evaluated": all(r.get("evaluated_from") for r in members),
        "device_hours": sum(r["wall_seconds"] for r in members) / 3600,
        "device": "/".join(sorted({r["device"] for r in members})),
        "machines": sorted({describe_machine(r["machine"]) for r in members}),
        "torch": sorted({r["versions"]["torch"] for r in members}),
        "commits": sorted({(r.get("git") or {}).get("commit", "?")[:10] for r in members}),
        "paper": first["config"]["run"].get("paper") or {},
        "run_config": first["config"]["run"],
        "per_layer": _per_layer_over_seeds([r.get("per_layer") for r in members]),
        "searched": first["config"]["run"].get("searched"),
        "config_hash": config_hash,
        "gpu_speed": first.get("gpu_speed_settings") or {},
        "status": "; ".join(f"seed {r['seed']} {r['error']}" for r in failures),
    }


def protocol_seconds_over_seeds(members: list[dict[str, Any]]
                                ) -> dict[str, tuple[float, float | None]]:
    """Each evaluation step's seconds (the features' extraction, then each protocol, as the
    results' ``protocol_seconds`` give them): mean and sample std over the seeds that recorded
    it. A result written before they were recorded, or with a malformed entry, adds nothing.

    >>> protocol_seconds_over_seeds([{"protocol_seconds": {"features": 2.0, "knn": 1.0}},
    ...                              {"protocol_seconds": {"features": 4.0, "knn": "x"}}, {}])
    {'features': (3.0, 1.4142135623730951), 'knn': (1.0, None)}
    """
    seconds: dict[str, list[float]] = {}
    for r in members:
        recorded = r.get("protocol_seconds")
        for name, value in (recorded.items() if isinstance(recorded, dict) else ()):
            if is_name(name) and is_finite_number(value) and value >= 0:
                seconds.setdefault(name, []).append(float(value))
    return {name: _mean_std(values) for name, values in seconds.items()}


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
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if std is not None else "")


def metrics_over_seeds(members: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each metric any seed recorded: its mean, sample std (None for one seed) and seed count."""
    metrics = {}
    for name in sorted({m for r in members for m in r["metrics"]}):
        values = [r["metrics"][name] for r in members if name in r["metrics"]]
        mean, std = _mean_std(values)
        metrics[name] = {"mean": mean, "std": std, "n": len(values)}
    return metrics


#: The per-layer statistics, as the ``per_layer`` protocol records them, in the table's order.
PER_LAYER_STATISTICS = ("silhouette", "sharpness_median", "sharpness_min", "sharpness_raw_median",
                        "sharpness_raw_min", "same_cluster_nonpositive_share",
                        "different_cluster_positive_share")

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


def _per_layer_over_seeds(per_seed: list[list[dict] | None]) -> list[dict[str, Any]]:
    """Each layer's statistics, mean and std over the seeds that report them (non-finite
    values, e.g. an infinite sharpness, and statistics a result predates are left out)."""
    per_seed = [layers for layers in per_seed if layers]
    if not per_seed:
        return []
    out = []
    for i in range(min(len(layers) for layers in per_seed)):
        first = per_seed[0][i]
        entry: dict[str, Any] = {"layer": first["layer"],
                                 "name": first.get("name") or str(first["layer"])}
        for key in PER_LAYER_STATISTICS:
            values = [layers[i][key] for layers in per_seed if is_finite_number(layers[i].get(key))]
            entry[key] = _mean_std(values) if values else None
        out.append(entry)
    return out


def _per_layer_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    def cell(stat, digits=4):
        if stat is None:
            return "n/a"
        mean, std = stat
        return f"{mean:.{digits}g}" + (f" ± {std:.2g}" if std is not None else "")

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


def is_percent(metric: str) -> bool:
    """Accuracies are stored as fractions and shown in percent; scores (ARI, NMI, silhouette)
    are shown as they are (each protocol's :class:`~benchmarks.protocols.Metric` says which)."""
    described = metric_of(metric)
    return described is not None and described.percent


def display_scale(metric: str) -> float:
    return 100.0 if is_percent(metric) else 1.0


def _fmt(stat: dict[str, Any] | None, metric: str = "linear_probe_top1") -> str:
    if stat is None:
        return "n/a"
    scale, digits = (100.0, 2) if is_percent(metric) else (1.0, 3)
    mean = f"{scale * stat['mean']:.{digits}f}"
    return mean if stat["std"] is None else f"{mean} ± {scale * stat['std']:.{digits}f}"


def _columns(rows: list[dict[str, Any]], headline: str) -> list[str]:
    """Metric columns: the headline, then in the order of :func:`metric_columns` (a family such
    as kNN by its k), then anything else by name."""
    columns = metric_columns()

    def key(m: str) -> tuple:
        group = next((i for i, c in enumerate(columns) if c.matches(m)), len(columns))
        order = columns[group].order(m) if group < len(columns) else 0
        return (m != headline, group, order, m)

    return sorted({m for row in rows for m in row["metrics"]}, key=key)


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
    text = f"{mean:.2f}" + (f" ± {std:.2f}" if std is not None else "")
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
    measured = _columns(rows, "")
    return [m for m in measured if m in recorded] + sorted(recorded - set(measured))


def _paper_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
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
                         f"{mean:.2f}" + (f" ± {std:.2f}" if std is not None else ""),
                         "n/a" if ours is None else f"{100 * ours['mean'] - mean:+.2f}",
                         row["paper"].get("source", ""), settings])
    return header, body


def searched_cell(row: dict[str, Any]) -> str:
    """``"6 configs (ASHA, ≤ 4 epochs, 1 failed)"`` for a retrained search winner, else ``"—"``."""
    searched = row.get("searched")
    if not searched:
        return "—"
    failed = searched.get("trials_failed", 0)
    configs, epochs = searched["configurations_searched"], searched["max_epochs"]
    return (f"{configs} config{'s' * (configs != 1)} (ASHA, ≤ {epochs} "
            f"epoch{'s' * (epochs != 1)}{f', {failed} failed' if failed else ''})")


def _table(rows: list[dict[str, Any]], metrics: list[str], headline: str | None = None,
           metrics_first: bool = False) -> tuple[list[str], list[list[str]]]:
    """The leaderboard's header and rows: who (suite, method), what (dataset, backbone, budget),
    the scores (and the paper's), then the cost. ``metrics_first`` puts the scores right after
    the method (the HTML page: they stay in view on a narrow window)."""
    with_paper = headline is not None and any(paper_value(r, headline) for r in rows)
    with_search = any(r.get("searched") for r in rows)
    with_suite = len({r["suite"] for r in rows}) > 1  # merged suites may share run names
    with_status = any(r["status"] for r in rows)
    who = [*(["Suite"] if with_suite else []), "Method"]
    what = ["Dataset", "Backbone", "Epochs", "Batch", "Seeds",
            *(["Searched"] if with_search else [])]
    scores = [*[metric_label(m) for m in metrics],
              *(["Paper (%)", "Ours − paper"] if with_paper else [])]
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
             *(_paper_cells(row, headline) if with_paper else [])],
            [train_time_cell(row), f"{row['device_hours']:.4f} {hours_unit}",
             "; ".join(row["machines"]), *([row["status"] or "none"] if with_status else [])])))
    return ordered((who, what, scores, cost)), body


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
    return f"{mean:.1f}" + (f" ± {std:.1f}" if std is not None else "")


def _preamble(rows: list[dict[str, Any]], headline: str) -> list[str]:
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
    for speed in {json.dumps(r["gpu_speed"], sort_keys=True) for r in rows if r["gpu_speed"]}:
        speed = json.loads(speed)
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


def render_markdown(rows: list[dict[str, Any]], headline: str) -> str:
    metrics = _columns(rows, headline)
    header, body = _table(rows, metrics, headline)
    lines = ["# Leaderboard", "", *[f"- {line}" for line in _preamble(rows, headline)], "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += [_row(cells) for cells in body]
    layer_header, layer_body = _per_layer_table(rows)
    if layer_body:
        lines += ["", "## Per-layer fusion", "", PER_LAYER_CAPTION, "",
                  "| " + " | ".join(layer_header) + " |", "|" + "---|" * len(layer_header)]
        lines += [_row(cells) for cells in layer_body]
    paper_header, paper_body = _paper_table(rows)
    if paper_body:
        lines += ["", "## Against the papers", "",
                  "Every number the suite records from a paper, beside ours (mean over seeds).",
                  "", "| " + " | ".join(paper_header) + " |", "|" + "---|" * len(paper_header)]
        lines += [_row(cells) for cells in paper_body]
    time_header, time_body = evaluation_time_table(rows)
    if time_body:
        lines += ["", "## Evaluation time", "", EVALUATION_TIME, "",
                  "| " + " | ".join(time_header) + " |", "|" + "---|" * len(time_header)]
        lines += [_row(cells) for cells in time_body]
    return "\n".join(lines) + "\n"


def render_csv(rows: list[dict[str, Any]], headline: str) -> str:
    metrics = _columns(rows, headline)
    reported = paper_metrics(rows)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["suite", "run", "method", "dataset", "backbone", "budget", "epochs",
                     "batch_size", "seeds", "configurations_searched",
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
        writer.writerow([row["suite"], row["run"], row["method"], row["dataset"], row["backbone"],
                         row["budget"], row["epochs"], row["batch_size"], len(row["seeds"]),
                         (row.get("searched") or {}).get("configurations_searched", ""), *cells,
                         *["" if v is None else v for v in paper_value(row, headline) or ("", "")],
                         row["paper"].get("source", ""),
                         *["" if v is None else v for m in reported
                           for v in paper_value(row, m) or ("", "")],
                         row["train_seconds"][0],
                         row["device_hours"], row["device"],
                         "; ".join(row["machines"]), "; ".join(row["torch"]),
                         "; ".join(row["commits"]), row["config_hash"], row["status"]])
    return out.getvalue()


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
    marks = [{**bar, "text": f"{bar['mean']:.2f}" if scale == 100 else f"{bar['mean']:.3f}"}
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
    def said(mean: float, std: float | None) -> str:
        return f"{mean:.2f}" + (f" ± {std:.2f}" if std is not None else "")

    return f"Chart of {metric_label(metric)}: " + "; ".join(
        f"{b['label']} {said(b['mean'], b['std'])}"
        + (f" (paper: {said(b['paper_mean'], b['paper_std'])})"
           if b["paper_mean"] is not None else "")
        for b in bar_chart_data(rows, metric))


def setting(row: dict[str, Any], path: str) -> Any:
    """A run's setting by dotted path, e.g. ``model.lr`` (None when the run does not set it)."""
    section, _, key = path.partition(".")
    return (row["run_config"].get(section) or {}).get(key)


def plot_file_name(plot: dict[str, Any]) -> str:
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
        ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=str(key))
    if plot.get("log_x"):
        ax.set_xscale("log")
    ax.set_xlabel(plot["x"])
    ax.set_ylabel(metric_label(plot["y"]))
    ax.set_title(plot.get("title", ""))
    if len(series) > 1:
        ax.legend(title=plot.get("series"), fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return png_bytes(fig, dpi=110)


def render_html(rows: list[dict[str, Any]], headline: str,
                plots: dict[str, bytes] | None = None) -> str:
    """The leaderboard as one self-contained page: its tables sort by a click on a header and
    filter per column, a dot chart per metric (the paper's value marked where the suite records
    one), the suite's plots and each run's figures."""
    metrics = _columns(rows, headline)
    header, body = _table(rows, metrics, headline, metrics_first=True)
    parts = [html_page.bullets(_preamble(rows, headline)),
             "<p>Click a column's header to sort by it; type in the box under a header to keep "
             "the rows whose cell contains that text (or, for numbers, <code>&gt;90</code>, "
             "<code>&lt;0.5</code>).</p>",
             html_page.table(header, body, sortable=True)]
    layer_header, layer_body = _per_layer_table(rows)
    if layer_body:
        parts.append(f"<h2>Per-layer fusion</h2><p>{html_page.esc(PER_LAYER_CAPTION)}</p>"
                     + html_page.table(layer_header, layer_body, sortable=True))
    paper_header, paper_body = _paper_table(rows)
    if paper_body:
        parts.append("<h2>Against the papers</h2>"
                     + html_page.table(paper_header, paper_body, sortable=True))
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


def write_leaderboard(results_dir: str | Path, headline: str | None = None,
                      sources: list[Path] | None = None) -> list[Path]:
    """Rebuild ``leaderboard.{md,csv,html}`` in ``results_dir`` from its result files (or from
    those of the folders ``sources``: several suites side by side), atomically.

    With no result files nothing is written (an earlier leaderboard stays as it was)."""
    results_dir = Path(results_dir)
    results = [r for source in (sources or [results_dir]) for r in load_results(source)]
    if not results:
        return []
    if headline is None:
        headline = results[0]["config"].get("headline", "linear_probe_top1")
    rows = aggregate(results, headline)
    plots = {plot_file_name(plot): line_plot_png(rows, plot)
             for plot in results[0]["config"].get("plots") or []}
    texts = {"leaderboard.md": render_markdown(rows, headline),
             "leaderboard.csv": render_csv(rows, headline),
             "leaderboard.html": render_html(rows, headline, {
                 **plots, **learning_curves(results), **run_figures(results)})}
    # the plots, the Markdown, the CSV and the HTML are replaced together or not at all
    return write_atomic_together({results_dir / name: data
                                  for name, data in {**plots, **texts}.items()},
                                 journal=results_dir / JOURNAL)
