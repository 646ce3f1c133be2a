"""Suites: YAML files in ``benchmarks/``, looked up by file name, validated before anything runs.

A suite holds shared settings (``seeds``, ``data``, ``trainer``, ``evaluation``), a list of
``runs`` (each a registered method with its arguments, optionally overriding the shared
``data`` and ``trainer``), a ``fast`` section of overrides for a tiny budget, and optionally a
``search`` section (:class:`SearchSpec`: the space ``clusterbench tune`` samples and the budget
``clusterbench bench`` searches it with before retraining the best configuration). Top-level keys
starting with ``x-`` are ignored: they hold YAML anchors (``x-model: &base {...}``, then
``model: {<<: *base, loss: sum}``). A suite with ``kind: experiment`` is a paper's figures and
tables computed by one function instead (:mod:`benchmarks.suites.experiment`).
Nothing in a suite file is
code: methods, datasets and experiments are names looked up in registries.

Here: a training suite's schema and its loading (:func:`load_suite`). The files are found and
read by :mod:`benchmarks.suites.suite_file`; ``--set`` is applied by
:mod:`benchmarks.suites.overrides`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.infra.errors import ConfigError, resolve_name, suggest
from benchmarks.infra.paths import check_name
from benchmarks.protocols import PROTOCOLS
from benchmarks.protocols.evaluate import check_evaluation, suite_protocols
from benchmarks.run.one import recorded_metrics
from benchmarks.run.spec import (
    PAPER_TUNED_KEY,
    PER_LAYER_PAPER_KEY,
    RUNNER_DATA_KEYS,
    RUNNER_MODEL_KEYS,
    RUNNER_TRAINER_KEYS,
    RunSpec,
    SuiteSettings,
    argument_default,  # noqa: F401 - benchmarks.perf.train_throughput reads it here
    check_arguments,
    check_keys,
)
from benchmarks.run.trainer_choices import check_trainer_choices
from benchmarks.suites.rankings import check_ranking
from benchmarks.suites.suite_file import BUDGETS, read_suite_file
from tune.spec import SearchSpec

SUITE_KEYS = {"name", "description", "headline", "seeds", "data", "trainer", "evaluation", "runs",
              "fast", "ci", "search", "plots", "ranking"}
PLOT_KEYS = {"x", "y", "series", "log_x", "title"}
RUN_KEYS = {"name", "method", "model", "data", "trainer", "paper", "search"}
#: The ``search`` section: its space, and the budget ``clusterbench bench`` searches it with.
SEARCH_KEYS = {"space", "runs", "num_samples", "max_epochs", "grace_period", "reduction_factor",
               "metric", "mode", "cpus_per_trial", "gpus_per_trial", "gpus_per_trial_for",
               "gpu_memory_gib", "workers_per_trial", "max_concurrent", "cut_in_warmup"}



#: Lightning seeds numpy too, which takes seeds in [0, 2**32 - 1]; it replaces any other by 0.
MAX_SEED = 2**32 - 1


def check_seeds(seeds: Any, where: str) -> None:
    """A non-empty list of distinct integer seeds in [0, 2**32 - 1]: a repeated seed would count
    one training twice in the mean and std over seeds, and ``true`` is not a seed."""
    ok = isinstance(seeds, list) and seeds and all(
        isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_SEED for s in seeds)
    if not ok:
        raise ConfigError(f"seeds in {where} must be a non-empty list of integers in "
                          f"[0, {MAX_SEED}], got {seeds!r}")
    from collections import Counter

    repeated = sorted(s for s, n in Counter(seeds).items() if n > 1)  # linear: a million is fine
    if repeated:
        shown = ", ".join(map(str, repeated[:10])) + (", ..." if len(repeated) > 10 else "")
        raise ConfigError(f"seeds in {where} must be distinct, got {len(seeds)} seeds with "
                          f"{len(repeated)} repeated ({shown} more than once)")


def as_mapping(value: Any, where: str) -> dict[str, Any]:
    """``value`` (a section that may be left out) as a dict, or a ConfigError naming it."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping, got {value!r}")
    return dict(value)


#: The metrics a run records besides the protocols' that a paper number may be recorded for:
#: the online probe's validation accuracy.
RUN_PAPER_METRICS = ("online_val_acc",)


def paper_metric_names() -> list[str]:
    """The metrics a paper number may be recorded for, as a message lists them: the protocols'
    accuracies (in percent), then the online probe's."""
    return [metric.shown() for protocol in PROTOCOLS.values() for metric in protocol.metrics
            if metric.percent] + list(RUN_PAPER_METRICS)


