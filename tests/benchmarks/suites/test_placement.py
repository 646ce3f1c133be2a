"""A suite placed on a Ray cluster: every (run, seed) a Ray task, a kill of the driver in the
middle, and a second ``bench`` that finishes it without retraining what finished, ending with
the leaderboard an uninterrupted run gives. The cluster is a Ray head started here, on the
loopback, and stopped here."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
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
from benchmarks.suites.results import result_files

GOOD_RUNS = [
    {"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}},
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


def bench_on(address: str, suite: Path, results: Path, *flags: str, **popen) -> subprocess.Popen:
    """``bench`` on the cluster, each run training on the CPU, as ``--accelerator cpu`` keeps it
    (by default holding one of the GPUs the nodes declare, which they do not have)."""
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.cli", "bench", str(suite), "--address", address,
         "--results", str(results), "--accelerator", "cpu", *flags], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=CLUSTER_ENV, **popen)


def ray_node(ray: str, *args: str) -> subprocess.Popen:
    """``ray start ... --block`` on 127.0.0.1, in a process group of its own (what is stopped).
    No log monitor: the commands join with ``log_to_driver=False`` and relay what their tasks
    say through files (:mod:`benchmarks.infra.said`), so it would poll the logs for nothing."""
    return subprocess.Popen([ray, "start", "--node-ip-address", "127.0.0.1", *args,
                             "--include-log-monitor", "false", "--block"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=CLUSTER_ENV,
                            start_new_session=True)


def nodes_up(ray: str, address: str, nodes: int) -> bool:
    status = subprocess.run([ray, "status", "--address", address], capture_output=True,
                            text=True, env=CLUSTER_ENV)
    return status.returncode == 0 and status.stdout.count(" node_") >= nodes


def await_nodes(ray: str, address: str, nodes: int, starting: subprocess.Popen,
                deadline: float, what: str) -> None:
    """Until the cluster has ``nodes`` nodes; fails naming ``what`` if the node ``starting``
    ended or ``deadline`` passed. Polled every 2 s: each ``ray status`` costs about 1.5 s of
    CPU."""
    while not nodes_up(ray, address, nodes):
        assert starting.poll() is None and time.monotonic() < deadline, what
        time.sleep(2)


@pytest.fixture(scope="module")
def ray_head():
    """A cluster of two nodes on 127.0.0.1 that declare GPUs they do not have, as a GPU cluster
    is laid out: a head (2 CPUs, 2 GPUs) and a worker (1 CPU, 2 GPUs). Each node is a process
    group of its own, which is what the fixture stops (no other Ray on the machine is touched)."""
    port = free_port()
    temp = tempfile.mkdtemp(prefix="cbray", dir="/tmp")  # Ray's socket paths must stay short
    ray = str(Path(sys.executable).parent / "ray")
    address = f"127.0.0.1:{port}"
    nodes = [ray_node(ray, "--head", "--port", str(port), "--num-cpus", "2", "--num-gpus", "2",
                      "--include-dashboard", "false", "--temp-dir", temp)]
    try:
        deadline = time.monotonic() + 120
        await_nodes(ray, address, 1, nodes[0], deadline, "no Ray head")
        nodes.append(ray_node(ray, "--address", address, "--num-cpus", "1", "--num-gpus", "2"))
        await_nodes(ray, address, 2, nodes[1], deadline, "no Ray worker")
        yield address
    finally:
        for node in nodes:  # all at once: each takes seconds to stop
            os.killpg(node.pid, signal.SIGTERM)
        for node in nodes:  # a node's processes left after a few seconds are killed
            try:
                node.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)
            node.wait()
        shutil.rmtree(temp, ignore_errors=True)


def metric_columns(board: Path) -> list[dict[str, str]]:
    """The leaderboard's rows without timings, machines or commits, by run (runs whose
    headline ties, at chance on these tiny runs, may come in either order)."""
    rows = list(csv.DictReader(board.open()))
    keep = [c for c in rows[0] if c.endswith(("_mean", "_std")) and "seconds" not in c]
    return sorted(({"run": r["run"], "seeds": r["seeds"], **{c: r[c] for c in keep}}
                   for r in rows), key=lambda row: row["run"])


@pytest.mark.slow
def test_a_suite_on_a_ray_cluster_killed_midway_finishes_without_retraining(tmp_path,
                                                                             ray_head):
    suite = tmp_path / "placed.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    # uninterrupted, for reference, in this process (the Ray tasks' numbers are the same:
    # test_parallel_runs_jobs_on_a_local_ray_instance_with_the_in_process_numbers)
    reference = tmp_path / "reference"
    assert main(["bench", str(suite), "--results", str(reference), "--no-progress"]) == 1
    assert len(list((reference / "placed/runs").rglob("result.json"))) == JOBS

    results = tmp_path / "results"
    # no GPU held: Ray runs a GPU task in a fresh worker (its imports each time), a CPU task in
    # a worker of the command's that is free; two CPUs a run fit only the head, one run at a
    # time, so each command imports torch in one worker, not three
    one_worker = ("--gpus-per-run", "0", "--cpus-per-run", "2")
    driver = bench_on(ray_head, suite, results, *one_worker)
    deadline = time.monotonic() + 300
    # two jobs came back, and the driver wrote the partial leaderboard they make; read with the
    # suite's own walk, which skips the folders the runs rename into place meanwhile
    while (len(result_files(results)) < 2
           or not (results / "placed/leaderboard.md").is_file()):
        assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()
        time.sleep(0.05)
    driver.send_signal(signal.SIGKILL)
    driver.communicate(timeout=60)
    finished = {p: p.stat().st_mtime_ns for p in result_files(results)}  # tasks may still end
    assert 2 <= len(finished) < JOBS, "the kill came too late to test anything"

    _, err = (driver := bench_on(ray_head, suite, results, *one_worker)).communicate(timeout=600)
    assert driver.returncode == 1, err[-3000:]  # the broken run fails alone, listed
    port = ray_head.rpartition(":")[2]  # the host is the one the head's GCS names itself by
    assert re.search(rf"^--address {ray_head}: joined the Ray cluster at "
                     rf"\S+:{port} \(2 node\(s\), 3 CPU, 4 GPU\)$", err, re.MULTILINE), err
    assert "2 run(s) failed: broken/seed-0, broken/seed-1" in err
    assert "already done, same configuration" in err
    assert {p: p.stat().st_mtime_ns for p in finished} == finished  # not retrained
    assert len(list((results / "placed/runs").rglob("result.json"))) == JOBS
    assert (metric_columns(results / "placed/leaderboard.csv")
            == metric_columns(reference / "placed/leaderboard.csv"))


@pytest.mark.slow
def test_parallel_runs_jobs_on_a_local_ray_instance_with_the_in_process_numbers(tmp_path,
                                                                                local_ray):
    suite = tmp_path / "placed.yaml"
    suite.write_text(yaml.safe_dump({**SUITE, "seeds": [0], "runs": GOOD_RUNS[:1]}))
    here, there = tmp_path / "here", tmp_path / "there"
    assert main(["bench", str(suite), "--results", str(here), "--no-progress"]) == 0
    assert main(["bench", str(suite), "--results", str(there), "--parallel", "2"]) == 0
    assert (metric_columns(here / "placed/leaderboard.csv")
            == metric_columns(there / "placed/leaderboard.csv"))


@pytest.mark.slow
def test_runs_waiting_on_resources_give_up_after_the_budget_naming_them(tmp_path, local_ray,
                                                                       capsys):
    """Every CPU of the Ray instance held by another driver's placement group: no run can
    start, and bench fails after --resource-wait seconds, exit 2, in one line naming what each
    run waited for; nothing was written in the results."""
    from busy_ray import every_cpu_held

    suite = tmp_path / "placed.yaml"
    suite.write_text(yaml.safe_dump({**SUITE, "runs": GOOD_RUNS[:1]}))
    with every_cpu_held():
        assert main(["bench", str(suite), "--parallel", "2", "--resource-wait", "3",
                     "--results", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("clusterbench: error: no run could start for 3 s: each needs 0 GPU "
                              "and 1 CPU on one node, and the cluster has {")
    assert "the same command continues (raise --resource-wait to wait longer)" in err[-1]
    assert not list(tmp_path.rglob("result.json"))


#: Each refusal's command line, all run by one driver process (:func:`refusals`).
REFUSED = {
    # four GPUs a run on two nodes of two GPUs each
    "bench": ["bench", "--gpus-per-run", "4", "--accelerator", "cpu", "--results"],
    # three CPUs a trial on nodes of two and one
    "tune": ["tune", "--cpus-per-trial", "3", "--storage"],
    # the suite pins the CPU; GPUs given, no --accelerator
    "pinned": ["bench", "--gpus-per-run", "1", "--results"],
}


@pytest.fixture(scope="module")
def refusals(ray_head, tmp_path_factory) -> dict[str, tuple[int, list[str], float, Path]]:
    """Each of :data:`REFUSED` on the cluster, as ``main`` calls in one driver process (Ray
    reads its auth mode once per process, and one process imports torch once for the three):
    its exit status, its ``clusterbench:`` lines, its seconds and its folder."""
    tmp = tmp_path_factory.mktemp("refused")
    suite = tmp / "placed.yaml"
    search = {"space": {"model.lr": {"loguniform": [1.0e-4, 1.0e-2]}}, "num_samples": 1,
              "max_epochs": 1}
    suite.write_text(yaml.safe_dump({**SUITE, "runs": GOOD_RUNS[:1], "search": search}))
    calls = {name: [flags[0], str(suite), *flags[1:], str(tmp / name / "out"), "--address",
                    ray_head] for name, flags in REFUSED.items()}
    code = ("import contextlib, io, json, sys, time\n"
            "from benchmarks.cli import main\n"
            "for name, argv in json.loads(sys.argv[1]).items():\n"
            "    err, started = io.StringIO(), time.monotonic()\n"
            "    with contextlib.redirect_stderr(err):\n"
            "        status = main(argv)\n"
            "    print('refused', json.dumps([name, status, err.getvalue(),\n"
            "                                 time.monotonic() - started]), flush=True)\n")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(calls)], capture_output=True,
                          text=True, env=CLUSTER_ENV, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    said = [json.loads(line.partition(" ")[2]) for line in done.stdout.splitlines()
            if line.startswith("refused ")]
    return {name: (status, [line for line in err.splitlines()
                            if line.startswith("clusterbench:")], seconds, tmp / name)
            for name, status, err, seconds in said}


@pytest.mark.slow
@pytest.mark.parametrize("command", ["bench", "tune"])
def test_resources_no_one_node_has_are_refused_at_once(command, refusals):
    """Four GPUs a run on two nodes of two GPUs each (or three CPUs a trial on nodes of two and
    one): the cluster has them, but no task can take them on one node, so it would wait
    forever. One line, exit 2, nothing run."""
    status, errors, seconds, folder = refusals[command]
    assert status == 2 and len(errors) == 1, errors
    asked, most = ("--gpus-per-run 4", "has 2 GPU; 4 in all") if command == "bench" else (
        "--cpus-per-trial 3", "has 2 CPU; 3 in all")
    assert f"{asked} is more than any one node of the Ray cluster has" in errors[0]
    assert most in errors[0]
    assert seconds < 120 and not list(folder.rglob("result.json"))


@pytest.mark.slow
def test_a_suite_pinned_to_the_cpu_given_gpus_without_an_accelerator_is_refused_at_once(
        refusals):
    """The suite's own accelerator: cpu on a cluster that declares GPUs, with --gpus-per-run and
    no --accelerator: which one wins is the user's to say; one line, exit 2, nothing run (the
    suite's runs failed one by one with a 45-line traceback)."""
    status, errors, _, folder = refusals["pinned"]
    assert status == 2 and len(errors) == 1, errors
    assert ("--gpus-per-run 1 gives each run GPUs, but the suite pins trainer.accelerator: cpu "
            "for simclr") in errors[0]
    assert not list(folder.rglob("result.json"))


