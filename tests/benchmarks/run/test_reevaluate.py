"""A changed or added protocol re-evaluates the kept weights without training again; a changed
training setting trains again."""

from __future__ import annotations

import json

from tiny_suites import TINY_EVALUATION, TINY_TRAINER, write_suite

from benchmarks.cli import main

RUNS = [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}},
        {"name": "pixels", "method": "pixels"}]


def bench(suite, root) -> int:
    return main(["bench", str(suite), "--results", str(root), "--no-progress"])


def test_an_added_protocol_reevaluates_and_a_training_change_retrains(tmp_path, capsys):
    root = tmp_path / "results"
    seed = root / "reeval/runs/simclr/seed-0"
    assert bench(write_suite(tmp_path / "reeval.yaml", RUNS), root) == 0
    first = json.loads((seed / "result.json").read_text())
    weights, curves = (seed / "encoder.pt").read_bytes(), (seed / "logs/metrics.csv").read_text()

    knn = {"k": [5, 10], "temperature": None}
    suite = write_suite(tmp_path / "reeval.yaml", RUNS, headline="knn10_top1",
                        evaluation={**TINY_EVALUATION, "knn": knn})
    capsys.readouterr()
    assert bench(suite, root) == 0
    err = capsys.readouterr().err
    assert "simclr seed 0: the evaluation changed, the training did not" in err
    again = json.loads((seed / "result.json").read_text())
    assert "knn10_top1" in again["metrics"] and "knn10_top1" not in first["metrics"]
    assert again["metrics"]["knn5_top1"] == first["metrics"]["knn5_top1"]  # the same weights
    assert len(again["reevaluated"]["trained_under"]) == 12  # the hash it was trained under
    assert (seed / "encoder.pt").read_bytes() == weights  # not trained again
    assert (seed / "logs/metrics.csv").read_text() == curves
    assert again["train_seconds"] == first["train_seconds"]
    assert again["config"]["evaluation"]["knn"] == knn
    pixels = json.loads((root / "reeval/runs/pixels/seed-0/result.json").read_text())
    assert "knn10_top1" in pixels["metrics"]  # a method that trains nothing is re-scored too
    assert "kNN@10 top-1 (%)" in (root / "reeval/leaderboard.md").read_text()

    suite = write_suite(tmp_path / "reeval.yaml", RUNS, headline="knn10_top1",
                        evaluation={**TINY_EVALUATION, "knn": knn},
                        trainer={**TINY_TRAINER, "limit_train_batches": 3})
    assert bench(suite, root) == 0
    trained = json.loads((seed / "result.json").read_text())
    assert "reevaluated" not in trained and trained["train_steps"] == 3
    assert (seed / "encoder.pt").read_bytes() != weights
