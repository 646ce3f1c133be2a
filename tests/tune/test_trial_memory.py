"""A search trial's GPU memory, estimated before anything trains, against the share of a GPU it
gets: set per dataset or per run, refused (exit 2) where it would not fit."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tiny_suites import write_suite

from benchmarks.cli import main
from benchmarks.infra.errors import ConfigError
from benchmarks.suites.config import load_suite
from tune.memory import check_trial_memory, estimate_trial_memory

SEARCH = {"space": {"model.lr": {"loguniform": [1e-4, 1e-2]}}, "num_samples": 2,
          "max_epochs": 1, "gpus_per_trial": 0.5}
RUNS = [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}]


def test_a_trial_that_cannot_fit_its_share_is_refused_before_anything_trains(tmp_path, capsys):
    suite = write_suite(tmp_path / "memory.yaml", RUNS,
                        search={**SEARCH, "gpu_memory_gib": 1.0e-4})
    root = tmp_path / "results"
    assert main(["bench", str(suite), "--results", str(root), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "run 'simclr': a search trial needs about" in err
    assert "(0.5 of a 0.0001 GiB GPU); set search.gpus_per_trial_for: {digits: " in err
    assert not root.exists() or not any(root.rglob("result.json"))  # nothing trained
    # without the search, nothing is refused
    assert main(["bench", str(suite), "--results", str(root), "--no-progress",
                 "--no-search"]) == 0


@pytest.mark.parametrize(("share", "message"), [
    ({"cifar10": 0.5}, "'cifar10' is neither a run nor a dataset of this suite"),
    ({"digits": -1}, "gpus_per_trial_for.digits must be > 0, got -1"),
    ({"simclr": 1.5}, "gpus_per_trial_for.simclr above 1 must be a whole number of GPUs"),
    ([0.5], "gpus_per_trial_for must be a mapping of run names or datasets"),
])
def test_per_run_and_per_dataset_shares_are_checked(tmp_path, share, message):
    path = write_suite(tmp_path / "memory.yaml", RUNS,
                       search={**SEARCH, "gpus_per_trial_for": share})
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(")):
        load_suite(str(path))


def test_the_shipped_search_gives_tinyimagenet_trials_the_memory_they_need():
    """kernel_infonce_table1 on 80 GiB GPUs: 32-px trials (about 6.5 GiB) at a quarter of one,
    64-px TinyImageNet trials (about 25 GiB, as an H200 measured) at a half; at a quarter
    they would be refused."""
    suite = load_suite("kernel_infonce_table1")
    by_dataset = {}
    for run in suite.searched_runs():
        recorded = check_trial_memory(run, suite.search)
        by_dataset.setdefault(run.dataset, recorded)
    assert by_dataset["cifar10"]["gpus_per_trial"] == 0.25
    assert 5 < by_dataset["cifar10"]["gib"] < 8 and by_dataset["cifar10"]["share_gib"] == 20
    tiny = by_dataset["tinyimagenet"]
    assert tiny["gpus_per_trial"] == 0.5 and 22 < tiny["gib"] < 28 < tiny["share_gib"]
    assert tiny["gib"] / by_dataset["cifar10"]["gib"] == pytest.approx(4, rel=0.1)  # 4x pixels
    quarter = replace(suite.search, gpus_per_trial_for=None)
    with pytest.raises(ConfigError, match="gets 20.0 GiB \\(0.25 of a 80 GiB GPU\\); set "
                                          "search.gpus_per_trial_for: {tinyimagenet: 0.5}"):
        check_trial_memory(suite.run("tinyimagenet/nt_xent/400ep"), quarter)


def test_the_estimate_follows_the_batch_and_the_precision():
    suite = load_suite("kernel_infonce_table1")
    run = suite.run("cifar10/nt_xent/400ep")
    base = estimate_trial_memory(run)["gib"]
    half = estimate_trial_memory(replace(run, data={**run.data, "batch_size": 128}))["gib"]
    full = estimate_trial_memory(replace(run, trainer={**run.trainer,
                                                       "precision": "32-true"}))["gib"]
    assert half == pytest.approx(base / 2, rel=0.1)  # activations dominate (not the weights)
    assert full == pytest.approx(2 * base, rel=0.05)  # float32 activations: twice bf16's