@pytest.mark.slow
def test_two_ddp_trials_on_a_cluster_that_fits_one_at_a_time_both_finish(tmp_path, ray_head):
    """The multi-worker search stall, reproduced: two trials of two DDP processes and two GPUs
    each, on a cluster where only the head has the CPUs a trial asks for, so they run one after
    the other. With Ray Train nested in each trial the second waited forever; each trial is now
    one Tune trial running Lightning DDP itself (CPU processes here, gloo)."""
    suite = tmp_path / "placed.yaml"
    search = {"space": {"model.lr": {"loguniform": [1.0e-4, 1.0e-2]}}, "num_samples": 2,
              "max_epochs": 1, "grace_period": 1}
    suite.write_text(yaml.safe_dump({**SUITE, "runs": GOOD_RUNS[:1], "search": search}))
    storage = tmp_path / "search"
    done = subprocess.run([sys.executable, "-m", "benchmarks.cli", "tune", str(suite),
                           "--gpus-per-trial", "2", "--cpus-per-trial", "2", "--address",
                           ray_head, "--storage", str(storage)], capture_output=True, text=True,
                          env=CLUSTER_ENV, timeout=400)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert re.search(rf"--address {ray_head}: joined the Ray cluster at \S+:"
                     rf"{ray_head.rpartition(':')[2]} \(2 node", done.stderr), done.stderr[-2000:]
    trials = list(csv.DictReader((storage / "trials.csv").open()))
    assert [(t["devices"], t["status"], t["epochs"]) for t in trials] == [
        ("2", "completed", "1")] * 2


