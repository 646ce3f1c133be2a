"""What a suite's (run, seed) jobs come to, said a line each and counted: a result, a reused
one, a crash, a divergence or bad input, with the time left and a partial leaderboard."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from benchmarks.infra.errors import Preempted
from benchmarks.suites.leaderboard import write_leaderboard
from benchmarks.suites.results import display_scale

console = Console(stderr=True)


@dataclass
class Outcome:
    """What became of one (run, seed) job."""

    name: str
    result: dict[str, Any] | None = None
    error: str | None = None
    bad_input: bool = False


def duration(seconds: float) -> str:
    """A time left, as a person says it.

    >>> duration(20), duration(299), duration(5400)
    ('less than a minute', '5 min', '1 h 30 min')
    """
    minutes = round(seconds / 60)
    if minutes < 1:
        return "less than a minute"
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


#: Seconds between two partial leaderboards while a suite runs (one is written at the end).
BOARD_EVERY = 30.0


@dataclass
class Tally:
    """What a suite's (run, seed) jobs have come to: those finished, failed (a crash, a
    divergence, a search that broke) and stopped on bad input (no data, a setting the data
    cannot take)."""

    suite_dir: Path
    finished: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    bad_input: list[str] = field(default_factory=list)
    board_written: float = -float("inf")  # time.monotonic() of the last partial leaderboard
    total: int = 0  # the (run, seed) jobs sent so far, whatever became of them
    seen: int = 0  # the outcomes recorded
    started: float = field(default_factory=time.monotonic)

    def progress(self) -> str:
        """``k of N`` jobs, and the time left at the pace so far (reused results included).

        >>> tally = Tally(Path("."), total=12, seen=3, started=time.monotonic() - 90)
        >>> tally.progress()
        '3 of 12, about 5 min left'
        """
        if self.seen >= self.total:
            return f"{self.seen} of {self.total}"
        left = (time.monotonic() - self.started) / max(1, self.seen) * (self.total - self.seen)
        return f"{self.seen} of {self.total}, about {duration(left)} left"

    def record(self, outcome: Any) -> None:
        """One job's outcome, said in a line and counted; a new result rebuilds the partial
        leaderboard, at most every :data:`BOARD_EVERY` seconds (rebuilding it reads every
        result: after each of thousands of jobs, the driver would do little else)."""
        result = outcome.result or {}
        self.seen += 1
        if outcome.bad_input:
            run_name = outcome.name.rsplit("/seed-", 1)[0]
            print(f"clusterbench: {run_name}: {outcome.error}", file=sys.stderr)
            self.bad_input.append(outcome.name)
            return
        if outcome.error is not None:
            console.print(outcome.error, style="red", markup=False)
            self.failed.append(outcome.name)
            return
        self.finished.append(outcome.name)
        if result.get("status") == "diverged":  # a row that says so, no numbers
            self.failed.append(outcome.name)
            console.print(f"{outcome.name}: {result['error']}" + (
                " (already done, same configuration; --rerun trains it again)"
                if result.get("reused") else ""), style="red", markup=False)
        else:
            shown = ", ".join(f"{k} {display_scale(k) * v:.2f}"
                              for k, v in result["metrics"].items())
            how = (f"{result['same_as']}'s: the same settings, not trained again"
                   if result.get("same_as") else "already done, same configuration"
                   if result.get("reused") else f"{result['wall_seconds']:.1f} s" + (
                       f", resumed at epoch {result['resumed_from_epoch']}"
                       if result.get("resumed_from_epoch") is not None else ""))
            console.print(f"{outcome.name}: {shown} ({how}; {self.progress()})",
                          soft_wrap=True)  # one line, however wide the terminal
        if not result.get("reused") and time.monotonic() - self.board_written >= BOARD_EVERY:
            write_leaderboard(self.suite_dir)
            self.board_written = time.monotonic()

    def interrupted(self, err: KeyboardInterrupt, total: int) -> KeyboardInterrupt:
        """A stop's one line (Ctrl-C, or a stop signal's :class:`Preempted`, whose signal it
        keeps): what finished, where it is, and that the same command goes on."""
        said = ((f"{err}; " if str(err) else "")
                + f"{len(self.finished)} of {total} (run, seed) jobs are finished"
                + (f" ({', '.join(self.finished)})" if self.finished else "")
                + f", their results in {self.suite_dir}/runs. The same command continues: "
                "finished runs are skipped, unfinished ones resume from their last checkpoint")
        if isinstance(err, Preempted):
            return Preempted(said, signum=err.signum)
        return KeyboardInterrupt(said)
