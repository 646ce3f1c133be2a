"""A search's space and ASHA budget, as a suite's ``search`` section states them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.infra.errors import ConfigError, suggest
from benchmarks.run.spec import RunSpec, argument_default
from modules.ranges import check_count, check_non_negative, check_positive


@dataclass
class SearchSpec:
    """A suite's ``search`` section.

    ``space`` maps ``model.<arg>``, ``data.<arg>`` or ``trainer.<arg>`` to one distribution
    (:mod:`tune.search`); a run's own ``search:`` replaces it. The rest is the ASHA budget
    (``clusterbench tune``'s options override it); ``runs`` lists the runs ``bench`` searches
    (default: every trained run). A section with no ``space`` key is a space by itself.
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
    #: Shares for some runs: ``{<run name or dataset>: gpus}``; a run's name wins over its
    #: dataset, and ``gpus_per_trial`` covers the rest (:meth:`gpus_for`).
    gpus_per_trial_for: dict[str, float] | None = None
    #: The memory of one GPU the trials run on, in GiB: each trial's estimated memory must fit
    #: its share of it. None: the local GPU's, where there is one; else not checked.
    gpu_memory_gib: float | None = None
    workers_per_trial: int = 1
    max_concurrent: int | None = None
    #: True lets ASHA's first cut (``grace_period``) fall inside a searched run's learning-rate
    #: warm-up, which the suite must then say why (a plumbing budget whose trials end in it).
    cut_in_warmup: bool = False

    def gpus_for(self, run: Any) -> float:
        """The GPUs one trial of ``run`` gets: its name's entry of ``gpus_per_trial_for``, else
        its dataset's, else ``gpus_per_trial``.

        >>> spec = SearchSpec(space={}, gpus_per_trial=0.25,
        ...                   gpus_per_trial_for={"tinyimagenet": 0.5, "big/run": 1})
        >>> from types import SimpleNamespace as Run
        >>> [spec.gpus_for(Run(name=n, dataset=d)) for n, d in
        ...  [("a", "cifar10"), ("b", "tinyimagenet"), ("big/run", "tinyimagenet")]]
        [0.25, 0.5, 1]
        """
        shares = self.gpus_per_trial_for or {}
        return shares.get(run.name, shares.get(run.dataset, self.gpus_per_trial))

    def with_options(self, **options: Any) -> SearchSpec:
        """This budget with the options that are not None over it; a trial over more than one
        GPU gets one DDP worker per GPU unless ``workers_per_trial`` is given."""
        budget = dataclasses.replace(self, **{k: v for k, v in options.items() if v is not None})
        if options.get("gpus_per_trial") is not None:  # the command line's share is every run's
            budget.gpus_per_trial_for = None
        gpus = budget.gpus_per_trial
        if (options.get("workers_per_trial") is None and isinstance(gpus, int | float)
                and gpus > 1):
            budget.workers_per_trial = int(gpus)
        return budget

    def check(self, name: Callable[[str], str]) -> None:
        """The budget's values in their ranges. ``name`` spells a setting as the reader wrote
        it: ``search.num_samples`` or ``--num-samples``.

        Raises:
            ConfigError: naming the setting, what it accepts and the value.
        """
        try:
            for key in ("num_samples", "max_epochs", "grace_period", "workers_per_trial"):
                check_count(name(key), getattr(self, key))
            if self.max_concurrent is not None:
                check_count(name("max_concurrent"), self.max_concurrent)
            check_positive(name("cpus_per_trial"), self.cpus_per_trial)
            check_non_negative(name("gpus_per_trial"), self.gpus_per_trial)
            if self.gpu_memory_gib is not None:
                check_positive(name("gpu_memory_gib"), self.gpu_memory_gib)
        except ValueError as err:
            raise ConfigError(str(err)) from err
        shares = self.gpus_per_trial_for
        if shares is not None and not isinstance(shares, dict):
            raise ConfigError(f"{name('gpus_per_trial_for')} must be a mapping of run names or "
                              f"datasets to GPUs per trial, got {shares!r}")
        for key, share in (shares or {}).items():
            try:
                check_positive(f"{name('gpus_per_trial_for')}.{key}", share)
            except ValueError as err:
                raise ConfigError(str(err)) from err
            if share > 1 and share != int(share):
                raise ConfigError(f"{name('gpus_per_trial_for')}.{key} above 1 must be a whole "
                                  f"number of GPUs, got {share}")
        if self.grace_period > self.max_epochs:
            raise ConfigError(f"{name('grace_period')} ({self.grace_period}) must not exceed "
                              f"{name('max_epochs')} ({self.max_epochs})")
        factor = self.reduction_factor
        if not isinstance(factor, int | float) or isinstance(factor, bool) or not factor > 1:
            raise ConfigError(f"{name('reduction_factor')} must be above 1, got {factor!r}")
        if self.mode not in ("max", "min"):
            raise ConfigError(f"{name('mode')} must be max or min, got {self.mode!r}")
        gpus = self.gpus_per_trial
        if gpus > 1 and gpus != int(gpus):
            raise ConfigError(f"{name('gpus_per_trial')} above 1 must be a whole number of GPUs "
                              f"(one DDP worker each), got {gpus}")
        if gpus > 1 and self.workers_per_trial != gpus:
            raise ConfigError(f"{name('workers_per_trial')} {self.workers_per_trial} with "
                              f"{name('gpus_per_trial')} {gpus:g}: a DDP trial runs one worker "
                              "per GPU")

    def check_first_cut(self, warmup_epochs: int, run: str, name: Callable[[str], str]) -> None:
        """Refuses ASHA's first cut (``grace_period``) inside ``run``'s learning-rate warm-up
        unless ``cut_in_warmup`` is set: there a rate that would diverge and one that would trail
        still look alike.

        >>> SearchSpec(space={}, max_epochs=50, grace_period=5).check_first_cut(
        ...     10, "cifar10/sum", lambda key: f"search.{key}")
        Traceback (most recent call last):
        ...
        benchmarks.infra.errors.ConfigError: search.grace_period (5) falls inside the 10-epoch ...
        """
        if self.cut_in_warmup or self.grace_period > warmup_epochs:
            return
        raise ConfigError(f"{name('grace_period')} ({self.grace_period}) falls inside the "
                          f"{warmup_epochs}-epoch warm-up of run {run!r} (model.warmup_epochs): "
                          "ASHA's first cut would rank trials before an epoch at their full "
                          f"learning rate; set it above {warmup_epochs}, or "
                          f"{name('cut_in_warmup')}: true to cut there anyway")

    def check_run_first_cut(self, run: RunSpec, name: Callable[[str], str]) -> None:
        """:meth:`check_first_cut` against the warm-up ``run`` trains with: its
        ``model.warmup_epochs``, else its method's default. Every search is held to it: a suite
        at load, ``bench`` after its ``--set`` settings, ``tune`` after its options. A space that
        samples the warm-up is left to its trials.

        >>> run = RunSpec(name="sum", method="simclr", model={"warmup_epochs": 10})
        >>> SearchSpec(space={}, max_epochs=50, grace_period=5).check_run_first_cut(
        ...     run, lambda key: f"search.{key}")
        Traceback (most recent call last):
        ...
        benchmarks.infra.errors.ConfigError: search.grace_period (5) falls inside the 10-epoch ...
        """
        from modules.methods import METHODS

        space = run.search if run.search is not None else self.space
        if "model.warmup_epochs" in space:
            return
        warmup = run.model.get("warmup_epochs",
                               argument_default(METHODS[run.method], "warmup_epochs", 0))
        self.check_first_cut(warmup, run.name, name)

    def check_metric(self, method: type, name: Callable[[str], str]) -> None:
        """``metric`` must be one of the method's ``epoch_metrics``, or the search would fail
        only after every trial had trained."""
        accepted = method.epoch_metrics
        if self.metric not in accepted:
            raise ConfigError(f"{name('metric')} {self.metric!r} is not a metric "
                              f"{method.__name__} logs every epoch"
                              f"{suggest(self.metric, accepted)}")