@pytest.mark.slow
def test_a_run_whose_only_fitting_node_is_lost_ends_the_wait_in_one_line(tmp_path, ray_head):
    """A third node, the only one with the 3 CPUs a run takes, is killed while the run trains on
    it: Ray's retry of the run fits no node left, and bench, which waited in silence until
    killed, ends after --resource-wait in one line naming the run whose node was lost (exit 2).
    A marker standing still for 8 s counts as lost here (CLUSTERBENCH_LOST_AFTER_S; 30 s by
    default); the task's start, its imports included, does not count as waiting."""
    ray = str(Path(sys.executable).parent / "ray")
    node = ray_node(ray, "--address", ray_head, "--num-cpus", "3", "--num-gpus", "0")
    try:
        deadline = time.monotonic() + 120
        await_nodes(ray, ray_head, 3, node, deadline, "no third node")
        suite = tmp_path / "placed.yaml"
        suite.write_text(yaml.safe_dump({**SUITE, "seeds": [0], "runs": GOOD_RUNS[:1],
                                         "trainer": {**SUITE["trainer"], "max_epochs": 500}}))
        results = tmp_path / "results"
        driver = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.cli", "bench", str(suite), "--address", ray_head,
             "--results", str(results), "--cpus-per-run", "3", "--gpus-per-run", "0",
             "--resource-wait", "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**CLUSTER_ENV, "CLUSTERBENCH_LOST_AFTER_S": "8"})
        marker = results / "placed" / ".started" / "simclr%seed-0"
        while not marker.exists():  # the run trains on the third node
            assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()
            time.sleep(0.2)
    finally:
        os.killpg(node.pid, signal.SIGKILL)
        node.wait()
    _, err = driver.communicate(timeout=240)
    errors = [line for line in err.splitlines() if line.startswith("clusterbench: error:")]
    assert driver.returncode == 2 and len(errors) == 1, err[-3000:]
    assert "no run (simclr/seed-0: its node was lost, it waits to be placed again)" in errors[0]
    assert "each needs 0 GPU and 3 CPU on one node" in errors[0]
    assert not list(results.rglob("result.json"))


