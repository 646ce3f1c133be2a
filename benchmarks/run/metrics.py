"""What each metric is, wherever it is shown: its column title, whether it is an accuracy stored
as a fraction and shown in percent, and its decimals. The leaderboards
(:mod:`benchmarks.suites.results`) and the W&B runs (:mod:`benchmarks.run.wandb_runs`) both read
it here, so the two show every number in the same units.

The protocols' metrics are read from :data:`~benchmarks.protocols.PROTOCOLS`, whose modules
import torch and Lightning; a process that has not imported it (``leaderboard``, ``report``,
``compare``) reads them as kept from the registry of this source
(:mod:`benchmarks.infra.source_cache`), so that it reads results without those imports.
"""

from __future__ import annotations

import functools
import sys

from benchmarks.infra import source_cache
from benchmarks.infra.metric import Metric

#: The metrics a run records besides the protocols': the online probe's.
RUN_METRICS = (Metric("online_val_acc", "Online probe, val (%)", percent=True),)
#: The package whose source the protocols' metrics are declared in (each protocol's ``metrics``,
#: literal :class:`Metric` lines, and the registry's order): a change to it is read afresh.
PROTOCOLS_PACKAGE = "benchmarks.protocols"


def metric_columns() -> list[Metric]:
    """Every metric a result can hold, in the leaderboard's column order: the protocols' a
    suite names (in the registry's order), the online probe's, then the automatic protocols'."""
    named, automatic = protocol_metrics()
    return [*named, *RUN_METRICS, *automatic]


def protocol_metrics() -> tuple[tuple[Metric, ...], tuple[Metric, ...]]:
    """The metrics of the protocols a suite names and of the automatic ones, each in the
    registry's order: from the registry itself in a process that has imported it (a protocol
    added at run time, as a test does, is read), else as :func:`kept_protocol_metrics`."""
    if PROTOCOLS_PACKAGE not in sys.modules:
        return kept_protocol_metrics()
    from benchmarks.protocols import PROTOCOLS

    return (tuple(m for p in PROTOCOLS.values() if not p.automatic for m in p.metrics),
            tuple(m for p in PROTOCOLS.values() if p.automatic for m in p.metrics))


@functools.cache
def kept_protocol_metrics() -> tuple[tuple[Metric, ...], tuple[Metric, ...]]:
    """:func:`protocol_metrics` from the file kept for this source of :data:`PROTOCOLS_PACKAGE`
    (``~/.cache/clusterbench-metrics``); where there is none, from the registry, imported, then
    kept for the next process."""
    path = source_cache.kept_file("clusterbench-metrics", "protocol-metrics", [PROTOCOLS_PACKAGE])
    kept = metrics_from_json(source_cache.read_kept(path))
    if kept is not None:
        return kept
    import benchmarks.protocols  # noqa: F401 - protocol_metrics reads the registry from now on

    described = protocol_metrics()
    source_cache.keep(path, [[[m.name, m.label, m.percent, m.bounds] for m in metrics]
                             for metrics in described])
    return described


def metrics_from_json(value: object) -> tuple[tuple[Metric, ...], tuple[Metric, ...]] | None:
    """The metrics a kept file holds (two lists of ``[name, label, percent, bounds]``), or None
    where ``value`` has another shape: the file is in the user's folder.

    >>> named, automatic = metrics_from_json([[["knn{k}_top1", "kNN@{k}", True, None]],
    ...                                       [["ari", "ARI", False, [-0.5, 1]]]])
    >>> named[0].label_of("knn5_top1"), automatic[0].range()
    ('kNN@5', (-0.5, 1))
    >>> metrics_from_json([[["knn", "kNN", "yes", None]], []]) is None
    True
    """
    def metric(item: object) -> Metric | None:
        if not (isinstance(item, list) and len(item) == 4):
            return None
        name, label, percent, bounds = item
        if not (isinstance(name, str) and isinstance(label, str) and isinstance(percent, bool)):
            return None
        if bounds is None:
            return Metric(name, label, percent)
        ends_ok = isinstance(bounds, list) and len(bounds) == 2 and all(
            end is None or (isinstance(end, (int, float)) and not isinstance(end, bool))
            for end in bounds)
        return Metric(name, label, percent, tuple(bounds)) if ends_ok else None

    if not (isinstance(value, list) and len(value) == 2
            and all(isinstance(part, list) for part in value)):
        return None
    parts = tuple(tuple(metric(item) for item in part) for part in value)
    if any(m is None for part in parts for m in part):
        return None
    return parts


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
