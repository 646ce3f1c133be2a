"""A search's space and ASHA budget, as a suite's ``search`` section states them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class SearchSpec:
    """A suite's ``search`` section.

    ``space`` maps ``model.<arg>``, ``data.<arg>`` or ``trainer.<arg>`` to one distribution (see
    :mod:`tune.search`); a run's own ``search:`` mapping replaces it for that run. The rest is
    the ASHA budget, used by ``clusterbench bench`` and as ``clusterbench tune``'s defaults
    (its options override them): ``runs`` lists the runs ``bench`` searches (default: every
    trained run). A section with no ``space`` key is a space by itself (no budget).
    """

    space: dict[str, Any]
    runs: list[str] | None = None
    num_samples: int = 8
    max_epochs: int = 10
    grace_period: int = 1
    reduction_factor: float = 2
    metric: str = "online_val_acc"
    mode: str = "max"
    cpus_per_trial: float = 1
    gpus_per_trial: float = 0
    workers_per_trial: int = 1
    max_concurrent: int | None = None


