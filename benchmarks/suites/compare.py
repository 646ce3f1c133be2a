"""Two leaderboards side by side, as a regression gate: ``clusterbench compare BASELINE
CURRENT``. Each is a suite's results folder or a ``leaderboard.csv`` (a baseline committed to a
repository, say). For every run and metric both have, the change of the mean over seeds is
checked against a tolerance: a fixed number of points (percent points of an accuracy,
hundredths of a score: ARI, NMI, silhouette), or a multiple of the pooled standard deviation
over seeds, whichever is larger. Every metric is one where higher is better (the
accuracies, ARI, NMI, silhouette): a drop beyond the tolerance is a regression, and so is a run
of the baseline that the current results lack. Two budgets (``ci`` against ``fast``, say) train
differently and their numbers do not compare: such a pair of leaderboards is refused unless
asked for (``--mixed-budgets``). ``--runs`` narrows both sides to the runs named (a ``bench
--runs``): only the runs both sides have are compared, and the others are named, not counted.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.infra.errors import ConfigError, control_free, suggest
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


#: A number as ``leaderboard.csv`` writes one (Python's ``repr`` of a float or an int): ASCII
#: digits, a point, an exponent; ``nan`` and ``inf`` too (:class:`Change` calls them a
#: regression). Python's ``float`` also takes ``0_5``, spaces and other scripts' digits
#: (``٠٫٥``), none of which clusterbench writes.
CSV_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
                        r"|[+-]?inf|nan")
#: The longest cell read: far above any clusterbench writes (a name is at most 500 characters,
#: a row's machines a few hundred), below the csv module's own limit of 131,072.
LONGEST_CELL = 65_536


def number(board: Path, line: int, run: str, column: str, value: str) -> float:
    """The cell ``value`` as a number written as :data:`CSV_NUMBER` says, or a one-line
    ConfigError naming the file, row and column.

    >>> number(Path("b.csv"), 2, "r", "c", "9.5e-01")
    0.95
    """
    if CSV_NUMBER.fullmatch(value) is None:
        raise ConfigError(f"{board}: row {line} (run {run!r}), column {column!r} holds "
                          f"{value[:40]!r}, not a number; accepted: a leaderboard.csv written by "
                          "clusterbench")
    return float(value)


@dataclass(frozen=True)
class Board:
    """A leaderboard as ``compare`` reads it: ``run -> metric -> (mean, std)`` in display units,
    and each run's budget where the file has a ``budget`` column."""

    metrics: dict[str, dict[str, tuple[float, float]]]
    budgets: dict[str, str]

    def narrowed(self, runs: set[str] | None) -> Board:
        """The board's runs among ``runs`` (all of them for None)."""
        if runs is None:
            return self
        return Board({r: m for r, m in self.metrics.items() if r in runs},
                     {r: b for r, b in self.budgets.items() if r in runs})


