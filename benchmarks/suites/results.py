"""A suite's results as the leaderboards read them: found under a results folder, checked,
grouped into one row per (suite, run, dataset, budget, configuration) and aggregated over seeds.
What each metric is (its column title, its display scale) is :mod:`benchmarks.run.metrics`'s,
read here by the leaderboard's modules.

Everything is derived from the ``result.json`` files under a results directory, so results from
several machines can be copied into one directory and merged. The Markdown and CSV tables are
:mod:`benchmarks.suites.render_table`'s, the HTML page :mod:`benchmarks.suites.render_html`'s.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.infra.environment import describe_machine
from benchmarks.infra.errors import control_free
from benchmarks.infra.read_back import Unreadable, regular_file_bytes
from benchmarks.infra.statistics import mean_std
from benchmarks.run.identity import configuration_hash
from benchmarks.run.metrics import (  # noqa: F401 - the leaderboard's modules read them here
    RUN_METRICS,
    display_scale,
    is_percent,
    metric_columns,
    metric_digits,
    metric_label,
    metric_of,
)
from benchmarks.run.result_schema import (
    PER_LAYER_STATISTICS,
    is_finite_number,
    is_name,
    read_result,
)


def staging(part: str) -> bool:
    """A folder a run writes before its result is complete, or the earlier result it replaces
    (``seed-0.attempt``, ``seed-0.replaced``): never read as a result."""
    return part.endswith((".attempt", ".replaced")) or ".replaced-" in part


def result_files(root: Path) -> list[Path]:
    """Every ``result.json`` below ``root``, sorted, outside Ray Tune's ``search`` folders and a
    run's staging folders (never entered). A folder gone by the time the walk comes to it is
    skipped: on a cluster the driver reads while other runs rename their folders into place."""
    import os
    import sys

    def unreadable(err: OSError) -> None:
        if not isinstance(err, (FileNotFoundError, NotADirectoryError)):
            print(control_free(f"clusterbench: warning: skipping {err.filename}: {err.strerror}"),
                  file=sys.stderr)

    found = []
    for directory, folders, files in os.walk(root, onerror=unreadable):
        folders[:] = [f for f in folders if f != "search" and not staging(f)]
        if "result.json" in files:
            found.append(Path(directory) / "result.json")
    return sorted(found)


def load_results(results_dir: str | Path) -> list[dict[str, Any]]:
    """Every finished ``result.json`` below ``results_dir``; one that cannot be read (truncated
    by a crash, edited by hand, not a regular file, too large or too deep) or that is not a
    result (:func:`~benchmarks.run.result_schema.read_result`) is skipped with a warning naming
    it and the field."""
    import sys

    results = []
    for path in result_files(Path(results_dir)):
        try:
            result = read_result(path)
        except FileNotFoundError:  # replaced since the walk found it: the next board has it
            continue
        except (OSError, ValueError) as err:
            print(control_free(f"clusterbench: warning: skipping {path}: cannot be read as a "
                               f"result ({err})"), file=sys.stderr)
            continue
        if result.get("kind") == "experiment":  # an experiment suite's report, not a run
            continue
        result["directory"] = str(path.parent)  # where its figures are (not stored)
        result.setdefault("config_hash", configuration_hash(result["config"]))
        results.append(result)
    return results


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
    import sys

    figures: dict[str, bytes] = {}
    drawn: set[tuple[str, bytes]] = set()
    for r in sorted(results, key=lambda r: (r["run"], r["seed"])):
        listed = r.get("figures") or []
        for name in listed if isinstance(listed, list) else []:
            path = run_figure(r["directory"], name)
            if path is None or not path.is_file():
                continue
            try:  # a regular file of bounded size (run_figure resolved its links)
                png = regular_file_bytes(path, follow_links=True)
            except FileNotFoundError:  # its run replaced meanwhile (on a cluster): next board
                continue
            except (OSError, Unreadable) as err:
                print(f"clusterbench: warning: figure not shown: {err}", file=sys.stderr)
                continue
            if (r["run"], png) in drawn:
                continue
            drawn.add((r["run"], png))
            words = FIGURE_WORDS.get(str(name), str(name))
            figures[f"{r['run']} ({r['dataset']}, seed {r['seed']}): {words}"] = png
    return figures


def aggregate(results: list[dict[str, Any]], headline: str | None = None) -> list[dict[str, Any]]:
    """One row per (suite, run, dataset, budget, configuration): each metric's mean and sample
    std over seeds.

    A seed present twice (results merged from two machines) counts once: the newest result.
    Seeds trained with different configurations of one run (the suite was edited between two
    benches) are never averaged: the configuration of the newest result is the run's row, each
    other one gets a row of its own, its name marked ``[earlier configuration <hash>]``. A run
    that diverged keeps its row, which says so instead of showing numbers (each row says
    whether it is such an ``earlier_configuration``)."""
    groups = configuration_groups(newest_per_seed(results))
    current = newest_configurations(groups)
    rows = []
    for group, members in groups.items():
        run, config_hash = group[1], group[4]
        earlier = current[group[:4]] != config_hash
        if earlier:
            run = f"{run} [earlier configuration {config_hash}]"
        rows.append({**aggregate_row(group, run, members), "earlier_configuration": earlier})
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
        "train_seconds": mean_std([r["train_seconds"] for r in members]),
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
        # a search's winner that is the run's own settings: that run's results, not retrained
        "same_as": first.get("same_as"),
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
    return {name: mean_std(values) for name, values in seconds.items()}


def metrics_over_seeds(members: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each metric any seed recorded: its mean, sample std (None for one seed), seed count and
    the per-seed values themselves, in seed order (what a comparison of two rows reads)."""
    metrics = {}
    for name in sorted({m for r in members for m in r["metrics"]}):
        values = [r["metrics"][name] for r in sorted(members, key=lambda r: r["seed"])
                  if name in r["metrics"]]
        mean, std = mean_std(values)
        metrics[name] = {"mean": mean, "std": std, "n": len(values), "values": values}
    return metrics




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
            entry[key] = mean_std(values) if values else None
        out.append(entry)
    return out
