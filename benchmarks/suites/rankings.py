"""Which differences between a leaderboard's rows hold beyond the spread over seeds: a suite's
``ranking`` section, checked (:func:`check_ranking`), and what the section "Rankings beyond the
spread" says of the rows (:func:`suite_rankings`), as tables that
:mod:`benchmarks.suites.render_table` (Markdown, ``rankings.csv``) and
:mod:`benchmarks.suites.render_html` draw.

A suite names the metrics to rank by, its baselines and the orders papers claim::

    ranking:
      metrics: [logistic_probe_top1, knn50_top1]
      baselines: [pixels, random_init]
      margin: 0.02                 # optional, stored units: two points of an accuracy
      orderings:
        - source: "Kernel-InfoNCE (arXiv:2303.15103) Table 1, CIFAR-10, 200 epochs"
          runs: [simclr/concat_sum, simclr/sum, simclr/laplacian]   # best first

Each difference of two rows' means comes with Welch's 95% t interval over their per-seed values
(:func:`benchmarks.infra.statistics.welch_interval`); it is "beyond the spread" when the
interval leaves out 0. The rows and their per-seed values are the leaderboard's own
(:func:`benchmarks.suites.results.aggregate`): one configuration a row, the current one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.infra.errors import ConfigError, resolve_name, suggest
from benchmarks.infra.statistics import DifferenceInterval, welch_interval
from benchmarks.run.spec import check_keys
from benchmarks.suites.results import display_scale, is_percent, metric_digits

#: The keys of a suite's ``ranking`` section and of each of its ``orderings``.
RANKING_KEYS = {"metrics", "baselines", "margin", "orderings"}
ORDERING_KEYS = {"source", "runs"}
#: The confidence of every interval the section shows.
CONFIDENCE = 0.95

TITLE = "Rankings beyond the spread"
CAPTION = (
    "Each difference is of two rows' means over seeds (A − B; in percentage points for an "
    "accuracy, in the score's own units otherwise) with its 95% confidence interval: Welch's t "
    "interval over the per-seed values (each side's sample std, ddof 1; Welch-Satterthwaite "
    "degrees of freedom; the t quantile of scipy.stats.t). A difference is beyond the spread "
    "when its interval leaves out 0; n/a (one seed) when a side has fewer than two seeds, whose "
    "spread is unknown. A side whose seeds all gave the same number (raw pixels) has no spread: "
    "the interval is the other side's alone, and with neither side varying the difference is "
    "exact. A row is compared with the baselines of its own dataset. Each interval is 95% on "
    "its own: among many comparisons, about one in twenty of those without a real difference "
    "lands beyond the spread by chance.")


def margin_rule(margin: float) -> str:
    """The rule a row's margin over a baseline is judged by, in words.

    >>> print(margin_rule(0.02).split(":")[0])
    Margin 0.02 in the metrics' stored units (2.00 points of an accuracy)
    """
    return (f"Margin {margin:g} in the metrics' stored units ({100 * margin:.2f} points of an "
            "accuracy): a row is above by more than the margin when its interval's lower end is "
            "above the margin (it then leads the baseline by at least the margin, at 95% "
            "confidence); above beyond the spread, not by the margin, when the lower end is above "
            "0 but not above the margin.")


# -- the suite's section, checked --------------------------------------------------------------


def check_ranking(raw: Any, recorded_by_run: dict[str, set[str]],
                  where: str) -> dict[str, Any] | None:
    """The suite's ``ranking`` section (None when it has none) as every result records it:
    ``metrics`` that the suite records, ``baselines`` and each ordering's ``runs`` among the
    suite's runs (``recorded_by_run``: each run's recorded metrics, ``+tuned`` runs included)
    and recording every metric, a ``margin`` of at least 0, each ordering with its ``source``.

    Raises:
        ConfigError: one line naming the bad value and what is accepted.
    """
    if raw is None:
        return None
    where = f"{where}: ranking"
    check_keys(raw, RANKING_KEYS, where)
    metrics = raw.get("metrics")
    if not isinstance(metrics, list) or not metrics:
        raise ConfigError(f"{where}.metrics must be a non-empty list of metrics the suite "
                          f"records, got {metrics!r}")
    recorded = set().union(*recorded_by_run.values())
    for metric in metrics:
        if not isinstance(metric, str) or metric not in recorded:
            raise ConfigError(f"{where}.metrics: {metric!r} is not a metric this suite's "
                              f"evaluation records{suggest(str(metric), recorded)}")
    check_distinct(metrics, f"{where}.metrics")
    baselines = run_names(raw.get("baselines", []), recorded_by_run, f"{where}.baselines", 0)
    orderings = raw.get("orderings", [])
    if not isinstance(orderings, list):
        raise ConfigError(f"{where}.orderings must be a list of orders, each a source and its "
                          f"runs best first, got {orderings!r}")
    checked = [check_ordering(ordering, recorded_by_run, f"{where}.orderings[{i}]")
               for i, ordering in enumerate(orderings)]
    if not baselines and not checked:
        raise ConfigError(f"{where} needs baselines or orderings: with neither it compares "
                          "nothing")
    margin = raw.get("margin")
    if margin is not None and not baselines:
        raise ConfigError(f"{where}.margin {margin!r} is a margin over the baselines, and the "
                          "section names none")
    if margin is not None and (isinstance(margin, bool) or not isinstance(margin, (int, float))
                               or not math.isfinite(margin) or margin < 0):
        raise ConfigError(f"{where}.margin must be a number of at least 0 in the metrics' "
                          f"stored units (0.02: two points of an accuracy), got {margin!r}")
    for name in dict.fromkeys([*baselines, *(n for o in checked for n in o["runs"])]):
        missing = [m for m in metrics if m not in recorded_by_run[name]]
        if missing:
            raise ConfigError(f"{where}.metrics: {missing[0]!r} is not recorded by run {name!r}, "
                              f"which the section compares; it records: "
                              f"{', '.join(sorted(recorded_by_run[name]))}")
    return {"metrics": list(metrics), "baselines": baselines,
            "margin": None if margin is None else float(margin), "orderings": checked}


def check_ordering(raw: Any, recorded_by_run: dict[str, set[str]],
                   where: str) -> dict[str, Any]:
    """One claimed order: a ``source`` (whose claim: a paper and its table) and at least two
    distinct runs of the suite, best first."""
    check_keys(raw, ORDERING_KEYS, where)
    source = raw.get("source")
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(f"{where}.source must say whose order it is (a paper and its table), "
                          f"got {source!r}")
    return {"source": source, "runs": run_names(raw.get("runs"), recorded_by_run,
                                                f"{where}.runs", 2)}


def run_names(value: Any, recorded_by_run: dict[str, set[str]], where: str,
              least: int) -> list[str]:
    """``value``: a list of at least ``least`` distinct run names of the suite."""
    if not isinstance(value, list) or len(value) < least:
        raise ConfigError(f"{where} must be a list of at least {least} of the suite's runs"
                          f"{', best first' if least > 1 else ''}, got {value!r}")
    for name in value:
        resolve_name(recorded_by_run, name, f"run in {where}")
    check_distinct(value, where)
    return list(value)


def check_distinct(names: list[str], where: str) -> None:
    repeated = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if repeated is not None:
        raise ConfigError(f"{where} names {repeated!r} twice; each may appear once")


# -- the rows, compared ------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """``first − second`` in one metric: each side's seed count and, with two seeds a side,
    the difference's interval. ``outcome``: ``above`` or ``below`` (beyond the spread),
    ``within``, ``one seed`` or ``no result`` (a side without the metric)."""

    first: str
    second: str
    seeds: tuple[int, int]
    interval: DifferenceInterval | None
    outcome: str


def compare(first: dict[str, Any] | None, second: dict[str, Any] | None, names: tuple[str, str],
            metric: str) -> Comparison:
    """The rows ``first`` and ``second`` (None: no row) compared in ``metric`` over their
    per-seed values (those :func:`benchmarks.suites.results.metrics_over_seeds` kept)."""
    values = [((row or {}).get("metrics", {}).get(metric) or {}).get("values", [])
              for row in (first, second)]
    seeds = (len(values[0]), len(values[1]))
    if min(seeds) == 0:
        return Comparison(*names, seeds, None, "no result")
    if min(seeds) < 2:
        return Comparison(*names, seeds, None, "one seed")
    interval = welch_interval(values[0], values[1], CONFIDENCE)
    outcome = ("above" if interval.low > 0 else "below" if interval.high < 0 else "within")
    return Comparison(*names, seeds, interval, outcome)


@dataclass(frozen=True)
class OrderingCheck:
    """A claimed order (best first) and each adjacent pair of it compared."""

    source: str
    runs: list[str]
    pairs: list[Comparison]

    def summary(self) -> str:
        """``"2 of 4 adjacent pairs hold beyond the spread, 1 reversed, 1 within the spread"``."""
        count = {o: sum(p.outcome == o for p in self.pairs)
                 for o in ("above", "below", "within")}
        unknown = len(self.pairs) - sum(count.values())
        return (f"{count['above']} of {len(self.pairs)} adjacent pairs hold beyond the spread, "
                f"{count['below']} reversed, {count['within']} within the spread"
                + (f", {unknown} n/a" if unknown else ""))


@dataclass(frozen=True)
class MetricRanking:
    """One metric's part of the section: every other row against each baseline, each claimed
    order, and the pairs of the other rows that differ beyond the spread (of ``pairs_compared``,
    each pair of rows of one dataset with two seeds or more)."""

    metric: str
    against_baselines: list[Comparison]
    orderings: list[OrderingCheck]
    pairs: list[Comparison]
    pairs_compared: int


@dataclass(frozen=True)
class SuiteRanking:
    """The section of one suite and budget, as its newest result's ``ranking`` asks."""

    suite: str
    budget: str
    margin: float | None
    metrics: list[MetricRanking]


