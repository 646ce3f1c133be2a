"""What each metric is, wherever it is shown: its column title, whether it is an accuracy stored
as a fraction and shown in percent, and its decimals. The leaderboards
(:mod:`benchmarks.suites.results`) and the W&B runs (:mod:`benchmarks.run.wandb_runs`) both read
it here, so the two show every number in the same units.
"""

from __future__ import annotations

import functools

from benchmarks.protocols import PROTOCOLS, Metric

#: The metrics a run records besides the protocols': the online probe's.
RUN_METRICS = (Metric("online_val_acc", "Online probe, val (%)", percent=True),)


def metric_columns() -> list[Metric]:
    """Every metric a result can hold, in the leaderboard's column order: the protocols' a
    suite names (in the registry's order), the online probe's, then the automatic protocols'."""
    named = [m for p in PROTOCOLS.values() if not p.automatic for m in p.metrics]
    automatic = [m for p in PROTOCOLS.values() if p.automatic for m in p.metrics]
    return [*named, *RUN_METRICS, *automatic]


def metric_of(name: str) -> Metric | None:
    """The description of the metric ``name`` (``None`` for a name no protocol writes)."""
    return next((m for m in metric_columns() if m.matches(name)), None)


def metric_label(name: str) -> str:
    """A column title: ``knn50_top1`` -> ``kNN@50 top-1 (%)``; the name itself for a metric no
    protocol describes."""
    metric = metric_of(name)
    return metric.label_of(name) if metric else name


def is_percent(metric: str) -> bool:
    """Accuracies are stored as fractions and shown in percent; scores (ARI, NMI, silhouette)
    are shown as they are (each protocol's :class:`~benchmarks.protocols.Metric` says which)."""
    described = metric_of(metric)
    return described is not None and described.percent


def display_scale(metric: str) -> float:
    """The factor from a stored value to the shown one: 100 for an accuracy, else 1."""
    return 100.0 if is_percent(metric) else 1.0


def metric_digits(metric: str) -> int:
    """Decimals a metric is shown with, in display units: 2 for a percentage, 3 for a score
    (ARI, NMI, silhouette lie in [-1, 1], so their third decimal is a tenth of a point)."""
    return 2 if is_percent(metric) else 3


#: The online monitors' accuracies, logged each epoch as fractions: the leaderboard shows the
#: probe's (:data:`RUN_METRICS`); W&B shows both in percent, as every accuracy.
ONLINE_ACCURACIES = ("online_val_acc", "online_knn_acc")


@functools.cache
def shown_in_percent(name: str) -> bool:
    """Whether ``name`` is an accuracy, stored as a fraction and shown in percent: a protocol's,
    or one of the online monitors' (:data:`ONLINE_ACCURACIES`).

    >>> shown_in_percent("knn50_top1"), shown_in_percent("online_knn_acc")
    (True, True)
    >>> shown_in_percent("kmeans_ari"), shown_in_percent("rankme"), shown_in_percent("epoch")
    (False, False, False)
    """
    return is_percent(name) or name in ONLINE_ACCURACIES
