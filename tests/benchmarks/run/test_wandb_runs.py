"""The W&B side of a suite run, checked on real offline runs read back with wandb's own reader."""

from __future__ import annotations

import csv
import io
import json
import os
import re
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.run.wandb_runs import (
    WandbSettings,
    make_wandb_logger,
    offline_run_dirs,
    read_offline_run,
    record_evaluation,
    record_leaderboard,
    run_id,
    wandb_mode,
)

SETTINGS = WandbSettings(project="clusterbench-test", tags=("test",))
METRICS = {"linear_probe_top1": 0.9, "knn50_top1": 0.8}


@pytest.fixture(autouse=True)
def offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Offline W&B with every file it writes (runs, core logs, artifact staging) under tmp_path.

    ``make test`` exports WANDB_MODE=disabled; these tests need real offline runs to read back.
    """
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var, sub in (("WANDB_DIR", "wandb-dir"), ("WANDB_CACHE_DIR", "cache"),
                     ("WANDB_CONFIG_DIR", "config"), ("WANDB_DATA_DIR", "data"),
                     ("XDG_CACHE_HOME", "xdg-cache"), ("XDG_CONFIG_HOME", "xdg-config")):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(var, str(tmp_path / sub))
    yield
    import wandb

    if wandb.run is not None:  # a failing test must not leave its run open for the next one
        wandb.run.finish()


def png_bytes() -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1), dpi=20)
    ax.plot([0, 1], [1, 0])
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()


class TinyClassifier(pl.LightningModule):
    """Two linear layers on random data: just enough to log a training curve per step."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=False)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("online_val_acc", (self.net(x).argmax(1) == y).float().mean(), on_epoch=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def tiny_loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 8, generator=g), torch.randint(0, 2, (64,), generator=g))
    return DataLoader(data, batch_size=16)


def train(logger, tmp_path: Path, epochs: int = 2) -> None:
    trainer = pl.Trainer(max_epochs=epochs, logger=logger, accelerator="cpu", devices=1,
                         log_every_n_steps=1, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path)
    trainer.fit(TinyClassifier(), tiny_loader(), tiny_loader())


def only_run(save_dir: Path, rid: str) -> dict:
    (run_dir,) = offline_run_dirs(save_dir, rid)
    return read_offline_run(run_dir)


def test_training_curves_then_evaluation_and_figures_land_in_one_run(tmp_path):
    save_dir = tmp_path / "runs"
    config = {"method": "simclr", "lr": 0.1, "model": {"backbone": "mlp"}}
    logger = make_wandb_logger(SETTINGS, suite="smoke", run="simclr-mlp", trains=True,
                               seed=3, budget="full", save_dir=save_dir, config=config)
    train(logger, tmp_path)
    record_evaluation(logger, METRICS, {"tsne.png": png_bytes()},
                      notes={"probe": "100 epochs"}, extra_summary={"train_seconds": 1.5})

    got = only_run(save_dir, run_id("smoke", "simclr-mlp", 3, budget="full"))
    # 2 epochs x 4 batches, one train_loss row each
    assert len([row for row in got["history"] if "train_loss" in row]) == 8
    assert any("online_val_acc" in row for row in got["history"])
    # the evaluation comes after training, once, as a chartable row and in the summary
    eval_rows = [i for i, row in enumerate(got["history"]) if "eval/linear_probe_top1" in row]
    assert len(eval_rows) == 1
    assert eval_rows[0] > max(i for i, row in enumerate(got["history"]) if "train_loss" in row)
    assert got["summary"]["eval/linear_probe_top1"] == pytest.approx(0.9)
    assert got["summary"]["eval/knn50_top1"] == pytest.approx(0.8)
    assert got["summary"]["notes/probe"] == "100 epochs"
    assert got["summary"]["train_seconds"] == 1.5
    assert got["summary"]["figures/tsne._type"] == "image-file"
    assert any(f.startswith("media/images/figures/tsne") and f.endswith(".png")
               for f in got["files"])
    assert {k: got["config"][k] for k in config} == config
    assert got["run"] == {"id": run_id("smoke", "simclr-mlp", 3, budget="full"),
                          "project": "clusterbench-test", "group": "smoke/simclr-mlp",
                          "job_type": "train",
                          "name": "smoke/simclr-mlp/seed-3", "tags": ["test"]}


