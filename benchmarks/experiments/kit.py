"""What every paper experiment shares, written once: table columns and sentences of statistics
over seeds (mean and *sample* std, :func:`benchmarks.infra.statistics.mean_std`), the adjusted
Rand index, torch's thread count, quiet Lightning logging, the worker processes that run an
experiment's jobs (:func:`run_jobs`) and the check of a suite's nested settings. Figures come
from :mod:`benchmarks.infra.plots` (``pyplot()`` on the Agg backend, ``png_bytes``); the
machine, versions and wall time beside every number are written by the suite runner
(:mod:`benchmarks.suites.experiment`), never by an experiment.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from benchmarks.infra.errors import ConfigError
from benchmarks.infra.statistics import format_mean_std, mean_std
from benchmarks.run.spec import check_keys


def add_mean_std(row: dict[str, Any], name: str, values: Sequence[float],
                 digits: int | None = None) -> None:
    """Columns ``"<name> mean"`` and ``"<name> std"`` of a table row: the mean and sample std
    of the values, NaNs (a seed whose statistic is undefined) left out, the std of one value 0
    (a table's column stays numeric); with ``digits`` both are rounded and an undefined one
    (NaN: nothing to average) becomes None.

    >>> row = {}
    >>> add_mean_std(row, "ARI", [0.5, 1.0])
    >>> row
    {'ARI mean': 0.75, 'ARI std': 0.3535533905932738}
    >>> add_mean_std(row, "gap", [float("nan")], digits=2)
    >>> row["gap mean"], row["gap std"]
    (None, None)
    >>> add_mean_std(row, "one seed", [0.5])
    >>> row["one seed std"]
    0.0
    """
    mean, std = mean_std(values, omit_nan=True, std_of_one=0.0)
    if digits is not None:
        mean = None if math.isnan(mean) else round(mean, digits)
        std = None if math.isnan(std) else round(std, digits)
    row[f"{name} mean"], row[f"{name} std"] = mean, std


def mean_pm_std(values: Sequence[float], digits: int = 2) -> str:
    """``"mean ± std"`` of ``values`` for a sentence (the std is the sample std; a sentence that
    prints one says so).

    >>> mean_pm_std([1.0, 2.0, 3.0])
    '2.00 ± 1.00'
    """
    mean, std = mean_std(values, omit_nan=True, std_of_one=0.0)
    return format_mean_std(mean, std, f".{digits}f")


def ari(labels: Any, assignment: Any) -> float:
    """The adjusted Rand index of an assignment against labels (scikit-learn's), as a float.

    >>> ari([0, 0, 1, 1], [1, 1, 0, 0])
    1.0
    """
    from sklearn.metrics import adjusted_rand_score

    return float(adjusted_rand_score(np.asarray(labels), np.asarray(assignment)))


class TorchThreads:
    """``with TorchThreads(n):`` runs torch's CPU operations on ``n`` threads and restores the
    earlier count afterwards; None leaves torch's setting. Small experiment matrices are faster
    on one thread than on two shared cores. A worker process enters it for its lifetime."""

    def __init__(self, threads: int | None) -> None:
        self.threads = threads

    def __enter__(self) -> TorchThreads:
        import torch

        self.before = torch.get_num_threads()
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        return self

    def __exit__(self, *exc: object) -> None:
        import torch

        torch.set_num_threads(self.before)


class QuietLightning:
    """``with QuietLightning():`` silences Lightning's banners and the small-data warnings of
    Lightning and scikit-learn while an experiment trains its internal models; the logging
    levels and warning filters are restored afterwards. A worker process enters it for its
    lifetime."""

    names = ("lightning.pytorch", "lightning.fabric")

    def __enter__(self) -> QuietLightning:
        import lightning.pytorch  # noqa: F401  (it sets its loggers' levels when imported)

        self.levels = {name: logging.getLogger(name).level for name in self.names}
        for name in self.names:
            logging.getLogger(name).setLevel(logging.ERROR)
        self.warnings = warnings.catch_warnings()
        self.warnings.__enter__()
        warnings.simplefilter("ignore")
        return self

    def __exit__(self, *exc: object) -> None:
        self.warnings.__exit__(*exc)
        for name, level in self.levels.items():
            logging.getLogger(name).setLevel(level)


def run_jobs(jobs: dict[Any, tuple[Callable[..., Any], tuple]], workers: int,
             threads: int | None) -> dict[Any, Any]:
    """Every job ``key -> (function, args)``, in ``workers`` processes (spawned, ``threads``
    torch threads each, Lightning quiet) or in this one when ``workers <= 1``; the results by
    key. Every job seeds itself, so the numbers do not depend on ``workers``; ``function``
    must be importable by name (a module's top level), and a script that calls this with
    ``workers > 1`` needs the ``if __name__ == "__main__":`` guard.

    The workers end with this process, however it ends: a stop signal here (or an error of
    one job) ends them at once, SIGTERM ends one whatever library handler it runs, the
    signals a whole process group gets are left to this process, and a worker whose parent
    is killed is killed with it (:mod:`benchmarks.infra.stop_signals`). Nothing of a job cut
    short is kept: the same command runs it again.

    >>> run_jobs({"a": (abs, (-2,)), "b": (abs, (3,))}, workers=1, threads=None)
    {'a': 2, 'b': 3}
    """
    if workers <= 1 or len(jobs) <= 1:
        return {key: _call(job) for key, job in jobs.items()}
    import multiprocessing
    import os

    from benchmarks.infra.stop_signals import signals_blocked, start_resource_tracker

    start_resource_tracker()
    context = multiprocessing.get_context("spawn")
    with signals_blocked():  # the pool's threads never take a stop; its workers once set up
        pool = context.Pool(processes=min(workers, len(jobs)), initializer=_worker_init,
                            initargs=(os.getpid(), threads))
    try:
        pending = {key: pool.apply_async(_call, (job,)) for key, job in jobs.items()}
        results = {key: result.get() for key, result in pending.items()}
    except BaseException:
        pool.terminate()  # SIGTERM to every worker, each ending at once, then joined
        pool.join()
        raise
    pool.close()
    pool.join()
    return results


def _worker_init(parent: int, threads: int | None) -> None:
    from benchmarks.infra.stop_signals import end_with_parent, leave_stop_signals_to_parent

    end_with_parent(parent)
    leave_stop_signals_to_parent(sigterm=False)
    TorchThreads(threads).__enter__()  # for the worker's lifetime
    QuietLightning().__enter__()


def _call(job: tuple[Callable[..., Any], tuple]) -> Any:
    function, args = job
    return function(*args)


def section(settings: Any, keys: Sequence[str], where: str) -> dict[str, Any]:
    """A nested mapping of a suite's settings, checked to hold exactly ``keys`` (the suite YAML
    is the one home of every setting, so a missing key is an error, not a default): a
    ConfigError names the unknown or missing key and the accepted ones.

    >>> section({"a": 1, "b": 2}, ["a", "b"], "settings: toy")
    {'a': 1, 'b': 2}
    >>> section({"a": 1}, ["a", "b"], "settings: toy")
    Traceback (most recent call last):
    ...
    benchmarks.infra.errors.ConfigError: settings: toy is missing 'b' (accepted and required: a, b)
    """
    check_keys(settings, set(keys), where)
    missing = [key for key in keys if key not in settings]
    if missing:
        raise ConfigError(f"{where} is missing {missing[0]!r} (accepted and required: "
                          f"{', '.join(sorted(keys))})")
    return dict(settings)
