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
"""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from benchmarks.protocols import PROTOCOLS
from benchmarks.protocols.evaluate import check_evaluation, suite_protocols
from benchmarks.run.one import recorded_metrics
from benchmarks.run.spec import (  # noqa: F401 - the names suites and their callers use
    PAPER_TUNED_KEY,
    PER_LAYER_PAPER_KEY,
    RUNNER_DATA_KEYS,
    RUNNER_MODEL_KEYS,
    RUNNER_TRAINER_KEYS,
    ConfigError,
    RunSpec,
    SuiteSettings,
    check_arguments,
    check_keys,
    check_name,
    init_parameters,
    suggest,
)
from tune.spec import SearchSpec

SUITE_DIR = Path(__file__).resolve().parent.parent  # the suite files are benchmarks/*.yaml

SUITE_KEYS = {"name", "description", "headline", "seeds", "data", "trainer", "evaluation", "runs",
              "fast", "ci", "search", "plots"}
#: A suite's budgets: its settings as written, and the override sections ``fast`` (a tiny budget
#: that checks the plumbing) and ``ci`` (numbers that mean something in minutes on a CPU).
BUDGETS = ("full", "fast", "ci")
PLOT_KEYS = {"x", "y", "series", "log_x", "title"}
RUN_KEYS = {"name", "method", "model", "data", "trainer", "paper", "search"}
EXPERIMENT_KEYS = {"name", "kind", "description", "experiment", "seeds", "settings", "fast"}
#: The ``search`` section: its space, and the budget ``clusterbench bench`` searches it with.
SEARCH_KEYS = {"space", "runs", "num_samples", "max_epochs", "grace_period", "reduction_factor",
               "metric", "mode", "cpus_per_trial", "gpus_per_trial", "gpus_per_trial_for",
               "gpu_memory_gib", "workers_per_trial", "max_concurrent", "cut_in_warmup"}


def resolve_name(registry: dict[str, Any], name: str, what: str) -> Any:
    """``registry[name]``, or a ConfigError listing the available names (a list or a number
    where a name belongs included)."""
    if not isinstance(name, str) or name not in registry:
        raise ConfigError(f"unknown {what} {name!r}{suggest(name, set(registry))}")
    return registry[name]


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


def suites() -> dict[str, Path]:
    """The suite registry: every YAML file in ``benchmarks/``, by file name (without .yaml)."""
    return {p.stem: p for p in sorted(SUITE_DIR.glob("*.yaml"))}


def suite_path(name_or_path: str) -> Path:
    """A registered suite's file, or the file ``name_or_path`` names, as an absolute path: Ray
    runs search trials and placed runs in other working directories, where a relative path
    names nothing."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ConfigError(f"suite file {str(path)!r} does not exist")
        return path.resolve()
    return resolve_name(suites(), name_or_path.replace("-", "_"), "suite")


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
    #: The command line's ``--set KEY=VALUE`` settings (:func:`override_suite`).
    overrides: dict[str, Any] = field(default_factory=dict)

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
                             plots=self.plots, overrides=self.overrides, budget=self.budget)


class SuiteLoader(yaml.SafeLoader):
    """PyYAML's safe loader, with YAML 1.2's floats: ``1e-3`` (an exponent without a decimal
    point) is a float, not the string YAML 1.1 makes of it.

    >>> yaml.load("lr: 1e-3\\nwd: -2E+1\\nname: 1e", Loader=SuiteLoader)
    {'lr': 0.001, 'wd': -20.0, 'name': '1e'}
    """


SuiteLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


#: The most values a suite file may expand to, its anchors' aliases counted each time they are
#: used: a real suite holds a few thousand; 1 KB of nested anchors (a "billion laughs") expands
#: to billions, which the first deep copy of a run turns into a MemoryError after other runs
#: have trained.
MAX_SUITE_VALUES = 1_000_000


def read_suite_file(name_or_path: str) -> tuple[Path, dict[str, Any]]:
    path = suite_path(name_or_path)
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=SuiteLoader) or {}
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path} is not UTF-8 text (byte {err.start}); a suite file is "
                          "YAML in UTF-8") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path} is not valid YAML: {err}") from err
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must hold a mapping of suite settings")
    check_expansion(raw, str(path))
    return path, raw


