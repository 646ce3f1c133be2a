"""``clusterbench bench SUITE --set KEY=VALUE``: a loaded suite with settings set from the
command line, each checked as the suite file's own keys are before anything runs.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from benchmarks.infra.errors import ConfigError, resolve_name, suggest
from benchmarks.infra.yaml_files import load_yaml
from benchmarks.protocols import PROTOCOLS
from benchmarks.protocols.evaluate import check_evaluation
from benchmarks.run.spec import (
    RUNNER_DATA_KEYS,
    RUNNER_MODEL_KEYS,
    RUNNER_TRAINER_KEYS,
    RunSpec,
    check_arguments,
    check_keys,
    init_parameters,
)
from benchmarks.run.trainer_choices import check_trainer_choices
from benchmarks.suites.config import (
    Suite,
    check_recorded,
    check_seeds,
    merge,
    runs_recorded_metrics,
)

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

    >>> from benchmarks.suites.config import load_suite
    >>> smoke = load_suite("smoke", fast=True)
    >>> suite = override_suite(smoke, ["trainer.max_epochs=3", "model.temperature=0.2"], [0, 1])
    >>> suite.seeds, suite.run("simclr").trainer["max_epochs"], suite.overrides
    ([0, 1], 3, {'model.temperature': 0.2, 'trainer.max_epochs': 3})
    >>> suite.run("pixels").model  # its method takes no temperature
    {}
    >>> override_suite(smoke, ["trainer.max_epoch=3"])
    Traceback (most recent call last):
    ...
    benchmarks.infra.errors.ConfigError: unknown key 'max_epoch' in --set trainer (did you mean ...
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
    return key, load_yaml(value, f"--set {key}")  # no anchors: a value holds no copies


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
    """The ``trainer.`` settings against the Trainer's choices and signature, and each run's data
    settings against its datamodule's (:func:`check_set_data`)."""
    import lightning.pytorch as pl

    given = {section: {k.split(".")[1]: v for k, v in overrides.items()
                       if k.startswith(section + ".")} for section in ("data", "trainer")}
    try:  # before its type: a precision's type names choices a run cannot evaluate with
        check_trainer_choices(given["trainer"])
    except ValueError as err:
        raise ConfigError(f"--set trainer.{err}") from err
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
    """What the leaderboard sorts by (the headline), draws (the plots' metrics) or ranks by (the
    ranking's metrics) stays recorded under the new ``evaluation`` wherever the suite's own
    recorded it."""
    before = runs_recorded_metrics(suite.runs, suite.evaluation)
    after = runs_recorded_metrics(runs, evaluation)
    for metric, what in ([(suite.headline, "the suite's headline")]
                         + [(plot["y"], "a plotted metric") for plot in suite.plots]
                         + [(m, "a ranked metric") for m in (suite.ranking or {}).get(
                             "metrics", [])]):
        if metric in before:
            check_recorded(metric, after, f"--set evaluation: {what}")
