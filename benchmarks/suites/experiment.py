"""Experiment suites: a paper's figures and tables that are not "train a method, then probe it".

A suite YAML with ``kind: experiment`` names a registered function (``experiment: NAME``, a key
of :data:`benchmarks.experiments.EXPERIMENTS`) and its keyword ``settings``; ``seeds`` and a
``fast`` section (``{settings: {...}}`` overrides, merged recursively) work as in training
suites. The suite file is the one home of an experiment's settings: every argument of the
function without a default must be set there (checked before anything runs, as unknown keys
are). ``clusterbench bench NAME`` calls ``function(seeds=[...], **settings)``; the function
computes and returns an :class:`ExperimentOutput`, and writes nothing itself. The runner writes,
atomically, under ``<results>/<name>[-fast]/``:

- ``leaderboard.md`` and ``leaderboard.html`` with every table, the notes and the figures
  embedded;
- ``leaderboard.csv``: every table in one tidy table (one header row: a ``table`` column naming
  each row's table, then the union of the tables' columns, empty where a table has none), and
  beside it one file per table, ``<table-slug>.csv``;
- ``figures/<name>.png``;
- ``result.json``: the tables, notes, seeds, settings, budget, wall time and the machine.

Example suite file::

    name: invariant_attention
    kind: experiment
    description: ...
    experiment: invariant_attention
    seeds: [0, 1, 2, 3, 4]
    settings: {image_size: 32, iterations: 2}
    fast: {seeds: [0], settings: {image_size: 16}}
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.infra import html_page
from benchmarks.infra.errors import ConfigError, resolve_name, suggest
from benchmarks.infra.paths import check_name, inside
from benchmarks.run.spec import check_keys
from benchmarks.suites.config import check_seeds, merge
from benchmarks.suites.suite_file import read_suite_file

#: The report header's word on the spread: every "std" column and "± std" is the sample std.
STATISTICS_LINE = ("Statistics: every \"std\" column and every \"± std\" is the sample standard "
                   "deviation (ddof 1) over the seeds")


@dataclass
class ExperimentOutput:
    """What an experiment function returns.

    Attributes:
        tables: table title -> rows; each row a dict from column name to a number or a string,
            every row of a table with the same columns. Numbers over seeds are reported as
            columns ``"<metric> mean"`` and ``"<metric> std"`` (the sample std, ddof 1: see
            :func:`benchmarks.infra.statistics.mean_std`; or one preformatted string
            ``"0.95 ± 0.01"``), with a ``"seeds"`` column giving how many seeds.
        figures: file name (``"weights.png"``) -> PNG bytes.
        notes: sentences for the report: what was measured, departures from the paper, and
            whether the paper's claim held here.
    """

    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    figures: dict[str, bytes] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


#: The keys of a ``kind: experiment`` suite file.
EXPERIMENT_KEYS = {"name", "kind", "description", "experiment", "seeds", "settings", "fast"}


@dataclass
class ExperimentSuite:
    """A ``kind: experiment`` suite: ``experiment`` names a function of the experiment registry
    (:data:`benchmarks.experiments.EXPERIMENTS`), called as ``function(seeds=seeds, **settings)``;
    it returns an :class:`ExperimentOutput`."""

    name: str
    description: str
    path: Path
    seeds: list[int]
    experiment: str
    function: Callable[..., Any]
    settings: dict[str, Any]
    fast: bool = False


def keyword_parameters(function: Callable[..., Any]) -> set[str]:
    """The arguments ``function`` takes by name. A ``**kwargs`` catch-all is not one of them: a
    suite's settings are checked against the names a function spells out, never waved through.

    >>> sorted(keyword_parameters(lambda seeds, n=1, *args, fail=False, **kwargs: None))
    ['fail', 'n', 'seeds']
    """
    return {name for name, p in inspect.signature(function).parameters.items()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def load_experiment_suite(name_or_path: str, experiments: dict[str, Callable[..., Any]],
                          fast: bool = False) -> ExperimentSuite:
    """Load and validate a ``kind: experiment`` suite: its ``experiment`` is looked up by name in
    ``experiments`` (the registry; passed in because it sits a layer above the suites) and its
    ``settings`` are checked against the function's named arguments before anything runs."""
    path, raw = read_suite_file(name_or_path)
    where = str(path)
    check_keys(raw, EXPERIMENT_KEYS, where)
    if fast:
        overrides = raw.get("fast") or {}
        check_keys(overrides, {"seeds", "settings"}, f"{where}: fast")
        raw = merge(raw, overrides)
    seeds = raw.get("seeds")
    check_seeds(seeds, where)
    name = raw.get("experiment")
    if not isinstance(name, str):
        raise ConfigError(f"{where} needs experiment: NAME{suggest('', set(experiments))}")
    try:
        function = resolve_name(experiments, name, "experiment")
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from err
    check_name(raw.get("name", path.stem), f"{where}: suite name")
    settings = raw.get("settings") or {}
    check_keys(settings, keyword_parameters(function) - {"seeds"}, f"{where}: settings")
    return ExperimentSuite(name=raw.get("name", path.stem), description=raw.get("description", ""),
                           path=path, seeds=seeds, experiment=name, function=function,
                           settings=dict(settings), fast=fast)


