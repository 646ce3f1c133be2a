"""The W&B side of a suite run, checked on real offline runs read back with wandb's own reader:
what each run holds, its identity (a function of what was run), the units of its numbers and
what W&B prints."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
import yaml
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.run.spec import SuiteSettings
from benchmarks.run.wandb_runs import (
    SearchWandb,
    WandbSettings,
    configuration_group,
    make_wandb_logger,
    offline_run_dirs,
    read_offline_run,
    record_evaluation,
    record_leaderboard,
    run_id,
    run_name,
    wandb_mode,
)

SETTINGS = WandbSettings(project="clusterbench-test", tags=("test",))
#: Two accuracies (shown in percent on the leaderboard) and a score (shown as it is).
METRICS = {"linear_probe_top1": 0.9, "knn50_top1": 0.8, "kmeans_ari": 0.25}
SMOKE = SuiteSettings("smoke", "smoke.yaml")
CONFIG = {"suite": "smoke", "seed": 0, "run": {"name": "simclr"}}


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


def train(logger, tmp_path: Path, epochs: int = 2) -> pl.Trainer:
    trainer = pl.Trainer(max_epochs=epochs, logger=logger, accelerator="cpu", devices=1,
                         log_every_n_steps=1, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path)
    trainer.fit(TinyClassifier(), tiny_loader(), tiny_loader())
    return trainer


def only_run(save_dir: Path, rid: str) -> dict:
    (run_dir,) = offline_run_dirs(save_dir, rid)
    return read_offline_run(run_dir)


def test_training_curves_then_evaluation_and_figures_land_in_one_run(tmp_path):
    suite_dir = tmp_path / "smoke"
    config = {"method": "simclr", "seed": 3, "model": {"backbone": "mlp"}}
    logger = make_wandb_logger(SETTINGS, suite=SMOKE, run="simclr-mlp", seed=3, trains=True,
                               suite_dir=suite_dir, config=config)
    trainer = train(logger, tmp_path)
    record_evaluation(logger, METRICS, {"tsne.png": png_bytes()},
                      notes={"probe": "100 epochs"}, extra_summary={"train_seconds": 1.5})

    rid = run_id(config, budget="full", suite_dir=suite_dir)
    got = only_run(suite_dir, rid)
    # 2 epochs x 4 batches, one train_loss row each
    assert len([row for row in got["history"] if "train_loss" in row]) == 8
    # the online probe's curve in percent, as the leaderboard shows its accuracy
    (*_, last) = [row for row in got["history"] if "online_val_acc" in row]
    logged = float(trainer.callback_metrics["online_val_acc"])  # Lightning's: a fraction
    assert last["online_val_acc"] == pytest.approx(100 * logged)
    # the evaluation comes after training, once, as a chartable row and in the summary
    eval_rows = [i for i, row in enumerate(got["history"]) if "eval/linear_probe_top1" in row]
    assert len(eval_rows) == 1
    assert eval_rows[0] > max(i for i, row in enumerate(got["history"]) if "train_loss" in row)
    # accuracies in percent under their own keys, a score (ARI) as it is
    assert got["summary"]["eval/linear_probe_top1"] == pytest.approx(90.0)
    assert got["summary"]["eval/knn50_top1"] == pytest.approx(80.0)
    assert got["summary"]["eval/kmeans_ari"] == pytest.approx(0.25)
    assert got["summary"]["notes/probe"] == "100 epochs"
    assert got["summary"]["train_seconds"] == 1.5
    assert got["summary"]["figures/tsne._type"] == "image-file"
    assert any(f.startswith("media/images/figures/tsne") and f.endswith(".png")
               for f in got["files"])
    assert {k: got["config"][k] for k in config} == config
    assert got["run"] == {"id": rid, "project": "clusterbench-test", "group": "smoke/simclr-mlp",
                          "job_type": "train",
                          "name": "smoke/simclr-mlp/seed-3", "tags": ["test"]}


def test_untrained_baseline_is_recorded_and_fast_budget_gets_its_own_group(tmp_path):
    # the pixels baseline never trains: record_evaluation starts the run through the logger
    suite_dir = tmp_path / "smoke-fast"
    fast = SuiteSettings("smoke", "smoke.yaml", fast=True, budget="fast")
    config = {"method": "pixels", "seed": 0}
    logger = make_wandb_logger(SETTINGS, suite=fast, run="pixels", seed=0, trains=False,
                               suite_dir=suite_dir, config=config)
    record_evaluation(logger, METRICS, {})

    got = only_run(suite_dir, run_id(config, budget="fast", suite_dir=suite_dir))
    assert got["run"]["group"] == "smoke-fast/pixels" and got["run"]["job_type"] == "evaluate"
    assert got["run"]["name"] == "smoke-fast/pixels/seed-0"
    assert got["summary"]["eval/knn50_top1"] == pytest.approx(80.0)
    assert got["config"]["method"] == "pixels"


def test_the_wandb_identity_is_a_function_of_what_was_run(tmp_path):
    """Id, name and group of a (run, seed) as ``bench`` gives them: the same for the same suite,
    settings, budget and results folder (a rerun continues its W&B run), another id for any of
    them changed, and another name and group where the suite's label shows the change
    (``--set``, the budget)."""
    from benchmarks.run.cache import resolved_config
    from benchmarks.suites.config import load_suite
    from benchmarks.suites.overrides import override_suite
    from benchmarks.suites.preflight import suite_results_dir

    def wandb_identity(suite, results="results", run="simclr", seed=0):
        suite_dir = suite_results_dir(suite, tmp_path / results)
        config = resolved_config(suite.settings, suite.run(run), seed)
        return (run_id(config, budget=suite.budget, suite_dir=suite_dir),
                run_name(suite.settings.label, run, seed),
                configuration_group(suite.settings.label, run))

    smoke = load_suite("smoke")
    first = wandb_identity(smoke)
    assert wandb_identity(load_suite("smoke")) == first
    assert re.fullmatch(r"[a-z0-9]+", first[0])  # what W&B takes as an id

    def differs(other, *, shown: bool) -> None:
        """Another id; with ``shown``, another name and group too, else the same ones."""
        assert other[0] != first[0]
        if shown:
            assert other[1] != first[1] and other[2] != first[2]
        else:
            assert other[1:] == first[1:]

    differs(wandb_identity(override_suite(smoke, ["data.val_fraction=0.2"])), shown=True)
    differs(wandb_identity(load_suite("smoke", fast=True)), shown=True)
    differs(wandb_identity(load_suite("smoke", budget="ci")), shown=True)
    differs(wandb_identity(smoke, results="elsewhere"), shown=False)
    seed_1 = wandb_identity(smoke, seed=1)  # another run of the same group (its seeds')
    assert seed_1[0] != first[0] and seed_1[1] != first[1] and seed_1[2] == first[2]

    # the suite's content: where its file lies and its comments do not count, its settings do
    raw = yaml.safe_load((Path(smoke.path)).read_text())
    copy = tmp_path / "copy.yaml"
    copy.write_text("# a comment\n" + yaml.safe_dump(raw))
    assert wandb_identity(load_suite(str(copy))) == first
    (simclr,) = [r for r in raw["runs"] if r["name"] == "simclr"]
    simclr["model"]["temperature"] = 0.2
    copy.write_text(yaml.safe_dump(raw))
    differs(wandb_identity(load_suite(str(copy))), shown=False)


def test_resumed_run_seed_continues_the_same_wandb_run(tmp_path):
    suite_dir = tmp_path / "smoke"
    for _ in range(2):
        logger = make_wandb_logger(SETTINGS, suite=SMOKE, run="simclr", seed=0, trains=True,
                                   suite_dir=suite_dir, config=CONFIG)
        record_evaluation(logger, METRICS, {})
    other = make_wandb_logger(SETTINGS, suite=SMOKE, run="simclr", seed=1, trains=True,
                              suite_dir=suite_dir, config={**CONFIG, "seed": 1})
    record_evaluation(other, METRICS, {})

    rid = run_id(CONFIG, budget="full", suite_dir=suite_dir)
    # offline, each resume writes a new directory; `wandb sync` sends both to the same run id
    resumed = offline_run_dirs(suite_dir, rid)
    assert len(resumed) == 2
    assert [read_offline_run(d)["run"]["id"] for d in resumed] == [rid, rid]
    assert len(offline_run_dirs(suite_dir)) == 3


def test_an_open_run_is_refused_rather_than_reused(tmp_path):
    import wandb

    wandb.init(project="clusterbench-test", dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="still open"):
        make_wandb_logger(SETTINGS, suite=SMOKE, run="simclr", seed=0, trains=True,
                          suite_dir=tmp_path / "smoke", config=CONFIG)


def test_disabled_mode_writes_nothing_and_stays_disabled(tmp_path, monkeypatch):
    # Lightning's offline=True would flip WANDB_MODE to "dryrun" for the whole process
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode() == "disabled"
    suite_dir = tmp_path / "smoke"
    logger = make_wandb_logger(SETTINGS, suite=SMOKE, run="simclr", seed=0, trains=True,
                               suite_dir=suite_dir, config=CONFIG)
    record_evaluation(logger, METRICS, {"tsne.png": png_bytes()})
    assert os.environ["WANDB_MODE"] == "disabled"
    assert offline_run_dirs(suite_dir) == []


LEADERBOARD = [["suite", "run", "linear_probe_top1_mean", "linear_probe_top1_std", "device"],
               ["smoke", "simclr", "0.91", "0.02", "cpu"],
               ["smoke", "pixels", "0.5", "", "cpu"]]


@pytest.mark.parametrize("with_figures", [True, False])
def test_leaderboard_run_holds_the_csv_as_a_table_in_percent(tmp_path, with_figures):
    suite_dir = tmp_path / "smoke"
    suite_dir.mkdir()
    with (suite_dir / "leaderboard.csv").open("w", newline="") as file:
        csv.writer(file).writerows(LEADERBOARD)
    if with_figures:
        (suite_dir / "figures").mkdir()
        (suite_dir / "figures" / "linear_probe_top1.png").write_bytes(png_bytes())

    record_leaderboard(SETTINGS, label="smoke", content={"runs": ["simclr"]}, suite_dir=suite_dir)

    (run_dir,) = offline_run_dirs(suite_dir)
    got = read_offline_run(run_dir)
    assert got["run"]["job_type"] == "leaderboard"
    assert got["run"]["group"] == "smoke"
    assert got["run"]["name"] == "smoke/leaderboard"
    assert got["summary"]["leaderboard._type"] == "table-file"
    (table_file,) = [f for f in got["files"] if f.startswith("media/table/leaderboard")]
    table = json.loads((run_dir / "files" / table_file).read_text())
    assert table["columns"] == LEADERBOARD[0]
    # the accuracy's mean and spread in percent, as leaderboard.md shows them
    assert table["data"] == [["smoke", "simclr", pytest.approx(91.0), pytest.approx(2.0), "cpu"],
                             ["smoke", "pixels", pytest.approx(50.0), None, "cpu"]]
    images = [f for f in got["files"] if f.startswith("media/images/figures/linear_probe_top1")]
    assert len(images) == int(with_figures)


def test_a_rebuilt_leaderboard_continues_its_run_and_another_suite_or_folder_starts_one(
        tmp_path):
    def record(content: dict, folder: str) -> str:
        suite_dir = tmp_path / folder
        suite_dir.mkdir(exist_ok=True)
        with (suite_dir / "leaderboard.csv").open("w", newline="") as file:
            csv.writer(file).writerows(LEADERBOARD)
        before = set(offline_run_dirs(suite_dir))
        record_leaderboard(SETTINGS, label="smoke", content=content, suite_dir=suite_dir)
        # the run this call wrote (two started in one second sort by their random ids)
        (new,) = set(offline_run_dirs(suite_dir)) - before
        return read_offline_run(new)["run"]["id"]

    first = record({"runs": ["simclr"]}, "smoke")
    assert record({"runs": ["simclr"]}, "smoke") == first
    assert record({"runs": ["simclr", "supcon"]}, "smoke") != first
    assert record({"runs": ["simclr"]}, "other") != first


def tiny_suite(path: Path, runs: list[dict], **evaluation) -> Path:
    """A suite of ``runs`` on 10 digits a class, one seed, two epochs."""
    path.write_text(yaml.safe_dump({
        "name": "wb", "seeds": [0], "data": {"name": "digits", "batch_size": 64,
                                             "limit_per_class": 10},
        "trainer": {"max_epochs": 2, "accelerator": "cpu", "log_every_n_steps": 1},
        "evaluation": evaluation or {"knn": {"k": [5], "temperature": None}}, "runs": runs}))
    return path


SIMCLR = {"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}


def bench_wandb(suite: Path, results: Path, *more: str) -> None:
    from benchmarks.cli import main

    assert main(["bench", str(suite), "--results", str(results), "--no-progress", "--logger",
                 "wandb", "--wandb-project", "cb-test", "--fast", *more]) == 0


def wandb_runs(folder: Path, job_type: str) -> list[dict]:
    """What every offline run of ``job_type`` under ``folder`` recorded, oldest first."""
    runs = [read_offline_run(d) for d in offline_run_dirs(folder)]
    return [run for run in runs if run["run"]["job_type"] == job_type]


def test_bench_with_wandb_gives_one_run_per_run_seed_with_its_evaluation_and_the_table(
        tmp_path):
    """The whole path: ``clusterbench bench --logger wandb`` on a suite, read back."""
    suite = tiny_suite(tmp_path / "wb.yaml", [SIMCLR, {"name": "pixels", "method": "pixels"}],
                       linear_probe={"epochs": 2, "lr": 0.3, "batch_size": 64,
                                     "weight_decay": 1.0e-6},
                       knn={"k": [5], "temperature": None}, tsne={"iterations": 250})
    results = tmp_path / "results"
    bench_wandb(suite, results, "--wandb-tags", "nightly", "cpu")
    suite_dir = results / "wb-fast"
    for name in ("simclr", "pixels"):
        seed_dir = suite_dir / f"runs/{name}/seed-0"
        result = json.loads((seed_dir / "result.json").read_text())
        (run_dir,) = offline_run_dirs(suite_dir,  # beside the runs, not in them
                                      run_id(result["config"], budget="fast",
                                             suite_dir=suite_dir))
        run = read_offline_run(run_dir)
        assert run["run"]["group"] == f"wb-fast/{name}" and run["run"]["tags"] == ["nightly", "cpu"]
        assert run["run"]["job_type"] == ("train" if name == "simclr" else "evaluate")
        assert run["config"]["config_hash"] == result["config_hash"]  # the leaderboard's row
        if name == "simclr":  # the arguments NT-Xent uses, resolved; not the kernels' defaults
            used = run["config"]["hyperparameters"]
            assert used["temperature"] == 0.5 and used["loss"] == "nt_xent"
            assert not {"tau1", "tau2", "lam", "gamma", "momentum"} & set(used)
            assert not {"tau1", "tau2", "lam", "gamma"} & set(run["config"])  # nor flat
        # every evaluation number, in W&B; each here an accuracy, so in percent
        assert set(result["metrics"]) <= {"linear_probe_top1", "knn5_top1", "online_val_acc"}
        for metric, value in result["metrics"].items():
            assert run["summary"][f"eval/{metric}"] == pytest.approx(100 * value)
        # and what it cost: training, evaluation and each evaluation step, in seconds
        assert run["summary"]["time/train_seconds"] == pytest.approx(result["train_seconds"])
        assert run["summary"]["time/eval_seconds"] == pytest.approx(result["eval_seconds"])
        assert {key for key in run["summary"] if key.startswith("time/")} == {
            "time/train_seconds", "time/eval_seconds", "time/features_seconds",
            "time/linear_probe_seconds", "time/knn_seconds", "time/tsne_seconds"}
        assert any("tsne" in f for f in run["files"])  # the figure, as an image
        if name == "simclr":  # the training curves, in the same run
            assert sum("train_loss" in row for row in run["history"]) >= 2
    (board,) = wandb_runs(suite_dir, "leaderboard")
    assert board["summary"]["leaderboard._type"] == "table-file"


def test_two_benches_differing_by_a_set_give_two_wandb_runs_and_a_rerun_continues_its_own(
        tmp_path):
    """The same command again (``--rerun`` trains again) continues the same W&B runs; a
    ``--set`` setting gives its own runs, names and groups, so that both can be synced and
    compared."""
    suite, results = tiny_suite(tmp_path / "wb.yaml", [SIMCLR]), tmp_path / "results"
    bench_wandb(suite, results)
    bench_wandb(suite, results, "--rerun")
    bench_wandb(suite, results, "--set", "data.val_fraction=0.2")
    plain = wandb_runs(results / "wb-fast", "train")
    assert len(plain) == 2 and plain[0]["run"] == plain[1]["run"]  # one W&B run, resumed
    (varied,) = wandb_runs(results / "wb-fast+data.val_fraction=0.2", "train")
    for key in ("id", "name", "group"):
        assert varied["run"][key] != plain[0]["run"][key], key
    boards = wandb_runs(results / "wb-fast", "leaderboard")
    (other_board,) = wandb_runs(results / "wb-fast+data.val_fraction=0.2", "leaderboard")
    assert len(boards) == 2 and boards[0]["run"] == boards[1]["run"]
    assert other_board["run"]["id"] != boards[0]["run"]["id"]


def flat_keys(config: dict, prefix: str = "") -> set[str]:
    """The keys of a nested config as W&B shows them: ``hyperparameters.lr``."""
    keys = set()
    for key, value in config.items():
        if isinstance(value, dict) and value:
            keys |= flat_keys(value, f"{prefix}{key}.")
        else:
            keys.add(prefix + key)
    return keys


def test_a_search_trial_is_named_by_its_number_and_logs_the_bench_runs_config_keys(tmp_path):
    """A trial's run: in the project, entity and tags asked for, in its search's group, job
    type ``search``, named after its configuration number, its files in the search's storage;
    its config nested as the same run's from ``bench`` (with the values it was given) beside
    the trial's own, and only the arguments its method uses; its per-epoch metrics in the
    history (accuracies in percent), a summary and an exit record (a run left open was
    abandoned when Ray ended the trial)."""
    from benchmarks.suites.config import load_suite
    from tune.trial import TrialSpec, build_trial

    suite_file = tiny_suite(tmp_path / "wb.yaml", [SIMCLR])
    bench_wandb(suite_file, tmp_path / "results")
    (bench,) = wandb_runs(tmp_path / "results" / "wb-fast", "train")

    suite = load_suite(str(suite_file), fast=True)
    storage = tmp_path / "search"
    search = SearchWandb(SETTINGS, suite.settings, "simclr", "20260101T000000-ab12", str(storage))
    trial = TrialSpec(run=suite.run("simclr"), max_epochs=2, metric="online_val_acc", seed=0,
                      wandb=search)
    datamodule, model, trainer = build_trial(trial, {"model.lr": 0.003}, [], number=3)
    trainer.fit(model, datamodule=datamodule)  # the trial's callbacks end its W&B run
    (run_dir,) = offline_run_dirs(storage)
    got = read_offline_run(run_dir)
    assert got["run"]["project"] == "clusterbench-test" and got["run"]["tags"] == ["test"]
    assert got["run"]["group"] == "wb-fast/simclr/search-20260101T000000-ab12"
    assert got["run"]["name"] == "wb-fast/simclr/trial-0003"
    assert got["run"]["job_type"] == "search"

    config = got["config"]
    # beside the bench run's keys: the trial's own, and the sampled value set in the run as a
    # suite file sets it (the suite leaves lr to its default)
    assert flat_keys(config) - flat_keys(bench["config"]) == {"trial.number", "trial.searched",
                                                             "run.model.lr"}
    assert flat_keys(bench["config"]) <= flat_keys(config)
    assert config["trial"] == {"number": 3, "searched": ["model.lr"]}
    assert config["hyperparameters"]["lr"] == config["run"]["model"]["lr"] == 0.003
    assert bench["config"]["hyperparameters"]["lr"] != 0.003  # the suite's own
    assert not {"lr", "model.lr", "tau1", "tau2", "lam", "gamma"} & set(config)
    assert not {"tau1", "tau2", "lam", "gamma", "momentum"} & set(config["hyperparameters"])

    epochs = [row for row in got["history"] if "online_val_acc" in row]
    assert [row["epoch"] for row in epochs] == [0, 1]
    logged = float(trainer.callback_metrics["online_val_acc"])  # Lightning's: a fraction
    assert epochs[-1]["online_val_acc"] == pytest.approx(100 * logged)
    assert "rankme" in got["summary"] and got["exit_code"] == 0


def test_a_search_summary_run_holds_one_row_per_trial(tmp_path):
    from benchmarks.run.wandb_runs import record_search_summary

    rows = [["trial_id", "model.lr", "online_val_acc", "epochs", "devices", "status", "error"],
            ["0000", "0.001", "0.5", "4", "1", "completed", ""],
            ["0001", "0.01", "0.25", "1", "1", "stopped early by ASHA", ""]]
    with (tmp_path / "trials.csv").open("w", newline="") as file:
        csv.writer(file).writerows(rows)
    (tmp_path / "trials.png").write_bytes(png_bytes())
    search = SearchWandb(SETTINGS, SuiteSettings("wb", "wb.yaml"), "simclr",
                         "20260101T000000-ab12", str(tmp_path))
    record_search_summary(search)
    (run_dir,) = offline_run_dirs(tmp_path)
    got = read_offline_run(run_dir)
    assert got["run"]["job_type"] == "search-summary"
    assert got["run"]["group"] == "wb/simclr/search-20260101T000000-ab12"
    assert got["run"]["name"] == "wb/simclr/search-20260101T000000-ab12/summary"
    (table_file,) = [f for f in got["files"] if f.startswith("media/table/trials")]
    table = json.loads((run_dir / "files" / table_file).read_text())
    assert table["columns"] == rows[0]
    # the metric in percent, as the leaderboard shows accuracies; the sampled values as they are
    assert [row[:3] for row in table["data"]] == [[0, 0.001, pytest.approx(50.0)],
                                                  [1, 0.01, pytest.approx(25.0)]]


#: What a process logging to W&B runs: two starts of one (run, seed), a warning W&B gives while
#: the run is open, the evaluation and the leaderboard.
QUIET_SCRIPT = """
import csv, sys
from pathlib import Path
import wandb
from benchmarks.run.spec import SuiteSettings
from benchmarks.run.wandb_runs import (WandbSettings, make_wandb_logger, record_evaluation,
                                       record_leaderboard)
