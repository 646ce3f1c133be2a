"""``clusterbench leaderboard`` and ``report``: a suite's leaderboard files rebuilt from its
per-run results, and its results page for the docs."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.cli.console import print_leaderboard
from benchmarks.infra.errors import ConfigError


def leaderboard_main(ns: argparse.Namespace) -> int:
    """The leaderboard files of a results folder, written under its lock, then printed."""
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
    from benchmarks.suites.leaderboard import write_leaderboard

    with folder_lock(directory):
        if not write_leaderboard(directory, sources=folders if ns.out else None):
            raise ConfigError(f"no result.json files under {', '.join(map(str, folders))}: "
                              "run a suite first (clusterbench bench SUITE --results DIR)")
    print_leaderboard(directory, folders if ns.out else None)
    return 0


def report_main(ns: argparse.Namespace) -> int:
    """``docs/results/<suite>.md`` from a suite's results folder; with ``--check``, whether the
    pages still match their suite files and commits."""
    if ns.check is not None:
        return check_pages(ns)
    if ns.results_dir is None:
        raise ConfigError("report needs a suite's results directory, e.g. results/smoke (or "
                          "--check, which checks the pages already written)")
    if Path(ns.out).exists() and not Path(ns.out).is_dir():
        raise ConfigError(f"--out {ns.out} is a file; accepted: a folder (made when missing) "
                          "that the page is written into, e.g. docs/results")
    from benchmarks.suites.report import write_report

    path = write_report(ns.results_dir, ns.out, note=ns.note)
    print(f"Wrote {path}")
    if ns.screenshot:
        from benchmarks.infra.html_page import screenshot

        shot = screenshot(Path(ns.results_dir) / "leaderboard.html", Path(ns.screenshot),
                          width=ns.width)
        print(f"Wrote {shot} (the page at {ns.width} px, in headless Chromium)")
    return 0


def check_pages(ns: argparse.Namespace) -> int:
    """``report --check [PAGE ...]``: a line per page, current or stale and why; exit 1 when one
    is stale. Without pages, every page ``report`` wrote in ``--out``."""
    from benchmarks.suites.page_check import check_page, report_pages
    from benchmarks.suites.report import GENERATED

    pages = [Path(p) for p in ns.check] or report_pages(Path(ns.out))
    for page in pages:
        if not page.is_file() or not page.read_text(encoding="utf-8", errors="replace"
                                                     ).startswith(GENERATED):
            raise ConfigError(f"--check {page}: not a page clusterbench report wrote (its first "
                              f"line would be {GENERATED!r})")
    if not pages:
        raise ConfigError(f"--check: no page clusterbench report wrote in {ns.out}")
    from benchmarks.experiments import EXPERIMENTS  # the suites' checks import torch: pages first

    stale = 0
    for page in pages:
        problems, notes = check_page(page, EXPERIMENTS)
        stale += bool(problems)
        print(f"{page}: " + (f"stale: {'; '.join(problems)}" if problems else "current")
              + "".join(f" ({note})" for note in notes))
    if stale:
        print(f"{stale} of {len(pages)} page(s) stale: bench each one's suite at its commit's "
              "code and run clusterbench report again")
    return 1 if stale else 0


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
    report.add_argument("results_dir", nargs="?",
                        help="a suite's results directory, e.g. results/smoke")
    report.add_argument("--check", nargs="*", metavar="PAGE", help="write nothing: say whether "
                        "each page (default: every page report wrote in --out) still matches its "
                        "suite file and names a commit of this checkout's history; exit 1 when "
                        "one does not")
    report.add_argument("--out", default="docs/results",
                        help="folder of the page (default: docs/results)")
    report.add_argument("--note", help="one line the page shows beside the facts read from the "
                        "results, e.g. that the machine was shared with other jobs")
    report.add_argument("--screenshot", metavar="PNG", help="also a screenshot of the suite's "
                        "leaderboard.html, e.g. docs/leaderboard.png (needs Chromium)")
    report.add_argument("--width", type=int, default=1400,
                        help="the screenshot's window width in px (default 1400)")
