"""Suites: YAML files in ``benchmarks/``, looked up by file name, validated before anything runs.

A suite holds shared settings (``seeds``, ``data``, ``trainer``, ``evaluation``), a list of
``runs`` (each a registered method with its arguments, optionally overriding the shared
``data`` and ``trainer``), a ``fast`` section of overrides for a tiny budget, and optionally a
``search`` section for ``clusterbench tune``. Top-level keys starting with ``x-`` are ignored:
they hold YAML anchors (``x-model: &base {...}``, then ``model: {<<: *base, loss: sum}``).
"""

from __future__ import annotations

import copy
import difflib
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SUITE_DIR = Path(__file__).resolve().parent

SUITE_KEYS = {"name", "description", "headline", "seeds", "data", "trainer", "evaluation", "runs",
              "fast", "search", "plots"}
PLOT_KEYS = {"x", "y", "series", "log_x", "title"}
RUN_KEYS = {"name", "method", "model", "data", "trainer", "paper"}
EVALUATION_KEYS = {"linear_probe": {"epochs", "lr", "batch_size", "weight_decay"},
                   "knn": {"k", "temperature"}, "svm": {"C"},
                   "per_layer": {"silhouette_metric", "scores"}, "cluster": {"n_clusters"},
                   "tsne": set()}
#: Set by the runner itself; a suite may not override them.
RUNNER_TRAINER_KEYS = {"logger", "callbacks", "default_root_dir", "enable_progress_bar"}
RUNNER_DATA_KEYS = {"seed"}
RUNNER_MODEL_KEYS = {"num_classes", "input_shape"}


class ConfigError(ValueError):
    """A bad name, key or value in a suite or on the command line (the CLI exits 2)."""