def slug(title: str) -> str:
    """A file-name form of a table title: ``"Experiment 1: ARI"`` -> ``experiment-1-ari``."""
    import re

    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "table"


def cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def check_output(output: Any, where: str) -> ExperimentOutput:
    """The function's return value, checked: the runner fails loudly on a malformed report."""
    if not isinstance(output, ExperimentOutput):
        raise TypeError(f"{where} returned {type(output).__name__}, not an ExperimentOutput")
    for title, rows in output.tables.items():
        columns = list(rows[0]) if rows else []
        for row in rows:
            if list(row) != columns:
                raise ValueError(f"{where}: table {title!r} has rows with different columns: "
                                 f"{columns} and {list(row)}")
        if "table" in columns:  # leaderboard.csv's column naming each row's table
            raise ValueError(f"{where}: table {title!r} has a column named 'table', the "
                             "column of leaderboard.csv that names each row's table")
    for name, png in output.figures.items():
        if not (name.endswith(".png") and png.startswith(b"\x89PNG")):
            raise ValueError(f"{where}: figure {name!r} is not PNG bytes named *.png")
    return output


def check_settings_complete(suite: ExperimentSuite) -> None:
    """A ConfigError naming the first argument of the suite's function that has no default and
    that the suite's settings leave unset: the suite file is the one home of the settings."""
    for name, parameter in inspect.signature(suite.function).parameters.items():
        if (name != "seeds" and parameter.default is inspect.Parameter.empty
                and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
                and name not in suite.settings):
            raise ConfigError(f"{suite.path}: settings is missing {name!r} (experiment "
                              f"{suite.experiment!r} takes every setting from the suite file)")


