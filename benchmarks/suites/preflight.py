"""What is settled before a suite's first job is placed: the folder its results go to, every
run's values built and checked, and the data its runs need present."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from benchmarks.infra.errors import ConfigError
from benchmarks.infra.paths import inside
from benchmarks.run.cache import already_done
from benchmarks.run.one import instantiate
from benchmarks.run.spec import RunSpec
from benchmarks.run.trainer import (
    RunOptions,
    check_accelerator,
    check_global_batch,
    trainer_settings,
)
from benchmarks.suites.config import Suite


def suite_results_dir(suite: Suite, results_root: str | Path) -> Path:
    """``<root>/<label>`` (:attr:`~benchmarks.run.spec.SuiteSettings.label`): a smaller budget
    goes to ``<root>/<suite>-fast`` (``--fast``) or ``<root>/<suite>-ci`` (``--budget ci``) so
    that it never mixes with, or replaces, full-budget results, and a suite with ``--set``
    settings to ``<root>/<suite>+<settings>`` for the same reason."""
    root = Path(results_root).resolve()
    return inside(root, root / suite.settings.label)


def check_values(suite: Suite, only: list[str] | None = None,
                 options: RunOptions | None = None, here: bool = True) -> None:
    """Build every run's datamodule and model on the ``meta`` device (no memory, no data read,
    no weights downloaded) so that a bad *value*, e.g. a negative temperature, is refused before
    anything trains; check each run's Trainer settings (``max_epochs``, and with ``here``, the
    runs training on this machine, that it has the accelerator and the devices) and that its
    global batch splits over its devices. A failure that is not a ValueError or TypeError is
    left to the run itself.

    Raises:
        ConfigError: naming the suite, the run and the bad value.
    """
    options = options or RunOptions()
    for run in suite.runs:
        if only and run.name not in only:
            continue
        try:
            settings = trainer_settings(run, options)
            check_global_batch(run, settings["devices"])
            if here:
                check_accelerator(run, settings)
        except ConfigError as err:
            raise ConfigError(f"{suite.path}: {err}") from err
        try:
            with torch.device("meta"):
                instantiate(run, suite.seeds[0], {k: v for k, v in run.model.items()
                                                  if k != "backbone_weights"})
        except (ValueError, TypeError) as err:
            raise ConfigError(f"{suite.path}: run {run.name!r}: {err}") from err
        except Exception:  # noqa: BLE001 - not a bad value; the run will say what it is
            continue



def check_data_present(runs: list[RunSpec], suite: Suite, suite_dir: Path,
                       options: RunOptions) -> None:
    """Every dataset a run still to be trained needs is in its data folder (or a system package
    has it), else one ConfigError naming each missing dataset once, where it was looked for and
    the command that fetches it, before anything trains (a suite of 30 runs on CIFAR printed 30
    near-identical blocks)."""
    from datamodules.base import default_data_dir
    from datamodules.catalog import CATALOG, present, system_copy

    missing: dict[str, Path] = {}
    for run in runs:
        name = run.dataset
        if name not in CATALOG or run.data.get("download") or name in missing:
            continue
        root = Path(run.data.get("data_dir") or default_data_dir())
        if present(root, name) or system_copy(name) or all(
                already_done(suite.settings, run, seed, suite_dir, options)
                for seed in suite.seeds):
            continue
        missing[name] = root
    if missing:
        raise ConfigError(f"{len(missing)} dataset(s) missing, nothing trained: " + "; ".join(
            f"{name} (looked in {root / CATALOG[name].folder}; fetch it with: clusterbench data "
            f"fetch {name} --to {root})" for name, root in missing.items()))


def check_data(runs: list[RunSpec], suite: Suite, suite_dir: Path, options: RunOptions) -> None:
    """:func:`check_data_present`, then :func:`check_data_readable`: the data every run still to
    be trained needs is there and reads, before any run's folder is made."""
    check_data_present(runs, suite, suite_dir, options)
    check_data_readable(runs, suite, suite_dir, options)


def check_data_readable(runs: list[RunSpec], suite: Suite, suite_dir: Path,
                        options: RunOptions) -> None:
    """Every file a run still to be trained reads is readable (an image folder's images each
    decode), else one ConfigError naming the run and the file, before any run's folder is made
    (a damaged image stopped each run as it started, its attempt folder made). Each dataset, as
    its settings give it, is checked once.

    Raises:
        ConfigError: naming the run and the file, saying what is wrong with it.
    """
    from datamodules import DATAMODULES

    checked: set[str] = set()
    for run in runs:
        data = json.dumps(run.data, sort_keys=True, default=str)
        if data in checked or all(already_done(suite.settings, run, seed, suite_dir, options)
                                  for seed in suite.seeds):
            continue
        checked.add(data)
        try:
            DATAMODULES[run.dataset](**run.data_kwargs(), seed=suite.seeds[0]).check_files()
        except (OSError, ValueError) as err:
            raise ConfigError(f"run {run.name!r}: {err}; nothing trained") from err
