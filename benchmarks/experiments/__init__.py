"""Experiment functions of ``kind: experiment`` suites (see :mod:`benchmarks.suites.experiment`).

``EXPERIMENTS`` is the one registry of them: the name a suite's ``experiment:`` key gives ->
the function. A suite file only names one; it can never make the runner import or call anything
else (a ``package.module:function`` path once let a suite call ``torch.hub.load`` on a directory
of its choosing). Each paper's experiment is a package whose ``run`` takes ``seeds`` and named
keyword arguments without defaults, so that a suite's ``settings`` are checked against them, and
found complete, before anything runs: the suite file is the one home of the settings. What the
papers share is in :mod:`benchmarks.experiments.kit`.
"""

from collections.abc import Callable

from benchmarks.experiments import (
    contrastive_dynamics,
    invariant_attention,
    tensorized,
    transfusion_theorem2,
)
from benchmarks.suites.experiment import ExperimentOutput

EXPERIMENTS: dict[str, Callable[..., ExperimentOutput]] = {
    "contrastive_dynamics": contrastive_dynamics.run,
    "invariant_attention": invariant_attention.run,
    "tensorized": tensorized.run,
    "transfusion_theorem2": transfusion_theorem2.run,
}

__all__ = ["EXPERIMENTS"]