def suggest(name: str, accepted: set[str] | list[str]) -> str:
    close = difflib.get_close_matches(str(name), list(accepted), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{hint}; accepted: {', '.join(sorted(accepted))}"


def resolve_name(registry: dict[str, Any], name: str, what: str) -> Any:
    """``registry[name]``, or a ConfigError listing the available names."""
    if name not in registry:
        raise ConfigError(f"unknown {what} {name!r}{suggest(name, set(registry))}")
    return registry[name]


def suites() -> dict[str, Path]:
    """The suite registry: every YAML file in ``benchmarks/``, by file name (without .yaml)."""
    return {p.stem: p for p in sorted(SUITE_DIR.glob("*.yaml"))}


def suite_path(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ConfigError(f"suite file {str(path)!r} does not exist")
        return path
    return resolve_name(suites(), name_or_path.replace("-", "_"), "suite")


def merge(base: dict, override: dict) -> dict:
    """Recursive dict merge; lists and scalars in ``override`` replace those in ``base``."""
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def check_keys(mapping: Any, accepted: set[str], where: str) -> None:
    if not isinstance(mapping, dict):
        raise ConfigError(f"{where} must be a mapping, got {mapping!r}")
    for key in mapping:
        if key not in accepted:
            raise ConfigError(f"unknown key {key!r} in {where}{suggest(key, accepted)}")


def init_parameters(cls: type, exclude: set[str]) -> set[str]:
    """The keyword arguments ``cls(...)`` accepts (to validate suite keys against).

    A method whose ``__init__`` takes ``**kwargs`` passes them to its base class (as every method
    does to ``RepresentationModule``), so the base's arguments are accepted too."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass is object:
            continue
        params = inspect.signature(klass.__init__).parameters
        names |= {n for n, p in params.items() if n != "self" and n not in exclude
                  and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
    return names


def check_paper(paper: Any, where: str) -> None:
    """A paper reference: a ``source`` string and metrics as a number or ``[mean, std]``."""
    if not isinstance(paper, dict):
        raise ConfigError(f"{where} must be a mapping, got {paper!r}")
    for key, value in paper.items():
        if key == "source":
            continue
        ok = isinstance(value, (int, float)) or (
            isinstance(value, list) and len(value) == 2
            and all(isinstance(v, (int, float)) for v in value))
        if not ok:
            raise ConfigError(f"{where}.{key} must be a number or [mean, std] in percent, "
                              f"got {value!r}")


@dataclass
class RunSpec:
    """One row of a suite: a method, its arguments, its data and its trainer settings."""

    name: str
    method: str
    model: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    trainer: dict[str, Any] = field(default_factory=dict)
    #: The paper's reported numbers for this row, in percent: ``{"source": "Table 1",
    #: "linear_probe_top1": [88.11, 0.09]}`` (a number or ``[mean, std]`` per metric).
    paper: dict[str, Any] = field(default_factory=dict)

    @property
    def dataset(self) -> str:
        return self.data["name"]

    def data_kwargs(self) -> dict[str, Any]:
        return {k: v for k, v in self.data.items() if k != "name"}


@dataclass
class Suite:
    name: str
    description: str
    path: Path
    seeds: list[int]
    headline: str
    evaluation: dict[str, Any]
    runs: list[RunSpec]
    search: dict[str, Any] | None
    fast: bool = False
    #: Metric-against-setting plots for the leaderboard: ``{x: model.lr, y: svm_top1,
    #: series: model.loss, log_x: true}``.
    plots: list[dict[str, Any]] = field(default_factory=list)

    def run(self, name: str) -> RunSpec:
        return resolve_name({r.name: r for r in self.runs}, name, f"run of suite {self.name!r}")


def load_suite(name_or_path: str, fast: bool = False) -> Suite:
    """Load, merge (``fast`` overrides when asked) and validate a suite."""
    from datamodules import DATAMODULES
    from modules import METHODS

    path = suite_path(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path} is not valid YAML: {err}") from err
    where = str(path)
    # Top-level keys starting with "x-" only hold YAML anchors for the runs to share.
    raw = {k: v for k, v in raw.items() if not str(k).startswith("x-")}
    check_keys(raw, SUITE_KEYS, where)
    fast_overrides = (raw.get("fast") or {}) if fast else {}
    if fast:
        check_keys(fast_overrides, SUITE_KEYS - {"name", "fast", "runs"}, f"{where}: fast")
        raw = merge(raw, fast_overrides)
    for key in ("runs", "seeds"):
        if not raw.get(key):
            raise ConfigError(f"{where} needs a non-empty {key!r} list")
    seeds = raw["seeds"]
    if not isinstance(seeds, list) or not all(isinstance(s, int) for s in seeds):
        raise ConfigError(f"seeds in {where} must be a list of integers, got {seeds!r}")
    evaluation = raw.get("evaluation") or {}
    check_keys(evaluation, set(EVALUATION_KEYS), f"{where}: evaluation")
    for protocol, keys in EVALUATION_KEYS.items():
        check_keys(evaluation.get(protocol) or {}, keys, f"{where}: evaluation.{protocol}")

    import lightning.pytorch as pl

    trainer_keys = init_parameters(pl.Trainer, RUNNER_TRAINER_KEYS)
    runs, names = [], set()
    for i, run_raw in enumerate(raw["runs"]):
        run_where = f"{where}: runs[{i}]"
        check_keys(run_raw, RUN_KEYS, run_where)
        if "method" not in run_raw:
            raise ConfigError(f"{run_where} needs a 'method'; available: {', '.join(METHODS)}")
        method_cls = resolve_name(METHODS, run_raw["method"], f"method in {run_where}")
        run = RunSpec(name=str(run_raw.get("name", run_raw["method"])), method=run_raw["method"],
                      model=dict(run_raw.get("model") or {}),
                      # --fast overrides win over a run's own settings (its epochs, say)
                      data=merge(merge(raw.get("data") or {}, run_raw.get("data") or {}),
                                 fast_overrides.get("data") or {}),
                      trainer=merge(merge(raw.get("trainer") or {}, run_raw.get("trainer") or {}),
                                    fast_overrides.get("trainer") or {}),
                      paper=dict(run_raw.get("paper") or {}))
        check_paper(run.paper, f"{run_where}.paper")
        if run.name in names:
            raise ConfigError(f"{run_where}: run name {run.name!r} is used twice")
        names.add(run.name)
        if "name" not in run.data:
            raise ConfigError(f"{run_where} has no dataset: set data.name; available: "
                              f"{', '.join(DATAMODULES)}")
        data_cls = resolve_name(DATAMODULES, run.dataset, f"dataset in {run_where}")
        check_keys(run.model, init_parameters(method_cls, RUNNER_MODEL_KEYS), f"{run_where}.model")
        check_keys(run.data, init_parameters(data_cls, RUNNER_DATA_KEYS) | {"name"},
                   f"{run_where}.data")
        check_keys(run.trainer, trainer_keys, f"{run_where}.trainer")
        try:  # cheap (nothing is loaded) and catches a bad value before any run starts
            data_cls(**run.data_kwargs())
        except (TypeError, ValueError) as err:
            raise ConfigError(f"{run_where}.data: {err}") from err
        runs.append(run)
    plots = raw.get("plots") or []
    for i, plot in enumerate(plots):
        check_keys(plot, PLOT_KEYS, f"{where}: plots[{i}]")
        for key in ("x", "series"):
            if key in plot and str(plot[key]).split(".")[0] not in ("model", "data", "trainer"):
                raise ConfigError(f"{where}: plots[{i}].{key} must name a run setting such as "
                                  f"model.lr or data.batch_size, got {plot[key]!r}")
        if "x" not in plot or "y" not in plot:
            raise ConfigError(f"{where}: plots[{i}] needs x (a run setting) and y (a metric)")
    headline = raw.get("headline", "linear_probe_top1")
    return Suite(name=raw.get("name", path.stem), description=raw.get("description", ""),
                 path=path, seeds=seeds, headline=headline, evaluation=evaluation, runs=runs,
                 search=raw.get("search"), fast=fast, plots=plots)
