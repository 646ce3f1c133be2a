"""The driver's work per finished (run, seed) as a suite grows: the partial leaderboard rebuilt at
most every 30 s (now) against rebuilt after every result (before), in one run.

A suite's driver records each outcome a worker sends back. Rebuilding the leaderboard reads
every result so far, so rebuilding it after each of N results costs O(N^2) in all: 200 runs x 3
seeds kept a driver 75% busy. Here N results (GENERATED records with the schema of real ones,
written once) are recorded both ways on this machine, and the driver's CPU seconds (process
time) are printed per result beside the ratio of the two. The record time is held still, as a
suite whose results arrive within 30 s would be, and both ways end with one leaderboard, as
a suite does.

Usage::

    python -m benchmarks.perf.driver_scale                       # 15, 30 and 60 results (1 min)
    python -m benchmarks.perf.driver_scale --results 30 90 --output results/driver_scale.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.perf.throughput import cpu_name
from benchmarks.suites import tally as tallies
from benchmarks.suites.leaderboard import write_leaderboard

#: Seeds per run in the generated suite.
SEEDS = 3


def generated_result(run: str, seed: int) -> dict[str, Any]:
    """GENERATED: a result record of the schema ``run_one`` writes, with made-up numbers."""
    return {
        "suite": "scale", "run": run, "method": "simclr", "dataset": "digits",
        "data_provenance": "generated", "data_source": "GENERATED for the driver benchmark",
        "backbone": "small_cnn", "seed": seed, "budget": "full", "epochs": 1, "train_steps": 1,
        "batch_size": 128, "split_sizes": {"train": 1, "val": 1, "test": 1},
        "metrics": {"linear_probe_top1": 0.5 + 0.001 * seed, "knn50_top1": 0.4},
        "notes": {}, "train_seconds": 1.0, "wall_seconds": 1.0, "device": "cpu",
        "git": {"commit": "0" * 40, "dirty": False},
        "versions": {"clusterbench": "0.1.0", "torch": "0", "lightning": "0", "python": "3"},
        "machine": {"hostname": "h", "platform": "Linux", "processor": "x86_64", "cpus": 2,
                    "gpu": None},
        "config": {"suite": "scale", "suite_file": "scale.yaml", "fast": False, "seed": seed,
                   "headline": "linear_probe_top1",
                   "run": {"name": run, "method": "simclr", "model": {}, "data": {"name": "digits"},
                           "trainer": {}}, "evaluation": {}},
    }


def write_results(folder: Path, count: int) -> list[tallies.Outcome]:
    """``count`` generated results on disk (``count / SEEDS`` runs) and their outcomes."""
    outcomes = []
    for i in range(count):
        run, seed = f"run{i // SEEDS:04d}", i % SEEDS
        result = generated_result(run, seed)
        directory = folder / "runs" / run / f"seed-{seed}"
        directory.mkdir(parents=True)
        (directory / "result.json").write_text(json.dumps(result))
        outcomes.append(tallies.Outcome(f"{run}/seed-{seed}", result=result))
    return outcomes


def driver_seconds(folder: Path, outcomes: list[tallies.Outcome], every_result: bool) -> float:
    """The process time of recording ``outcomes`` and writing the final leaderboard, with the
    partial leaderboard rebuilt after every result (``every_result``) or at most every
    ``BOARD_EVERY`` seconds of a clock held still."""
    tally = tallies.Tally(folder, total=len(outcomes))
    start = time.process_time()
    with quiet_console():
        for outcome in outcomes:
            tally.record(outcome)
            if every_result:
                write_leaderboard(folder)
        write_leaderboard(folder)
    return time.process_time() - start


class quiet_console:  # noqa: N801 - a context manager, used as one
    """The tally's console, silenced while it records thousands of lines."""

    def __enter__(self) -> None:
        self.quiet = tallies.console.quiet
        tallies.console.quiet = True

    def __exit__(self, *exc: object) -> None:
        tallies.console.quiet = self.quiet


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=int, nargs="+", default=[15, 30, 60],
                        help="the suite sizes, in results (runs x 3 seeds)")
    parser.add_argument("--output", help="also write the record as JSON here")
    args = parser.parse_args(argv)
    rows = []
    for count in args.results:
        with tempfile.TemporaryDirectory(prefix="driver-scale-") as scratch:
            outcomes = write_results(Path(scratch), count)
            now = driver_seconds(Path(scratch), outcomes, every_result=False)
            before = driver_seconds(Path(scratch), outcomes, every_result=True)
        rows.append({"results": count, "now_s": now, "before_s": before,
                     "now_ms_per_result": 1000 * now / count,
                     "before_ms_per_result": 1000 * before / count, "ratio": before / now})
    record = {"machine": cpu_name(), "data": "GENERATED result records", "seeds_per_run": SEEDS,
              "rows": rows}
    print(f"Driver CPU seconds per suite size, {cpu_name()} (generated results, "
          f"{SEEDS} seeds a run)")
    print("| results | now (s) | ms/result | rebuilt every result (s) | ms/result | ratio |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['results']} | {row['now_s']:.2f} | {row['now_ms_per_result']:.2f} | "
              f"{row['before_s']:.2f} | {row['before_ms_per_result']:.2f} | "
              f"{row['ratio']:.1f}x |")
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(record, indent=2))
    return record


if __name__ == "__main__":
    main()
