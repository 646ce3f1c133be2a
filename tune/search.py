"""Ray Tune ASHA search over a suite run's hyperparameters.

The suite's ``search`` section maps ``model.<arg>``, ``data.<arg>`` or ``trainer.<arg>`` to one
distribution: ``{loguniform: [low, high]}``, ``{uniform: [low, high]}``,
``{choice: [a, b, ...]}``, ``{randint: [low, high]}`` (high exclusive) or ``{grid: [a, b, ...]}``.
Each trial is a normal Lightning Trainer that reports the metric (default ``online_val_acc``)
once per validation epoch, so ASHA's time unit is the epoch.
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path
from typing import Any

import yaml

from benchmarks.atomic import write_atomic
from benchmarks.config import (
    RUNNER_DATA_KEYS,
    RUNNER_MODEL_KEYS,
    RUNNER_TRAINER_KEYS,
    ConfigError,
    RunSpec,
    Suite,
    check_keys,
    init_parameters,
    load_suite,
)

DISTRIBUTIONS = ("loguniform", "uniform", "choice", "randint", "grid")


def search_space(suite: Suite, run: RunSpec) -> dict[str, Any]:
    """Ray Tune domains from the suite's ``search`` section, keys checked against the run."""
    import lightning.pytorch as pl
    from ray import tune

    from datamodules import DATAMODULES
    from modules import METHODS

    spec = suite.search or {}
    if not spec:
        raise ConfigError(f"suite {suite.name!r} ({suite.path}) has no 'search' section to tune")
    accepted = {
        "model": init_parameters(METHODS[run.method], RUNNER_MODEL_KEYS),
        "data": init_parameters(DATAMODULES[run.dataset], RUNNER_DATA_KEYS),
        "trainer": init_parameters(pl.Trainer, RUNNER_TRAINER_KEYS),
    }
    space = {}
    for key, dist in spec.items():
        section, _, arg = str(key).partition(".")
        where = f"{suite.path}: search.{key}"
        check_keys({section: None}, set(accepted), f"{suite.path}: search (section of {key!r})")
        check_keys({arg: None}, accepted[section], f"{suite.path}: search.{section}")
        if not isinstance(dist, dict) or len(dist) != 1:
            raise ConfigError(f"{where} must be one distribution, e.g. {{loguniform: [0.01, 10]}}")
        (kind, args), = dist.items()
        check_keys({kind: None}, set(DISTRIBUTIONS), where)
        if not isinstance(args, list) or (kind in ("loguniform", "uniform", "randint")
                                          and len(args) != 2):
            raise ConfigError(f"{where}: {kind} takes a list"
                              + (" [low, high]" if kind != "choice" and kind != "grid" else ""))
        if kind == "loguniform" and not 0 < args[0] < args[1]:
            raise ConfigError(f"{where}: loguniform needs 0 < low < high, got {args}")
        space[key] = {"loguniform": lambda a: tune.loguniform(*a),
                      "uniform": lambda a: tune.uniform(*a),
                      "randint": lambda a: tune.randint(*a),
                      "choice": tune.choice, "grid": tune.grid_search}[kind](args)
    return space


def apply_config(run: RunSpec, config: dict[str, Any]) -> RunSpec:
    """A copy of ``run`` with the sampled ``section.arg`` values set."""
    run = copy.deepcopy(run)
    for key, value in config.items():
        section, _, arg = key.partition(".")
        if section in ("model", "data", "trainer"):
            getattr(run, section)[arg] = value
    return run


def train_trial(config: dict[str, Any], suite_path: str, fast: bool, run_name: str,
                max_epochs: int, metric: str, seed: int) -> None:
    """One trial: the suite run with the sampled values, reporting ``metric`` every epoch."""
    import lightning.pytorch as pl
    from ray.tune.integration.pytorch_lightning import TuneReportCheckpointCallback

    from benchmarks.runner import instantiate

    run = apply_config(load_suite(suite_path, fast=fast).run(run_name), config)
    datamodule, model = instantiate(run, seed)
    trainer_kwargs = {**run.trainer, "max_epochs": max_epochs}
    trainer = pl.Trainer(**trainer_kwargs, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0,
                         callbacks=[TuneReportCheckpointCallback(
                             {metric: metric}, save_checkpoints=False, on="validation_end")])
    trainer.fit(model, datamodule=datamodule)


