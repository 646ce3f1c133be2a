"""An experiment suite stopped while the kit's worker processes run its jobs: the command ends
at once with exit status 128 + the signal's number and one line, its workers and their
multiprocessing resource tracker with it (they used to run on as orphans, ignoring SIGTERM),
nothing half-written; the same command then writes the report an uninterrupted run writes."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from stopped_commands import Followed, last_line, start

from benchmarks.cli import main

HERE = Path(__file__).parent


def stop_while_workers_run(tmp_path: Path, signum: int, group: bool) -> tuple[Path, Path]:
    import waiting_jobs

    folder = tmp_path / "jobs"
    folder.mkdir(exist_ok=True)
    for started in folder.glob("started-*"):
        started.unlink()
    suite = waiting_jobs.suite_file(tmp_path / "waiting_jobs.yaml", folder)
    results = tmp_path / "results"
    followed = Followed(start([str(HERE / "waiting_jobs.py"), "bench", str(suite), "--results",
                               str(results)]))
    followed.signal_when(lambda: len(list(folder.glob("started-*"))) == 2, "both jobs started",
                         signum, group=group, timeout=300)
    assert len(followed.seen) >= 4  # the command, two workers, their resource tracker
    code, _, err = followed.finish(timeout=60)
    assert code == 128 + signum, err[-3000:]
    assert last_line(err) == (f"clusterbench: stopped by {signal.Signals(signum).name}; the "
                              "same command continues")
    assert "Traceback" not in err, err[-3000:]
    assert not (results / "waiting_jobs").exists() or not any(
        (results / "waiting_jobs").glob("*.csv")), "nothing of a stopped experiment is written"
    return suite, results


@pytest.mark.slow
def test_an_experiment_suite_stopped_while_its_workers_run_leaves_no_process_and_then_finishes(
        tmp_path, monkeypatch):
    """SIGTERM to the command alone (a scheduler), then Ctrl-C to its whole group (a terminal,
    which reaches the workers too); the same command then writes the uninterrupted report."""
    import waiting_jobs

    monkeypatch.syspath_prepend(str(HERE))
    stop_while_workers_run(tmp_path, signal.SIGTERM, group=False)
    suite, results = stop_while_workers_run(tmp_path, signal.SIGINT, group=True)
    monkeypatch.setitem(sys.modules, "waiting_jobs", waiting_jobs)
    from benchmarks.experiments import EXPERIMENTS

    monkeypatch.setitem(EXPERIMENTS, "waiting_jobs", waiting_jobs.run)
    (tmp_path / "jobs" / "go").touch()
    assert main(["bench", str(suite), "--results", str(results)]) == 0
    rows = (results / "waiting_jobs" / "jobs.csv").read_text().splitlines()
    assert rows[1:] == ["0,0", "1,10"]