def suite_rankings(results: list[dict[str, Any]],
                   rows: list[dict[str, Any]]) -> list[SuiteRanking]:
    """The section for each suite and budget among ``results`` whose newest result records a
    ``ranking``, over the leaderboard's ``rows`` of that suite and budget (their current
    configurations, matched by run name)."""
    newest: dict[tuple[str, str], dict[str, Any]] = {}
    for r in sorted(results, key=lambda r: r.get("finished_at", "")):
        newest[(r["suite"], r["budget"])] = r
    out = []
    for (suite, budget), result in sorted(newest.items()):
        ranking = result["config"].get("ranking")
        if not ranking:
            continue
        current = [row for row in rows if row["suite"] == suite and row["budget"] == budget
                   and not row.get("earlier_configuration")]
        out.append(SuiteRanking(suite, budget, ranking.get("margin"),
                                [metric_ranking(current, ranking, m)
                                 for m in ranking["metrics"]]))
    return out


def metric_ranking(rows: list[dict[str, Any]], ranking: dict[str, Any],
                   metric: str) -> MetricRanking:
    """What the section says of ``metric`` over ``rows`` (one suite's, in leaderboard order)."""
    by_name = {row["run"]: row for row in rows}
    baselines = ranking.get("baselines") or []
    others = [row for row in rows if row["run"] not in baselines]
    against = [compare(row, by_name.get(base), (row["run"], base), metric)
               for row in others for base in baselines
               if by_name.get(base) is None or by_name[base]["dataset"] == row["dataset"]]
    orderings = [OrderingCheck(o["source"], o["runs"], [
        compare(by_name.get(a), by_name.get(b), (a, b), metric)
        for a, b in itertools.pairwise(o["runs"])]) for o in ranking.get("orderings") or []]
    # highest mean first, so that each pair's difference is first - second >= 0
    ranked = sorted((row for row in others
                     if len((row["metrics"].get(metric) or {}).get("values", [])) >= 2),
                    key=lambda row: -row["metrics"][metric]["mean"])
    compared = [compare(a, b, (a["run"], b["run"]), metric)
                for i, a in enumerate(ranked) for b in ranked[i + 1:]
                if a["dataset"] == b["dataset"]]
    return MetricRanking(metric, against, orderings,
                         [c for c in compared if c.outcome == "above"], len(compared))


