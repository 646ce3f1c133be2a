"""Nothing escapes and faults end cleanly: names that cannot write outside the results folder,
one command at a time on a folder, a diverged run recorded as failed, a full disk said in one
line with every earlier result intact, and Ctrl-C answered with what finished and how to go on."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from bench_cli import bench, start_bench, wait_for

from benchmarks.cli import main

SUITE = {
    "name": "faults", "seeds": [0],
    "data": {"name": "digits", "batch_size": 32, "limit_per_class": 20},
    "trainer": {"max_epochs": 1, "accelerator": "cpu", "log_every_n_steps": 1},
    "evaluation": {"linear_probe": {"epochs": 1, "lr": 0.3,
                                    "batch_size": 64, "weight_decay": 1.0e-6},
                   "knn": {"k": [5], "temperature": None}},
    "runs": [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}],
}
PIXELS = {"name": "pixels", "method": "pixels"}


def write_suite(path: Path, **changes) -> Path:
    path.write_text(yaml.safe_dump({**SUITE, **changes}))
    return path


def files_under(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


# -- names ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("changes, message", [
    ({"name": "../../x"}, "suite name '../../x' is not a safe name"),
    ({"name": "/tmp/elsewhere"}, "is not a safe name"),
    ({"name": ".."}, "is not a safe name"),
    ({"runs": [{**SUITE["runs"][0], "name": "../../escape"}]}, "run name '../../escape'"),
    ({"runs": [{**SUITE["runs"][0], "name": "/abs/run"}]}, "run name '/abs/run'"),
    ({"runs": [{**SUITE["runs"][0], "name": "a/../../b"}]}, "is not a safe name"),
    ({"runs": [{**SUITE["runs"][0], "name": "x.attempt"}]}, "is not a safe name"),
    ({"runs": [{**SUITE["runs"][0], "name": "a/b"}, {**PIXELS, "name": "a__b"}]},
     "run names 'a/b' and 'a__b' share the folder runs/a__b"),
    ({"name": "s" * 300}, "is 300 characters long; at most 150"),
    ({"runs": [{**SUITE["runs"][0], "name": "/".join(["r" * 60] * 5)}]},
     "is 304 characters long; at most 150"),
])
def test_a_name_that_would_write_outside_or_share_a_folder_exits_2(tmp_path, capsys, changes,
                                                                   message):
    results = tmp_path / "deep" / "results"
    assert bench(write_suite(tmp_path / "suite.yaml", **changes), results) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not any(tmp_path.rglob("result.json")) and not (tmp_path / "x").exists()


def test_a_million_seeds_are_checked_at_once_and_a_repeat_named():
    from benchmarks.infra.errors import ConfigError
    from benchmarks.suites.config import check_seeds

    seeds = list(range(1_000_000))
    check_seeds(seeds, "the suite")  # every seed compared with every other would take hours
    with pytest.raises(ConfigError, match=r"1000001 seeds with 1 repeated \(7 more than once"):
        check_seeds(seeds + [7], "the suite")


def test_every_run_folder_lies_under_the_results_root(tmp_path):
    from benchmarks.infra.errors import ConfigError
    from benchmarks.infra.paths import inside

    assert inside(tmp_path, tmp_path / "runs" / "a" / "seed-0") == tmp_path / "runs/a/seed-0"
    with pytest.raises(ConfigError, match="outside the results folder"):
        inside(tmp_path, tmp_path / ".." / "elsewhere")


# -- one command at a time -----------------------------------------------------------------------
@pytest.mark.slow
def test_a_second_command_on_a_busy_results_folder_exits_2_naming_the_holder(tmp_path, capsys):
    suite = write_suite(tmp_path / "suite.yaml",
                        trainer={**SUITE["trainer"], "max_epochs": 4}, seeds=[0, 1])
    results = tmp_path / "results"
    first = start_bench(suite, results)
    wait_for(results / "faults/runs/simclr/seed-0.attempt", first)  # training has started
    for argv in (["bench", str(suite)], ["leaderboard", str(results / "faults")]):
        extra = ["--results", str(results), "--no-progress"] if argv[0] == "bench" else []
        assert main([*argv, *extra]) == 2
        err = capsys.readouterr().err
        assert f"is in use by process {first.pid}" in err and "clusterbench bench" in err
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-3000:]
    # the first command's results are whole: both seeds, readable, in the leaderboard
    for seed in (0, 1):
        result = json.loads((results / f"faults/runs/simclr/seed-{seed}/result.json").read_text())
        assert result["status"] == "finished" and result["metrics"]
    board = (results / "faults/leaderboard.csv").read_text()
    assert "simclr" in board and not (results / "faults/.clusterbench.lock.owner").exists()
    assert bench(suite, results) == 0  # free again once the first one ended


# -- a diverged run ------------------------------------------------------------------------------
INF_RUN = {"name": "simclr-inf", "method": "simclr",
           # lr = inf: the first SGD step makes every weight infinite, the loss NaN after it
           "model": {"backbone_width": 4, "optimizer": "sgd", "lr": float("inf")}}


@pytest.mark.slow
def test_a_diverged_run_stops_at_once_and_is_a_failed_row(tmp_path, capsys):
    suite = write_suite(tmp_path / "suite.yaml", runs=[INF_RUN, PIXELS],
                        trainer={**SUITE["trainer"], "max_epochs": 5})
    results = tmp_path / "results"
    assert bench(suite, results) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "simclr-inf/seed-0: diverged at epoch 0, step 1 (loss nan)" in err
    assert "1 run(s) failed: simclr-inf/seed-0" in err
    result = json.loads((results / "faults/runs/simclr-inf/seed-0/result.json").read_text())
    assert result["status"] == "diverged" and result["metrics"] == {}
    assert result["epochs"] == 0  # stopped in its first epoch, not trained on to the fifth
    board = (results / "faults/leaderboard.md").read_text()
    row = next(line for line in board.splitlines() if line.startswith("| simclr-inf |"))
    assert "diverged at epoch 0, step 1 (loss nan)" in row and "n/a" in row
    assert "| pixels |" in board  # the other run went on
    # the same configuration diverges again: not retrained, still failed
    assert bench(suite, results) == 1
    said = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert "already done, same configuration; --rerun trains it again" in said


@pytest.mark.parametrize("own_file", [True, False])
def test_a_file_lost_from_the_results_folder_is_a_crash_and_missing_data_is_bad_input(
        own_file, tmp_path, monkeypatch, capsys):
    """A run whose own staging file vanished (clusterbench wrote it: a crash) fails with its
    traceback, exit 1; a file missing elsewhere (the data, weights the suite names) is the
    user's to mend: one line, exit 2. Either way the other runs go on."""
    import errno

    import benchmarks.run.one as one

    results = tmp_path / "results"
    lost = (results / "faults/runs/simclr/seed-0.attempt/logs" if own_file
            else tmp_path / "data/digits.npz")

    def vanished(*args, **kwargs):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(lost))

    monkeypatch.setattr(one, "make_logger", vanished)
    suite = write_suite(tmp_path / "suite.yaml", runs=[*SUITE["runs"], PIXELS])
    assert bench(suite, results) == (1 if own_file else 2)
    err = capsys.readouterr().err
    assert ("Traceback" in err) == own_file
    assert (f"clusterbench: simclr: [Errno 2] No such file or directory: '{lost}'" in err) != (
        own_file)
    assert (results / "faults/runs/pixels/seed-0/result.json").is_file()