def test_untrained_baseline_is_recorded_and_fast_budget_gets_its_own_group(tmp_path):
    # the pixels baseline never trains: record_evaluation starts the run through the logger
    save_dir = tmp_path / "runs"
    logger = make_wandb_logger(SETTINGS, suite="smoke", run="pixels", trains=False, seed=0,
                               budget="fast", save_dir=save_dir, config={"method": "pixels"})
    record_evaluation(logger, METRICS, {})

    got = only_run(save_dir, run_id("smoke", "pixels", 0, budget="fast"))
    assert got["run"]["group"] == "smoke-fast/pixels" and got["run"]["job_type"] == "evaluate"
    assert got["run"]["name"] == "smoke-fast/pixels/seed-0"
    assert got["summary"]["eval/knn50_top1"] == pytest.approx(0.8)
    assert got["config"]["method"] == "pixels"


def test_run_id_is_deterministic_and_says_which_run_seed_and_budget():
    ids = {run_id(suite, run, seed, fast) for suite in ("smoke", "table1")
           for run in ("simclr", "moco") for seed in (0, 1) for fast in (False, True)}
    assert len(ids) == 16
    assert run_id("smoke", "simclr", 0, False) == run_id("smoke", "simclr", 0, False)
    assert all(re.fullmatch(r"[a-z0-9]+", i) for i in ids)  # what W&B accepts in a run id


def test_resumed_run_seed_continues_the_same_wandb_run(tmp_path):
    save_dir = tmp_path / "runs"
    for _ in range(2):
        logger = make_wandb_logger(SETTINGS, suite="smoke", run="simclr", trains=True,
                                   seed=0, budget="full", save_dir=save_dir, config={})
        record_evaluation(logger, METRICS, {})
    other = make_wandb_logger(SETTINGS, suite="smoke", run="simclr", trains=True, seed=1,
                              budget="full", save_dir=save_dir, config={})
    record_evaluation(other, METRICS, {})

    rid = run_id("smoke", "simclr", 0, budget="full")
    # offline, each resume writes a new directory; `wandb sync` sends both to the same run id
    resumed = offline_run_dirs(save_dir, rid)
    assert len(resumed) == 2
    assert [read_offline_run(d)["run"]["id"] for d in resumed] == [rid, rid]
    assert len(offline_run_dirs(save_dir)) == 3


def test_an_open_run_is_refused_rather_than_reused(tmp_path):
    import wandb

    wandb.init(project="clusterbench-test", dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="still open"):
        make_wandb_logger(SETTINGS, suite="smoke", run="simclr", trains=True, seed=0,
                          budget="full", save_dir=tmp_path / "runs", config={})


def test_disabled_mode_writes_nothing_and_stays_disabled(tmp_path, monkeypatch):
    # Lightning's offline=True would flip WANDB_MODE to "dryrun" for the whole process
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode() == "disabled"
    save_dir = tmp_path / "runs"
    logger = make_wandb_logger(SETTINGS, suite="smoke", run="simclr", trains=True, seed=0,
                               budget="full", save_dir=save_dir, config={})
    record_evaluation(logger, METRICS, {"tsne.png": png_bytes()})
    assert os.environ["WANDB_MODE"] == "disabled"
    assert offline_run_dirs(save_dir) == []


LEADERBOARD = [["suite", "run", "linear_probe_top1_mean", "linear_probe_top1_std", "device"],
               ["smoke", "simclr", "0.91", "0.02", "cpu"],
               ["smoke", "pixels", "0.5", "", "cpu"]]