def is_paper_metric(name: str) -> bool:
    """An accuracy the suite measures in percent (a protocol's, or the online probe's)."""
    return name in RUN_PAPER_METRICS or any(
        metric.percent and metric.matches(name)
        for protocol in PROTOCOLS.values() for metric in protocol.metrics)


def merge(base: dict, override: dict) -> dict:
    """Recursive dict merge; lists and scalars in ``override`` replace those in ``base``."""
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def check_per_layer_paper(value: Any, where: str) -> None:
    """``{layer: silhouette}``: layers as whole numbers from 0 (the first block's input), each
    silhouette a number in [-1, 1]."""
    if not isinstance(value, dict) or not value:
        raise ConfigError(f"{where} must be a mapping of layer (0 = the first block's input) to "
                          f"silhouette, got {value!r}")
    for layer, score in value.items():
        if not str(layer).isdigit():
            raise ConfigError(f"{where}: layer {layer!r} is not a whole number from 0")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not -1 <= score <= 1:
            raise ConfigError(f"{where}.{layer} must be a silhouette in [-1, 1], got {score!r}")


def check_paper(paper: Any, where: str) -> None:
    """A paper reference: a ``source`` string, metrics as a number or ``[mean, std]``,
    per-layer silhouettes under :data:`PER_LAYER_PAPER_KEY`, and whether the paper tuned the
    row (:data:`PAPER_TUNED_KEY`, true or false)."""
    if not isinstance(paper, dict):
        raise ConfigError(f"{where} must be a mapping, got {paper!r}")
    for key, value in paper.items():
        if key == "source":
            continue
        if key == PAPER_TUNED_KEY:
            if not isinstance(value, bool):
                raise ConfigError(f"{where}.{key} must be true (the paper searched this row's "
                                  f"hyperparameters) or false, got {value!r}")
            continue
        if key == PER_LAYER_PAPER_KEY:
            check_per_layer_paper(value, f"{where}.{key}")
            continue
        if not is_paper_metric(str(key)):
            raise ConfigError(f"{where}.{key}: not a metric the suite measures in percent; "
                              f"accepted: {', '.join(paper_metric_names())}")
        ok = isinstance(value, (int, float)) or (
            isinstance(value, list) and len(value) == 2
            and all(isinstance(v, (int, float)) for v in value))
        if not ok:
            raise ConfigError(f"{where}.{key} must be a number or [mean, std] in percent, "
                              f"got {value!r}")


def parse_search(raw: Any, suite_file: str) -> SearchSpec | None:
    """The ``search`` section of ``suite_file`` as a :class:`SearchSpec` (``None`` when there
    is none)."""
    where = f"{suite_file}: search"
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a mapping, got {raw!r}")
    if "space" not in raw:  # the short form: the section is the space
        return SearchSpec(space=dict(raw))
    check_keys(raw, SEARCH_KEYS, where)
    spec = SearchSpec(**raw)
    if not isinstance(spec.space, dict) or not spec.space:
        raise ConfigError(f"{where}.space must be a non-empty mapping, got {spec.space!r}")
    if spec.runs is not None and not isinstance(spec.runs, list):
        raise ConfigError(f"{where}.runs must be a list of run names, got {spec.runs!r}")
    # the budget is checked here, not only once the suite's runs have trained and the search
    # starts (the same check, with the command line's options over it)
    try:
        spec.with_options().check(lambda key: f"search.{key}")
    except ConfigError as err:
        raise ConfigError(f"{suite_file}: {err}") from err
    return spec


@dataclass
class Suite:
    name: str
    description: str
    path: Path
    seeds: list[int]
    headline: str
    evaluation: dict[str, Any]
    runs: list[RunSpec]
    search: SearchSpec | None
    fast: bool = False
    budget: str = "full"  # which of BUDGETS; ``fast`` is ``budget == "fast"``
    #: Metric-against-setting plots for the leaderboard: ``{x: model.lr, y: svm_top1,
    #: series: model.loss, log_x: true}``.
    plots: list[dict[str, Any]] = field(default_factory=list)
    #: The command line's ``--set KEY=VALUE`` settings
    #: (:func:`benchmarks.suites.overrides.override_suite`).
    overrides: dict[str, Any] = field(default_factory=dict)
    #: Which differences between rows the leaderboard tests against the spread over seeds
    #: (:func:`benchmarks.suites.rankings.check_ranking`); None without a ranking section.
    ranking: dict[str, Any] | None = None

    def run(self, name: str) -> RunSpec:
        return resolve_name({r.name: r for r in self.runs}, name, f"run of suite {self.name!r}")

    def searched_runs(self, only: list[str] | None = None) -> list[RunSpec]:
        """The runs ``clusterbench bench`` searches: the search section's ``runs`` (default:
        every trained run), restricted to ``only`` when given; none without a search space."""
        from modules.methods import METHODS

        if self.search is None or not self.search.space and not any(r.search for r in self.runs):
            return []
        names = self.search.runs or [r.name for r in self.runs
                                     if METHODS[r.method].requires_training]
        return [self.run(n) for n in names if not only or n in only]

    @property
    def settings(self) -> SuiteSettings:
        """What each of its runs carries of the suite (:class:`SuiteSettings`)."""
        return SuiteSettings(name=self.name, path=str(self.path), fast=self.fast,
                             headline=self.headline, evaluation=self.evaluation,
                             plots=self.plots, overrides=self.overrides, budget=self.budget,
                             ranking=self.ranking)