def read_board(path: Path) -> Board:
    """The :class:`Board` of a ``leaderboard.csv`` (or the one in a results folder); a std over
    one seed is 0. The file is read only if it is a regular file of bounded size, and only
    whole (:func:`csv_rows`); a cell that is not a number as the file writes one
    (:data:`CSV_NUMBER`) is one line naming it."""
    path = Path(path)
    board = path / "leaderboard.csv" if path.is_dir() else path
    if not board.is_file():
        raise ConfigError(f"{path} is neither a results folder with a leaderboard.csv nor a "
                          "leaderboard.csv (run clusterbench leaderboard DIR first)")
    try:
        text = regular_file_bytes(board, follow_links=True).decode("utf-8")
    except (Unreadable, OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{board} cannot be read: {' '.join(str(err).split())}") from None
    (_, header), *table = csv_rows(board, text)
    if "run" not in header:
        raise ConfigError(f"{board} has no 'run' column; accepted: a leaderboard.csv written by "
                          "clusterbench")
    out: dict[str, dict[str, tuple[float, float]]] = {}
    budgets: dict[str, str] = {}
    for line, cells in table:
        row = dict(zip(header, cells, strict=True))
        run = unquoted(row["run"])
        if row.get("budget"):
            budgets[run] = unquoted(row["budget"])
        metrics = {}
        for column, value in row.items():
            name = column.removesuffix("_mean")
            if column.endswith("_mean") and name not in NOT_METRICS and value != "":
                scale = display_scale(name)
                std = row.get(f"{name}_std") or "0"
                metrics[name] = (scale * number(board, line, run, column, value),
                                 scale * number(board, line, run, f"{name}_std", std))
        out[run] = metrics
    return Board(out, budgets)


def csv_rows(board: Path, text: str) -> list[tuple[int, list[str]]]:
    """The rows of the CSV ``text`` of ``board``, each with the line it ends on, blank lines
    left out; the first is the header. A row of more or fewer cells than the header (a file
    cut short, or written by hand), a cell longer than :data:`LONGEST_CELL` or text that is not
    CSV is a one-line ConfigError naming the file and the line: a row read in part would drop
    its run from the comparison without a word."""
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[tuple[int, list[str]]] = []
    try:
        for cells in reader:
            if not cells:
                continue
            if rows and len(cells) != len(rows[0][1]):
                raise ConfigError(f"{board}: line {reader.line_num} has {len(cells)} cells and "
                                  f"the header {len(rows[0][1])}: not a whole leaderboard.csv "
                                  "(cut short, or edited by hand)")
            if max(map(len, cells)) > LONGEST_CELL:
                raise ConfigError(f"{board}: line {reader.line_num} has a cell of more than "
                                  f"{LONGEST_CELL:,} characters, longer than any clusterbench "
                                  "writes: not a leaderboard.csv")
            rows.append((reader.line_num, cells))
    except csv.Error as err:
        raise ConfigError(f"{board}: line {reader.line_num} is not CSV as clusterbench writes "
                          f"it ({err})") from None
    if not rows:
        raise ConfigError(f"{board} is empty; accepted: a leaderboard.csv written by "
                          "clusterbench")
    return rows


def unquoted(cell: str) -> str:
    """A text cell as written before :func:`~benchmarks.suites.render_table.csv_text` quoted
    it against a spreadsheet's formulas.

    >>> unquoted("'=x"), unquoted("'quoted"), unquoted("simclr")
    ('=x', "'quoted", 'simclr')
    """
    return cell[1:] if cell.startswith("'") and cell[1:].startswith(FORMULA_STARTS) else cell


@dataclass(frozen=True)
class Comparison:
    """What ``compare`` found: every (run, metric) pair both sides have (``changes``), the
    baseline's runs the current results lack (``missing``: regressions), and where ``--runs``
    narrowed the comparison, the runs it named (``runs``) and each side's runs left out of it
    (``left_out``: why -> runs; no regressions). ``budgets``: the two sides' budgets where
    they differ and ``--mixed-budgets`` compared them anyway."""

    changes: list[Change]
    missing: list[str]
    runs: tuple[str, ...] | None = None
    left_out: dict[str, list[str]] = field(default_factory=dict)
    budgets: tuple[str, str] | None = None

    @property
    def regressions(self) -> int:
        return sum(c.regressed for c in self.changes) + len(self.missing)


def budget_names(board: Board) -> str:
    """The board's budgets as one word or a list: ``ci``, ``ci, full``; ``""`` when unknown."""
    return ", ".join(sorted(set(board.budgets.values())))


def check_budgets(baseline: Path, old: Board, current: Path, new: Board,
                  mixed_budgets: bool) -> tuple[str, str] | None:
    """Two leaderboards of different budgets are refused in one line unless ``mixed_budgets``;
    returns both budgets where they differ (and were allowed to). A leaderboard without a
    ``budget`` column (an old one) is taken as it is."""
    said = budget_names(old), budget_names(new)
    if not all(said) or said[0] == said[1]:
        return None
    if not mixed_budgets:
        raise ConfigError(f"{baseline} is budget {said[0]} and {current} budget {said[1]}: "
                          "runs of different budgets train differently and their numbers do "
                          "not compare; --mixed-budgets compares them anyway")
    return said


def compare(baseline: Path, current: Path, points: float = 0.0, sigmas: float = 2.0,
            runs: list[str] | None = None, mixed_budgets: bool = False) -> Comparison:
    """Every metric of every run both leaderboards have, with its tolerance
    ``max(points, sigmas * pooled std)``; and the runs of the baseline the current lacks.
    ``runs`` (``--runs``) narrows both sides to those runs and compares only those both have:
    a run one side lacks is then named, not a regression.

    >>> Change("simclr", "knn50_top1", 97.0, 95.5, 1.0).regressed
    True
    """
    if points < 0 or sigmas < 0 or not (math.isfinite(points) and math.isfinite(sigmas)):
        raise ConfigError(f"--points and --sigmas must be finite and >= 0, got {points:g} and "
                          f"{sigmas:g}")
    named = set(runs) if runs else None
    whole_old, whole_new = read_board(baseline), read_board(current)
    for run in sorted(named or ()):
        if run not in whole_old.metrics and run not in whole_new.metrics:
            raise ConfigError(f"--runs {run}: neither {baseline} nor {current} has that run"
                              + suggest(run, set(whole_old.metrics) | set(whole_new.metrics)))
    old, new = whole_old.narrowed(named), whole_new.narrowed(named)
    budgets = check_budgets(baseline, old, current, new, mixed_budgets)
    changes = []
    for run, metrics in old.metrics.items():
        for metric, (mean, std) in metrics.items():
            if metric in new.metrics.get(run, {}):
                now, now_std = new.metrics[run][metric]
                finite = all(map(math.isfinite, (mean, std, now, now_std)))
                pooled = math.sqrt((std ** 2 + now_std ** 2) / 2) if finite else math.nan
                # a point: a percent point of an accuracy, a hundredth of a score
                floor = points if display_scale(metric) == 100.0 else points / 100
                tolerance = max(floor, sigmas * pooled) if finite else math.nan
                changes.append(Change(run, metric, mean, now, tolerance, finite))
    missing = [run for run in old.metrics if run not in new.metrics]
    left_out = {}
    if named is not None:  # --runs: a run one side lacks is not what this comparison checks
        everything = set(whole_old.metrics) | set(whole_new.metrics)
        left_out = {"not named by --runs": sorted(everything - named),
                    "only in the baseline": missing,
                    "only in the current results": sorted(set(new.metrics) - set(old.metrics))}
        missing = []
    if not changes and not missing:
        raise ConfigError(f"{baseline} and {current} share no run and metric"
                          + (f" among --runs {' '.join(runs)}" if runs else "")
                          + ": nothing to compare")
    return Comparison(changes, missing, tuple(runs) if runs else None,
                      {why: names for why, names in left_out.items() if names}, budgets)


def markdown(comparison: Comparison) -> str:
    """The comparison as a Markdown table for a pull request's comment, regressions first."""
    changes, missing = comparison.changes, comparison.missing
    lines = [f"**{comparison.regressions} regression(s)** in {len(changes)} "
             f"(run, metric) pairs"
             + (f"; missing runs: {', '.join(map(text_cell, missing))}" if missing else "")]
    if comparison.runs:
        lines += ["", f"Only the runs both sides have among --runs "
                     f"{' '.join(map(text_cell, comparison.runs))}; not compared, and no "
                     "regression: " + ("; ".join(
                         f"{', '.join(map(text_cell, names))} ({why})"
                         for why, names in comparison.left_out.items()) or "none") + "."]
    if comparison.budgets:
        was, now = map(text_cell, comparison.budgets)
        lines += ["", f"Budgets differ (--mixed-budgets): baseline {was}, current {now}."]
    lines += ["", "| run | metric | baseline | current | change | tolerance | verdict |",
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