@pytest.mark.slow
def test_a_seed_lock_held_elsewhere_is_said_on_the_driver_then_the_run_finishes(tmp_path,
                                                                              ray_head):
    """The lock of the job's seed folder held by another process (as a task of a killed command
    holds it): the job's Ray task waits and says so on its node, the driver prints that line
    while the task waits, and the run finishes once the lock is free."""
    import fcntl
    import threading

    suite = tmp_path / "placed.yaml"
    suite.write_text(yaml.safe_dump({**SUITE, "seeds": [0], "runs": [GOOD_RUNS[-1]]}))
    results = tmp_path / "results"
    (results / "placed" / "runs" / "pixels").mkdir(parents=True)
    held = (results / "placed" / "runs" / "pixels" / "seed-0.lock").open("a")  # as a process
    fcntl.flock(held, fcntl.LOCK_EX)  # of a killed command still holds it
    driver = bench_on(ray_head, suite, results)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(driver.stderr.readline, "")))
    reader.start()
    waiting = ("clusterbench: pixels seed 0: waiting for the process that still holds "
               "seed-0.lock (at most 300 s)\n")
    try:
        deadline = time.monotonic() + 180
        while waiting not in lines:
            assert driver.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.2)
        assert not list(results.rglob("result.json"))  # it waits for the lock
    finally:
        held.close()  # releases the lock
    driver.wait(timeout=300)
    reader.join()
    assert driver.returncode == 0, "".join(lines)[-3000:]
    assert lines.count(waiting) == 1
    assert (results / "placed" / "runs" / "pixels" / "seed-0" / "result.json").is_file()