# -- the section's cells -----------------------------------------------------------------------


def points(metric: str) -> str:
    """The unit of a difference: percentage points of an accuracy, else the score's own."""
    return " points" if is_percent(metric) else ""


def shown_difference(value: float, metric: str) -> str:
    """A difference in display units with its sign: ``+3.52`` (points), ``-0.012`` (ARI)."""
    return f"{display_scale(metric) * value:+.{metric_digits(metric)}f}"


def interval_cells(c: Comparison, metric: str) -> list[str]:
    """The difference and its interval as two cells, or n/a."""
    if c.interval is None:
        return ["n/a", "n/a"]
    i = c.interval
    return [shown_difference(i.difference, metric),
            f"[{shown_difference(i.low, metric)}, {shown_difference(i.high, metric)}]"]


def exactness(c: Comparison) -> str:
    return " (exact: no spread on either side)" if c.interval and c.interval.exact else ""


def baseline_verdict(c: Comparison, margin: float | None) -> str:
    """What a row's difference from a baseline says, with the margin's rule
    (:func:`margin_rule`) where the suite sets one."""
    if c.interval is None:
        return f"n/a ({c.outcome})"
    said = {"above": "above beyond the spread", "below": "below beyond the spread",
            "within": "within the spread"}[c.outcome]
    if c.outcome == "above" and margin is not None:
        said = ("above by more than the margin" if c.interval.low > margin
                else "above beyond the spread, not by the margin")
    return said + exactness(c)


