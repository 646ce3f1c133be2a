"""What a metric is, as every table and chart shows it: its key (or a family of keys), its column
title, whether it is an accuracy shown in percent, and the range of its values.

The protocols declare their metrics with it (:class:`benchmarks.protocols.Metric`); it imports
nothing heavy, so that the leaderboards read what each metric is without importing the protocols
(:mod:`benchmarks.run.metrics`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One metric a protocol writes into ``result.json``'s ``metrics``, as the leaderboard shows it.

    ``name`` is the key, or a pattern with one ``{field}`` of digits for a family of keys
    (``knn{k}_top1``: ``knn50_top1``, ``knn200_top1``); ``label`` is the column title, with the
    same field (``kNN@{k} top-1 (%)``). ``percent``: a fraction in [0, 1] shown in percent (an
    accuracy, which a paper number may be recorded for); otherwise a score shown as it is.
    ``bounds``: the range of the values stored (``None`` for an open end: a rank, a loss);
    charts take their axes from it. Default: [0, 1] for a percentage, open otherwise.

    >>> knn = Metric("knn{k}_top1", "kNN@{k} top-1 (%)", percent=True)
    >>> knn.matches("knn50_top1"), knn.matches("knn_top1"), knn.label_of("knn50_top1")
    (True, False, 'kNN@50 top-1 (%)')
    >>> knn.order("knn200_top1") > knn.order("knn50_top1")
    True
    """

    name: str
    label: str
    percent: bool
    bounds: tuple[float | None, float | None] | None = None

    def range(self) -> tuple[float | None, float | None]:
        """``bounds``, or its default: [0, 1] for a percentage, open otherwise.

        >>> Metric("x_top1", "x", percent=True).range(), Metric("rank", "r", False).range()
        ((0.0, 1.0), (None, None))
        """
        if self.bounds is not None:
            return self.bounds
        return (0.0, 1.0) if self.percent else (None, None)

    @property
    def _pattern(self) -> re.Pattern[str]:
        parts = re.split(r"\{(\w+)\}", self.name)  # literal, field, literal, ...
        return re.compile("".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>[0-9]+)"
                                  for i, p in enumerate(parts)))

    def matches(self, metric: str) -> bool:
        return self._pattern.fullmatch(metric) is not None

    def fields(self, metric: str) -> dict[str, str]:
        found = self._pattern.fullmatch(metric)
        return found.groupdict() if found else {}

    def label_of(self, metric: str) -> str:
        return self.label.format(**self.fields(metric))

    def order(self, metric: str) -> int:
        """Where ``metric`` sits in its family: by its number (``knn50`` before ``knn200``)."""
        return sum(int(v) for v in self.fields(metric).values())

    def shown(self) -> str:
        """The name as a message lists it: ``knn<k>_top1``."""
        return re.sub(r"\{(\w+)\}", r"<\1>", self.name)
