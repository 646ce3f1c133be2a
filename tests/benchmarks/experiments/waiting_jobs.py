"""An experiment whose jobs run in the kit's worker processes and wait (for a file, at most
``wait_s`` seconds) before they return: a suite to stop while its workers run. Registered and run
through ``clusterbench bench`` in a process of its own by ``python waiting_jobs.py ARGS``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from benchmarks.experiments.kit import run_jobs
from benchmarks.suites.experiment import ExperimentOutput


def waiting_job(seed: int, folder: str, wait_s: float) -> int:
    """Says it started (``started-<seed>`` in ``folder``), waits for ``folder/go`` or
    ``wait_s`` seconds, returns a number of the seed."""
    Path(folder, f"started-{seed}").touch()
    deadline = time.monotonic() + wait_s
    while not Path(folder, "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return seed * 10


def run(seeds: list[int], folder: str, wait_s: float, workers: int) -> ExperimentOutput:
    done = run_jobs({seed: (waiting_job, (seed, folder, wait_s)) for seed in seeds}, workers, 1)
    return ExperimentOutput(tables={"Jobs": [{"seed": s, "value": done[s]} for s in seeds]})


def suite_file(path: Path, folder: Path, wait_s: float = 120, workers: int = 2) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({
        "name": "waiting_jobs", "kind": "experiment", "experiment": "waiting_jobs",
        "description": "jobs that wait", "seeds": [0, 1],
        "settings": {"folder": str(folder), "wait_s": wait_s, "workers": workers},
        "fast": {"seeds": [0]}}))
    return path


def registered() -> None:
    from benchmarks.experiments import EXPERIMENTS

    EXPERIMENTS["waiting_jobs"] = run


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))  # the workers import this module by name
    import waiting_jobs  # noqa: E402  (as the workers will, not as __main__)

    waiting_jobs.registered()
    from benchmarks.cli import main

    sys.exit(main(sys.argv[1:]))
