"""``clusterbench compare BASELINE CURRENT``: a regression gate between two leaderboards (two
results folders, or a results folder against a committed ``leaderboard.csv``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.infra.atomic import write_atomic


def compare_main(ns: argparse.Namespace) -> int:
    """The comparison's Markdown on stdout (and in ``--out``); exit 1 on a regression."""
    from benchmarks.suites.compare import compare, markdown

    comparison = compare(Path(ns.baseline), Path(ns.current), points=ns.points,
                         sigmas=ns.sigmas, runs=ns.runs, mixed_budgets=ns.mixed_budgets)
    text = markdown(comparison)
    print(text, end="")
    if ns.out:
        write_atomic(Path(ns.out), text)
    return 1 if comparison.regressions else 0


def add_parser(sub) -> None:
    """``clusterbench compare``'s options."""
    compare = sub.add_parser(
        "compare", help="compare a suite's results with a baseline (a results folder or a "
        "leaderboard.csv); exit 1 when a metric dropped beyond its tolerance")
    compare.add_argument("baseline", help="the baseline: a results folder or a leaderboard.csv")
    compare.add_argument("current", help="the results to check: a results folder or a CSV")
    compare.add_argument("--points", type=float, default=0.0,
                         help="a drop of at most this much is no regression (percent points "
                         "for accuracies, hundredths for scores; default 0)")
    compare.add_argument("--sigmas", type=float, default=2.0,
                         help="... nor one within this many pooled standard deviations over "
                         "seeds (default 2)")
    compare.add_argument("--runs", nargs="+", metavar="RUN",
                         help="compare only these runs, those both sides have (as after a "
                         "bench --runs): a run one side lacks is named, not a regression")
    compare.add_argument("--mixed-budgets", action="store_true",
                         help="compare leaderboards of different budgets (ci against full, "
                         "say), refused otherwise")
    compare.add_argument("--out", help="also write the Markdown table to this file")
