"""Nothing lost to a kill: finished runs are not retrained, unfinished ones resume from their
checkpoint and end where an uninterrupted run ends (training is deterministic on the CPU), and
every run keeps its weights for ``clusterbench evaluate``."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest
import torch
import yaml
from bench_cli import bench, start_bench, wait_for

from benchmarks.cli import main

#: Long enough (8 epochs of about 0.3 s) for a kill to land between two checkpoints, even when
#: another test shares the cores.
SUITE = {
    "name": "resume", "seeds": [0],
    "data": {"name": "digits", "batch_size": 32, "limit_per_class": 40},
    "trainer": {"max_epochs": 8, "accelerator": "cpu", "log_every_n_steps": 1},
    "evaluation": {"linear_probe": {"epochs": 3, "lr": 0.3,
                                    "batch_size": 64, "weight_decay": 1.0e-6},
                   "knn": {"k": [5], "temperature": None}},
    "runs": [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}],
}


def write_suite(path: Path, **changes) -> Path:
    path.write_text(yaml.safe_dump({**SUITE, **changes}))
    return path


def result_of(results: Path) -> dict:
    return json.loads((results / "resume/runs/simclr/seed-0/result.json").read_text())


def curves(results: Path) -> list[list[str]]:
    """The training curves without the wall-clock columns."""
    import csv

    rows = list(csv.DictReader((results / "resume/runs/simclr/seed-0/logs/metrics.csv").open()))
    return [[r[k] for k in sorted(r)] for r in rows]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("uninterrupted")
    assert bench(write_suite(root / "resume.yaml"), root / "results") == 0
    return root / "results"


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_run_resumes_from_its_checkpoint_and_ends_as_an_uninterrupted_one(
        tmp_path, uninterrupted, how):
    suite, results = write_suite(tmp_path / "resume.yaml"), tmp_path / "results"
    attempt = results / "resume/runs/simclr/seed-0.attempt"
    proc = start_bench(suite, results)
    wait_for(attempt / "checkpoints/last.ckpt", proc)  # the first epoch is done
    proc.send_signal(how)
    _, err = proc.communicate(timeout=120)
    assert not (results / "resume/runs/simclr/seed-0").exists(), "the kill came too late"
    if how == signal.SIGTERM:  # a scheduler's preemption: checkpoint saved, exit 143
        assert proc.returncode == 143 and "same command resumes it" in err, err[-2000:]
    saved_epoch = torch.load(attempt / "checkpoints/last.ckpt", weights_only=True)["epoch"]
    assert 0 <= saved_epoch < SUITE["trainer"]["max_epochs"] - 1

    assert bench(suite, results) == 0
    resumed, reference = result_of(results), result_of(uninterrupted)
    assert resumed["resumed_from_epoch"] == saved_epoch
    assert resumed["epochs"] == reference["epochs"] == SUITE["trainer"]["max_epochs"]
    # resumed at an epoch end (SIGKILL) or at the step the SIGTERM stopped it at (the batches
    # and random streams of the rest of that epoch kept): the same run, to the last digit
    assert resumed["metrics"] == reference["metrics"]
    assert curves(results) == curves(uninterrupted)  # earlier epochs' curves kept too
    got, want = (torch.load(r / "resume/runs/simclr/seed-0/encoder.pt", weights_only=True)
                 for r in (results, uninterrupted))
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert not (results / "resume/runs/simclr/seed-0/checkpoints").exists()  # weights kept


@pytest.mark.slow
def test_a_sigterm_to_the_whole_process_group_saves_the_checkpoint_with_loader_workers_running(
        tmp_path):
    """``timeout``, SLURM and ``kill -TERM -PGID`` signal every process of the group: the
    loader workers too. They must outlive the signal so that the run finishes its step, writes
    its checkpoint and says it was preempted (a worker killed under it made the save raise,
    and the run was reported failed)."""
    import os

    suite = write_suite(tmp_path / "resume.yaml",
                        data={**SUITE["data"], "num_workers": 2},
                        trainer={**SUITE["trainer"], "max_epochs": 40})
    results = tmp_path / "results"
    attempt = results / "resume/runs/simclr/seed-0.attempt"
    proc = start_bench(suite, results, own_group=True)
    wait_for(attempt / "checkpoints/last.ckpt", proc)
    first = torch.load(attempt / "checkpoints/last.ckpt", weights_only=True)["global_step"]
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "same command resumes it" in err, err[-3000:]
    assert "DataLoader worker" not in err, err[-3000:]
    saved = torch.load(attempt / "checkpoints/last.ckpt", weights_only=True)
    assert saved["global_step"] >= first


@pytest.mark.slow
def test_a_run_killed_after_its_last_epoch_resumes_with_its_online_probe_values(
        tmp_path, uninterrupted, monkeypatch):
    """The last checkpoint is written, then the evaluation dies: the resumed run has no epoch
    left to train (so no validation runs) and still records the last validation's values."""
    import benchmarks.run.one as one

    suite, results = write_suite(tmp_path / "resume.yaml"), tmp_path / "results"
    evaluate = one.evaluate_and_record

    def killed(*args, **kwargs):
        raise RuntimeError("killed during the evaluation")

    monkeypatch.setattr(one, "evaluate_and_record", killed)
    assert bench(suite, results) == 1
    last = results / "resume/runs/simclr/seed-0.attempt/checkpoints/last.ckpt"
    assert torch.load(last, weights_only=True)["epoch"] == SUITE["trainer"]["max_epochs"] - 1
    monkeypatch.setattr(one, "evaluate_and_record", evaluate)
    assert bench(suite, results) == 0
    resumed, reference = result_of(results), result_of(uninterrupted)
    assert resumed["resumed_from_epoch"] == SUITE["trainer"]["max_epochs"] - 1
    assert "online_val_acc" in reference["metrics"]
    assert resumed["metrics"] == reference["metrics"]


