"""Every run logs a training-loss curve: Lightning's logging interval (50 steps by default)
follows the epoch's length when the run did not set it, on a short epoch as on a long one."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from benchmarks.cli import main

#: Digits at batch 64 with 20 images a class: 2 steps an epoch, far below the default 50.
SUITE = {
    "name": "curves", "seeds": [0],
    "data": {"name": "digits", "batch_size": 64, "limit_per_class": 20},
    "trainer": {"max_epochs": 3, "accelerator": "cpu"},
    "evaluation": {"knn": {"k": [5], "temperature": None}},
    "runs": [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}],
}


def train_losses(metrics: Path) -> list[float]:
    return [float(row["train_loss"]) for row in csv.DictReader(metrics.open())
            if row.get("train_loss")]


@pytest.mark.parametrize("interval, points", [(None, 3), (4, 1)])
def test_a_bare_suite_logs_a_point_every_epoch_unless_it_sets_the_interval(
        tmp_path, interval, points):
    """Without ``log_every_n_steps`` a 2-step epoch logs once an epoch (3 points in 3 epochs,
    none at Lightning's 50); a suite that sets it keeps it (every 4th of 6 steps: 1 point)."""
    suite = yaml.safe_load(yaml.safe_dump(SUITE))
    if interval is not None:
        suite["trainer"]["log_every_n_steps"] = interval
    path = tmp_path / "curves.yaml"
    path.write_text(yaml.safe_dump(suite))
    assert main(["bench", str(path), "--results", str(tmp_path), "--no-progress"]) == 0
    (metrics,) = (tmp_path / "curves/runs/simclr/seed-0/logs").rglob("metrics.csv")
    assert len(train_losses(metrics)) == points


def test_fit_on_digits_logs_a_training_curve(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "--model", "simclr", "--data", "digits", "--model.backbone_width", "4",
                 "--data.limit_per_class", "20", "--data.batch_size", "64",
                 "--trainer.max_epochs", "2", "--trainer.accelerator", "cpu",
                 "--trainer.enable_progress_bar", "false"]) == 0
    metrics = Path("results/fit/lightning_logs/version_0/metrics.csv")
    assert len(train_losses(metrics)) == 2  # 2 steps an epoch: a point an epoch
