"""Every command ends on a scheduler's signal (SIGTERM, SIGINT, SIGHUP, SLURM's SIGUSR1) sent to
its process or to its whole process group, at start-up, in the middle of an epoch or of the
evaluation: within a bounded grace, no process of it left, what can be checkpointed saved, one
line saying what stopped and how to go on, exit status 128 + the signal's number; and the same
command then finishes with the numbers of an uninterrupted run. Under SLURM, SIGUSR1 also
requeues the job (a fake ``scontrol`` on PATH records it)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch
import yaml
from stopped_commands import Followed, clusterbench, last_line

from benchmarks.cli import main

#: Long enough (6 epochs of about 0.3 s, then a linear probe of about a second) for a signal to
#: land in an epoch or in the evaluation, even when another test shares the cores.
SUITE = {
    "name": "stops", "seeds": [0],
    "data": {"name": "digits", "batch_size": 32, "limit_per_class": 40, "num_workers": 1},
    "trainer": {"max_epochs": 6, "accelerator": "cpu", "log_every_n_steps": 1},
    "evaluation": {"linear_probe": {"epochs": 300, "lr": 0.3,
                                    "batch_size": 64, "weight_decay": 1.0e-6},
                   "knn": {"k": [5], "temperature": None}},
    "runs": [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}],
}
SEED = "stops/runs/simclr/seed-0"


def bench_args(suite: Path, results: Path) -> list[str]:
    return ["bench", str(suite), "--results", str(results), "--no-progress"]


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("suite") / "stops.yaml"
    path.write_text(yaml.safe_dump(SUITE))
    return path


@pytest.fixture(scope="module")
def uninterrupted(suite, tmp_path_factory) -> Path:
    results = tmp_path_factory.mktemp("uninterrupted") / "results"
    assert main(bench_args(suite, results)) == 0
    return results


def same_run(results: Path, reference: Path) -> dict:
    """The result of ``results``' run, checked against the uninterrupted ``reference``: the same
    metrics and the same weights, to the last digit (training is deterministic on the CPU)."""
    got, want = (json.loads((r / SEED / "result.json").read_text()) for r in (results, reference))
    assert got["metrics"] == want["metrics"] and got["epochs"] == want["epochs"]
    weights, reference_weights = (torch.load(r / SEED / "encoder.pt", weights_only=True)
                                  for r in (results, reference))
    assert weights.keys() == reference_weights.keys()
    assert all(torch.equal(weights[k], reference_weights[k]) for k in weights)
    return got


def handlers_installed(pid: int) -> bool:
    """Whether the command catches SIGTERM yet (its ``main`` has started): the caught-signals
    mask of ``/proc/PID/status``."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:"))
                 .split()[1], 16)
    return bool(caught >> (signal.SIGTERM - 1) & 1)


def after(condition, seconds: float):
    """A condition that holds ``seconds`` after ``condition`` was first seen to hold."""
    seen: list[float] = []

    def holds() -> bool:
        if not seen and condition():
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() >= seen[0] + seconds

    return holds


def stop_bench(suite: Path, results: Path, signum: int, moment: str, group: bool,
               env: dict[str, str] | None = None) -> tuple[int, str, Followed]:
    """``bench`` in a process of its own, ``signum`` sent at ``moment`` (``start-up``: as its
    imports run; ``epoch``: after its first checkpoint, in the next epoch; ``evaluation``: once
    training is done) to it alone or to its whole group; its exit status and stderr, checked to
    leave no process behind."""
    followed = Followed(clusterbench(*bench_args(suite, results), env=env))
    attempt = results / f"{SEED}.attempt"
    if moment == "start-up":
        when, what = (lambda: handlers_installed(followed.proc.pid)), "main started"
    elif moment == "epoch":  # a moment into the epoch after the first checkpoint
        when, what = after((attempt / "checkpoints/last.ckpt").exists, 0.1), "first checkpoint"
    else:
        when, what = (attempt / "encoder.pt").exists, "training done"
    followed.signal_when(when, what, signum, group=group)
    code, _, err = followed.finish()
    assert "Traceback" not in err, err[-3000:]
    return code, err, followed


def test_bench_stopped_mid_epoch_by_sighup_to_its_group_resumes_to_the_uninterrupted_run(
        suite, uninterrupted, tmp_path):
    """A closed terminal signals the whole group, the loader worker too: the run stops after
    the step in flight, saves that step, and the same command ends as if never stopped."""
    results = tmp_path / "results"
    code, err, _ = stop_bench(suite, results, signal.SIGHUP, "epoch", group=True)
    assert not (results / SEED).exists(), "the signal came too late"
    assert code == 128 + signal.SIGHUP, err[-3000:]
    line = last_line(err)
    assert line.startswith("clusterbench: stopped by SIGHUP: simclr seed 0: its checkpoint is ")
    assert "The same command continues" in line and "SIGTERM" not in line
    # saved at the step it stopped at (in the middle of an epoch, unless a busy machine made the
    # signal land at an epoch's end: tests/benchmarks/run/test_stop.py places it exactly)
    saved = torch.load(results / f"{SEED}.attempt/checkpoints/last.ckpt", weights_only=True)
    assert main(bench_args(suite, results)) == 0
    assert same_run(results, uninterrupted)["resumed_from_epoch"] == saved["epoch"]