@pytest.mark.parametrize("with_figures", [True, False])
def test_leaderboard_run_holds_the_csv_as_a_table(tmp_path, with_figures):
    suite_dir = tmp_path / "smoke"
    suite_dir.mkdir()
    with (suite_dir / "leaderboard.csv").open("w", newline="") as file:
        csv.writer(file).writerows(LEADERBOARD)
    if with_figures:
        (suite_dir / "figures").mkdir()
        (suite_dir / "figures" / "linear_probe_top1.png").write_bytes(png_bytes())

    record_leaderboard(SETTINGS, suite="smoke", budget="full", suite_dir=suite_dir)

    (run_dir,) = offline_run_dirs(suite_dir)
    got = read_offline_run(run_dir)
    assert got["run"]["job_type"] == "leaderboard"
    assert got["run"]["group"] == "smoke"
    assert got["run"]["name"] == "smoke/leaderboard"
    assert got["summary"]["leaderboard._type"] == "table-file"
    (table_file,) = [f for f in got["files"] if f.startswith("media/table/leaderboard")]
    table = json.loads((run_dir / "files" / table_file).read_text())
    assert table["columns"] == LEADERBOARD[0]
    assert table["data"] == [["smoke", "simclr", 0.91, 0.02, "cpu"],
                             ["smoke", "pixels", 0.5, None, "cpu"]]
    images = [f for f in got["files"] if f.startswith("media/images/figures/linear_probe_top1")]
    assert len(images) == int(with_figures)


def test_bench_with_wandb_gives_one_run_per_run_seed_with_its_evaluation_and_the_table(
        tmp_path):
    """The whole path: ``clusterbench bench --logger wandb`` on a suite, read back."""
    import yaml

    from benchmarks.cli import main

    suite = tmp_path / "wb.yaml"
    suite.write_text(yaml.safe_dump({
        "name": "wb", "seeds": [0], "data": {"name": "digits", "batch_size": 64,
                                             "limit_per_class": 10},
        "trainer": {"max_epochs": 2, "accelerator": "cpu", "log_every_n_steps": 1},
        "evaluation": {"linear_probe": {"epochs": 2, "lr": 0.3,
                                        "batch_size": 64, "weight_decay": 1.0e-6},
                       "knn": {"k": [5], "temperature": None}, "tsne": {"iterations": 250}},
        "runs": [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}},
                 {"name": "pixels", "method": "pixels"}]}))
    results = tmp_path / "results"
    assert main(["bench", str(suite), "--results", str(results), "--no-progress", "--logger",
                 "wandb", "--wandb-project", "cb-test", "--wandb-tags", "nightly", "cpu",
                 "--fast"]) == 0
    for name in ("simclr", "pixels"):
        seed_dir = results / f"wb-fast/runs/{name}/seed-0"
        result = json.loads((seed_dir / "result.json").read_text())
        (run_dir,) = offline_run_dirs(results / "wb-fast",  # beside the runs, not in them
                                      run_id("wb", name, 0, budget="fast"))
        run = read_offline_run(run_dir)
        assert run["run"]["group"] == f"wb-fast/{name}" and run["run"]["tags"] == ["nightly", "cpu"]
        assert run["run"]["job_type"] == ("train" if name == "simclr" else "evaluate")
        if name == "simclr":  # the arguments NT-Xent uses, resolved; not the kernels' defaults
            used = run["config"]["hyperparameters"]
            assert used["temperature"] == 0.5 and used["loss"] == "nt_xent"
            assert not {"tau1", "tau2", "lam", "gamma", "momentum"} & set(used)
            assert not {"tau1", "tau2", "lam", "gamma"} & set(run["config"])  # nor flat
        for metric, value in result["metrics"].items():  # every evaluation number, in W&B
            assert run["summary"][f"eval/{metric}"] == pytest.approx(value)
        # and what it cost: training, evaluation and each evaluation step, in seconds
        assert run["summary"]["time/train_seconds"] == pytest.approx(result["train_seconds"])
        assert run["summary"]["time/eval_seconds"] == pytest.approx(result["eval_seconds"])
        assert {key for key in run["summary"] if key.startswith("time/")} == {
            "time/train_seconds", "time/eval_seconds", "time/features_seconds",
            "time/linear_probe_seconds", "time/knn_seconds", "time/tsne_seconds"}
        assert any("tsne" in f for f in run["files"])  # the figure, as an image
        if name == "simclr":  # the training curves, in the same run
            assert sum("train_loss" in row for row in run["history"]) >= 2
    (board_dir,) = [d for d in offline_run_dirs(results / "wb-fast")
                    if read_offline_run(d)["run"]["job_type"] == "leaderboard"]
    board = read_offline_run(board_dir)
    assert board["run"]["job_type"] == "leaderboard"
    assert board["summary"]["leaderboard._type"] == "table-file"