def leaderboard_csv(output: ExperimentOutput) -> str:
    """Every table of ``output`` as one tidy CSV: one header row, ``table`` first, then every
    column of every table in first-seen order; a row leaves the columns of other tables empty.

    >>> print(leaderboard_csv(ExperimentOutput(tables={"a": [{"x": 1}], "b": [{"y": 2.5}]})))
    table,x,y
    a,1,
    b,,2.5
    <BLANKLINE>
    """
    import csv
    import io

    columns: dict[str, None] = {}
    for rows in output.tables.values():
        for row in rows[:1]:
            columns.update(dict.fromkeys(row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=["table", *columns], lineterminator="\n")
    if columns or any(output.tables.values()):
        writer.writeheader()
    for table, rows in output.tables.items():
        writer.writerows({"table": table, **row} for row in rows)
    return buffer.getvalue()


def render_markdown(title: str, header: list[str], output: ExperimentOutput) -> str:
    lines = [f"# {title}", "", *[f"- {line}" for line in header], ""]
    for table, rows in output.tables.items():
        lines += [f"## {table}", ""]
        if rows:
            lines += ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
            lines += ["| " + " | ".join(cell(v).replace("|", "\\|") for v in row.values()) + " |"
                      for row in rows]  # a "|" inside a cell would split it
        lines.append("")
    if output.notes:
        lines += ["## Notes", "", *[f"- {note}" for note in output.notes], ""]
    if output.figures:
        lines += ["## Figures", "", *[f"![{name}](figures/{name})" for name in output.figures], ""]
    return "\n".join(lines)


def render_html(title: str, header: list[str], output: ExperimentOutput) -> str:
    parts = [html_page.bullets(header)]
    for name, rows in output.tables.items():
        parts.append(f"<h2>{html_page.esc(name)}</h2>")
        if rows:
            parts.append(html_page.table(rows[0], ([cell(v) for v in row.values()]
                                                    for row in rows)))
    if output.notes:
        parts.append("<h2>Notes</h2>" + html_page.bullets(output.notes))
    parts.extend(html_page.figure(name, png) for name, png in output.figures.items())
    return html_page.page(title, title, parts)


def run_experiment_suite(suite: ExperimentSuite, results_root: str | Path = "results") -> Path:
    """Run a loaded ``kind: experiment`` suite
    (:func:`load_experiment_suite`)
    and write its report (see the module docstring); returns the suite's results directory.
    Nothing is written if the function raises."""
    from benchmarks.infra.locking import folder_lock

    root = Path(results_root).resolve()
    out_dir = inside(root, root / (suite.name + ("-fast" if suite.fast else "")))
    check_settings_complete(suite)
    with folder_lock(out_dir, f"suite {suite.name!r}'s results folder"):
        return compute_and_write(suite, out_dir)


def compute_and_write(suite: ExperimentSuite, out_dir: Path) -> Path:
    """The body of :func:`run_experiment_suite`, under the results folder's lock: every file of
    the report is replaced together, once the function has returned."""
    import time

    from rich.console import Console

    from benchmarks.infra.atomic import write_atomic_together
    from benchmarks.infra.environment import environment

    Console(stderr=True).rule(f"[bold]{suite.name}[/]: {suite.experiment}, seeds {suite.seeds}"
                              + (" (fast budget)" if suite.fast else ""))
    start = time.perf_counter()
    output = check_output(suite.function(seeds=list(suite.seeds), **suite.settings),
                          suite.experiment)
    wall = time.perf_counter() - start
    write_atomic_together(report_files(suite, out_dir, output, wall, environment()))
    return out_dir


def report_files(suite: ExperimentSuite, out_dir: Path, output: ExperimentOutput, wall: float,
                 env: dict[str, Any]) -> dict[Path, str | bytes]:
    """Every file of the report (see the module docstring) by its path under ``out_dir``: the
    figures, one CSV a table, ``result.json`` and the leaderboards."""
    header = report_header(suite, wall, env)
    files: dict[Path, str | bytes] = {out_dir / "figures" / name: png
                                      for name, png in output.figures.items()}
    for title, rows in output.tables.items():
        files[out_dir / f"{slug(title)}.csv"] = table_csv(rows)
    files[out_dir / "result.json"] = result_json(suite, output, wall, env)
    title = f"{suite.name}: tables and figures"
    files[out_dir / "leaderboard.md"] = render_markdown(title, header, output)
    files[out_dir / "leaderboard.html"] = render_html(title, header, output)
    files[out_dir / "leaderboard.csv"] = leaderboard_csv(output)
    return files


def report_header(suite: ExperimentSuite, wall: float, env: dict[str, Any]) -> list[str]:
    """The lines above the report's tables: the suite, its budget and seeds, the machine and
    versions, and what "std" means, so that every number is read with what made it."""
    from benchmarks.infra.environment import describe_machine

    budget = "fast" if suite.fast else "full"
    return [
        f"Suite: {suite.name} ({suite.description})" if suite.description else
        f"Suite: {suite.name}",
        f"Budget: {budget}" + (" (a tiny smoke budget: these numbers check the plumbing, not "
                               "the paper)" if suite.fast else "")
        + f"; seeds {', '.join(map(str, suite.seeds))} ({len(suite.seeds)}); "
        f"wall time {wall:.1f} s",
        f"Machine: {describe_machine(env['machine'])}; torch {env['versions']['torch']}; "
        f"clusterbench commit {((env['git'] or {}).get('commit') or '?')[:10]}",
        STATISTICS_LINE,
    ]


def table_csv(rows: list[dict[str, Any]]) -> str:
    """One table as CSV, its columns those of its first row (an empty table: an empty file)."""
    import csv
    import io

    buffer = io.StringIO()
    if rows:
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return buffer.getvalue()


def result_json(suite: ExperimentSuite, output: ExperimentOutput, wall: float,
                env: dict[str, Any]) -> str:
    """The report's ``result.json``: the tables and notes with the seeds, settings, budget,
    wall time and environment that produced them."""
    import json
    from datetime import datetime, timezone

    return json.dumps({
        "suite": suite.name, "suite_file": str(suite.path), "kind": "experiment",
        "experiment": suite.experiment,
        "budget": "fast" if suite.fast else "full", "seeds": suite.seeds,
        "settings": suite.settings, "tables": output.tables, "notes": output.notes,
        "figures": list(output.figures), "wall_seconds": wall,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), **env,
    }, indent=2, default=str)