def test_sigusr1_under_slurm_checkpoints_and_requeues_the_job(suite, uninterrupted, tmp_path):
    """``#SBATCH --signal=USR1@90``: SLURM signals every process of the step before its time
    limit; the command saves where it stands, requeues its job with ``scontrol requeue`` (not
    Lightning's own requeue and ``hpc_ckpt``) and exits 138."""
    scontrol = tmp_path / "bin" / "scontrol"
    scontrol.parent.mkdir()
    scontrol.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'scontrol.args'}\n")
    scontrol.chmod(0o755)
    slurm = {"PATH": f"{scontrol.parent}{os.pathsep}{os.environ['PATH']}",
             "SLURM_JOB_ID": "4242", "SLURM_NTASKS": "1", "SLURM_PROCID": "0",
             "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_JOB_NAME": "stops",
             "SLURM_NODELIST": "localhost"}
    results = tmp_path / "results"
    code, err, _ = stop_bench(suite, results, signal.SIGUSR1, "epoch", group=True, env=slurm)
    assert code == 128 + signal.SIGUSR1, err[-3000:]
    assert (tmp_path / "scontrol.args").read_text() == "requeue 4242\n"
    line = last_line(err)
    assert line.startswith("clusterbench: stopped by SIGUSR1: ")
    assert line.endswith("SLURM job 4242 requeued: it runs the same command again")
    attempt = results / f"{SEED}.attempt"
    assert (attempt / "checkpoints/last.ckpt").is_file()
    assert not list(attempt.rglob("hpc_ckpt*"))  # Lightning's own requeue stayed off
    assert main(bench_args(suite, results)) == 0  # the requeued job, here
    same_run(results, uninterrupted)


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "moment", "group"), [
    (signal.SIGTERM, "start-up", False),
    (signal.SIGINT, "epoch", True),  # Ctrl-C in a terminal
    (signal.SIGTERM, "evaluation", True),  # a scheduler stopping the whole job
])
def test_bench_stopped_at_any_moment_ends_cleanly_and_the_same_command_finishes_the_run(
        suite, uninterrupted, tmp_path, signum, moment, group):
    results = tmp_path / "results"
    code, err, _ = stop_bench(suite, results, signum, moment, group)
    assert not (results / SEED).exists(), "the run finished before the signal came"
    assert code == 128 + signum, err[-3000:]
    line = last_line(err)
    assert line.startswith(f"clusterbench: stopped by {signal.Signals(signum).name}")
    assert "same command continues" in line.lower()
    assert main(bench_args(suite, results)) == 0
    same_run(results, uninterrupted)


@pytest.mark.parametrize(("signum", "argv"), [
    (signal.SIGTERM, ["report", "{results}/stops", "--out", "{out}"]),
    (signal.SIGINT, ["evaluate", "{results}/" + SEED, "--suite", "{suite}", "--results",
                     "{out}"]),
    (signal.SIGHUP, ["validate", "--model", "simclr", "--data", "digits",
                     "--trainer.accelerator", "cpu"]),
    (signal.SIGUSR1, ["tune", "{suite}", "--storage", "{out}", "--num-samples", "2"]),
])
def test_every_command_stopped_at_start_up_says_so_and_exits_128_plus_the_signal(
        suite, uninterrupted, tmp_path, signum, argv):
    """As its imports run (torch's and Lightning's take seconds): nothing is written, one line
    is said, and the exit status is the shell's for that signal."""
    args = [a.format(results=uninterrupted, suite=suite, out=tmp_path / "out") for a in argv]
    followed = Followed(clusterbench(*args))
    followed.signal_when(lambda: handlers_installed(followed.proc.pid), "main started", signum,
                         group=True)
    code, _, err = followed.finish()
    assert code == 128 + signum, err[-3000:]
    assert last_line(err).startswith(f"clusterbench: stopped by {signal.Signals(signum).name}")
    assert "Traceback" not in err, err[-3000:]


#: ``clusterbench fit`` of SimCLR on digits: 4 epochs of about 0.3 s.
FIT = ["fit", "--model", "simclr", "--model.backbone_width", "4", "--data", "digits",
       "--data.batch_size", "32", "--data.limit_per_class", "40", "--trainer.max_epochs", "4",
       "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false",
       "--trainer.enable_model_summary", "false", "--trainer.log_every_n_steps", "1"]
FIT_LOGS = Path("results/fit/lightning_logs")


def fitted_weights(version: Path) -> dict[str, torch.Tensor]:
    (path,) = (version / "checkpoints").glob("epoch=*.ckpt")
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


