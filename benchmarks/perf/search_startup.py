"""What a search trial costs before it trains: fresh workers against reused ones, in one run.

A search runs the same suite run many times. With a fresh worker process per trial, every trial
pays Python's imports, the datamodule's reading and checks, and its statistics; with reused
workers (``reuse_actors``) and the prepared datamodule kept in the worker
(:data:`tune.trial.PREPARED`), a worker pays them once. Both searches here train the same
trials (same seed, same sampled configurations, one trial at a time), so the difference of their
wall times, divided by the number of trials, is the start-up a reused worker saves per trial.

Usage::

    python -m benchmarks.perf.search_startup                  # smoke --fast, 6 trials each way
    python -m benchmarks.perf.search_startup --trials 3 --output results/search_startup.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path


def timed_search(suite, run, storage: Path, trials: int, reuse: bool) -> float:
    from tune.search import run_search

    start = time.perf_counter()
    run_search(suite.settings, suite.search, run, num_samples=trials, max_epochs=1,
               grace_period=1, max_concurrent=1, storage=str(storage), seed=0,
               reuse_workers=reuse)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    from benchmarks.perf.throughput import cpu_name
    from benchmarks.run.local_ray import start_local_ray, stop_local_ray
    from benchmarks.suites.config import load_suite

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="smoke", help="a suite with a search section")
    parser.add_argument("--trials", type=int, default=6, help="trials of each search")
    parser.add_argument("--output", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    suite = load_suite(args.suite, fast=True)
    run = next(r for r in suite.runs if r.search is not None or suite.search is not None)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    watchdog = start_local_ray()  # one instance for both: its start is no trial's cost
    try:
        with tempfile.TemporaryDirectory() as scratch:
            # fresh first, so that any warm file cache favours the fresh search, not ours
            fresh = timed_search(suite, run, Path(scratch) / "fresh", args.trials, False)
            reused = timed_search(suite, run, Path(scratch) / "reused", args.trials, True)
    finally:
        stop_local_ray(watchdog)
    saved = (fresh - reused) / args.trials
    import torch

    record = {"suite": f"{suite.name} --fast", "run": run.name, "trials": args.trials,
              "epochs_per_trial": 1, "fresh_workers_seconds": fresh,
              "reused_workers_seconds": reused, "saved_per_trial_seconds": saved,
              "machine": f"{cpu_name()} ({platform.machine()}, {os.cpu_count()} CPUs)",
              "torch": torch.__version__}
    print(f"{suite.name} --fast, run {run.name}: {args.trials} one-epoch trials, one at a time, "
          f"on {record['machine']}, torch {record['torch']}")
    print("| workers | search wall time (s) | per trial (s) |\n|---|---|---|")
    print(f"| a fresh one per trial | {fresh:.1f} | {fresh / args.trials:.2f} |")
    print(f"| reused, data kept | {reused:.1f} | {reused / args.trials:.2f} |")
    print(f"Start-up saved per trial: {saved:.2f} s ({fresh / reused:.2f}x faster search)")
    if args.output:
        from benchmarks.infra.atomic import write_atomic

        write_atomic(args.output, json.dumps(record, indent=2))
    return record


if __name__ == "__main__":
    main()
