"""The paper suites, end to end on their --fast budget, on tiny files in the real formats.

The real datasets cannot be downloaded here, so CIFAR's pickles and MNIST's idx files are written
small (random pixels) into $CLUSTERBENCH_DATA; every row of the paper suites that runs offline is
trained for two batches and scored, and its leaderboard shows the paper's number beside ours. This
checks the plumbing of the suites, never the numbers.
"""

from __future__ import annotations

import csv
import json

import pytest
from sample_data import set_checksums

from benchmarks.cli import main
from datamodules.sample_files import write_cifar10, write_cifar100, write_mnist

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("paper-data")
    write_cifar10(root)
    write_cifar100(root, n_train=200, n_test=50)  # the probe takes ResNet50 features of each
    write_mnist(root, "FashionMNIST", seed=3)
    return root


@pytest.fixture
def offline_data(data_dir, monkeypatch):
    monkeypatch.setenv("CLUSTERBENCH_DATA", str(data_dir))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    set_checksums(monkeypatch, data_dir)
    return data_dir


#: One row of each paper suite's datasets: CIFAR-10 comes with the MoCo suite (each ResNet18 row
#: costs this CPU about 20 s).
@pytest.mark.parametrize("suite, runs", [
    ("kernel_infonce_table1", ["cifar100/exponential/400ep"]),
    ("kernel_infonce_moco", ["cifar10/moco-sum/1000ep"]),
    ("transfusion_fusion_paper", ["fashionmnist/5-blocks", "fashionmnist/pixels"]),
])
def test_paper_suite_runs_end_to_end_on_the_fast_budget(suite, runs, offline_data, tmp_path):
    code = main(["bench", suite, "--fast", "--runs", *runs, "--results", str(tmp_path),
                 "--no-progress", "--accelerator", "cpu", "--no-search"])
    assert code == 0
    suite_dir = tmp_path / f"{suite}-fast"
    rows = {row["run"]: row for row in csv.DictReader((suite_dir / "leaderboard.csv").open())}
    assert set(rows) == set(runs)
    for run in runs:
        result = json.loads((suite_dir / "runs" / run.replace("/", "__") / "seed-0"
                             / "result.json").read_text())
        trained = result["method"] != "pixels"  # the raw-pixel baseline trains nothing
        assert (result["epochs"], result["train_steps"]) == ((1, 2) if trained else (0, 0))
        assert result["budget"] == "fast"
        if result["config"]["run"]["paper"]:  # the paper's number rides along to the board
            assert rows[run]["paper_mean"] != ""
    if suite.startswith("kernel_infonce"):
        assert "Ours − paper" in (suite_dir / "leaderboard.md").read_text()