def test_the_driver_losing_a_file_of_its_results_is_a_crash_not_bad_input(tmp_path,
                                                                         monkeypatch):
    """What failed CI once: bench's own walk of its results met a folder gone meanwhile, and
    said so in one line, exit 2, as if the user had named a missing file. A file missing below
    --results is now raised whole; one elsewhere stays one line, exit 2."""
    import errno

    import benchmarks.suites.runner as runner

    results = tmp_path / "results"
    lost = results / "faults/runs/simclr/seed-1.attempt/logs"

    def walk_meets_a_gone_folder(*args, **kwargs):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(lost))

    monkeypatch.setattr(runner, "write_leaderboard", walk_meets_a_gone_folder)
    suite = write_suite(tmp_path / "suite.yaml", runs=[PIXELS])
    with pytest.raises(FileNotFoundError, match="seed-1.attempt"):
        bench(suite, results)
    lost = tmp_path / "elsewhere.yaml"
    assert bench(suite, results) == 2


@pytest.mark.slow
def test_fit_exits_non_zero_when_the_loss_diverges(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["fit", "--model", "simclr", "--data", "digits", "--model.backbone_width", "4",
                 # YAML's infinity: the first SGD step makes the weights infinite
                 "--model.optimizer", "sgd", "--model.lr", ".inf",
                 "--data.limit_per_class", "10", "--trainer.max_epochs", "3",
                 "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false"])
    assert code == 1
    # one batch an epoch: the first step is finite, the second (in epoch 1) is not
    assert "SimCLR diverged at epoch 1, step 1 (loss nan)" in capsys.readouterr().err


