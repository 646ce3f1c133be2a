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
import math
from dataclasses import dataclass
from pathlib import Path

from benchmarks.infra.errors import ConfigError
from benchmarks.suites.results import display_scale, metric_digits, metric_label

#: Columns of ``leaderboard.csv`` that end in ``_mean`` but are no metric.
NOT_METRICS = ("train_seconds", "paper")


@dataclass(frozen=True)
class Change:
    """One run's metric in both leaderboards, in display units (percent for accuracies)."""

    run: str
    metric: str
    baseline: float
    current: float
    tolerance: float

    @property
    def delta(self) -> float:
        return self.current - self.baseline

    @property
    def regressed(self) -> bool:
        return self.delta < -self.tolerance


def read_board(path: Path) -> dict[str, dict[str, tuple[float, float]]]:
    """``run -> metric -> (mean, std)`` of a ``leaderboard.csv`` (or the one in a results
    folder), in display units; a std over one seed is 0."""
    path = Path(path)
    board = path / "leaderboard.csv" if path.is_dir() else path
    if not board.is_file():
        raise ConfigError(f"{path} is neither a results folder with a leaderboard.csv nor a "
                          "leaderboard.csv (run clusterbench leaderboard DIR first)")
    out: dict[str, dict[str, tuple[float, float]]] = {}
    with board.open(newline="") as file:
        for row in csv.DictReader(file):
            metrics = {}
            for column, value in row.items():
                name = column.removesuffix("_mean")
                if column.endswith("_mean") and name not in NOT_METRICS and value not in ("", None):
                    scale = display_scale(name)
                    std = row.get(f"{name}_std") or "0"
                    metrics[name] = (scale * float(value), scale * float(std))
            out[row["run"]] = metrics
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
                pooled = math.sqrt((std ** 2 + now_std ** 2) / 2)
                # a point: a percent point of an accuracy, a hundredth of a score
                floor = points if display_scale(metric) == 100.0 else points / 100
                changes.append(Change(run, metric, mean, now, max(floor, sigmas * pooled)))
    missing = [run for run in old if run not in new]
    if not changes and not missing:
        raise ConfigError(f"{baseline} and {current} share no run and metric: nothing to compare")
    return changes, missing


def markdown(changes: list[Change], missing: list[str]) -> str:
    """The comparison as a Markdown table for a pull request's comment, regressions first."""
    regressed = [c for c in changes if c.regressed]
    lines = [f"**{len(regressed) + len(missing)} regression(s)** in {len(changes)} "
             f"(run, metric) pairs" + (f"; missing runs: {', '.join(missing)}" if missing else ""),
             "", "| run | metric | baseline | current | change | tolerance | verdict |",
             "|---|---|---|---|---|---|---|"]
    for change in sorted(changes, key=lambda c: (not c.regressed, c.run, c.metric)):
        digits = metric_digits(change.metric)
        values = [f"{v:.{digits}f}" for v in (change.baseline, change.current)]
        lines.append(f"| {change.run} | {metric_label(change.metric)} | {values[0]} | "
                     f"{values[1]} | {change.delta:+.{digits}f} | {change.tolerance:.{digits}f} | "
                     f"{'REGRESSION' if change.regressed else 'ok'} |")
    lines += [f"| {run} | (every metric) | present | missing | | | REGRESSION |" for run in missing]
    return "\n".join(lines) + "\n"
