"""The training monitors (modules.monitors) against independent naive implementations: RankMe
from numpy's float64 singular values and a loop for the entropy, the kNN vote from a loop over
queries, the feature bank against a list; and a method logging both monitors each epoch."""

from __future__ import annotations

import csv
import math

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

from datamodules import DATAMODULES
from modules.methods import METHODS
from modules.monitors import FeatureBank, knn_vote_accuracy, rankme


def naive_rankme(z: np.ndarray, eps: float = 1e-7) -> float:
    sigma = np.linalg.svd(z.astype(np.float64), compute_uv=False)
    total = sum(float(s) for s in sigma)
    entropy = 0.0
    for s in sigma:
        p = float(s) / total + eps
        entropy -= p * math.log(p)
    return math.exp(entropy)


@pytest.mark.parametrize("n, d", [(5, 3), (16, 16), (40, 8), (8, 40)])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 50.0])
def test_rankme_matches_a_float64_loop(n, d, scale):
    g = torch.Generator().manual_seed(n * d)
    z = scale * torch.randn(n, d, generator=g)
    assert rankme(z).item() == pytest.approx(naive_rankme(z.numpy()), rel=1e-4)


def test_rankme_closed_forms():
    """r equal singular values give r (up to eps); one direction gives 1."""
    q, _ = torch.linalg.qr(torch.randn(12, 12, dtype=torch.float64))
    for r in (1, 3, 7):
        z = (q[:, :r] * 2.5).float()  # r orthogonal columns of norm 2.5
        assert rankme(z).item() == pytest.approx(r, rel=1e-4)


def naive_knn_accuracy(bank, bank_labels, queries, labels, k):
    correct = 0
    for query, label in zip(queries.tolist(), labels.tolist(), strict=True):
        norm_q = math.sqrt(sum(x * x for x in query))
        scored = []
        for row, row_label in zip(bank.tolist(), bank_labels.tolist(), strict=True):
            norm_r = math.sqrt(sum(x * x for x in row))
            scored.append((sum(a * b for a, b in zip(query, row, strict=True)) / norm_q / norm_r,
                           row_label))
        scored.sort(key=lambda pair: -pair[0])
        votes: dict[int, int] = {}
        for _, row_label in scored[:min(k, len(scored))]:
            votes[row_label] = votes.get(row_label, 0) + 1
        winner = min(votes, key=lambda c: (-votes[c], c))  # ties: the smallest label
        correct += winner == label
    return correct / len(labels)


@pytest.mark.parametrize("k", [1, 5, 200])
@pytest.mark.parametrize("classes", [2, 7])
def test_knn_vote_matches_a_loop(k, classes):
    g = torch.Generator().manual_seed(k + classes)
    bank, queries = torch.randn(60, 6, generator=g), torch.randn(25, 6, generator=g)
    bank_labels = torch.randint(0, classes, (60,), generator=g)
    labels = torch.randint(0, classes, (25,), generator=g)
    got = knn_vote_accuracy(bank, bank_labels, queries, labels, k, classes).item()
    assert got == pytest.approx(naive_knn_accuracy(bank, bank_labels, queries, labels, k))


def test_the_bank_keeps_the_last_rows_written():
    bank, written = FeatureBank(size=10), []
    g = torch.Generator().manual_seed(0)
    for size in (3, 4, 6, 12, 1):
        rows = torch.randn(size, 2, generator=g)
        bank.add(rows, torch.arange(size))
        written += [tuple(r) for r in rows.tolist()]
    features, _ = bank.filled()
    assert sorted(tuple(r) for r in features.tolist()) == sorted(written[-10:])


def test_a_method_logs_both_monitors_every_epoch(tmp_path):
    """SimCLR on digits logs both monitors every epoch; the last epoch's kNN accuracy is the
    vote of the validation embeddings among the training embeddings its bank kept, and its
    RankMe that of the validation embeddings."""
    model = METHODS["simclr"](num_classes=10, input_shape=(1, 8, 8), backbone_width=4)
    datamodule = DATAMODULES["digits"](batch_size=64)
    logger = pl.loggers.CSVLogger(tmp_path)
    trainer = pl.Trainer(max_epochs=2, limit_train_batches=5, logger=logger,
                         enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, accelerator="cpu", log_every_n_steps=1)
    trainer.fit(model, datamodule=datamodule)
    rows = [r for r in csv.DictReader(open(f"{logger.log_dir}/metrics.csv")) if r["rankme"]]
    assert [int(r["epoch"]) for r in rows] == [0, 1]
    bank, bank_labels = model.monitor_bank.filled()
    assert len(bank) == 2 * 5 * 64  # the first views of two epochs of five steps
    model.eval()
    loader = datamodule.val_dataloader()
    queries = torch.cat([model.encode(x) for x, _ in loader])
    labels = torch.cat([y for _, y in loader])
    assert float(rows[-1]["online_knn_acc"]) == pytest.approx(naive_knn_accuracy(
        bank, bank_labels, queries, labels, model.monitor_k), abs=1e-6)
    assert float(rows[-1]["rankme"]) == pytest.approx(naive_rankme(queries.numpy()), rel=1e-4)


def test_a_search_may_schedule_on_rankme(tmp_path):
    """RankMe needs no labels: a suite's search may name it as ASHA's metric."""
    import yaml

    from benchmarks.suites.config import load_suite

    path = tmp_path / "unlabelled.yaml"
    path.write_text(yaml.safe_dump({
        "name": "unlabelled", "seeds": [0], "data": {"name": "digits"},
        "evaluation": {"knn": {"k": [5], "temperature": None}},
        "runs": [{"name": "simclr", "method": "simclr"}],
        "search": {"space": {"model.lr": {"loguniform": [1.0e-4, 1.0e-2]}},
                   "metric": "rankme", "mode": "max"}}))
    assert load_suite(str(path)).search.metric == "rankme"