def test_a_finished_run_is_not_retrained_unless_its_configuration_changed(tmp_path):
    suite = write_suite(tmp_path / "resume.yaml", trainer={**SUITE["trainer"], "max_epochs": 1},
                        seeds=[0, 1])
    results = tmp_path / "results"
    assert bench(suite, results) == 0
    files = {p: p.stat().st_mtime_ns for p in (results / "resume/runs").rglob("*")
             if p.is_file()}
    assert bench(suite, results) == 0  # nothing to do
    assert {p: p.stat().st_mtime_ns for p in files} == files
    # a changed setting is another configuration: retrained
    write_suite(suite, trainer={**SUITE["trainer"], "max_epochs": 2}, seeds=[0, 1])
    assert bench(suite, results) == 0
    assert result_of(results)["epochs"] == 2
    # --rerun retrains even the same configuration
    before = (results / "resume/runs/simclr/seed-1/result.json").stat().st_mtime_ns
    assert bench(suite, results, "--rerun", "--runs", "simclr") == 0
    assert (results / "resume/runs/simclr/seed-1/result.json").stat().st_mtime_ns != before


def test_rerun_changed_retrains_only_results_computed_by_other_code(tmp_path):
    """A results folder cached across commits (CI): --rerun-changed retrains a result whose
    recorded commit is not this code's, and keeps one this code computed."""
    suite = write_suite(tmp_path / "resume.yaml", trainer={**SUITE["trainer"], "max_epochs": 1},
                        seeds=[0, 1])
    results = tmp_path / "results"
    assert bench(suite, results) == 0
    old = results / "resume/runs/simclr/seed-0/result.json"
    record = json.loads(old.read_text())
    record["git"] = {"commit": "0" * 40, "dirty": False}  # as an older commit wrote it
    old.write_text(json.dumps(record))
    kept = results / "resume/runs/simclr/seed-1/result.json"
    times = {p: p.stat().st_mtime_ns for p in (old, kept)}
    assert bench(suite, results) == 0  # without the flag, reused as before
    assert {p: p.stat().st_mtime_ns for p in times} == times
    assert bench(suite, results, "--rerun-changed") == 0
    assert json.loads(old.read_text())["git"]["commit"] != "0" * 40  # retrained by this code
    if not json.loads(kept.read_text())["git"].get("dirty"):  # this code, unchanged: kept
        assert kept.stat().st_mtime_ns == times[kept]


def test_a_run_keeps_weights_that_evaluate_scores_to_the_same_numbers(tmp_path, capsys):
    suite = write_suite(tmp_path / "resume.yaml", trainer={**SUITE["trainer"], "max_epochs": 1})
    results = tmp_path / "results"
    assert bench(suite, results) == 0
    run_dir = results / "resume/runs/simclr/seed-0"
    state = torch.load(run_dir / "encoder.pt", weights_only=True)  # plain tensors, no pickle
    assert any(k.startswith("backbone.") for k in state)
    assert not any(k.startswith("online_probe.") for k in state)
    capsys.readouterr()
    assert main(["evaluate", str(run_dir), "--suite", str(suite), "--results",
                 str(results)]) == 0
    scored = json.loads((results / "resume/runs/simclr@evaluated/seed-0/result.json").read_text())
    # said as bench says it: accuracies in percent
    shown = f"knn5_top1 {100 * scored['metrics']['knn5_top1']:.2f}"
    assert shown in capsys.readouterr().out
    trained = result_of(results)
    assert scored["metrics"] == {k: v for k, v in trained["metrics"].items()
                                 if not k.startswith("online_val")}
    assert scored["evaluated_from"] == str(run_dir.resolve())
    board = (results / "resume/leaderboard.md").read_text().partition("## Evaluation time")[0]
    assert "| simclr@evaluated |" in board and "| simclr |" in board
    (evaluated,) = [line for line in board.splitlines() if line.startswith("| simclr@evaluated")]
    assert "| — (evaluated) |" in evaluated  # trained elsewhere, not in 0.0 s