def rows_by_trial(state: Path) -> dict[str, int]:
    """How many epochs each trial's record holds (:mod:`tune.records`)."""
    return {path.parent.name: len(json.loads(path.read_text())["rows"])
            for path in state.glob("trials/*/record.json")}


def sessions(state: Path) -> set[str]:
    """The starts of the search that have begun training some trial."""
    return {attempt["session"] for path in state.glob("trials/*/record.json")
            for attempt in json.loads(path.read_text())["attempts"]}


@pytest.mark.slow
def test_a_search_stopped_by_ctrl_c_then_killed_at_a_random_moment_resumes_to_the_end(tmp_path,
                                                                                     ray_head):
    """On the cluster, Ctrl-C: exit 130, no best configuration, trials.csv says what was cut
    off. Then the resume is killed with SIGKILL at a moment drawn at random (from its start:
    connecting, a trial's epoch, a checkpoint being written), a pickle is planted where Ray
    keeps its state, and the next resume finishes: each stop lost at most one epoch per running
    trial, and nothing planted was loaded. No start counts its trials' start-up (fresh
    processes importing torch) as waiting for resources (--resource-wait 3)."""
    import random

    from bench_cli import foreground_signals
    from planted import planted_pickle

    storage, marker = tmp_path / "search", tmp_path / "marker"
    state = storage / "simclr"
    # one trial: a trial's start costs a process importing torch, and each stop and resume
    # below starts it again
    command = [sys.executable, "-m", "benchmarks.cli", "tune", "smoke", "--fast",
               "--num-samples", "1", "--seed", "7", "--max-epochs", "24", "--grace-period",
               "24", "--address", ray_head, "--storage", str(storage), "--resource-wait", "3"]

    def start(*extra: str) -> subprocess.Popen:
        return subprocess.Popen([*command, *extra], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=CLUSTER_ENV,
                                preexec_fn=foreground_signals)

    proc, deadline = start(), time.monotonic() + 240
    while not any(rows_by_trial(state).values()):  # a trial reported an epoch
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-3000:] + err[-3000:]
    assert "--resume" in err and "unfinished" in err
    assert not (storage / "best_config.yaml").exists()  # nothing looks finished
    cut = [t for t in csv.DictReader((storage / "trials.csv").open())
           if t["status"] == "unfinished (interrupted)" and 1 <= int(t["epochs"]) < 24]
    assert cut  # a trial stopped between two of its epochs
    held, seen = [rows_by_trial(state)], [sessions(state)]

    moment = random.Random().uniform(0, 12)  # seconds after the resume starts
    proc = start("--resume")
    time.sleep(moment)
    proc.kill()
    proc.communicate(timeout=60)
    held.append(rows_by_trial(state))
    seen.append(sessions(state))
    payload = planted_pickle(marker)
    (state / "ray").mkdir(exist_ok=True)
    (state / "ray" / "tuner.pkl").write_bytes(payload)
    (state / "tuner.pkl").write_bytes(payload)

    proc = start("--resume")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"killed {moment:.1f} s in: " + out[-2000:] + err[-2000:]
    assert not marker.exists()
    if max(held[1].values(), default=0) >= 2:  # a trial's checkpoint held an epoch: it said so
        assert re.search(r"^clusterbench: trial 0000 resumes from its checkpoint at epoch "
                         r"\d+ of 24$", err, re.MULTILINE), err[-2000:]
    trials = list(csv.DictReader((storage / "trials.csv").open()))
    assert [(t["status"], t["epochs"]) for t in trials] == [("completed", "24")]
    for path in state.glob("trials/*/record.json"):
        record = json.loads(path.read_text())
        assert [r["epoch"] for r in record["rows"]] == list(range(1, 25))
        # each later start of this trial began at most one epoch before what its record held
        # when the search stopped last (the row written, its checkpoint cut off by the stop)
        for attempt in record["attempts"]:
            if attempt["session"] in seen[0]:
                continue  # the first start
            before = held[0] if attempt["session"] in seen[1] else held[1]
            assert attempt["from_epoch"] >= before.get(path.parent.name, 0) - 1, (
                moment, record["attempts"], held)
    best = yaml.safe_load((storage / "best_config.yaml").read_text())
    assert best["configurations_searched"] == 1
    assert best["budget"]["seed"] == 7 and best["budget"]["max_epochs"] == 24