def ordering_verdict(c: Comparison) -> str:
    """What an adjacent pair of a claimed order says of the claim."""
    if c.interval is None:
        return f"n/a ({c.outcome})"
    return {"above": "holds beyond the spread", "below": "reversed beyond the spread",
            "within": "within the spread"}[c.outcome] + exactness(c)


def seeds_cell(c: Comparison) -> str:
    return f"{c.seeds[0]} vs {c.seeds[1]}"


def baseline_table(ranked: MetricRanking,
                   margin: float | None) -> tuple[list[str], list[list[str]]]:
    """Every other row against each baseline: the difference, its interval and the verdict."""
    unit = f" ({points(ranked.metric).strip()})" if is_percent(ranked.metric) else ""
    header = ["Run", "Baseline", "Seeds", f"Run − baseline{unit}", f"95% interval{unit}",
              "Verdict"]
    return header, [[c.first, c.second, seeds_cell(c), *interval_cells(c, ranked.metric),
                     baseline_verdict(c, margin)] for c in ranked.against_baselines]


def ordering_table(check: OrderingCheck, metric: str) -> tuple[list[str], list[list[str]]]:
    """Each adjacent pair of a claimed order: the one claimed above less the one below."""
    unit = f" ({points(metric).strip()})" if is_percent(metric) else ""
    header = ["Claimed above", "Claimed below", "Seeds", f"Above − below{unit}",
              f"95% interval{unit}", "Verdict"]
    return header, [[c.first, c.second, seeds_cell(c), *interval_cells(c, metric),
                     ordering_verdict(c)] for c in check.pairs]


def pairs_lead(ranked: MetricRanking) -> str | None:
    """The line above the list of other pairs beyond the spread (None: no pair to compare)."""
    if not ranked.pairs_compared:
        return None
    return (f"{len(ranked.pairs)} of the {ranked.pairs_compared} pairs of the other rows (a "
            "dataset's rows with two seeds or more) differ beyond the spread"
            + (":" if ranked.pairs else "."))


def pair_line(c: Comparison, metric: str, name: Callable[[str], str] = str) -> str:
    """``simclr/sum > simclr/nt_xent: +1.20 [+0.30, +2.10]``, each run's name as ``name``
    writes it (escaped for Markdown, say).

    >>> pair_line(Comparison("a", "b", (3, 3), DifferenceInterval(0.012, 0.003, 0.021, 3.9,
    ...                                                            0.95), "above"), "knn50_top1")
    'a > b: +1.20 [+0.30, +2.10]'
    """
    difference, interval = interval_cells(c, metric)
    return f"{name(c.first)} > {name(c.second)}: {difference} {interval}{exactness(c)}"


def claim(check: OrderingCheck, name: Callable[[str], str] = str) -> str:
    """A claimed order and what became of it: ``Claimed by SOURCE: a > b > c. 1 of 2 ...``."""
    return (f"Claimed by {name(check.source)}: {' > '.join(map(name, check.runs))}. "
            f"{check.summary()}.")


def ranking_heading(ranking: SuiteRanking, several: bool) -> str | None:
    """The heading of a suite's part where a board holds several suites or budgets."""
    return f"{ranking.suite}, {ranking.budget} budget" if several else None


#: ``rankings.csv``'s columns: one line per comparison, numbers in stored units.
CSV_HEADER = ["suite", "budget", "metric", "comparison", "source", "first", "second",
              "first_seeds", "second_seeds", "difference", "low", "high", "degrees_of_freedom",
              "margin", "verdict"]


def csv_rows(rankings: list[SuiteRanking]) -> list[list[Any]]:
    """Every comparison of the section (:data:`CSV_HEADER`): against a baseline, an adjacent
    pair of a claimed order, or another pair beyond the spread."""
    out = []
    for ranking in rankings:
        for ranked in ranking.metrics:
            tagged = [("baseline", "", c, baseline_verdict(c, ranking.margin))
                      for c in ranked.against_baselines]
            tagged += [("ordering", o.source, c, ordering_verdict(c))
                       for o in ranked.orderings for c in o.pairs]
            tagged += [("pair", "", c, "above beyond the spread" + exactness(c))
                       for c in ranked.pairs]
            for kind, source, c, verdict in tagged:
                i = c.interval
                numbers = (["", "", "", ""] if i is None else
                           [i.difference, i.low, i.high,
                            "" if i.exact else i.degrees_of_freedom])
                out.append([ranking.suite, ranking.budget, ranked.metric, kind, source, c.first,
                            c.second, *c.seeds, *numbers,
                            "" if ranking.margin is None or kind != "baseline"
                            else ranking.margin, verdict])
    return out