def load_suite(name_or_path: str, fast: bool = False, budget: str = "full") -> Suite:
    """Load, merge (the ``fast`` or ``ci`` overrides when asked: ``fast=True`` is
    ``budget="fast"``) and validate a suite: every key, and every
    value whose type or range is known without building anything: the types of the model,
    data and Trainer arguments (their signatures), the seeds, the evaluation settings, the
    search budget and metric, and the headline and plotted metrics against those the
    evaluation records, and the ranking section. Model values are built and checked by
    :func:`benchmarks.suites.preflight.check_values`."""
    budget = "fast" if fast else budget
    path, raw = read_suite_file(name_or_path)
    where = str(path)
    raw, fast_overrides = training_settings(raw, where, budget)
    check_runs_and_seeds(raw, where)
    shared = {key: as_mapping(raw.get(key), f"{where}: {key}") for key in ("data", "trainer")}
    evaluation = suite_evaluation(raw.get("evaluation"), where)
    check_name(raw.get("name", path.stem), f"{where}: suite name")
    runs = parse_runs(raw["runs"], where, shared, fast_overrides)
    recorded = runs_recorded_metrics(runs, evaluation)
    plots = parse_plots(raw.get("plots"), recorded, where)
    headline = suite_headline(raw, recorded, where)
    search = parse_suite_search(raw.get("search"), runs, where)
    suite = Suite(name=raw.get("name", path.stem), description=raw.get("description", ""),
                  path=path, seeds=raw["seeds"], headline=headline, evaluation=evaluation,
                  runs=runs, search=search, fast=budget == "fast", budget=budget, plots=plots)
    check_search_metric(suite, where)
    check_search_first_cut(suite, where)
    suite.ranking = check_ranking(raw.get("ranking"), recorded_by_run(suite), where)
    return suite