def check_expansion(value: Any, where: str, limit: int = MAX_SUITE_VALUES) -> None:
    """``value`` (as YAML loaded it, aliases shared) expands to at most ``limit`` values, counted
    without expanding anything: each shared part's size is computed once.

    >>> laughs = ["lol"] * 10
    >>> for _ in range(8):
    ...     laughs = [laughs] * 10
    >>> check_expansion(laughs, "suite.yaml")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    benchmarks.run.spec.ConfigError: suite.yaml expands to more than 1000000 values ...

    Raises:
        ConfigError: naming ``where``.
    """
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        if id(node) not in sizes:
            sizes[id(node)] = 0  # a cycle (an anchor inside itself) counts once
            children = node.values() if isinstance(node, dict) else node
            sizes[id(node)] = 1 + sum(min(size(child), limit + 1) for child in children)
        return sizes[id(node)]

    if size(value) > limit:
        raise ConfigError(f"{where} expands to more than {limit} values (YAML anchors used inside "
                          "anchors?); a suite holds a few thousand")


def suite_kind(name_or_path: str) -> str:
    """``"training"`` or ``"experiment"`` (the ``kind`` key)."""
    path, raw = read_suite_file(name_or_path)
    kind = raw.get("kind", "training")
    if kind not in ("training", "experiment"):
        raise ConfigError(f"{path}: unknown kind {kind!r}; accepted: experiment, training")
    return kind


@dataclass
class ExperimentSuite:
    """A ``kind: experiment`` suite: ``experiment`` names a function of the experiment registry
    (:data:`benchmarks.experiments.EXPERIMENTS`), called as ``function(seeds=seeds, **settings)``;
    it returns a :class:`benchmarks.suites.experiment.ExperimentOutput`."""

    name: str
    description: str
    path: Path
    seeds: list[int]
    experiment: str
    function: Callable[..., Any]
    settings: dict[str, Any]
    fast: bool = False


