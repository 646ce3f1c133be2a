"""``clusterbench leaderboard`` and ``report``: a suite's leaderboard files rebuilt from its
per-run results, and its results page for the docs."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.cli.console import print_leaderboard
from benchmarks.infra.errors import ConfigError


def leaderboard_main(ns: argparse.Namespace) -> int:
    """The leaderboard files of a results folder, written under its lock, then printed."""
    from benchmarks.suites.leaderboard import write_leaderboard

    folders = [Path(d) for d in ns.results_dir]
    for folder in folders:
        if not folder.is_dir():
            raise ConfigError(f"results directory {str(folder)!r} does not exist")
    if len(folders) > 1 and ns.out is None:
        raise ConfigError(f"{len(folders)} results folders side by side need --out DIR, the "
                          "folder of their one leaderboard")
    directory = Path(ns.out) if ns.out else folders[0]
    directory.mkdir(parents=True, exist_ok=True)
    from benchmarks.infra.locking import folder_lock

    with folder_lock(directory):
        if not write_leaderboard(directory, sources=folders if ns.out else None):
            raise ConfigError(f"no result.json files under {', '.join(map(str, folders))}: "
                              "run a suite first (clusterbench bench SUITE --results DIR)")
    print_leaderboard(directory, folders if ns.out else None)
    return 0


def report_main(ns: argparse.Namespace) -> int:
    """``docs/results/<suite>.md`` from a suite's results folder."""
    from benchmarks.suites.report import write_report

    if Path(ns.out).exists() and not Path(ns.out).is_dir():
        raise ConfigError(f"--out {ns.out} is a file; accepted: a folder (made when missing) "
                          "that the page is written into, e.g. docs/results")
    path = write_report(ns.results_dir, ns.out, note=ns.note)
    print(f"Wrote {path}")
    if ns.screenshot:
        from benchmarks.infra.html_page import screenshot

        shot = screenshot(Path(ns.results_dir) / "leaderboard.html", Path(ns.screenshot),
                          width=ns.width)
        print(f"Wrote {shot} (the page at {ns.width} px, in headless Chromium)")
    return 0


def add_parsers(sub) -> None:
    """``clusterbench leaderboard``'s and ``report``'s options."""
    leaderboard = sub.add_parser("leaderboard",
                                 help="rebuild the leaderboard files from per-run results")
    leaderboard.add_argument("results_dir", nargs="+",
                             help="a suite's results directory, e.g. results/smoke; several "
                             "(with --out) put their suites side by side")
    leaderboard.add_argument("--out", help="write the leaderboard files here (needed with "
                             "several folders; default: the one results directory)")
    report = sub.add_parser("report", help="write docs/results/<suite>.md (the leaderboard "
                            "tables, commit, machine, versions, seeds and budget) from a suite's "
                            "results directory")
    report.add_argument("results_dir", help="a suite's results directory, e.g. results/smoke")
    report.add_argument("--out", default="docs/results",
                        help="folder of the page (default: docs/results)")
    report.add_argument("--note", help="one line the page shows beside the facts read from the "
                        "results, e.g. that the machine was shared with other jobs")
    report.add_argument("--screenshot", metavar="PNG", help="also a screenshot of the suite's "
                        "leaderboard.html, e.g. docs/leaderboard.png (needs Chromium)")
    report.add_argument("--width", type=int, default=1400,
                        help="the screenshot's window width in px (default 1400)")