suite_dir = Path(sys.argv[1])
for _ in range(2):
    logger = make_wandb_logger(WandbSettings(project="cb-test"), suite=SuiteSettings("s", "s.yaml"),
                               run="r", seed=0, trains=True, suite_dir=suite_dir, config={})
    logger.experiment
    wandb.termwarn("a warning of W&B's own")
    record_evaluation(logger, {"knn5_top1": 0.9}, {})
with (suite_dir / "leaderboard.csv").open("w", newline="") as file:
    csv.writer(file).writerows([["run", "knn5_top1_mean"], ["r", "0.9"]])
record_leaderboard(WandbSettings(project="cb-test"), label="s", content={}, suite_dir=suite_dir)
"""


def test_wandbs_own_lines_go_to_its_log_not_the_console(tmp_path):
    """Not one ``wandb:`` line on the console (its start, its sync hints, its warnings, the
    ``anonymous`` argument Lightning passes it), whether or not the command set WANDB_SILENT;
    a warning it gives while a run is open is in that run's log."""
    root = Path(__file__).resolve().parents[3]  # the code under test
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SILENT"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", QUIET_SCRIPT, str(tmp_path / "s")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert [line for line in (done.stdout + done.stderr).splitlines() if "wandb" in line] == []
    started = offline_run_dirs(tmp_path / "s", run_id({}, budget="full", suite_dir=tmp_path / "s"))
    assert len(started) == 2 and len(offline_run_dirs(tmp_path / "s")) == 3  # and the leaderboard
    for run_dir in started:
        assert "a warning of W&B's own" in (run_dir / "logs" / "debug.log").read_text()