# -- a full disk ---------------------------------------------------------------------------------
@contextlib.contextmanager
def small_disk(path: Path, size: str):
    """A tmpfs of ``size`` mounted at ``path`` (the test is skipped where mounting is not
    allowed), unmounted afterwards."""
    path.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path, leave: int) -> None:
    """Fill ``disk`` until ``leave`` bytes are free."""
    free = shutil.disk_usage(disk).free
    with open(disk / f"filler-{uuid.uuid4().hex}", "wb") as f:
        f.write(b"\0" * max(0, free - leave))


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_every_earlier_result_stays_whole(tmp_path, capsys):
    with small_disk(tmp_path / "disk", "3m") as disk:
        suite = write_suite(tmp_path / "suite.yaml", runs=[PIXELS], seeds=[0, 1])
        results = disk / "results"
        assert bench(suite, results) == 0
        board = results / "faults"
        before = files_under(board)
        # room for the Markdown and the CSV (a 4 KiB page each), not for the HTML page (14 KB)
        fill(disk, 8_000)
        capsys.readouterr()
        assert main(["leaderboard", str(board)]) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("clusterbench: error: no space left on tmpfs mounted on ")
        assert "earlier results are intact" in err and len(err.splitlines()) == 1
        assert files_under(board) == before  # .md, .csv and .html replaced together or not
        # a suite that trains: one line, exit 1, the earlier runs' files untouched
        fill(disk, 4_000)
        suite = write_suite(tmp_path / "suite.yaml", seeds=[0, 1, 2], runs=[PIXELS, *SUITE["runs"]])
        assert bench(suite, results) == 1
        err = capsys.readouterr().err
        assert "Traceback" not in err, err
        assert err.strip().splitlines()[-1].startswith("clusterbench: error: no space left on")
        assert all(files_under(board).get(p) == b for p, b in before.items()
                   if ".lock" not in p.name)
        assert not any(p.name.endswith(".tmp") for p in board.rglob("*"))