def test_evaluate_scores_a_fit_checkpoint_with_a_suites_protocols(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "--model", "simclr", "--data", "digits", "--model.backbone_width", "4",
                 "--data.limit_per_class", "10", "--trainer.max_epochs", "1",
                 "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false"]) == 0
    (checkpoint,) = (tmp_path / "results/fit").rglob("*.ckpt")
    suite = write_suite(tmp_path / "resume.yaml")
    assert main(["evaluate", str(checkpoint), "--suite", str(suite), "--name", "from-fit"]) == 0
    result = json.loads((tmp_path / "results/resume/runs/from-fit/seed-0/result.json")
                        .read_text())
    assert result["method"] == "simclr" and result["epochs"] == 1
    assert set(result["metrics"]) == {"linear_probe_top1", "knn5_top1"}  # the suite's protocols


@pytest.mark.parametrize("argv, message", [
    (["--parallel", "0"], "--parallel must be a whole number of at least 1, got 0"),
    (["--gpus-per-run", "1.5"], "--gpus-per-run must be a fraction up to 1 or a whole number"),
    (["--checkpoint-every", "0"], "--checkpoint-every must be at least 1 epoch, got 0"),
    (["--devices", "3"], "data.batch_size 32 is the global batch and must split evenly over 3"),
])
def test_bad_placement_options_exit_2_before_anything_trains(tmp_path, capsys, argv, message):
    results = tmp_path / "results"
    assert bench(write_suite(tmp_path / "resume.yaml"), results, *argv) == 2
    assert message in capsys.readouterr().err
    assert not results.exists() or not any(results.rglob("result.json"))


def test_a_global_batch_the_gpus_per_run_cannot_share_exits_2(tmp_path, capsys):
    suite = write_suite(tmp_path / "resume.yaml")
    assert bench(suite, tmp_path / "results", "--parallel", "2", "--gpus-per-run", "3") == 2
    assert "must split evenly over 3 devices" in capsys.readouterr().err


