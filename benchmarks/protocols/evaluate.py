"""Score a trained encoder with the shared protocols, from features extracted once per run."""

from __future__ import annotations

from typing import Any

from benchmarks.protocols import (
    cluster_scores,
    extract_features,
    knn_accuracy,
    linear_probe_accuracy,
    svm_accuracy,
)
from benchmarks.protocols.clustering import check_cluster_settings
from benchmarks.protocols.knn import check_knn_settings
from benchmarks.protocols.linear_probe import check_linear_probe_settings
from benchmarks.protocols.svm import check_svm_settings

#: Every protocol's defaults: Kernel-InfoNCE's linear protocol, TransFusion's kNN sizes and SVM.
PROTOCOL_DEFAULTS: dict[str, dict[str, Any]] = {
    "linear_probe": {"epochs": 100, "lr": 0.3, "batch_size": 64, "weight_decay": 1e-6},
    "knn": {"k": [50, 200], "temperature": None},
    "svm": {"C": 1.0, "backend": "torch"},
    "cluster": {"n_clusters": None, "backend": "torch"},
}
#: The protocols a suite runs when its ``evaluation`` section names none.
DEFAULT_PROTOCOLS = ("linear_probe", "knn")


def protocol_settings(evaluation: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The protocols ``evaluation`` runs (:data:`DEFAULT_PROTOCOLS` when it names none of
    :data:`PROTOCOL_DEFAULTS`), each with its settings over the defaults."""
    names = [n for n in PROTOCOL_DEFAULTS if n in evaluation] or list(DEFAULT_PROTOCOLS)
    return {n: {**PROTOCOL_DEFAULTS[n], **(evaluation.get(n) or {})} for n in names}


def knn_sizes(k: Any) -> list[Any]:
    """The ``k`` of the kNN protocol: one, or a list of them."""
    return k if isinstance(k, list) else [k]


def check_evaluation(evaluation: dict[str, Any]) -> None:
    """Every protocol setting in its range, by the protocols' own checks, so that a suite with
    ``linear_probe: {batch_size: 0}`` is refused before it trains rather than after.

    Raises:
        ValueError: ``<protocol>: <setting> must be ..., got ...``.
    """
    checks = {"linear_probe": check_linear_probe_settings, "knn": check_knn_settings,
              "svm": check_svm_settings, "cluster": check_cluster_settings}
    for name, settings in protocol_settings(evaluation).items():
        try:
            if name == "knn":
                ks = knn_sizes(settings["k"])
                for k in ks if ks else [settings["k"]]:  # an empty list is refused as it is
                    check_knn_settings(k, settings["temperature"])
            else:
                checks[name](**settings)
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from err


def protocol_metrics(evaluation: dict[str, Any]) -> set[str]:
    """The metric names :func:`evaluate_encoder` can record under ``evaluation``."""
    settings = protocol_settings(evaluation)
    names: set[str] = set()
    if "linear_probe" in settings:
        names |= {"linear_probe_top1", "linear_probe_top5"}
    if "knn" in settings:
        names |= {f"knn{k}_top1" for k in knn_sizes(settings["knn"]["k"])}
    if "svm" in settings:
        names.add("svm_top1")
    if "cluster" in settings:
        names |= {"kmeans_ari", "kmeans_nmi", "silhouette"}
    return names


def evaluate_layers(model, datamodule, evaluation: dict[str, Any], seed: int
                    ) -> list[dict[str, float]] | None:
    """TransFusion's per-layer fusion protocol (silhouette and sharpness of every layer on the
    test split) when the suite asks for ``per_layer`` and the model has fusion blocks."""
    if "per_layer" not in evaluation or not hasattr(model, "layer_outputs"):
        return None
    from benchmarks.protocols.fusion import per_layer_fusion

    return per_layer_fusion(model, datamodule.test_dataloader(), seed=seed,
                            **(evaluation.get("per_layer") or {}))


def evaluate_encoder(encode, datamodule, evaluation: dict[str, Any], seed: int
                     ) -> tuple[dict[str, float], dict[str, str], dict[str, bytes]]:
    """Extract train and test features once, then run the suite's protocols on them.

    The protocols are the keys of ``evaluation`` (``linear_probe``, ``knn``, ``svm``,
    ``cluster``), each with
    its settings over :data:`PROTOCOL_DEFAULTS`; a section naming none of them runs
    :data:`DEFAULT_PROTOCOLS` (``per_layer`` is run by :func:`evaluate_layers`).
    Returns ``(metrics, notes)``: fractions in [0, 1] keyed ``linear_probe_top1``
    (``linear_probe_top5`` with at least 100 classes), ``knn<k>_top1``, ``svm_top1``, and
    ``kmeans_ari``, ``kmeans_nmi``, ``silhouette`` (scores, not fractions);
    ``notes`` says why a protocol was skipped (e.g. ``k`` above the number of training points);
    ``figures`` maps file names to PNG bytes (``tsne.png`` when the suite asks for ``tsne``).
    """
    settings = protocol_settings(evaluation)
    train_x, train_y = extract_features(encode, datamodule.train_eval_dataloader())
    test_x, test_y = extract_features(encode, datamodule.test_dataloader())
    metrics: dict[str, float] = {}
    notes: dict[str, str] = {}
    if "linear_probe" in settings:
        probe = linear_probe_accuracy(train_x, train_y, test_x, test_y, seed=seed,
                                      **settings["linear_probe"])
        metrics.update({f"linear_probe_{name}": value for name, value in probe.items()})
    if "knn" in settings:
        for k in knn_sizes(settings["knn"]["k"]):
            if k > len(train_y):
                notes[f"knn{k}_top1"] = f"skipped: k={k} > {len(train_y)} training points"
                continue
            metrics[f"knn{k}_top1"] = knn_accuracy(train_x, train_y, test_x, test_y, k=k,
                                                   temperature=settings["knn"]["temperature"])
    if "svm" in settings:
        metrics["svm_top1"] = svm_accuracy(train_x, train_y, test_x, test_y, seed=seed,
                                           **settings["svm"])
    if "cluster" in settings:  # k-means on the test features against the labels
        scores = cluster_scores(test_x, test_y, seed=seed, **settings["cluster"])
        metrics.update({"kmeans_ari": scores["ari"], "kmeans_nmi": scores["nmi"],
                        "silhouette": scores["silhouette"]})
    figures = {}
    if "tsne" in evaluation:  # a 2-D t-SNE of the same test features, coloured by label
        from benchmarks.infra.plots import tsne_panels_png

        figures["tsne.png"] = tsne_panels_png([test_x.numpy()], test_y.numpy(),
                                              ["test features"], seed=seed)
    return metrics, notes, figures
