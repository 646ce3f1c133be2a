"""``clusterbench tune --wandb`` with its trials on Ray workers: each trial's W&B run is made in
the worker, in the search's group, named by its configuration number, with the bench runs'
config keys; the workers get W&B's mode and folder from the driver, on a local instance as on
a cluster joined with ``--address`` (never the API key)."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import pytest
from tiny_suites import write_suite

import tune.search
from benchmarks.cli import main
from benchmarks.run.wandb_runs import offline_run_dirs, read_offline_run


@pytest.fixture
def offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline W&B, its files under tmp_path (``make test`` exports WANDB_MODE=disabled)."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_API_KEY", "secret-key-0123")
    for var, sub in (("WANDB_DIR", "wandb-dir"), ("WANDB_CACHE_DIR", "cache"),
                     ("WANDB_CONFIG_DIR", "config"), ("WANDB_DATA_DIR", "data")):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(var, str(tmp_path / sub))


def test_a_cluster_joined_for_a_search_gets_wandbs_mode_not_its_key(monkeypatch, offline_wandb):
    import ray

    joined = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: joined.append(kwargs))
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(tune.search, "joined", lambda address: "joined")
    with tune.search.ray_for_search("127.0.0.1:6379"):
        pass
    env = joined[0]["runtime_env"]["env_vars"]
    assert env["WANDB_MODE"] == "offline" and env["WANDB_SILENT"] == "true"
    assert "WANDB_API_KEY" not in env


@pytest.mark.slow
def test_tune_with_wandb_names_each_ray_trial_by_its_number(tmp_path, offline_wandb) -> None:
    import ray

    if ray.is_initialized():  # left by another test: the search must start its own, whose
        ray.shutdown()        # workers see this test's W&B environment
    suite = write_suite(tmp_path / "wbsearch.yaml",
                        [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}],
                        search={"space": {"model.lr": {"choice": [1.0e-3, 3.0e-3]}},
                                "num_samples": 2, "max_epochs": 1, "max_concurrent": 1})
    storage = tmp_path / "search"
    assert main(["tune", str(suite), "--storage", str(storage), "--wandb",
                 "--wandb-project", "clusterbench-test"]) == 0
    deadline = time.monotonic() + 60  # a trial's W&B writer may still be flushing its file
    while True:
        runs = [read_offline_run(d) for d in offline_run_dirs(storage)]
        named = [r for r in runs if r["run"].get("job_type") == "search"]
        if len(named) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(2)
    trials = sorted((r for r in runs if r["run"].get("job_type") == "search"),
                    key=lambda r: r["run"]["name"])  # (the summary run is the driver's)
    assert [r["run"]["name"] for r in trials] == ["wbsearch/simclr/trial-0000",
                                                  "wbsearch/simclr/trial-0001"]
    groups = {r["run"]["group"] for r in trials}
    assert len(groups) == 1 and groups.pop().startswith("wbsearch/simclr/search-")
    for number, trial in enumerate(trials):
        assert trial["run"]["project"] == "clusterbench-test" and trial["exit_code"] == 0
        assert trial["config"]["trial"]["number"] == number
        assert trial["config"]["hyperparameters"]["lr"] == trial["config"]["run"]["model"]["lr"]
        assert not {"lr", "model.lr"} & set(trial["config"])  # nested, as a bench run's
        assert any("online_val_acc" in row for row in trial["history"])
    drawn = [float(row["model.lr"]) for row in csv.DictReader((storage / "trials.csv").open())]
    assert [t["config"]["run"]["model"]["lr"] for t in trials] == drawn  # what each trained