def test_gpu_speed_settings_are_applied_where_asked_and_keep_the_encoder_file_plain(tmp_path):
    """What a GPU run turns on (bf16, channels-last, cuDNN autotuning, TF32, torch.compile),
    applied here to a CPU model: the suite's own choice wins, --no-fast-gpu turns it off, and the
    weights file keeps the plain parameter names of a compiled module."""
    import torch

    from benchmarks.run.cache import encoder_state
    from benchmarks.run.one import instantiate
    from benchmarks.run.spec import RunSpec
    from benchmarks.run.trainer import RunOptions, apply_gpu_speed_settings, gpu_speed_settings

    run = RunSpec(name="r", method="simclr", model={"backbone_width": 4},
                  data={"name": "digits", "limit_per_class": 10},
                  trainer={"accelerator": "gpu", "precision": "16-mixed"})
    speed = gpu_speed_settings(run, RunOptions(), on_gpu=True)
    assert speed["precision"] == "16-mixed" and speed["compile"] and speed["channels_last"]
    assert gpu_speed_settings(run, RunOptions(fast_gpu=False), on_gpu=True) == {}
    assert not gpu_speed_settings(run, RunOptions(), on_gpu=True, devices=2)["compile"]
    _, model = instantiate(run, 0)
    plain = set(encoder_state(model))
    before = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32,
              torch.backends.cudnn.allow_tf32)
    try:
        apply_gpu_speed_settings(model, {**speed, "compile": True})
        assert model.channels_last and torch.backends.cudnn.benchmark
        assert type(model.backbone).__name__ == "OptimizedModule"
        assert set(encoder_state(model)) == plain
    finally:
        (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32,
         torch.backends.cudnn.allow_tf32) = before


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated"])  # empty, random: test_untrusted_files
def test_an_unreadable_checkpoint_is_set_aside_and_the_run_starts_again(tmp_path, damage):
    """A last.ckpt that a full disk truncated (or anything else overwrote) made every later
    bench fail with "OSError: [Errno 22]" naming no file: now it is said in one line, kept
    beside the attempt, and the run trains from the start."""
    import os

    suite, results = write_suite(tmp_path / "resume.yaml"), tmp_path / "results"
    attempt = results / "resume/runs/simclr/seed-0.attempt"
    proc = start_bench(suite, results)
    wait_for(attempt / "checkpoints/last.ckpt", proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=120)
    checkpoint = attempt / "checkpoints/last.ckpt"
    data = checkpoint.read_bytes()
    checkpoint.write_bytes({"empty": b"", "random": os.urandom(4096),
                            "truncated": data[: len(data) // 2]}[damage])
    assert bench(suite, results) == 0
    aside = results / "resume/runs/simclr/seed-0.unreadable-last.ckpt"
    assert aside.is_file()
    result = result_of(results)
    assert result["resumed_from_epoch"] is None
    assert result["epochs"] == SUITE["trainer"]["max_epochs"]


@pytest.mark.slow
def test_a_kill_while_a_run_is_put_in_place_loses_nothing(tmp_path, monkeypatch):
    """Killed after result.json is written and before its folder is renamed into place, the run
    is not trained again: the next bench puts it in place. Killed between the two renames of a
    --rerun (the old result set aside, the new one not yet in place), the next bench puts the
    new one in place instead of deleting both."""
    import benchmarks.run.one as one

    suite, results = write_suite(tmp_path / "resume.yaml"), tmp_path / "results"
    final = results / "resume/runs/simclr/seed-0"

    def killed(new, target):
        raise SystemExit("killed before the rename")

    monkeypatch.setattr(one, "replace_directory", killed)
    with pytest.raises(SystemExit):
        bench(suite, results)
    monkeypatch.undo()
    assert not final.exists() and (final.parent / "seed-0.attempt/result.json").is_file()
    first = json.loads((final.parent / "seed-0.attempt/result.json").read_text())
    assert bench(suite, results) == 0
    assert result_of(results)["train_seconds"] == first["train_seconds"]  # not trained again

    # the --rerun's new result complete in .attempt, the old one set aside, none in place
    attempt = final.with_name("seed-0.attempt")
    shutil.copytree(final, attempt)
    marked = json.loads((attempt / "result.json").read_text())
    marked["train_seconds"] = 123.0
    (attempt / "result.json").write_text(json.dumps(marked))
    final.rename(final.with_name("seed-0.replaced"))
    assert bench(suite, results) == 0
    assert result_of(results)["train_seconds"] == 123.0
    assert not final.with_name("seed-0.replaced").exists() and not attempt.exists()


@pytest.mark.parametrize("saved, field", [
    ({"epoch": float("inf")}, "epoch = inf"),
    ({"epoch": "0"}, "epoch = 0 is not a count"),
    ({"epoch": 0, "loops": None, "optimizer_states": None}, "has no 'optimizer_states'"),
], ids=["inf", "string", "keys-missing"])
def test_a_last_ckpt_lightning_cannot_resume_is_set_aside_and_the_run_trains_again(
        tmp_path, capsys, saved, field):
    """A copied or edited last.ckpt (epoch inf, a string, Lightning's keys missing) failed every
    later bench: now it is kept beside the seed folder, said in one line naming the file and the
    field, and the run trains from scratch."""
    from tiny_suites import write_suite as write_tiny_suite

    suite = write_tiny_suite(tmp_path / "broken.yaml", [
        {"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}])
    results = tmp_path / "results"
    assert bench(suite, results) == 0
    final = results / "broken/runs/simclr/seed-0"
    attempt = final.with_name("seed-0.attempt")
    (attempt / "checkpoints").mkdir(parents=True)
    shutil.copy(final / "config.yaml", attempt / "config.yaml")
    shutil.rmtree(final)
    checkpoint = {"epoch": 0, "global_step": 2, "state_dict": {}, "optimizer_states": [],
                  "loops": {}, **saved}
    torch.save({k: v for k, v in checkpoint.items() if v is not None},
               attempt / "checkpoints/last.ckpt")
    capsys.readouterr()
    assert bench(suite, results) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "last.ckpt" in line]
    assert len(said) == 1 and str(attempt / "checkpoints/last.ckpt") in said[0], said
    assert field in said[0]
    assert (final.with_name("seed-0.unreadable-last.ckpt")).is_file()
    result = json.loads((final / "result.json").read_text())
    assert result["resumed_from_epoch"] is None and result["epochs"] == 1