@pytest.mark.slow
def test_a_stopped_fit_saves_a_checkpoint_that_continues_it_to_the_same_weights(
        tmp_path, monkeypatch):
    from stopped_commands import start

    monkeypatch.chdir(tmp_path)
    assert main(FIT) == 0  # uninterrupted: version_0
    followed = Followed(start(["-m", "benchmarks.cli", *FIT], cwd=tmp_path))
    followed.signal_when(
        after(lambda: any((tmp_path / FIT_LOGS / "version_1/checkpoints").glob("*.ckpt")), 0.1),
        "the first epoch's checkpoint", signal.SIGTERM, group=False)
    code, _, err = followed.finish()
    stopped = FIT_LOGS / "version_1/checkpoints/stopped.ckpt"
    assert code == 128 + signal.SIGTERM, err[-3000:]
    line = last_line(err)
    assert line.startswith(f"clusterbench: stopped by SIGTERM: SimCLR: its checkpoint is {stopped}")
    assert line.endswith(f"--ckpt_path {stopped} continues it")
    assert torch.load(stopped, weights_only=True)["epoch"] < 4, "the signal came too late"
    assert main([*FIT, "--ckpt_path", str(stopped)]) == 0  # version_2
    want, got = fitted_weights(FIT_LOGS / "version_0"), fitted_weights(FIT_LOGS / "version_2")
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


#: A search of one trial of the smoke suite: 6 epochs, no ASHA stop (the trial runs in a Ray
#: worker of its own process group, which goes on while the command takes the signal).
SEARCH = ["tune", "smoke", "--fast", "--num-samples", "1", "--seed", "7", "--max-epochs", "6",
          "--grace-period", "6"]


def trial_rows(storage: Path) -> list[list[dict]]:
    return [json.loads(p.read_text())["rows"]
            for p in sorted((storage / "simclr").glob("trials/*/record.json"))]


@pytest.mark.slow
def test_a_search_stopped_by_sigterm_resumes_to_the_uninterrupted_search(tmp_path, local_ray):
    """Ray Tune's own stop, which Ctrl-C calls, on SIGTERM: the trial stops where its record and
    checkpoint stand, trials.csv says so, the local Ray instance goes with the command, and
    ``--resume`` ends where an uninterrupted search ends."""
    reference = tmp_path / "uninterrupted"
    assert main([*SEARCH, "--storage", str(reference)]) == 0
    storage = tmp_path / "search"
    followed = Followed(clusterbench(*SEARCH, "--storage", str(storage)))
    followed.signal_when(lambda: any(rows for rows in trial_rows(storage)), "a trial's epoch",
                         signal.SIGTERM, group=False)
    code, _, err = followed.finish()
    assert code == 128 + signal.SIGTERM, err[-3000:]
    assert last_line(err).startswith("clusterbench: stopped by SIGTERM: the search stopped "
                                     "with 1 of 1 trials unfinished")
    assert "--resume" in last_line(err) and "Traceback" not in err
    assert not (storage / "best_config.yaml").exists()
    assert main([*SEARCH, "--storage", str(storage), "--resume"]) == 0
    assert trial_rows(storage) == trial_rows(reference)
    assert len(trial_rows(storage)[0]) == 6


@pytest.mark.slow
def test_a_ddp_run_stopped_by_sigterm_saves_every_rank_at_one_step_and_resumes(
        suite, uninterrupted, tmp_path):
    """Two spawned ranks, each with its loader worker: the command forwards the stop, the ranks
    agree at the end of a step, save together and end with the command and their workers (a
    rank whose loader's SIGCHLD handler raised as its worker was ended used to wait on the
    other forever); the same command finishes the run on the same number of steps as an
    uninterrupted one (each rank's random streams are seeded again: close to an uninterrupted
    run, not identical)."""
    results = tmp_path / "results"
    args = [*bench_args(suite, results), "--devices", "2"]
    followed = Followed(clusterbench(*args))
    checkpoint = results / f"{SEED}.attempt/checkpoints/last.ckpt"
    followed.signal_when(after(checkpoint.exists, 0.2), "first checkpoint", signal.SIGTERM,
                         group=False, timeout=400)
    code, _, err = followed.finish()
    assert code == 128 + signal.SIGTERM and "Traceback" not in err, err[-3000:]
    line = last_line(err)
    assert line.startswith("clusterbench: stopped by SIGTERM: simclr seed 0") and str(
        checkpoint) in line and "The same command continues" in line, err[-3000:]
    saved = torch.load(checkpoint, weights_only=True)
    assert 0 < saved["global_step"] < 66 and saved["epoch"] < 6  # 6 epochs of 11 steps
    assert not (results / SEED).exists()
    assert main(args) == 0
    got, want = (json.loads((r / SEED / "result.json").read_text())
                 for r in (results, uninterrupted))
    assert got["resumed_from_epoch"] is not None
    # the global batch split over the ranks: a step of two devices is one of one device
    assert (got["epochs"], got["train_steps"]) == (want["epochs"], want["train_steps"])