def test_a_result_the_driver_cannot_read_fails_naming_the_node_and_the_path(tmp_path):
    """A results folder the nodes do not share: the node wrote its result where the driver
    cannot see it, and the leaderboard would lack it without a word."""
    from benchmarks.suites.runner import Outcome, seen_here

    folder = tmp_path / "runs/simclr/seed-0"
    outcome = Outcome("simclr/seed-0", result={"machine": {"hostname": "gpu-node-7"}})
    failed = seen_here(outcome, folder)
    assert failed.result is None and "gpu-node-7" in failed.error
    assert str(folder / "result.json") in failed.error and "every node" in failed.error
    folder.mkdir(parents=True)
    (folder / "result.json").write_text("{}")
    assert seen_here(outcome, folder) is outcome


def test_finished_jobs_are_not_sent_out_and_the_leaderboard_is_not_rebuilt_per_result(
        tmp_path, monkeypatch):
    """The driver's work per result is constant: a finished (run, seed) is read, never sent to a
    worker, and the partial leaderboard is rebuilt at most every BOARD_EVERY seconds."""
    import ray

    from benchmarks.run.trainer import RunOptions
    from benchmarks.suites import runner
    from benchmarks.suites import tally as tally_module
    from benchmarks.suites.config import load_suite

    class NoTasks:
        """A remote function that fails the test when a task is submitted."""

        def options(self, **kwargs):
            return self

        def remote(self, *args, **kwargs):
            raise AssertionError("a finished job was sent out as a Ray task")

    monkeypatch.setattr(ray, "remote", lambda function: NoTasks())
    monkeypatch.setattr(runner, "gpus_per_job", lambda placement: 0)  # no cluster to ask
    monkeypatch.setattr(runner, "already_done", lambda *args: {
        "metrics": {"knn5_top1": 0.5}, "wall_seconds": 1.0, "reused": False})
    writes = []
    monkeypatch.setattr(tally_module, "write_leaderboard", lambda folder: writes.append(folder))
    path = tmp_path / "placed.yaml"
    path.write_text(yaml.safe_dump({**SUITE, "runs": GOOD_RUNS, "seeds": list(range(50))}))
    suite = load_suite(str(path))
    jobs = [(run, seed) for run in suite.runs for seed in suite.seeds]
    tally = runner.Tally(tmp_path)
    for outcome in runner.execute_on_ray(jobs, suite, tmp_path, RunOptions(),
                                         runner.Placement(parallel=2, gpus_per_run=0)):
        tally.record(outcome)
    assert len(tally.finished) == len(jobs) == len(GOOD_RUNS) * 50
    assert len(writes) == 1  # the first result's; the next would come BOARD_EVERY s later


