"""The paper-budget runner stopped by a signal while its ``bench`` child runs (a child of its own
session, which a signal to the runner's group does not reach): the child gets the stop forwarded
and ends with it, one line says so, and the exit status is 128 + the signal's number."""

from __future__ import annotations

import signal

from stopped_commands import Followed, last_line, start


def test_the_paper_budget_runner_stopped_ends_its_bench_child(tmp_path):
    followed = Followed(start(["-m", "benchmarks.paper_budget", "--cpu", "--out",
                               str(tmp_path / "out"), "--steps", "transfusion", "--budget",
                               "600"]))
    followed.signal_when(lambda: followed.runs_one_with("--bench-child"), "the bench child",
                         signal.SIGTERM, group=False)
    code, _, err = followed.finish()
    assert code == 128 + signal.SIGTERM, err[-3000:]
    assert last_line(err) == ("paper_budget: stopped by SIGTERM; the same command with "
                              "--resume-from its --out goes on")
