"""A suite placed on a Ray cluster: every (run, seed) a Ray task, a kill of the driver in the
middle, and a second ``bench`` that finishes it without retraining what finished, ending with
the leaderboard an uninterrupted run gives. The cluster is a Ray head started here, on the
loopback, and stopped here."""

from __future__ import annotations

import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from benchmarks.cli import main

GOOD_RUNS = [
    {"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}},
    {"name": "simclr/sum", "method": "simclr", "model": {"backbone_width": 4, "loss": "sum"}},
    {"name": "supcon", "method": "supcon", "model": {"backbone_width": 4}},
    {"name": "pixels", "method": "pixels"},
]
#: Fails when its training starts (digits have no superclasses): the others must go on.
BROKEN_RUN = {"name": "broken", "method": "transfusion", "model": {"hierarchical": True}}
SUITE = {
    "name": "placed", "seeds": [0, 1],
    "data": {"name": "digits", "batch_size": 32, "limit_per_class": 10},
    "trainer": {"max_epochs": 2, "accelerator": "cpu", "log_every_n_steps": 1},
    "evaluation": {"linear_probe": {"epochs": 1, "lr": 0.3,
                                    "batch_size": 64, "weight_decay": 1.0e-6},
                   "knn": {"k": [5], "temperature": None}},
    "runs": [*GOOD_RUNS, BROKEN_RUN],
}
JOBS = len(GOOD_RUNS) * len(SUITE["seeds"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: Ray's `ray start` turns token authentication on (2.59 and later): every driver says so. Ray
#: reads the mode once per process, so the drivers here are processes of their own.
CLUSTER_ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "disabled",
               "RAY_AUTH_MODE": "token"}


def bench_on(address: str, suite: Path, results: Path, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.cli", "bench", str(suite), "--address", address,
         "--results", str(results)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=CLUSTER_ENV, **popen)


@pytest.fixture(scope="module")
def ray_head():
    """``ray start --head`` on 127.0.0.1 with 2 CPUs, in its own process group, which is what
    the fixture stops at the end (no other Ray on the machine is touched)."""
    port = free_port()
    temp = tempfile.mkdtemp(prefix="cbray", dir="/tmp")  # Ray's socket paths must stay short
    env = CLUSTER_ENV
    ray = str(Path(sys.executable).parent / "ray")
    head = subprocess.Popen(
        [ray, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
         "--num-cpus", "2", "--num-gpus", "0", "--include-dashboard", "false",
         "--temp-dir", temp, "--block"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while subprocess.run([ray, "status", "--address", address], capture_output=True,
                             env=env).returncode != 0:
            assert head.poll() is None and time.monotonic() < deadline, "Ray head did not start"
            time.sleep(1)
        yield address
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def metric_columns(board: Path) -> list[dict[str, str]]:
    """The leaderboard's rows without timings, machines or commits."""
    rows = list(csv.DictReader(board.open()))
    keep = [c for c in rows[0] if c.endswith(("_mean", "_std")) and "seconds" not in c]
    return [{"run": r["run"], "seeds": r["seeds"], **{c: r[c] for c in keep}} for r in rows]


@pytest.mark.slow
def test_a_suite_on_a_ray_cluster_killed_midway_finishes_without_retraining(tmp_path,
                                                                             ray_head):
    suite = tmp_path / "placed.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    # uninterrupted, for reference; the broken run fails alone, listed, exit 1
    reference = tmp_path / "reference"
    _, err = (driver := bench_on(ray_head, suite, reference)).communicate(timeout=600)
    assert driver.returncode == 1, err[-3000:]
    assert "2 run(s) failed: broken/seed-0, broken/seed-1" in err
    assert len(list((reference / "placed/runs").rglob("result.json"))) == JOBS

    results = tmp_path / "results"
    driver = bench_on(ray_head, suite, results)
    deadline = time.monotonic() + 300
    # two jobs came back, and the driver wrote the partial leaderboard they make
    while (len(list(results.rglob("result.json"))) < 2
           or not (results / "placed/leaderboard.md").is_file()):
        assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()
        time.sleep(0.05)
    driver.send_signal(signal.SIGKILL)
    driver.communicate(timeout=60)
    finished = {p: p.stat().st_mtime_ns for p in results.rglob("result.json")}
    assert 2 <= len(finished) < JOBS, "the kill came too late to test anything"

    _, err = (driver := bench_on(ray_head, suite, results)).communicate(timeout=600)
    assert driver.returncode == 1, err[-3000:]
    assert "already done, same configuration" in err
    assert {p: p.stat().st_mtime_ns for p in finished} == finished  # not retrained
    assert len(list((results / "placed/runs").rglob("result.json"))) == JOBS
    assert (metric_columns(results / "placed/leaderboard.csv")
            == metric_columns(reference / "placed/leaderboard.csv"))


@pytest.mark.slow
def test_parallel_runs_jobs_on_a_local_ray_instance_with_the_in_process_numbers(tmp_path,
                                                                                local_ray):
    suite = tmp_path / "placed.yaml"
    suite.write_text(yaml.safe_dump({**SUITE, "runs": GOOD_RUNS[:1]}))
    here, there = tmp_path / "here", tmp_path / "there"
    assert main(["bench", str(suite), "--results", str(here), "--no-progress"]) == 0
    assert main(["bench", str(suite), "--results", str(there), "--parallel", "2"]) == 0
    assert (metric_columns(here / "placed/leaderboard.csv")
            == metric_columns(there / "placed/leaderboard.csv"))
