"""Tiny suites for the tests that run ``clusterbench bench``: digits, one epoch of two batches,
a two-epoch probe and a kNN."""

from __future__ import annotations

from pathlib import Path

import yaml

TINY_TRAINER = {"max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 1,
                "accelerator": "cpu", "log_every_n_steps": 1}
TINY_EVALUATION = {"linear_probe": {"epochs": 2, "lr": 0.3,
                                    "batch_size": 64, "weight_decay": 1.0e-6},
                   "knn": {"k": [5], "temperature": None}}


def write_suite(path: Path, runs: list[dict], **extra) -> Path:
    """A suite named after ``path``'s stem, with ``runs`` and ``extra`` keys, written there."""
    suite = {"name": path.stem, "seeds": [0], "data": {"name": "digits", "batch_size": 64},
             "trainer": TINY_TRAINER, "evaluation": TINY_EVALUATION, "runs": runs, **extra}
    path.write_text(yaml.safe_dump(suite))
    return path