# -- Ctrl-C --------------------------------------------------------------------------------------
@pytest.mark.slow
def test_ctrl_c_exits_130_saying_what_finished_and_the_same_command_continues(tmp_path):
    # 12 epochs of about 0.3 s: seconds between the first checkpoint and the run's end, for the
    # Ctrl-C to land in training even when another test shares the cores
    suite = write_suite(tmp_path / "suite.yaml", runs=[PIXELS, *SUITE["runs"]],
                        data={**SUITE["data"], "limit_per_class": 40},
                        trainer={**SUITE["trainer"], "max_epochs": 12})
    results = tmp_path / "results"
    proc = start_bench(suite, results)
    wait_for(results / "faults/runs/simclr/seed-0.attempt/checkpoints/last.ckpt", proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    last = err.strip().splitlines()
    said = " ".join(line.strip() for line in last[-6:])
    assert "clusterbench: stopped by SIGINT: simclr seed 0: its checkpoint is" in said
    assert "1 of 2 (run, seed) jobs are finished (pixels/seed-0)" in said
    assert "The same command continues" in said
    assert bench(suite, results) == 0
    result = json.loads((results / "faults/runs/simclr/seed-0/result.json").read_text())
    assert result["resumed_from_epoch"] is not None and result["epochs"] == 12


# -- Ray's local instance after a kill -9 --------------------------------------------------------
def alive(pid: int) -> bool:
    """Running (a zombie, dead and waiting to be reaped, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_ray_watchdog_stops_the_session_when_its_driver_is_killed(tmp_path):
    """The watchdog that ``bench --parallel`` and ``tune`` start beside their local Ray
    instance, on stand-ins: a "raylet" naming the session folder in its command line, an "agent"
    started with ``RAY_RAYLET_PID`` of it (as Ray's agents and workers are), and a bystander.
    The driver is killed with SIGKILL: the raylet and the agent are gone within seconds (Ray's
    agents used to stay a minute or more), the bystander is untouched."""
    import benchmarks.run.local_ray as local_ray

    session = str(tmp_path / f"session_{uuid.uuid4().hex}")
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    raylet = subprocess.Popen([*sleeper, session])
    agent = subprocess.Popen(sleeper, env={**os.environ, "RAY_RAYLET_PID": str(raylet.pid)})
    bystander = subprocess.Popen(sleeper)
    driver = subprocess.Popen([sys.executable, "-c", f"""
import subprocess, sys, time
subprocess.Popen([sys.executable, {local_ray.__file__!r}, {session!r}, "{raylet.pid}"],
                 stdin=subprocess.PIPE, start_new_session=True)
print("watching", flush=True)
time.sleep(120)
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout.readline().strip() == "watching"
        time.sleep(0.5)
        assert alive(raylet.pid) and alive(agent.pid)
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 20  # the watchdog gives Ray 5 s to stop its own first
        while (alive(raylet.pid) or alive(agent.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(raylet.pid) and not alive(agent.pid)
        assert alive(bystander.pid)
    finally:
        for proc in (raylet, agent, bystander, driver):
            proc.kill()
            proc.wait()


def test_a_seed_folder_waits_for_the_process_still_holding_it(tmp_path):
    """A Ray task of a killed command can outlive the command for a while: the next task of the
    same (run, seed) waits for it instead of working in the same attempt folder."""
    import subprocess
    import sys
    import time

    from benchmarks.infra.locking import seed_lock

    lock = tmp_path / "seed-0.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, time; "
        f"f = open({str(lock)!r}, 'a'); fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); "
        "time.sleep(2)")],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    heard: list[str] = []
    start = time.monotonic()
    with seed_lock(lock, report=heard.append):
        waited = time.monotonic() - start  # entered only once the holder (2 s) was gone
    assert heard == ["waiting for the process that still holds seed-0.lock (at most 300 s)"]
    assert waited > 1.5
    holder.wait()


@pytest.mark.parametrize("obstacle", ["a file", "a read-only file system"])
def test_a_results_folder_that_cannot_be_written_is_one_line_and_exit_2(
        obstacle, tmp_path, capsys, monkeypatch):
    """``--results`` naming a file, or a folder on a read-only file system (simulated: the
    operating system's EROFS where the folder is made), is bad input, said before any run."""
    import errno

    suite = write_suite(tmp_path / "faults.yaml")
    results = tmp_path / "results"
    if obstacle == "a file":
        results.write_text("not a folder")
    else:
        real_mkdir = Path.mkdir

        def read_only(self, *args, **kwargs):
            if results in (self, *self.parents):
                raise OSError(errno.EROFS, "Read-only file system", str(self))
            return real_mkdir(self, *args, **kwargs)

        monkeypatch.setattr(Path, "mkdir", read_only)
    assert main(["bench", str(suite), "--results", str(results), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be made or written" in err[0], err
    assert ("Not a directory" if obstacle == "a file" else "Read-only file system") in err[0]


def test_a_file_system_without_locks_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    """flock refused (Lustre mounted without it, some FUSE): filelock would fall back to a lock
    file that a kill -9 leaves behind for good; the command says so instead."""
    import errno
    import fcntl

    def no_flock(fd, operation):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    suite = write_suite(tmp_path / "faults.yaml")
    assert main(["bench", str(suite), "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not lock files (flock: Function not implemented)" in err[0]
    assert not list(tmp_path.rglob(".clusterbench.lock"))


def test_a_run_waiting_for_its_seed_says_so_and_gives_up_after_the_stated_time(
        tmp_path, capsys, monkeypatch):
    """Another process holds the seed's lock (a task of a killed command that never stopped):
    the run says it waits, and after SEED_LOCK_WAIT seconds stops in one line naming the lock."""
    from benchmarks.infra import locking

    monkeypatch.setattr(locking, "SEED_LOCK_WAIT", 1.0)
    suite = write_suite(tmp_path / "faults.yaml")
    results = tmp_path / "results"
    lock = results / "faults/runs/simclr/seed-0.lock"
    lock.parent.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["bench", str(suite), "--results", str(results), "--no-progress"]) == 2
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert "waiting for the process that still holds seed-0.lock (at most 1 s)" in err
    assert f"{lock} is still held after 1 s by another process" in err
    assert "Traceback" not in err, err