def test_the_wandb_key_never_travels_in_the_jobs_runtime_environment(monkeypatch):
    """Anyone who can list a cluster's jobs reads their runtime environment: the data folder and
    the W&B mode go there, the API key does not."""
    from benchmarks.run.local_ray import worker_env

    monkeypatch.setenv("WANDB_API_KEY", "secret-key-0123")
    monkeypatch.setenv("CLUSTERBENCH_DATA", "/data")
    monkeypatch.setenv("WANDB_MODE", "offline")
    env = worker_env()
    assert env["CLUSTERBENCH_DATA"] == "/data" and env["WANDB_MODE"] == "offline"
    assert "secret-key-0123" not in env.values() and "WANDB_API_KEY" not in env


@pytest.mark.slow
def test_a_driver_without_the_clusters_token_is_one_line_naming_the_mode(tmp_path, ray_head):
    """The cluster checks a token (``ray start``'s default); a driver without
    ``RAY_AUTH_MODE=token`` got 20 seconds of warnings and a traceback."""
    suite = tmp_path / "placed.yaml"
    suite.write_text(yaml.safe_dump({**SUITE, "runs": GOOD_RUNS[:1]}))
    env = {k: v for k, v in CLUSTER_ENV.items() if k != "RAY_AUTH_MODE"}
    done = subprocess.run([sys.executable, "-m", "benchmarks.cli", "bench", str(suite),
                           "--address", ray_head, "--results", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == [
        f"clusterbench: error: --address {ray_head}: the cluster checks a token and this command "
        "has none (RAY_AUTH_MODE is unset): run it with RAY_AUTH_MODE=token and the cluster's "
        "token in ~/.ray/auth_token or RAY_AUTH_TOKEN"]
    assert not (tmp_path / "out").exists()


def test_only_a_ray_task_marks_its_start(tmp_path, monkeypatch) -> None:
    """A job run as a Ray task writes its start marker (the driver's sign that it has its
    resources) before the job's own modules are imported; one run in the driver writes none,
    and asks Ray nothing (in a driver where a search left Ray running, Ray's task-id query
    warned on every run)."""
    import pickle

    import ray

    from benchmarks.infra.said import marked_then
    from benchmarks.suites import runner
    from benchmarks.suites.runner import job_name, run_job
    from benchmarks.suites.started import said_file, started_marker

    run = type("Run", (), {"name": "simclr"})()
    monkeypatch.setattr(runner, "run_one", lambda *args: {"run": "simclr"})
    monkeypatch.setattr(ray, "get_runtime_context", lambda: pytest.fail("Ray was asked"))
    assert run_job(None, run, 0, str(tmp_path), None) == {"run": "simclr"}
    assert not started_marker(tmp_path, job_name(run, 0)).exists()
    marker, said = started_marker(tmp_path, "simclr/seed-1"), said_file(tmp_path, "simclr/seed-1")
    assert marked_then(str(marker), str(said), pickle.dumps((len, ("abc",)))) == 3
    assert marker.read_text() == socket.gethostname()
    code = ("import sys; from benchmarks.infra import said; print(sorted(m for m in "
            "('torch', 'lightning', 'benchmarks.run') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"  # the task's module is light