def test_a_search_trial_is_a_finished_wandb_run_with_its_curves(tmp_path):
    """A trial's run: in the project, entity and tags asked for, grouped by its search, job
    type ``search``, its files in the search's storage; its per-epoch metrics in the history,
    a summary, and an exit record (a run left open was abandoned when Ray ended the trial)."""
    from benchmarks.run.spec import RunSpec
    from tune.trial import TrialSpec, build_trial, trial_logger

    run = RunSpec(name="simclr", method="simclr", model={"backbone_width": 4},
                  data={"name": "digits", "batch_size": 64, "limit_per_class": 10},
                  trainer={"accelerator": "cpu"})
    storage = tmp_path / "search"
    trial = TrialSpec(run=run, max_epochs=2, metric="online_val_acc", seed=0,
                      wandb_group="tune/wb/simclr", wandb=SETTINGS, wandb_dir=str(storage))
    config = {"model.lr": 0.003}
    logger = trial_logger(trial, config, "trial_00000")
    datamodule, model, trainer = build_trial(trial, config, [], logger)
    trainer.fit(model, datamodule=datamodule)  # the trial's callbacks end its W&B run
    (run_dir,) = offline_run_dirs(storage)
    got = read_offline_run(run_dir)
    assert got["run"]["project"] == "clusterbench-test" and got["run"]["tags"] == ["test"]
    assert got["run"]["group"] == "tune/wb/simclr" and got["run"]["job_type"] == "search"
    assert got["run"]["name"] == "trial_00000"
    epochs = [row for row in got["history"] if "online_val_acc" in row]
    assert [row["epoch"] for row in epochs] == [0, 1]
    assert "rankme" in got["summary"] and got["exit_code"] == 0


def test_a_search_summary_run_holds_one_row_per_trial(tmp_path):
    from benchmarks.run.wandb_runs import record_search_summary

    rows = [["trial_id", "model.lr", "online_val_acc", "epochs", "devices", "status", "error"],
            ["a1", "0.001", "0.5", "4", "1", "completed", ""],
            ["a2", "0.01", "0.25", "1", "1", "stopped early by ASHA", ""]]
    with (tmp_path / "trials.csv").open("w", newline="") as file:
        csv.writer(file).writerows(rows)
    (tmp_path / "trials.png").write_bytes(png_bytes())
    record_search_summary(SETTINGS, group="tune/wb/simclr", storage_dir=tmp_path)
    (run_dir,) = offline_run_dirs(tmp_path)
    got = read_offline_run(run_dir)
    assert got["run"]["job_type"] == "search-summary"
    assert got["run"]["name"] == "tune/wb/simclr/summary"
    (table_file,) = [f for f in got["files"] if f.startswith("media/table/trials")]
    table = json.loads((run_dir / "files" / table_file).read_text())
    assert table["columns"] == rows[0]
    assert [row[:3] for row in table["data"]] == [["a1", 0.001, 0.5], ["a2", 0.01, 0.25]]