def run_search(suite_name: str, run_name: str | None = None, num_samples: int = 8,
               max_epochs: int = 10, grace_period: int = 1, reduction_factor: float = 2,
               metric: str = "online_val_acc", mode: str = "max", cpus_per_trial: float = 1,
               gpus_per_trial: float = 0, storage: str | None = None,
               address: str | None = None, fast: bool = False, seed: int = 0) -> Path:
    """ASHA over the suite's search space; writes ``trials.csv`` and ``best_config.yaml``."""
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    from modules import METHODS

    for name, value, low in (("--num-samples", num_samples, 1), ("--max-epochs", max_epochs, 1),
                             ("--grace-period", grace_period, 1)):
        if value < low:
            raise ConfigError(f"{name} must be at least {low}, got {value}")
    if grace_period > max_epochs:
        raise ConfigError(f"--grace-period ({grace_period}) must not exceed --max-epochs "
                          f"({max_epochs})")
    suite = load_suite(suite_name, fast=fast)
    if run_name is None:
        trained = [r for r in suite.runs if METHODS[r.method].requires_training]
        if not trained:
            raise ConfigError(f"suite {suite.name!r} has no trained run to tune")
        run_name = trained[0].name
    run = suite.run(run_name)
    space = search_space(suite, run)
    storage_dir = Path(storage or Path("results") / "tune" / suite.name).resolve()
    started_ray = not ray.is_initialized()
    if started_ray:
        if address:
            ray.init(address=address)
        else:
            ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    try:
        trainable = functools.partial(train_trial, suite_path=str(suite.path), fast=fast,
                                      run_name=run.name, max_epochs=max_epochs, metric=metric,
                                      seed=seed)
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"cpu": cpus_per_trial, "gpu": gpus_per_trial}),
            param_space=space,
            tune_config=tune.TuneConfig(
                metric=metric, mode=mode, num_samples=num_samples,
                scheduler=ASHAScheduler(time_attr="training_iteration", max_t=max_epochs,
                                        grace_period=grace_period,
                                        reduction_factor=reduction_factor)),
            run_config=tune.RunConfig(name=run.name.replace("/", "__"),
                                      storage_path=str(storage_dir)),
        )
        results = tuner.fit()
    finally:
        if started_ray:
            ray.shutdown()
    return write_search_outputs(results, storage_dir, suite, run, metric, mode, num_samples,
                                max_epochs)


def write_search_outputs(results, storage_dir: Path, suite: Suite, run: RunSpec, metric: str,
                         mode: str, num_samples: int, max_epochs: int) -> Path:
    import csv
    import io

    keys = sorted({k for r in results for k in (r.config or {})})
    rows = []
    for result in results:
        metrics = result.metrics or {}
        rows.append({"trial_id": metrics.get("trial_id", Path(result.path).name),
                     **{k: (result.config or {}).get(k) for k in keys},
                     metric: metrics.get(metric),
                     "epochs": metrics.get("training_iteration", 0),
                     "status": "error" if result.error else
                     "completed" if metrics.get("training_iteration", 0) >= max_epochs else
                     "stopped early by ASHA"})
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["trial_id", *keys, metric, "epochs", "status"])
    writer.writeheader()
    writer.writerows(rows)
    storage_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(storage_dir / "trials.csv", out.getvalue())
    scored = [r for r in rows if r[metric] is not None]
    if not scored:
        raise RuntimeError(f"no trial reported {metric!r}; see the trial logs in {storage_dir}")
    best = (max if mode == "max" else min)(scored, key=lambda r: r[metric])
    best_run = apply_config(run, {k: best[k] for k in keys})
    write_atomic(storage_dir / "best_config.yaml", yaml.safe_dump({
        "suite": suite.name, "run": best_run.name, "method": best_run.method,
        "model": best_run.model, "data": best_run.data, "trainer": best_run.trainer,
        "metric": metric, "mode": mode, "best_value": best[metric], "trial_id": best["trial_id"],
        "configurations_searched": num_samples,
    }, sort_keys=False))
    print(f"best {metric} = {best[metric]:.4f} ({best['trial_id']}); {storage_dir}/trials.csv, "
          f"{storage_dir}/best_config.yaml")
    return storage_dir
