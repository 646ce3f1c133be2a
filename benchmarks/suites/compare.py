"""Two leaderboards side by side, as a regression gate: ``clusterbench compare BASELINE
CURRENT``. Each is a suite's results folder or a ``leaderboard.csv`` (a baseline committed to a
repository, say). For every run and metric both have, the change of the mean over seeds is
checked against a tolerance: a fixed number of points (percent points of an accuracy,
hundredths of a score: ARI, NMI, silhouette), or a multiple of the pooled standard deviation
over seeds, whichever is larger. Every metric is one where higher is better (the
accuracies, ARI, NMI, silhouette): a drop beyond the tolerance is a regression, and so is a run
of the baseline that the current results lack.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

from benchmarks.infra.errors import ConfigError, control_free
from benchmarks.infra.read_back import Unreadable, regular_file_bytes
from benchmarks.suites.render_table import FORMULA_STARTS, md_cell
from benchmarks.suites.results import display_scale, metric_digits, metric_label

#: Columns of ``leaderboard.csv`` that end in ``_mean`` but are no metric.
NOT_METRICS = ("train_seconds", "paper")


@dataclass(frozen=True)
class Change:
    """One run's metric in both leaderboards, in display units (percent for accuracies);
    ``finite`` is False when a mean or std of either is ``nan`` or infinite, which is a
    regression whatever the numbers (a ``nan`` mean compares as no drop, an infinite std as
    an infinite tolerance)."""

    run: str
    metric: str
    baseline: float
    current: float
    tolerance: float
    finite: bool = True

    @property
    def delta(self) -> float:
        return self.current - self.baseline

    @property
    def regressed(self) -> bool:
        return not self.finite or self.delta < -self.tolerance


def number(board: Path, line: int, run: str, column: str, value: str) -> float:
    """The cell ``value`` as a number, or a one-line ConfigError naming the file, row and
    column (``nan`` and ``inf`` are numbers here; :class:`Change` calls them a regression)."""
    try:
        return float(value)
    except ValueError:
        raise ConfigError(f"{board}: row {line} (run {run!r}), column {column!r} holds "
                          f"{value[:40]!r}, not a number; accepted: a leaderboard.csv written by "
                          "clusterbench") from None


def read_board(path: Path) -> dict[str, dict[str, tuple[float, float]]]:
    """``run -> metric -> (mean, std)`` of a ``leaderboard.csv`` (or the one in a results
    folder), in display units; a std over one seed is 0. The file is read only if it is a
    regular file of bounded size; a cell that is not a number is one line naming it."""
    path = Path(path)
    board = path / "leaderboard.csv" if path.is_dir() else path
    if not board.is_file():
        raise ConfigError(f"{path} is neither a results folder with a leaderboard.csv nor a "
                          "leaderboard.csv (run clusterbench leaderboard DIR first)")
    try:
        text = regular_file_bytes(board, follow_links=True).decode("utf-8")
    except (Unreadable, OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{board} cannot be read: {' '.join(str(err).split())}") from None
    rows = csv.DictReader(io.StringIO(text, newline=""))
    if "run" not in (rows.fieldnames or []):
        raise ConfigError(f"{board} has no 'run' column; accepted: a leaderboard.csv written by "
                          "clusterbench")
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for line, row in enumerate(rows, start=2):
        run = row["run"] or ""
        if run.startswith("'") and run[1:].startswith(FORMULA_STARTS):
            run = run[1:]  # quoted against a spreadsheet's formulas (render_table.csv_text)
        metrics = {}
        for column, value in row.items():
            name = (column or "").removesuffix("_mean")
            if (column or "").endswith("_mean") and name not in NOT_METRICS \
                    and value not in ("", None):
                scale = display_scale(name)
                std = row.get(f"{name}_std") or "0"
                metrics[name] = (scale * number(board, line, run, column, value),
                                 scale * number(board, line, run, f"{name}_std", std))
        out[run] = metrics
    return out


def compare(baseline: Path, current: Path, points: float = 0.0,
            sigmas: float = 2.0) -> tuple[list[Change], list[str]]:
    """Every metric of every run both leaderboards have, with its tolerance
    ``max(points, sigmas * pooled std)``; and the runs of the baseline the current lacks.

    >>> Change("simclr", "knn50_top1", 97.0, 95.5, 1.0).regressed
    True
    """
    if points < 0 or sigmas < 0 or not (math.isfinite(points) and math.isfinite(sigmas)):
        raise ConfigError(f"--points and --sigmas must be finite and >= 0, got {points:g} and "
                          f"{sigmas:g}")
    old, new = read_board(baseline), read_board(current)
    changes = []
    for run, metrics in old.items():
        for metric, (mean, std) in metrics.items():
            if metric in new.get(run, {}):
                now, now_std = new[run][metric]
                finite = all(map(math.isfinite, (mean, std, now, now_std)))
                pooled = math.sqrt((std ** 2 + now_std ** 2) / 2) if finite else math.nan
                # a point: a percent point of an accuracy, a hundredth of a score
                floor = points if display_scale(metric) == 100.0 else points / 100
                tolerance = max(floor, sigmas * pooled) if finite else math.nan
                changes.append(Change(run, metric, mean, now, tolerance, finite))
    missing = [run for run in old if run not in new]
    if not changes and not missing:
        raise ConfigError(f"{baseline} and {current} share no run and metric: nothing to compare")
    return changes, missing


def markdown(changes: list[Change], missing: list[str]) -> str:
    """The comparison as a Markdown table for a pull request's comment, regressions first."""
    regressed = [c for c in changes if c.regressed]
    lines = [f"**{len(regressed) + len(missing)} regression(s)** in {len(changes)} "
             f"(run, metric) pairs"
             + (f"; missing runs: {', '.join(map(text_cell, missing))}" if missing else ""),
             "", "| run | metric | baseline | current | change | tolerance | verdict |",
             "|---|---|---|---|---|---|---|"]
    for change in sorted(changes, key=lambda c: (not c.regressed, c.run, c.metric)):
        digits = metric_digits(change.metric)
        values = [f"{v:.{digits}f}" for v in (change.baseline, change.current)]
        lines.append(f"| {text_cell(change.run)} | {metric_label(change.metric)} | {values[0]} | "
                     f"{values[1]} | {change.delta:+.{digits}f} | {change.tolerance:.{digits}f} | "
                     f"{verdict(change)} |")
    lines += [f"| {text_cell(run)} | (every metric) | present | missing | | | REGRESSION |"
              for run in missing]
    return "\n".join(lines) + "\n"


def text_cell(name: str) -> str:
    """A run's name as one Markdown cell of plain text, without control characters: the
    comparison goes to a terminal and to a pull request's comment."""
    return md_cell(control_free(name))


def verdict(change: Change) -> str:
    """``ok``, ``REGRESSION``, or ``REGRESSION (not finite)`` for a ``nan`` or infinite
    mean or std."""
    if not change.finite:
        return "REGRESSION (not finite)"
    return "REGRESSION" if change.regressed else "ok"