def training_settings(raw: dict[str, Any], where: str,
                      budget: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A training suite's settings without its anchors, merged with the overrides of its
    ``budget`` section (``fast`` or ``ci``; none for ``full``); returns them and those
    overrides, which also win over each run's own settings."""
    if raw.get("kind", "training") != "training":
        raise ConfigError(f"{where} is a kind: {raw.get('kind')} suite, not a training suite "
                          "(run it with clusterbench bench)")
    raw.pop("kind", None)
    # Top-level keys starting with "x-" only hold YAML anchors for the runs to share.
    raw = {k: v for k, v in raw.items() if not str(k).startswith("x-")}
    check_keys(raw, SUITE_KEYS, where)
    check_keys({budget: None}, set(BUDGETS), "--budget")
    if budget == "full":
        return raw, {}
    if budget not in raw and budget != "fast":  # --fast without a fast: section: as written
        raise ConfigError(f"{where} has no {budget!r} budget (a {budget}: section of "
                          f"overrides); its budgets: "
                          + ", ".join(b for b in BUDGETS if b == "full" or b in raw))
    overrides = as_mapping(raw.get(budget), f"{where}: {budget}")
    check_keys(overrides, SUITE_KEYS - {"name", "fast", "ci", "runs"}, f"{where}: {budget}")
    for key in ("data", "trainer"):
        as_mapping(overrides.get(key), f"{where}: {budget}.{key}")
    return merge(raw, overrides), overrides


def check_runs_and_seeds(raw: dict[str, Any], where: str) -> None:
    """A suite trains something: a non-empty list of runs, each over the same valid seeds."""
    for key in ("runs", "seeds"):
        if not raw.get(key):
            raise ConfigError(f"{where} needs a non-empty {key!r} list")
    check_seeds(raw["seeds"], where)
    if not isinstance(raw["runs"], list):
        raise ConfigError(f"{where}: runs must be a list of runs, got {raw['runs']!r}")


def suite_evaluation(raw: Any, where: str) -> dict[str, Any]:
    """The ``evaluation`` section: protocols a suite may name, every protocol's settings pinned
    and in range by the registry's own checks."""
    evaluation = as_mapping(raw, f"{where}: evaluation")
    check_keys(evaluation, set(suite_protocols()), f"{where}: evaluation")
    try:
        check_evaluation(evaluation)
    except ValueError as err:
        raise ConfigError(f"{where}: evaluation{'.' if evaluation else ' '}{err}") from err
    return evaluation


def parse_runs(raw_runs: list[Any], where: str, shared: dict[str, dict[str, Any]],
               fast_overrides: dict[str, Any]) -> list[RunSpec]:
    """Every run of the suite, checked, each under its own name and in its own folder: two runs
    sharing one would leave one row of the leaderboard."""
    runs, names, slugs = [], set(), {}
    for i, run_raw in enumerate(raw_runs):
        run_where = f"{where}: runs[{i}]"
        run = parse_run(run_raw, run_where, shared, fast_overrides)
        if run.name in names:
            raise ConfigError(f"{run_where}: run name {run.name!r} is used twice")
        if run.slug in slugs:  # a/b and a__b would share one folder, one row lost
            raise ConfigError(f"{run_where}: run names {slugs[run.slug]!r} and {run.name!r} "
                              f"share the folder runs/{run.slug}; rename one")
        names.add(run.name)
        slugs[run.slug] = run.name
        check_run_arguments(run, run_where)
        runs.append(run)
    return runs


def parse_run(run_raw: Any, run_where: str, shared: dict[str, dict[str, Any]],
              fast_overrides: dict[str, Any]) -> RunSpec:
    """One entry of ``runs``: a registered method, its ``data`` and ``trainer`` merged over the
    suite's shared ones (``--fast`` overrides over both), its paper numbers and name checked."""
    from modules.methods import METHODS

    check_keys(run_raw, RUN_KEYS, run_where)
    if "method" not in run_raw:
        raise ConfigError(f"{run_where} needs a 'method'; available: {', '.join(METHODS)}")
    resolve_name(METHODS, run_raw["method"], f"method in {run_where}")
    sections = {key: as_mapping(run_raw.get(key), f"{run_where}.{key}")
                for key in ("model", "data", "trainer")}
    run = RunSpec(name=str(run_raw.get("name", run_raw["method"])), method=run_raw["method"],
                  model=sections["model"],
                  # --fast overrides win over a run's own settings (its epochs, say)
                  data=merge(merge(shared["data"], sections["data"]),
                             fast_overrides.get("data") or {}),
                  trainer=merge(merge(shared["trainer"], sections["trainer"]),
                                fast_overrides.get("trainer") or {}),
                  paper=as_mapping(run_raw.get("paper"), f"{run_where}.paper"),
                  search=run_raw.get("search"))
    if run.search is not None:
        check_keys(run.search, set(run.search), f"{run_where}.search")
    check_paper(run.paper, f"{run_where}.paper")
    check_name(run.name, f"{run_where}: run name", nested=True)
    return run


def check_run_arguments(run: RunSpec, run_where: str) -> None:
    """The run's dataset, and its model, data and Trainer arguments against the signatures that
    take them; the datamodule is built (cheap: nothing is loaded) to catch a bad value before
    any run starts."""
    import lightning.pytorch as pl

    from datamodules import DATAMODULES
    from modules.methods import METHODS

    if "name" not in run.data:
        raise ConfigError(f"{run_where} has no dataset: set data.name; available: "
                          f"{', '.join(DATAMODULES)}")
    data_cls = resolve_name(DATAMODULES, run.dataset, f"dataset in {run_where}")
    check_arguments(run.model, METHODS[run.method], RUNNER_MODEL_KEYS, f"{run_where}.model")
    check_arguments(run.data, data_cls, RUNNER_DATA_KEYS, f"{run_where}.data", extra={"name"})
    try:  # before its type: a precision's type names choices a run cannot evaluate with
        check_trainer_choices(run.trainer)
    except ValueError as err:
        raise ConfigError(f"{run_where}.trainer.{err}") from err
    check_arguments(run.trainer, pl.Trainer, RUNNER_TRAINER_KEYS, f"{run_where}.trainer")
    try:
        data_cls(**run.data_kwargs())
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{run_where}.data: {err}") from err


def runs_recorded_metrics(runs: list[RunSpec], evaluation: dict[str, Any]) -> set[str]:
    """Every metric a result of one of ``runs`` records under ``evaluation``
    (:func:`benchmarks.run.one.recorded_metrics`)."""
    from modules.methods import METHODS

    return set().union(*(recorded_metrics(METHODS[r.method], evaluation) for r in runs))


def recorded_by_run(suite: Suite) -> dict[str, set[str]]:
    """Each run's recorded metrics by the name of its leaderboard row, a searched run's
    ``+tuned`` retraining included."""
    from modules.methods import METHODS

    recorded = {r.name: recorded_metrics(METHODS[r.method], suite.evaluation) for r in suite.runs}
    return {**recorded, **{f"{r.name}+tuned": recorded[r.name] for r in suite.searched_runs()}}


def parse_plots(plots: Any, recorded: set[str], where: str) -> list[dict[str, Any]]:
    """The ``plots`` section: each plot draws a metric the suite records (``y``) against a run
    setting (``x``, and ``series`` when given), or it would be drawn empty."""
    plots = plots or []
    if not isinstance(plots, list):
        raise ConfigError(f"{where}: plots must be a list of plots, got {plots!r}")
    for i, plot in enumerate(plots):
        check_keys(plot, PLOT_KEYS, f"{where}: plots[{i}]")
        for key in ("x", "series"):
            if key in plot and str(plot[key]).split(".")[0] not in ("model", "data", "trainer"):
                raise ConfigError(f"{where}: plots[{i}].{key} must name a run setting such as "
                                  f"model.lr or data.batch_size, got {plot[key]!r}")
        if "x" not in plot or "y" not in plot:
            raise ConfigError(f"{where}: plots[{i}] needs x (a run setting) and y (a metric)")
        check_recorded(plot["y"], recorded, f"{where}: plots[{i}].y")
    return plots


def suite_headline(raw: dict[str, Any], recorded: set[str], where: str) -> str:
    """The metric the leaderboard sorts by. A suite that names none keeps the default, recorded
    or not: it is part of every result's configuration, so another default would retrain
    finished runs."""
    headline = raw.get("headline", "linear_probe_top1")
    if "headline" in raw:
        check_recorded(headline, recorded, f"{where}: headline")
    return headline


def parse_suite_search(raw: Any, runs: list[RunSpec], where: str) -> SearchSpec | None:
    """The ``search`` section (:func:`parse_search`), whose ``runs`` and ``gpus_per_trial_for``
    must name this suite's runs and datasets."""
    search = parse_search(raw, where)
    if search is None:
        return None
    for name in search.runs or []:
        resolve_name({r.name: r for r in runs}, name, f"run in {where}: search.runs")
    known = {r.name for r in runs} | {r.dataset for r in runs}
    for key in search.gpus_per_trial_for or {}:
        if key not in known:
            raise ConfigError(f"{where}: search.gpus_per_trial_for: {key!r} is neither a run nor "
                              f"a dataset of this suite{suggest(key, sorted(known))}")
    return search


def check_search_metric(suite: Suite, where: str) -> None:
    """The search's metric is one every searched run logs each epoch, or no trial would report
    it (:meth:`tune.spec.SearchSpec.check_metric`)."""
    from modules.methods import METHODS

    for run in suite.searched_runs():
        suite.search.check_metric(METHODS[run.method], lambda key: f"{where}: search.{key}")


def check_search_first_cut(suite: Suite, where: str, only: list[str] | None = None) -> None:
    """ASHA's first cut comes after the warm-up of each searched run (of ``only`` when given):
    :meth:`tune.spec.SearchSpec.check_run_first_cut`, the rule every search is held to; at load,
    and in ``bench`` again after its ``--set`` settings."""
    if suite.search is not None and not isinstance(suite.search.cut_in_warmup, bool):
        raise ConfigError(f"{where}: search.cut_in_warmup must be true or false, got "
                          f"{suite.search.cut_in_warmup!r}")
    try:
        for run in suite.searched_runs(only):
            suite.search.check_run_first_cut(run, lambda key: f"search.{key}")
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None


def check_recorded(metric: Any, recorded: set[str], where: str) -> None:
    """``metric`` is one the suite's results record (:func:`benchmarks.run.one.recorded_metrics`
    of its runs): a leaderboard sorted, or a figure drawn, by any other would be empty."""
    if not isinstance(metric, str) or metric not in recorded:
        raise ConfigError(f"{where} {metric!r} is not a metric this suite's evaluation records"
                          f"{suggest(metric, recorded)}")
