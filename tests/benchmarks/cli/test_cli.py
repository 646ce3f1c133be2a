"""End-to-end: the clusterbench CLI on the shipped smoke suite and on small suites written here."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tiny_suites import write_suite

from benchmarks.cli import main
from benchmarks.infra.errors import ConfigError
from benchmarks.suites.config import load_suite

os.environ.setdefault("WANDB_MODE", "disabled")


@pytest.fixture(scope="module")
def smoke_fast(tmp_path_factory) -> tuple[Path, int]:
    """The shipped smoke suite on its --fast budget, run once for the tests below."""
    root = tmp_path_factory.mktemp("results")
    code = main(["bench", "smoke", "--fast", "--results", str(root), "--no-progress",
                 "--no-search"])  # the search path has its own (slow) test
    return root / "smoke-fast", code


def test_smoke_fast_writes_leaderboard_and_run_records(smoke_fast):
    suite_dir, code = smoke_fast
    assert code == 0
    for name in ("leaderboard.md", "leaderboard.csv", "leaderboard.html"):
        assert (suite_dir / name).stat().st_size > 0
    rows = {row["run"]: row for row in csv.DictReader((suite_dir / "leaderboard.csv").open())}
    assert set(rows) == {run.name for run in load_suite("smoke").runs}
    assert {"simclr", "simclr/sum", "supcon", "transfusion", "pixels"} <= set(rows)
    for row in rows.values():
        assert row["seeds"] == "1" and row["budget"] == "fast"
        assert 0.0 <= float(row["linear_probe_top1_mean"]) <= 1.0
    assert "data:image/png;base64," in (suite_dir / "leaderboard.html").read_text()
    result = json.loads((suite_dir / "runs/simclr/seed-0/result.json").read_text())
    assert result["versions"]["torch"] and result["versions"]["lightning"]
    assert result["versions"]["clusterbench"] == "0.1.0"
    assert result["config"]["run"]["method"] == "simclr" and result["seed"] == 0
    assert result["epochs"] == 1 and result["train_steps"] == 2  # the fast budget was applied
    assert result["data_provenance"] == "real"
    assert "online_val_acc" in result["metrics"]
    assert {"linear_probe_top1", "knn50_top1", "knn200_top1", "svm_top1", "kmeans_ari",
            "kmeans_nmi", "silhouette"} <= set(result["metrics"])
    assert (suite_dir / "runs/simclr/seed-0/tsne.png").read_bytes().startswith(b"\x89PNG")
    assert (suite_dir / "runs/simclr/seed-0/config.yaml").is_file()
    assert (suite_dir / "runs/simclr/seed-0/logs/metrics.csv").is_file()


def test_raw_pixel_baseline_is_a_real_measurement(smoke_fast):
    # Raw pixels of the 8x8 digits are close to linearly separable: a linear probe on them is far
    # above chance (10%) even with the fast budget's 2 probe epochs, and the kNN vote too.
    suite_dir, _ = smoke_fast
    result = json.loads((suite_dir / "runs/pixels/seed-0/result.json").read_text())
    assert result["epochs"] == 0 and result["metrics"]["knn50_top1"] > 0.8
    assert result["split_sizes"] == {"train": 1212, "val": 135, "test": 450}


def test_leaderboard_command_rebuilds_the_same_files(smoke_fast, tmp_path, capsys):
    suite_dir, _ = smoke_fast
    before = (suite_dir / "leaderboard.csv").read_text()
    (suite_dir / "leaderboard.csv").unlink()
    assert main(["leaderboard", str(suite_dir)]) == 0
    assert (suite_dir / "leaderboard.csv").read_text() == before
    out = capsys.readouterr().out
    assert any(line.split()[:2] == ["simclr", "digits"] for line in out.splitlines() if line)


def test_the_leaderboard_prints_as_a_terminal_table_not_markdown(smoke_fast, capsys):
    """``clusterbench leaderboard`` (and the end of ``bench``) print a rich table: one row a line
    with the columns aligned, no Markdown bars or ``|---|`` rule."""
    suite_dir, _ = smoke_fast
    assert main(["leaderboard", str(suite_dir)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert not [line for line in lines if line.lstrip().startswith("|") or "---|" in line]
    assert "Evaluation time" in out  # the other tables print too; the leaderboard's first
    lines = out.partition("Evaluation time")[0].partition("Training curves")[0].splitlines()
    header = next(line for line in lines if line.startswith("Method "))
    rows = [line for line in lines if line.split()[:1] in (["simclr"], ["supcon"], ["pixels"])]
    assert len(rows) == 3 and all(len(row) == len(header.rstrip()) or len(row) >= len(
        header.rstrip()) - 1 for row in rows)
    # the columns line up: the dataset of every row starts where the header's Dataset does
    column = header.index("Dataset")
    assert all(row[column:].startswith("digits") for row in rows)
    assert any(set(line.strip()) == {"─"} for line in lines)  # the rule under the header


def test_crashing_run_keeps_other_results_and_exits_1(tmp_path, monkeypatch):
    from modules.methods.simclr import SimCLR

    def crash(*args, **kwargs):  # a fault inside the first training step
        raise RuntimeError("training step crashed")

    monkeypatch.setattr(SimCLR, "objective", crash)
    suite = write_suite(tmp_path / "crashy.yaml", [
        {"name": "pixels", "method": "pixels"},
        {"name": "broken", "method": "simclr", "model": {"backbone_width": 4}},
    ])
    root = tmp_path / "results"
    assert main(["bench", str(suite), "--results", str(root), "--no-progress"]) == 1
    suite_dir = root / "crashy"
    assert not (suite_dir / "runs/broken/seed-0/result.json").exists()
    board = (suite_dir / "leaderboard.md").read_text()
    assert "| pixels |" in board and "| broken |" not in board


def test_a_crashing_rerun_leaves_the_earlier_result_config_and_logs_as_they_were(tmp_path,
                                                                                   monkeypatch):
    import benchmarks.run.one

    runs = [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}]
    suite = write_suite(tmp_path / "rerun.yaml", runs)
    root = tmp_path / "results"
    assert main(["bench", str(suite), "--results", str(root), "--no-progress"]) == 0
    seed_dir = root / "rerun/runs/simclr/seed-0"
    before = {p.relative_to(seed_dir): p.read_bytes() for p in seed_dir.rglob("*") if p.is_file()}
    assert {Path("result.json"), Path("config.yaml"), Path("logs/metrics.csv")} <= set(before)

    def crash(*args, **kwargs):  # trained, then fails while evaluating
        raise RuntimeError("evaluation crashed")

    monkeypatch.setattr(benchmarks.run.one, "evaluate_encoder", crash)
    write_suite(tmp_path / "rerun.yaml", [{**runs[0], "model": {"backbone_width": 6}}])
    assert main(["bench", str(suite), "--results", str(root), "--no-progress"]) == 1
    after = {p.relative_to(seed_dir): p.read_bytes() for p in seed_dir.rglob("*") if p.is_file()}
    assert after == before  # the earlier config and training curves were not touched
    attempt = seed_dir.with_name("seed-0.attempt")  # the crashed attempt's own logs, kept aside
    assert b"backbone_width: 6" in (attempt / "config.yaml").read_bytes()
    assert (attempt / "logs/metrics.csv").is_file() and not (attempt / "result.json").exists()


@pytest.mark.parametrize(("model", "message"), [
    ({"method": "simclr", "model": {"temperature": -1.0}}, "temperature must be > 0, got -1.0"),
    ({"method": "moco", "model": {"momentum": 1.5}}, "momentum must be in [0, 1), got 1.5"),
    ({"method": "moco", "model": {"key_momentum": 1.0}},
     "key_momentum must be in [0, 1), got 1.0"),
    ({"method": "transfusion", "model": {"num_blocks": 0}}, "num_blocks must be at least 1"),
])
def test_a_bad_model_value_exits_2_before_anything_trains(tmp_path, capsys, model, message):
    suite = write_suite(tmp_path / "badvalue.yaml", [
        {"name": "pixels", "method": "pixels"}, {"name": "bad", **model}])
    root = tmp_path / "results"
    assert main(["bench", str(suite), "--results", str(root), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "run 'bad'" in err and message in err
    assert not root.exists() or not any(root.rglob("result.json"))  # nothing ran


def test_every_shipped_training_suite_passes_the_value_check():
    from benchmarks.suites.preflight import check_values
    from benchmarks.suites.suite_file import suite_kind, suites

    for name in suites():
        if suite_kind(name) == "training":
            for fast in (False, True):
                check_values(load_suite(name, fast=fast))


@pytest.mark.parametrize("argv, message", [
    (["bench", "smokee"], "did you mean 'smoke'"),
    (["leaderboard", "/nonexistent/results"], "does not exist"),
    (["fit", "--model", "simclrr", "--data", "digits"], "unknown method 'simclrr'"),
    (["fit", "--model", "simclr", "--data", "digitz"], "unknown dataset 'digitz'"),
])
def test_bad_names_exit_2_with_the_available_names(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_misspelled_suite_key_exits_2_naming_it(tmp_path, capsys):
    suite = write_suite(tmp_path / "typo.yaml",
                        [{"name": "simclr", "method": "simclr", "model": {"temprature": 0.5}}])
    assert main(["bench", str(suite), "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "'temprature'" in err and "did you mean 'temperature'" in err
    assert not (tmp_path / "typo").exists()  # validated before anything ran


@pytest.mark.parametrize("argv, message", [
    (["--model.temprature", "0.3"], "unknown key 'temprature' in --model.* (SimCLR) (did you "
     "mean 'temperature'?)"),
    (["--data.batch_sise", "32"], "unknown key 'batch_sise' in --data.* (DigitsDataModule) "
     "(did you mean 'batch_size'?)"),
    # argparse would take it as the key it abbreviates
    (["--trainer.max_epoch", "3"], "unknown key 'max_epoch' in --trainer.* (did you mean "
     "'max_epochs'?)"),
    (["--ckpt_pth", "x.ckpt"], "unknown option '--ckpt_pth' (did you mean '--ckpt_path'?)"),
    (["--trainer.max_epochs", "two"], "--trainer.max_epochs: expected int"),
])
def test_misspelled_fit_key_is_one_line_with_the_closest_key_exit_2(argv, message, tmp_path,
                                                                     capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "--model", "simclr", "--data", "digits", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("clusterbench: error: ")
    assert message in err
    assert not (tmp_path / "results").exists()  # nothing ran


def test_the_help_answers_without_importing_torch():
    """``clusterbench --help`` and each subcommand's help parse in a blink: the parser and the
    error types import no torch, Lightning or Ray (they took 7-10 s on two cores)."""
    code = ("import sys; from benchmarks.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('torch', 'lightning', 'ray', 'benchmarks.suites.config') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_an_unknown_budget_is_one_line_naming_it_and_the_budgets_before_torch_loads():
    """``bench --budget cii``: one line naming the value, the closest budget and every budget,
    exit 2, without argparse's usage above it and before anything heavy is imported."""
    code = ("import sys; from benchmarks.cli import main; "
            "code = main(['bench', 'smoke', '--budget', 'cii', '--results', 'nowhere']); "
            "print(code, sorted(m for m in ('torch', 'lightning') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "2 []", done.stdout + done.stderr
    assert done.stderr.splitlines() == ["clusterbench: error: --budget cii is not a budget (did "
                                        "you mean 'ci'?); accepted: ci, fast, full"]


@pytest.mark.parametrize("command", ["bench", "tune"])
def test_an_address_nothing_answers_at_is_refused_before_torch_loads(tmp_path, command):
    """``--address`` is checked first: a wrong one is one line in a blink, not after the
    10 s a process takes to import torch and Lightning on two cores."""
    suite = write_suite(tmp_path / "addr.yaml", [{"name": "pixels", "method": "pixels"}])
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code = ("import sys; from benchmarks.cli import main; "
            f"code = main([{command!r}, {str(suite)!r}, '--address', '127.0.0.1:{port}']); "
            "print(code, sorted(m for m in ('torch', 'lightning') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "2 []", done.stdout + done.stderr
    assert done.stderr.startswith(f"clusterbench: error: --address 127.0.0.1:{port}: nothing "
                                  "answers"), done.stderr


def test_leaderboard_of_an_empty_directory_exits_2(tmp_path, capsys):
    assert main(["leaderboard", str(tmp_path)]) == 2
    assert "no result.json" in capsys.readouterr().err


def test_list_names_every_registered_thing(capsys):
    from benchmarks.experiments import EXPERIMENTS
    from benchmarks.protocols import PROTOCOLS
    from datamodules import DATAMODULES
    from modules.losses import CONTRASTIVE_LOSSES
    from modules.methods import METHODS

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in [*METHODS, *CONTRASTIVE_LOSSES, *PROTOCOLS, *DATAMODULES, *EXPERIMENTS, "smoke"]:
        assert f"  {name} " in out
    assert ("laplacian Kernel-InfoNCE with the exponential kernel exp(-||x - y||^gamma / tau), "
            "with gamma = 1.0; reads temperature.") in " ".join(out.split())


def test_the_docs_name_every_registered_loss_and_protocol():
    """The docs' method table and SimCLR's docstring list the losses by hand: a loss added to
    the table must appear there too, as every protocol in docs/protocols.md."""
    from benchmarks.protocols import PROTOCOLS
    from modules.losses import CONTRASTIVE_LOSSES
    from modules.methods import SimCLR
    from modules.methods.transfusion import TRANSFUSION_LOSSES

    docs = Path(__file__).resolve().parents[3] / "docs"
    rows = {line.split("|")[1].strip(): line for line in
            (docs / "suites.md").read_text().splitlines() if line.startswith("| `")}
    for name in CONTRASTIVE_LOSSES:
        assert f"`{name}`" in rows["`simclr`"] and f"`{name}`" in rows["`moco`"], name
        assert f"``{name}``" in SimCLR.__doc__, name
    for name in TRANSFUSION_LOSSES:
        assert f"`{name}`" in rows["`transfusion`"], name
    protocols = (docs / "protocols.md").read_text()
    for name in PROTOCOLS:
        assert f"`{name}`" in protocols, name


@pytest.mark.parametrize("section, class_path", [
    ("model", "os.system"), ("model", "subprocess.Popen"), ("data", "subprocess.Popen")])
def test_fit_config_class_paths_must_be_a_module_or_datamodule(section, class_path, tmp_path,
                                                               capsys, monkeypatch):
    """A ``fit -c`` config names classes by import path (LightningCLI): one that is not a
    registered method (``model``) or dataset (``data``) is refused in one line before
    LightningCLI reads the file, so nothing is instantiated."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "ran"
    config = {"model": {"class_path": "modules.methods.simclr.SimCLR"},
              "data": {"class_path": "datamodules.DigitsDataModule"},
              "trainer": {"fast_dev_run": True}}
    init_args = {"os.system": {"command": f"touch {marker}"},
                 "subprocess.Popen": {"args": ["touch", str(marker)]}}[class_path]
    config[section] = {"class_path": class_path, "init_args": init_args}
    (tmp_path / "fit.yaml").write_text(yaml.safe_dump(config))
    assert main(["fit", "-c", str(tmp_path / "fit.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("clusterbench: error: ") and len(err.strip().splitlines()) == 1
    assert f"{section}.class_path" in err and "registered name" in err
    assert not marker.exists() and not (tmp_path / "results").exists()


def test_fit_saves_resolved_config_and_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["fit", "--model", "simclr", "--data", "digits", "--model.temperature", "0.3",
                 "--model.backbone_width", "4", "--trainer.max_epochs", "1",
                 "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
                 "--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu"])
    assert code == 0
    (log_dir,) = list((tmp_path / "results/fit/lightning_logs").iterdir())
    config = yaml.safe_load((log_dir / "config.yaml").read_text())
    assert config["model"]["class_path"] == "modules.methods.simclr.SimCLR"
    assert config["model"]["init_args"]["temperature"] == 0.3
    # num_classes and input_shape are linked from the datamodule when it is instantiated
    hparams = yaml.unsafe_load((log_dir / "hparams.yaml").read_text())
    assert hparams["num_classes"] == 10 and list(hparams["input_shape"]) == [1, 8, 8]
    environment = json.loads((log_dir / "environment.json").read_text())
    assert environment["versions"]["lightning"]
    assert (log_dir / "metrics.csv").is_file()


def test_a_batch_count_stays_a_count_whichever_union_order_the_process_built_first(
        tmp_path, monkeypatch):
    """typing caches ``Union[float, int]`` as ``Union[int, float]``: after an import that built
    the float-first order (Ray Tune's does), the Trainer's batch limits are annotated float
    first. ``1`` is still one batch, never the whole split (1.0), and ``0.5`` still a fraction."""
    import lightning.pytorch as pl

    annotations = pl.Trainer.__init__.__annotations__
    for key in ("limit_train_batches", "limit_val_batches"):
        monkeypatch.setitem(annotations, key, float | int | None)  # built anew: not cached
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "--model", "simclr", "--data", "digits", "--model.backbone_width", "4",
                 "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "1",
                 "--trainer.limit_val_batches", "0.5", "--trainer.enable_progress_bar",
                 "false", "--trainer.accelerator", "cpu"]) == 0
    (log_dir,) = list((tmp_path / "results/fit/lightning_logs").iterdir())
    trainer = yaml.safe_load((log_dir / "config.yaml").read_text())["trainer"]
    assert trainer["limit_train_batches"] == 1 and type(trainer["limit_train_batches"]) is int
    assert trainer["limit_val_batches"] == 0.5
    rows = list(csv.DictReader((log_dir / "metrics.csv").open()))
    assert max(int(row["step"]) for row in rows) + 1 == 1  # one batch, not the epoch


def test_per_layer_fusion_is_recorded_and_tabled_for_transfusion(tmp_path):
    suite = write_suite(tmp_path / "fusion.yaml", [
        {"name": "tf", "method": "transfusion",
         "model": {"backbone": "flatten", "num_blocks": 3, "lr": 1e-3}},
        {"name": "pixels", "method": "pixels"},
    ], evaluation={"knn": {"k": [5], "temperature": None},
                   "per_layer": {"silhouette_metric": "cosine", "scores": "relu",
                                 "tsne_iterations": 250}})
    root = tmp_path / "results"
    assert main(["bench", str(suite), "--results", str(root), "--no-progress"]) == 0
    layers = json.loads((root / "fusion/runs/tf/seed-0/result.json").read_text())["per_layer"]
    assert [layer["layer"] for layer in layers] == [0, 1, 2]  # the blocks' inputs
    assert all(-1.0 <= layer["silhouette"] <= 1.0 for layer in layers)
    assert json.loads((root / "fusion/runs/pixels/seed-0/result.json").read_text())[
        "per_layer"] is None  # no fusion blocks, nothing to analyse
    board = (root / "fusion/leaderboard.md").read_text()
    assert "## Per-layer fusion" in board and "| tf | digits | X^2 (embedding) |" in board
    header = next(line for line in board.split("## Per-layer fusion")[1].splitlines()
                  if line.startswith("| Method |"))
    assert ("| Raw sharpness (median) | Raw sharpness (min) | Same-class A ≤ 0 (share) | "
            "Different-class A > 0 (share) |") in header
    tsne = (root / "fusion/runs/tf/seed-0/per-layer-tsne.png").read_bytes()
    assert tsne.startswith(b"\x89PNG")
    import base64

    assert base64.b64encode(tsne).decode()[:200] in (root / "fusion/leaderboard.html").read_text()


@pytest.mark.parametrize("argv, message", [
    (["--data.val_fraction", "2"], "val_fraction must be in (0, 1), got 2.0"),
    (["--model.loss", "cosine"], "unknown SimCLR loss 'cosine'"),
])
def test_fit_bad_values_exit_2_naming_them(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "--model", "simclr", "--data", "digits", *argv]) == 2
    last_line = capsys.readouterr().err.strip().splitlines()[-1]
    assert last_line.startswith("clusterbench: error: ") and message in last_line


def test_bad_data_value_in_a_suite_exits_2_before_anything_runs(tmp_path, capsys):
    suite = write_suite(tmp_path / "bad.yaml", [{"name": "pixels", "method": "pixels"}])
    raw = yaml.safe_load(suite.read_text())
    raw["data"]["val_fraction"] = 1.5
    suite.write_text(yaml.safe_dump(raw))
    assert main(["bench", str(suite), "--results", str(tmp_path)]) == 2
    assert "val_fraction must be in (0, 1), got 1.5" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_missing_data_is_said_once_per_dataset_before_anything_trains(tmp_path, capsys,
                                                                       monkeypatch):
    """Three runs on CIFAR-10 without its files: one line names the dataset once, where it was
    looked for and the command that fetches it; nothing trains, not even the digits run."""
    monkeypatch.setenv("CLUSTERBENCH_DATA", str(tmp_path / "empty"))
    suite = write_suite(tmp_path / "nodata.yaml", [
        {"name": "cifar-pixels", "method": "pixels", "data": {"name": "cifar10"}},
        {"name": "cifar-simclr", "method": "simclr", "data": {"name": "cifar10"}},
        {"name": "cifar-supcon", "method": "supcon", "data": {"name": "cifar10"}},
        {"name": "digits-pixels", "method": "pixels"},
    ])
    root = tmp_path / "results"
    assert main(["bench", str(suite), "--results", str(root), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"clusterbench: error: 1 dataset(s) missing, nothing trained: cifar10 (looked in "
        f"{tmp_path / 'empty' / 'cifar-10-batches-py'}; fetch it with: clusterbench data fetch "
        f"cifar10 --to {tmp_path / 'empty'})"]
    assert not list(root.rglob("result.json"))


@pytest.mark.slow
def test_tune_records_a_diverging_trial_as_failed_and_resume_reruns_nothing(tmp_path,
                                                                            local_ray):
    suite = write_suite(tmp_path / "diverge.yaml", [
        {"name": "simclr", "method": "simclr",
         "model": {"backbone_width": 4, "projector_hidden": 16, "optimizer": "sgd"}}],
        # lr = inf: the first SGD step makes every weight infinite, so the loss is NaN by
        # construction, whatever the torch release (a large finite lr once stayed finite)
        search={"model.lr": {"grid": [1.0e-3, math.inf]}})
    storage = tmp_path / "search"
    # grace period = budget and one trial at a time: ASHA cannot stop the sane trial, whatever
    # order the trials reach their rungs in (this test is about failures and resume)
    schedule = ("--num-samples", "1", "--max-epochs", "1", "--grace-period", "1",
                "--max-concurrent", "1")  # the grid once: two trials
    assert main(["tune", str(suite), *schedule, "--storage", str(storage)]) == 0
    trials = {float(t["model.lr"]): t for t in csv.DictReader((storage / "trials.csv").open())}
    assert trials[math.inf]["status"] == "failed"
    assert "diverged at epoch 0, step" in trials[math.inf]["error"]
    assert trials[1.0e-3]["status"] == "completed" and trials[1.0e-3]["epochs"] == "1"
    best = yaml.safe_load((storage / "best_config.yaml").read_text())
    assert best["model"]["lr"] == 1.0e-3 and best["trials_failed"] == 1
    assert (storage / "trials.png").read_bytes().startswith(b"\x89PNG")
    assert best["configurations_searched"] == 2  # the grid's two trials
    diverged = json.loads((storage / "simclr" / "trials" / trials[math.inf]["trial_id"]
                           / "record.json").read_text())
    assert len(diverged["attempts"]) == 1  # its values diverge again: not retried
    before = (storage / "trials.csv").read_text()
    # what a trial writes as it trains: its record (every start of it) and its checkpoint
    trial_files = {p: p.read_bytes() for p in (storage / "simclr" / "trials").rglob("*")
                   if p.is_file()}
    assert main(["tune", str(suite), *schedule, "--storage", str(storage), "--resume"]) == 0
    assert (storage / "trials.csv").read_text() == before
    # neither the completed nor the failed trial trained again
    assert len(trial_files) >= 3 and all(p.read_bytes() == b for p, b in trial_files.items())


@pytest.mark.slow
def test_a_suite_given_by_a_relative_path_can_be_searched(tmp_path, monkeypatch, local_ray):
    """Ray runs each trial in a working directory of its own, where a relative path names
    nothing: the suite's path is made absolute when it is loaded. The search leaves this
    process's Ctrl-C as it found it (Ray Tune's own handler stayed, and the next Ctrl-C only
    told the finished search to stop)."""
    monkeypatch.chdir(tmp_path)
    write_suite(tmp_path / "relative.yaml",
                [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}],
                search={"space": {"model.lr": {"choice": [1.0e-3]}}, "num_samples": 1,
                        "max_epochs": 1})
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGUSR1)}
    assert main(["tune", "relative.yaml", "--storage", "search"]) == 0
    (trial,) = csv.DictReader((tmp_path / "search/trials.csv").open())
    assert trial["status"] == "completed" and not trial["error"]
    assert {s: signal.getsignal(s) for s in handlers} == handlers


@pytest.mark.slow
def test_a_search_waiting_on_resources_gives_up_after_its_budget_naming_them(tmp_path,
                                                                            local_ray, capsys):
    """Every CPU of the Ray instance held by a placement group: no trial can start, and the
    search fails after --resource-wait seconds, exit 2, in one line naming what it waited for."""
    from busy_ray import every_cpu_held

    with every_cpu_held():
        assert main(["tune", "smoke", "--fast", "--num-samples", "1", "--max-epochs", "1",
                     "--resource-wait", "3", "--storage", str(tmp_path / "search")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("clusterbench: error: no trial could start for 3 s: each needs "
                              "1 CPU on one node, and the cluster has {")
    assert "--resume continues (raise --resource-wait to wait longer)" in err[-1]
    assert "what finished is kept" in err[-1]


@pytest.mark.slow
def test_tune_refuses_more_gpus_than_the_cluster_has_before_any_trial(tmp_path, local_ray,
                                                                      capsys):
    assert main(["tune", "smoke", "--fast", "--gpus-per-trial", "1", "--storage",
                 str(tmp_path / "search")]) == 2
    err = capsys.readouterr().err
    assert "--gpus-per-trial 1 is more than any one node of the Ray cluster has" in err
    assert not (tmp_path / "search" / "trials.csv").exists()


def test_tune_resume_without_a_search_exits_2(tmp_path, capsys):
    assert main(["tune", "smoke", "--fast", "--resume", "--storage", str(tmp_path)]) == 2
    assert "nothing to resume" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_searches_then_retrains_the_best_configuration_and_reuses_the_search(
        tmp_path, local_ray, capsys, monkeypatch):
    from test_console import boilerplate

    root = tmp_path / "results"
    assert main(["bench", "smoke", "--fast", "--runs", "simclr", "--results", str(root),
                 "--no-progress"]) == 0
    suite_dir = root / "smoke-fast"
    search = suite_dir / "search" / "simclr"
    trials = list(csv.DictReader((search / "trials.csv").open()))
    assert len(trials) == 2  # the fast budget's num_samples
    best = yaml.safe_load((search / "best_config.yaml").read_text())
    rows = {row["run"]: row for row in csv.DictReader((suite_dir / "leaderboard.csv").open())}
    assert set(rows) == {"simclr", "simclr+tuned"}
    assert rows["simclr+tuned"]["configurations_searched"] == "2"
    assert rows["simclr"]["configurations_searched"] == ""
    tuned = json.loads((suite_dir / "runs/simclr+tuned/seed-0/result.json").read_text())
    # the retrained run has the winner's sampled values and the suite's budget, not the search's
    assert tuned["config"]["run"]["model"]["lr"] == best["model"]["lr"]
    assert tuned["config"]["run"]["model"]["temperature"] == best["model"]["temperature"]
    assert tuned["search"]["configurations_searched"] == 2 and tuned["epochs"] == 1
    assert "2 configs (ASHA" in (suite_dir / "leaderboard.md").read_text()
    assert "search-trials.png" in tuned["figures"]
    # the search's time, as the suite's report gives it
    assert best["budget"]["starts"] == 1 and 0 < best["budget"]["wall_seconds"] < 600
    assert tuned["search"]["wall_seconds"] == best["budget"]["wall_seconds"]
    assert main(["report", str(suite_dir), "--out", str(tmp_path / "pages")]) == 0
    assert re.search(r"^\| Search time \| simclr\+tuned: (\d+ min )?\d+ s \(2 configurations, "
                     r"ASHA, ≤ 2 epochs\) \|$",
                     (tmp_path / "pages" / "smoke-fast.md").read_text(), re.M)
    before = (search / "trials.csv").read_text()
    capsys.readouterr()
    assert main(["bench", "smoke", "--fast", "--runs", "simclr", "--results", str(root),
                 "--no-progress"]) == 0
    assert "reusing the finished search" in capsys.readouterr().err
    assert (search / "trials.csv").read_text() == before
    # tune, with the same seed, space and budget, makes the same decisions on the same values
    storage = tmp_path / "tuned"
    capsys.readouterr()
    assert main(["tune", "smoke", "--fast", "--run", "simclr", "--storage", str(storage)]) == 0
    for name in ("trials.csv", "decisions.csv"):
        assert (storage / name).read_text() == (search / name).read_text(), name
    # quietly: a line per trial, ASHA's decisions and the summary; Ray's own lines in its log
    printed = capsys.readouterr()
    lines = (printed.out + printed.err).strip().splitlines()
    assert boilerplate(printed.out + printed.err) == [] and len(lines) <= 12, lines
    assert sum(line.startswith("trial 000") for line in lines) == 2
    assert f"Ray's own messages: {storage / 'ray.log'}" in lines
    for trial in csv.DictReader((storage / "trials.csv").open()):
        assert 1e-5 <= float(trial["model.lr"]) <= 1e-2  # from the suite's space
    # the best configuration trains as it is with clusterbench fit (here on a tiny budget)
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "-c", str(storage / "best_config.yaml"), "--trainer.max_epochs", "1",
                 "--trainer.limit_train_batches", "1", "--trainer.limit_val_batches", "1",
                 "--trainer.enable_progress_bar", "false"]) == 0
    (log_dir,) = (tmp_path / "results/fit/lightning_logs").iterdir()
    config = yaml.safe_load((log_dir / "config.yaml").read_text())
    assert config["model"]["class_path"] == "modules.methods.simclr.SimCLR"
    assert config["model"]["init_args"]["lr"] == best["model"]["lr"]


@pytest.mark.parametrize("argv, message", [
    (["--gpus-per-trial", "1.5"], "must be a whole number of GPUs"),
    (["--gpus-per-trial", "2", "--workers-per-trial", "3"], "one worker per GPU"),
    (["--workers-per-trial", "0"], "--workers-per-trial must be an integer of at least 1"),
    (["--reduction-factor", "1"], "--reduction-factor must be above 1"),
])
def test_bad_trial_resources_exit_2_before_ray_starts(argv, message, tmp_path, capsys):
    assert main(["tune", "smoke", "--fast", *argv, "--storage", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


def test_cluster_specific_models_report_their_own_assignment_ari(tmp_path):
    import torch
    from torch import nn

    from benchmarks.run.one import assignment_ari
    from datamodules import DATAMODULES

    datamodule = DATAMODULES["iris"](batch_size=16)
    datamodule.setup("fit")

    class Oracle(nn.Module):  # assigns by a relabelling of the true class: ARI 1
        def __init__(self, constant: bool) -> None:
            super().__init__()
            self.constant, self.lookup = constant, {}

        def assign(self, x: torch.Tensor) -> torch.Tensor:
            if self.constant:
                return torch.zeros(len(x), dtype=torch.long)
            return torch.tensor([self.lookup[tuple(row.tolist())] for row in x])

    oracle = Oracle(constant=False)
    for x, y in datamodule.test_dataloader():
        oracle.lookup.update({tuple(r.tolist()): (2 - int(c)) for r, c in zip(x, y, strict=True)})
    assert assignment_ari(oracle, datamodule) == pytest.approx(1.0)
    assert assignment_ari(Oracle(constant=True), datamodule) == pytest.approx(0.0)

    suite = write_suite(tmp_path / "tz.yaml", [{"name": "ptae", "method": "ptae"},
                                               {"name": "ae", "method": "ae"}],
                        data={"name": "iris", "batch_size": 32})
    root = tmp_path / "results"
    assert main(["bench", str(suite), "--results", str(root), "--no-progress"]) == 0
    metrics = json.loads((root / "tz/runs/ptae/seed-0/result.json").read_text())["metrics"]
    assert -1.0 <= metrics["assignment_ari"] <= 1.0
    assert "assignment_ari" not in json.loads(
        (root / "tz/runs/ae/seed-0/result.json").read_text())["metrics"]
    assert "Assignment ARI (eq. 2)" in (root / "tz/leaderboard.md").read_text()


@pytest.mark.parametrize("flags", [["--runs", "ae"], ["--logger", "wandb"],
                                   ["--accelerator", "gpu"], ["--address", "auto"]])
def test_bench_refuses_training_options_for_an_experiment_suite(flags, tmp_path, capsys):
    assert main(["bench", "tensorized", "--results", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err
    assert "experiment suite" in err and flags[0] in err
    assert not any(tmp_path.iterdir())  # nothing ran


def test_checked_space_refuses_non_numeric_bounds_and_reads_yaml_1_2_floats(tmp_path):
    from tune.search import checked_space

    path = tmp_path / "bounds.yaml"
    path.write_text("name: bounds\nseeds: [0]\ndata: {name: digits}\n"
                    "evaluation: {knn: {k: 5, temperature: null}}\n"
                    "runs: [{name: simclr, method: simclr}]\n"
                    "search: {space: {model.lr: {loguniform: [1e-2, 10]}}}\n")
    suite = load_suite(str(path))
    lr = checked_space(suite.settings, suite.search, suite.run("simclr"))["model.lr"]
    assert lr == {"loguniform": [1e-2, 10]}  # YAML 1.1 would have read '1e-2' as a string
    path.write_text(path.read_text().replace("[1e-2, 10]", "[small, 10]"))
    with pytest.raises(ConfigError, match=r"loguniform takes numbers \[low, high\], got "
                                          r"\['small', 10\]"):
        edited = load_suite(str(path))
        checked_space(edited.settings, edited.search, edited.run("simclr"))


def test_a_papers_per_layer_silhouettes_are_checked_and_shown_beside_ours(tmp_path, capsys):
    """TransFusion's Table 2 gives a silhouette per layer: a run records them under
    paper.per_layer_silhouette, and the per-layer table shows them beside ours, by layer."""
    paper = {"source": "Table 2", "per_layer_silhouette": {0: -0.14, 2: -0.08}}
    runs = [{"name": "tf", "method": "transfusion", "paper": paper,
             "model": {"backbone": "flatten", "num_blocks": 3, "lr": 1e-3}}]
    evaluation = {"knn": {"k": [5], "temperature": None},
                  "per_layer": {"silhouette_metric": "cosine", "scores": "relu",
                                "tsne_iterations": 250}}
    root = tmp_path / "results"
    for bad, message in [({0: 1.5}, "per_layer_silhouette.0 must be a silhouette in [-1, 1], "
                                     "got 1.5"),
                         ({"input": 0.1}, "layer 'input' is not a whole number from 0")]:
        suite = write_suite(tmp_path / "fusion.yaml", [
            {**runs[0], "paper": {**paper, "per_layer_silhouette": bad}}], evaluation=evaluation)
        assert main(["bench", str(suite), "--results", str(root), "--no-progress"]) == 2
        assert message in capsys.readouterr().err
    suite = write_suite(tmp_path / "fusion.yaml", runs, evaluation=evaluation)
    assert main(["bench", str(suite), "--results", str(root), "--no-progress"]) == 0
    board = (root / "fusion/leaderboard.md").read_text()
    table = board.split("## Per-layer fusion", 1)[1]
    assert "| Layer | Silhouette | Paper silhouette |" in table
    lines = [line for line in table.splitlines() if line.startswith("| tf | digits |")]
    assert [line.split(" | ")[4] for line in lines] == ["-0.14", "", "-0.08"]


@pytest.mark.parametrize(("address", "says"), [
    ("garbage", "--address 'garbage' is not auto, HOST:PORT or ray://HOST:PORT"),
    ("127.0.0.1:99999", "is not auto, HOST:PORT or ray://HOST:PORT"),
    ("127.0.0.1:1", "--address 127.0.0.1:1: nothing answers at 127.0.0.1:1"),
])
def test_a_bad_or_unreachable_ray_address_is_one_line_before_anything(tmp_path, capsys,
                                                                        address, says):
    """A garbage address gave a traceback and an empty suite folder; an unreachable one retried
    for 837 s before a traceback."""
    import time

    suite = write_suite(tmp_path / "addr.yaml", [{"name": "pixels", "method": "pixels"}])
    root = tmp_path / "results"
    start = time.monotonic()
    assert main(["bench", str(suite), "--results", str(root), "--address", address]) == 2
    assert time.monotonic() - start < 30
    assert says in capsys.readouterr().err
    assert not root.exists()
    assert main(["tune", str(suite), "--address", address]) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("reply", [b"HTTP/1.1 400 Bad Request\r\n\r\n", b""])
def test_a_service_that_is_not_ray_at_the_address_is_one_line_before_anything(tmp_path, capsys,
                                                                             reply):
    """An HTTP server (or one that says nothing) where the cluster was expected: Ray's client
    waited 40 s, then ray.init 180 s more, after the suite folder was made."""
    import socket
    import threading
    import time

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            with connection:
                if reply:
                    connection.sendall(reply)
                else:
                    connection.recv(1024)  # reads, answers nothing until the client gives up

    threading.Thread(target=serve, daemon=True).start()
    suite = write_suite(tmp_path / "addr.yaml", [{"name": "pixels", "method": "pixels"}])
    root = tmp_path / "results"
    says = (f"--address 127.0.0.1:{port}: the service at 127.0.0.1:{port} is not a Ray "
            "cluster's")
    try:
        start = time.monotonic()
        assert main(["bench", str(suite), "--results", str(root), "--address",
                     f"127.0.0.1:{port}"]) == 2
        assert main(["tune", str(suite), "--address", f"127.0.0.1:{port}"]) == 2
        assert time.monotonic() - start < 30
    finally:
        server.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(says in line for line in err), err
    assert not root.exists()
