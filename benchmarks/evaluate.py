"""Score a trained encoder with the shared protocols, from features extracted once per run."""

from __future__ import annotations

from typing import Any

from benchmarks.protocols import extract_features, knn_accuracy, linear_probe_accuracy

#: Kernel-InfoNCE's linear protocol and TransFusion's kNN sizes: the defaults when a suite is
#: silent.
DEFAULT_EVALUATION: dict[str, Any] = {
    "linear_probe": {"epochs": 100, "lr": 0.3, "batch_size": 64, "weight_decay": 1e-6},
    "knn": {"k": [50, 200], "temperature": None},
}


def evaluate_encoder(encode, datamodule, evaluation: dict[str, Any], seed: int
                     ) -> tuple[dict[str, float], dict[str, str]]:
    """Extract train and test features once, then run every protocol on them.

    Returns ``(metrics, notes)``: fractions in [0, 1] keyed ``linear_probe_top1``
    (``linear_probe_top5`` with at least 100 classes) and ``knn<k>_top1``; ``notes`` says why a
    protocol was skipped (e.g. ``k`` above the number of training points).
    """
    settings = {name: {**DEFAULT_EVALUATION[name], **(evaluation.get(name) or {})}
                for name in DEFAULT_EVALUATION}
    train_x, train_y = extract_features(encode, datamodule.train_eval_dataloader())
    test_x, test_y = extract_features(encode, datamodule.test_dataloader())
    metrics: dict[str, float] = {}
    notes: dict[str, str] = {}
    probe = linear_probe_accuracy(train_x, train_y, test_x, test_y, seed=seed,
                                  **settings["linear_probe"])
    metrics.update({f"linear_probe_{name}": value for name, value in probe.items()})
    ks = settings["knn"]["k"]
    for k in ks if isinstance(ks, list) else [ks]:
        if k > len(train_y):
            notes[f"knn{k}_top1"] = f"skipped: k={k} > {len(train_y)} training points"
            continue
        metrics[f"knn{k}_top1"] = knn_accuracy(train_x, train_y, test_x, test_y, k=k,
                                               temperature=settings["knn"]["temperature"])
    return metrics, notes