def keyword_parameters(function: Callable[..., Any]) -> set[str]:
    """The arguments ``function`` takes by name. A ``**kwargs`` catch-all is not one of them: a
    suite's settings are checked against the names a function spells out, never waved through.

    >>> sorted(keyword_parameters(lambda seeds, n=1, *args, fail=False, **kwargs: None))
    ['fail', 'n', 'seeds']
    """
    return {name for name, p in inspect.signature(function).parameters.items()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def load_experiment_suite(name_or_path: str, experiments: dict[str, Callable[..., Any]],
                          fast: bool = False) -> ExperimentSuite:
    """Load and validate a ``kind: experiment`` suite: its ``experiment`` is looked up by name in
    ``experiments`` (the registry; passed in because it sits a layer above the suites) and its
    ``settings`` are checked against the function's named arguments before anything runs."""
    path, raw = read_suite_file(name_or_path)
    where = str(path)
    check_keys(raw, EXPERIMENT_KEYS, where)
    if fast:
        overrides = raw.get("fast") or {}
        check_keys(overrides, {"seeds", "settings"}, f"{where}: fast")
        raw = merge(raw, overrides)
    seeds = raw.get("seeds")
    check_seeds(seeds, where)
    name = raw.get("experiment")
    if not isinstance(name, str):
        raise ConfigError(f"{where} needs experiment: NAME{suggest('', set(experiments))}")
    try:
        function = resolve_name(experiments, name, "experiment")
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from err
    check_name(raw.get("name", path.stem), f"{where}: suite name")
    settings = raw.get("settings") or {}
    check_keys(settings, keyword_parameters(function) - {"seeds"}, f"{where}: settings")
    return ExperimentSuite(name=raw.get("name", path.stem), description=raw.get("description", ""),
                           path=path, seeds=seeds, experiment=name, function=function,
                           settings=dict(settings), fast=fast)


def load_suite(name_or_path: str, fast: bool = False, budget: str = "full") -> Suite:
    """Load, merge (the ``fast`` or ``ci`` overrides when asked: ``fast=True`` is
    ``budget="fast"``) and validate a suite: every key, and every
    value whose type or range is known without building anything: the types of the model,
    data and Trainer arguments (their signatures), the seeds, the evaluation settings, the
    search budget and metric, and the headline and plotted metrics against those the
    evaluation records. Model values are built and checked by
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


def check_search_first_cut(suite: Suite, where: str) -> None:
    """ASHA's first cut comes after each searched run's warm-up
    (:meth:`tune.spec.SearchSpec.check_first_cut`); a space that samples the warm-up is left to
    its trials."""
    from modules.methods import METHODS

    if suite.search is not None and not isinstance(suite.search.cut_in_warmup, bool):
        raise ConfigError(f"{where}: search.cut_in_warmup must be true or false, got "
                          f"{suite.search.cut_in_warmup!r}")
    for run in suite.searched_runs():
        if "model.warmup_epochs" in (run.search or suite.search.space):
            continue
        warmup = run.model.get("warmup_epochs",
                               argument_default(METHODS[run.method], "warmup_epochs", 0))
        suite.search.check_first_cut(warmup, run.name, lambda key: f"{where}: search.{key}")


def argument_default(cls: type, name: str, missing: Any) -> Any:
    """The default of ``cls``'s keyword argument ``name``, looked up the classes its
    ``**kwargs`` pass to (as :func:`benchmarks.run.spec.init_types` does), else ``missing``."""
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass is object:
            continue
        params = inspect.signature(klass.__init__).parameters
        if name in params and params[name].default is not inspect.Parameter.empty:
            return params[name].default
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
    return missing


def check_recorded(metric: Any, recorded: set[str], where: str) -> None:
    """``metric`` is one the suite's results record (:func:`benchmarks.run.one.recorded_metrics`
    of its runs): a leaderboard sorted, or a figure drawn, by any other would be empty."""
    if not isinstance(metric, str) or metric not in recorded:
        raise ConfigError(f"{where} {metric!r} is not a metric this suite's evaluation records"
                          f"{suggest(metric, recorded)}")


#: The sections ``--set`` may set, each with an example of one of its keys.
SET_EXAMPLES = {"model": "model.lr", "data": "data.batch_size", "trainer": "trainer.max_epochs",
                "evaluation": "evaluation.knn.k"}


def override_suite(suite: Suite, assignments: list[str], seeds: list[int] | None = None,
                   only: list[str] | None = None) -> Suite:
    """``clusterbench bench SUITE --set KEY=VALUE ... --seeds S ...``: ``suite`` with each
    ``KEY=VALUE`` set in every run (after its own settings and ``--fast``'s, so it wins) and
    ``seeds`` as its seeds; checked as the suite file's keys are, before anything runs.

    ``KEY`` is ``data.ARG`` or ``trainer.ARG`` (every run), ``model.ARG`` (every run whose method
    takes ``ARG``; at least one of the runs in ``only`` must) or ``evaluation.PROTOCOL.ARG``;
    ``VALUE`` is read as YAML (``3``, ``1e-3``, ``true``, ``[10, 20]``). The settings are kept
    as :attr:`Suite.overrides`, which every result records in its configuration.

    >>> smoke = load_suite("smoke", fast=True)
    >>> suite = override_suite(smoke, ["trainer.max_epochs=3", "model.temperature=0.2"], [0, 1])
    >>> suite.seeds, suite.run("simclr").trainer["max_epochs"], suite.overrides
    ([0, 1], 3, {'model.temperature': 0.2, 'trainer.max_epochs': 3})
    >>> suite.run("pixels").model  # its method takes no temperature
    {}
    >>> override_suite(smoke, ["trainer.max_epoch=3"])
    Traceback (most recent call last):
    ...
    benchmarks.run.spec.ConfigError: unknown key 'max_epoch' in --set trainer (did you mean ...
    """
    if seeds is not None:
        check_seeds(list(seeds), "--seeds")
    overrides = dict(parse_assignment(text) for text in assignments)
    runs = [copy.deepcopy(run) for run in suite.runs]
    evaluation = apply_overrides(overrides, suite, runs, only)
    check_set_trainer_and_data(overrides, runs)
    try:
        check_evaluation(evaluation)
    except ValueError as err:
        raise ConfigError(f"--set evaluation.{err}") from err
    check_still_recorded(suite, runs, evaluation)
    return replace(suite, runs=runs, seeds=list(seeds or suite.seeds), evaluation=evaluation,
                   overrides={**suite.overrides, **dict(sorted(overrides.items()))})


def parse_assignment(text: str) -> tuple[str, Any]:
    """One ``--set SECTION.KEY=VALUE`` as ``(key, value)``, the value read as YAML; a key naming
    no single setting is refused before any value is read."""
    key, eq, value = text.partition("=")
    parts = key.split(".")
    if not eq or parts[0] not in SET_EXAMPLES:
        raise ConfigError(f"--set {text!r} must be SECTION.KEY=VALUE with a section of "
                          f"{', '.join(SET_EXAMPLES)}; e.g. --set trainer.max_epochs=3")
    if len(parts) != (3 if parts[0] == "evaluation" else 2) or not all(parts):
        raise ConfigError(f"--set {key!r} must name one setting, as {SET_EXAMPLES[parts[0]]}")
    try:
        parsed = yaml.load(value, Loader=SuiteLoader)
    except yaml.YAMLError as err:
        raise ConfigError(f"--set {key}: {value!r} is not a YAML value") from err
    check_expansion(parsed, f"--set {key}")
    return key, parsed


def apply_overrides(overrides: dict[str, Any], suite: Suite, runs: list[RunSpec],
                    only: list[str] | None) -> dict[str, Any]:
    """Each setting of ``overrides``, in key order, into the copied ``runs`` (a model argument
    into the runs in ``only`` that take it); returns ``suite``'s evaluation with the
    ``evaluation.`` settings in it."""
    chosen = [run for run in runs if not only or run.name in only]
    evaluation = copy.deepcopy(suite.evaluation)
    for key, value in sorted(overrides.items()):
        section, arg = key.split(".", 1)
        if section == "evaluation":
            evaluation = set_evaluation_setting(evaluation, arg, value)
        elif section == "model":
            set_model_argument(chosen, arg, value, suite.name, only)
        else:
            for run in runs:
                getattr(run, section)[arg] = value
    return evaluation


def set_evaluation_setting(evaluation: dict[str, Any], arg: str, value: Any) -> dict[str, Any]:
    """``evaluation`` with ``PROTOCOL.NAME`` (``arg``) set to ``value``, both names checked
    against the protocol registry."""
    protocol, name = arg.split(".")
    check_keys({protocol: None}, set(PROTOCOLS), "--set evaluation")
    check_keys({name: None}, set(PROTOCOLS[protocol].setting_names()),
               f"--set evaluation.{protocol}")
    return merge(evaluation, {protocol: {name: value}})


def set_model_argument(chosen: list[RunSpec], arg: str, value: Any, suite_name: str,
                       only: list[str] | None) -> None:
    """``model.arg = value`` in every run of ``chosen`` whose method takes ``arg``: an argument
    no chosen run takes is a typo, refused with the names they do take."""
    from modules.methods import METHODS

    takes = [run for run in chosen if arg in init_parameters(
        METHODS[run.method], RUNNER_MODEL_KEYS)]
    if not takes:
        accepted = set().union(*(init_parameters(METHODS[r.method], RUNNER_MODEL_KEYS)
                                 for r in chosen))
        raise ConfigError(f"unknown key {arg!r} in --set model: no run of suite "
                          f"{suite_name!r}{' chosen with --runs' if only else ''} takes "
                          f"it{suggest(arg, accepted)}")
    for run in takes:
        check_arguments({arg: value}, METHODS[run.method], RUNNER_MODEL_KEYS, "--set model")
        run.model[arg] = value


def check_set_trainer_and_data(overrides: dict[str, Any], runs: list[RunSpec]) -> None:
    """The ``trainer.`` settings against the Trainer's signature, and each run's data settings
    against its datamodule's (:func:`check_set_data`)."""
    import lightning.pytorch as pl

    given = {section: {k.split(".")[1]: v for k, v in overrides.items()
                       if k.startswith(section + ".")} for section in ("data", "trainer")}
    check_arguments(given["trainer"], pl.Trainer, RUNNER_TRAINER_KEYS, "--set trainer")
    for run in runs:
        check_set_data(run, given["data"])


def check_set_data(run: RunSpec, given: dict[str, Any]) -> None:
    """The ``data.`` settings ``given`` by ``--set`` against ``run``'s datamodule, which is built
    (nothing is loaded) to catch a bad value. A dataset set by ``--set`` takes the run's other
    data settings too: all of them are checked."""
    from datamodules import DATAMODULES

    data_cls = resolve_name(DATAMODULES, run.dataset, "dataset in --set data.name")
    checked = run.data if "name" in given else given
    check_arguments(checked, data_cls, RUNNER_DATA_KEYS, "--set data", extra={"name"})
    try:
        data_cls(**run.data_kwargs())
    except (TypeError, ValueError) as err:
        raise ConfigError(f"--set data (run {run.name!r}): {err}") from err


def check_still_recorded(suite: Suite, runs: list[RunSpec], evaluation: dict[str, Any]) -> None:
    """What the leaderboard sorts by (the headline) or draws (the plots' metrics) stays recorded
    under the new ``evaluation`` wherever the suite's own recorded it."""
    before = runs_recorded_metrics(suite.runs, suite.evaluation)
    after = runs_recorded_metrics(runs, evaluation)
    for metric, what in ([(suite.headline, "the suite's headline")]
                         + [(plot["y"], "a plotted metric") for plot in suite.plots]):
        if metric in before:
            check_recorded(metric, after, f"--set evaluation: {what}")
