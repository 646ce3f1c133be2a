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
import io
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.infra.atomic import write_atomic
from benchmarks.infra.plots import png_bytes, pyplot
from benchmarks.run.divergence import StopOnDivergence
from benchmarks.run.local_ray import check_fits_a_node, start_local_ray, stop_local_ray
from benchmarks.run.progress import CurveEveryEpoch
from benchmarks.run.spec import (
    RUNNER_DATA_KEYS,
    RUNNER_MODEL_KEYS,
    RUNNER_TRAINER_KEYS,
    ConfigError,
    RunSpec,
    SuiteSettings,
    check_keys,
    init_parameters,
)
from benchmarks.run.wandb_runs import WandbSettings, record_search_summary
from tune.memory import check_trial_memory
from tune.spec import SearchSpec

DISTRIBUTIONS = ("loguniform", "uniform", "choice", "randint", "grid")


class SearchInterrupted(KeyboardInterrupt):
    """The search stopped before every trial had finished (Ctrl-C, SIGUSR1): Ray saved its
    state, ``trials.csv`` shows where each trial stands, no ``best_config.yaml`` is written, and
    ``--resume`` (or the next ``clusterbench bench``) continues it."""


def space_of(run: RunSpec, search: SearchSpec | None) -> dict[str, Any]:
    """The search space of ``run`` as the suite file gives it: the run's own ``search``
    mapping, or else the suite's ``search.space`` (``{}`` without either)."""
    return run.search if run.search is not None else (search.space if search else {})


def search_space(suite: SuiteSettings, search: SearchSpec | None, run: RunSpec
                 ) -> dict[str, Any]:
    """Ray Tune domains from the run's own ``search`` mapping, or else the suite's search space
    (``search``), every key checked against the run's method, datamodule and trainer
    arguments."""
    import lightning.pytorch as pl
    from ray import tune

    from datamodules import DATAMODULES
    from modules.methods import METHODS

    spec = space_of(run, search)
    where_section = f"{suite.path}: " + ("runs[" + run.name + "].search" if run.search is not None
                                         else "search.space")
    if not spec:
        raise ConfigError(f"suite {suite.name!r} ({suite.path}) has no search space for run "
                          f"{run.name!r}: add a 'search' section")
    accepted = {
        "model": init_parameters(METHODS[run.method], RUNNER_MODEL_KEYS),
        "data": init_parameters(DATAMODULES[run.dataset], RUNNER_DATA_KEYS),
        "trainer": init_parameters(pl.Trainer, RUNNER_TRAINER_KEYS),
    }
    space = {}
    for key, dist in spec.items():
        section, _, arg = str(key).partition(".")
        where = f"{where_section}.{key}"
        check_keys({section: None}, set(accepted), f"{where_section} (section of {key!r})")
        check_keys({arg: None}, accepted[section], f"{where_section}: {section}")
        if not isinstance(dist, dict) or len(dist) != 1:
            raise ConfigError(f"{where} must be one distribution, e.g. {{loguniform: [0.01, 10]}}")
        (kind, args), = dist.items()
        check_keys({kind: None}, set(DISTRIBUTIONS), where)
        bounded = kind in ("loguniform", "uniform", "randint")
        if not isinstance(args, list) or not args or (bounded and len(args) != 2):
            raise ConfigError(f"{where}: {kind} takes a list" + (" [low, high]" if bounded
                                                                 else " of values"))
        if bounded and not all(isinstance(a, int | float) and not isinstance(a, bool)
                               for a in args):
            raise ConfigError(f"{where}: {kind} takes numbers [low, high], got {args}")
        if bounded and not args[0] < args[1]:
            raise ConfigError(f"{where}: {kind} needs low < high, got {args}")
        if kind == "loguniform" and not 0 < args[0]:
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


def report_to_ray_train(metric: str):
    """A Lightning callback for DDP trials: every worker calls ``ray.train.report`` once per
    validation epoch (Ray Train takes rank 0's values, which ``sync_dist`` made global)."""
    import lightning.pytorch as pl

    class ReportToRayTrain(pl.Callback):
        def on_validation_end(self, trainer, pl_module) -> None:
            import ray.train

            if trainer.sanity_checking or metric not in trainer.callback_metrics:
                return
            ray.train.report({metric: float(trainer.callback_metrics[metric]),
                              "epoch": trainer.current_epoch, "world_size": trainer.world_size})

    return ReportToRayTrain()


#: The Lightning checkpoint inside each of a trial's Ray checkpoints.
TRIAL_CHECKPOINT = "trial.ckpt"


@dataclass
class TrialSpec:
    """What every trial of one search shares: the suite run and its budget."""

    run: RunSpec
    max_epochs: int
    metric: str
    seed: int
    wandb_group: str | None = None
    wandb: WandbSettings | None = None  # the project, entity and tags of the trials' W&B runs
    wandb_dir: str | None = None  # whose wandb/ folder gets their files: the search's storage
    workers: int = 1
    use_gpu: bool = False
    cpus_per_worker: float = 1
    gpus_per_worker: float = 0


#: The datamodule this worker process set up last, by its data settings and seed: trials run in
#: reused workers (``reuse_actors``) and the trials of one search mostly share their data, so
#: reading, checking and splitting it (seconds for TinyImageNet) is paid once per worker.
PREPARED: dict[str, Any] = {}


def prepared(datamodule, run: RunSpec, seed: int):
    """``datamodule`` set up, or this process's earlier one with the same data settings and seed
    (they determine the splits entirely; a datamodule keeps no state between fits)."""
    import json

    key = json.dumps({"data": run.data, "seed": seed}, sort_keys=True, default=str)
    if key not in PREPARED:
        datamodule.setup("fit")
        PREPARED.clear()  # one dataset at a time: a search has one
        PREPARED[key] = datamodule
    return PREPARED[key]


def build_trial(trial: TrialSpec, config: dict[str, Any], callbacks: list, logger, **trainer):
    """The trial's datamodule, model and Lightning Trainer (the suite run with ``config``)."""
    import lightning.pytorch as pl

    from benchmarks.run import instantiate

    run = apply_config(trial.run, config)
    datamodule, model = instantiate(run, trial.seed)
    datamodule = prepared(datamodule, run, trial.seed)
    trainer = pl.Trainer(**{"devices": 1, **run.trainer, "max_epochs": trial.max_epochs,
                            **trainer},
                         logger=logger, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0,
                         # a non-finite loss fails the trial at once (Ray records the error)
                         callbacks=[StopOnDivergence(),
                                    CurveEveryEpoch("log_every_n_steps" in run.trainer),
                                    *callbacks])
    return datamodule, model, trainer


def trial_logger(trial: TrialSpec, config: dict[str, Any], name: str):
    """One W&B run per trial, in the project, entity and tags asked for, grouped by the search,
    its files in the search's storage (``wandb/``); no logger without --wandb."""
    if trial.wandb_group is None:
        return False
    from lightning.pytorch.loggers import WandbLogger

    from benchmarks.run.wandb_runs import wandb_mode

    settings = trial.wandb or WandbSettings()
    Path(trial.wandb_dir or ".").mkdir(parents=True, exist_ok=True)
    # mode, not offline=: Lightning's offline flag would override WANDB_MODE=disabled
    return WandbLogger(project=settings.project, entity=settings.entity,
                       tags=list(settings.tags), group=trial.wandb_group, name=name,
                       job_type="search", config=config, mode=wandb_mode(),
                       save_dir=trial.wandb_dir)


@contextmanager
def finished_wandb_run(logger) -> Iterator[None]:
    """The trial's W&B run ended with the trial, its exit code saying how (a run left open is
    abandoned when Ray ends the trial's process: no summary, no exit record)."""
    try:
        yield
    except BaseException:
        if logger:
            logger.experiment.finish(exit_code=1)
        raise
    if logger:
        logger.experiment.finish(exit_code=0)


def train_trial(config: dict[str, Any], trial: TrialSpec) -> None:
    """One trial on one device: the suite run with the sampled values, reporting the metric
    every validation epoch (ASHA's time unit) with a checkpoint, so that a resumed search
    continues an unfinished trial from its last epoch rather than from the start."""
    from ray import tune
    from ray.tune.integration.pytorch_lightning import TuneReportCheckpointCallback

    report = TuneReportCheckpointCallback({trial.metric: trial.metric}, filename=TRIAL_CHECKPOINT,
                                          save_checkpoints=True, on="validation_end")
    logger = trial_logger(trial, config, tune.get_context().get_trial_name())
    datamodule, model, trainer = build_trial(trial, config, [report], logger)
    checkpoint = tune.get_checkpoint()
    with finished_wandb_run(logger):
        if checkpoint is None:
            trainer.fit(model, datamodule=datamodule)
            return
        with checkpoint.as_directory() as directory:
            trainer.fit(model, datamodule=datamodule,
                        ckpt_path=str(Path(directory) / TRIAL_CHECKPOINT))


def train_ddp_worker(config: dict[str, Any]) -> None:
    """One Ray Train worker of a multi-device trial: Lightning DDP through Ray's strategy."""
    import ray.train
    from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment, prepare_trainer

    trial: TrialSpec = config.pop("__trial__")
    name = config.pop("__trial_name__")
    rank = ray.train.get_context().get_world_rank()
    logger = trial_logger(trial, config, name) if rank == 0 else False
    datamodule, model, trainer = build_trial(
        trial, config, [report_to_ray_train(trial.metric)], logger,
        devices="auto", accelerator="gpu" if trial.use_gpu else "cpu",
        strategy=RayDDPStrategy(), plugins=[RayLightningEnvironment()])
    trainer = prepare_trainer(trainer)
    with finished_wandb_run(logger):
        trainer.fit(model, datamodule=datamodule)


def train_ddp_trial(config: dict[str, Any], trial: TrialSpec, storage: str) -> None:
    """A trial over ``trial.workers`` devices: a Ray Train TorchTrainer (Lightning DDP, one
    worker per device) launched from the Tune trial, its reports forwarded to Tune."""
    import ray.train
    from ray import tune
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    name = tune.get_context().get_trial_name()
    TorchTrainer(
        train_ddp_worker,
        train_loop_config={**config, "__trial__": trial, "__trial_name__": name},
        scaling_config=ray.train.ScalingConfig(
            num_workers=trial.workers, use_gpu=trial.use_gpu,
            resources_per_worker={"CPU": trial.cpus_per_worker,
                                  **({"GPU": trial.gpus_per_worker} if trial.use_gpu else {})}),
        run_config=ray.train.RunConfig(name=name, storage_path=storage,
                                       callbacks=[TuneReportCallback()],
                                       failure_config=ray.train.FailureConfig(max_failures=0)),
    ).fit()


def run_search(suite: SuiteSettings, search: SearchSpec | None, run: RunSpec,
               num_samples: int | None = None,
               max_epochs: int | None = None, grace_period: int | None = None,
               reduction_factor: float | None = None, metric: str | None = None,
               mode: str | None = None, cpus_per_trial: float | None = None,
               gpus_per_trial: float | None = None, storage: str | None = None,
               address: str | None = None, seed: int = 0,
               max_concurrent: int | None = None, resume: bool = False,
               wandb: bool | WandbSettings = False, max_failures: int = 1,
               workers_per_trial: int | None = None, reuse_workers: bool = True) -> Path:
    """ASHA over the run's search space; writes ``trials.csv``, ``best_config.yaml`` and
    ``trials.png`` (the metric against the epoch for every trial) in the storage directory.

    Options left ``None`` come from the suite's ``search`` section, else its defaults
    (:class:`tune.spec.SearchSpec`). A trial runs on one device unless
    ``gpus_per_trial`` is above 1 or ``workers_per_trial`` is set above 1: then it is a Ray Train
    TorchTrainer running Lightning DDP on that many workers (one GPU each; gloo on CPUs), the
    trial's CPUs and GPUs shared evenly among them.

    A trial that raises or whose loss turns non-finite is retried ``max_failures`` times (for
    transient faults), then recorded as failed with its error; the search goes on. ``resume``
    continues an interrupted search from its storage directory without rerunning finished
    trials; failed trials stay failed (they are not rerun). ``seed`` seeds the sampling of the
    configurations and every trial. A search interrupted before the end raises
    :class:`SearchInterrupted` after writing ``trials.csv``."""
    # Ray reports usage statistics to its servers unless told not to; nothing here touches the
    # network unless asked (an existing cluster keeps its own setting).
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.basic_variant import BasicVariantGenerator

    from modules.methods import METHODS
    from tune.signed_search_state import SignSearchState, check_search_state, sign_search_state

    budget = (search or SearchSpec(space={})).with_options(
        num_samples=num_samples, max_epochs=max_epochs, grace_period=grace_period,
        reduction_factor=reduction_factor, metric=metric, mode=mode,
        cpus_per_trial=cpus_per_trial, gpus_per_trial=gpus_per_trial,
        max_concurrent=max_concurrent, workers_per_trial=workers_per_trial)

    def flag(key: str) -> str:
        return "--" + key.replace("_", "-")

    budget.check(flag)
    num_samples, max_epochs, grace_period = (budget.num_samples, budget.max_epochs,
                                             budget.grace_period)
    reduction_factor, metric, mode = budget.reduction_factor, budget.metric, budget.mode
    cpus_per_trial, gpus_per_trial = budget.cpus_per_trial, budget.gpus_for(run)
    max_concurrent, workers_per_trial = budget.max_concurrent, budget.workers_per_trial
    if not METHODS[run.method].requires_training:
        raise ConfigError(f"run {run.name!r} ({run.method}) trains nothing: there is nothing to "
                          "tune")
    budget.check_metric(METHODS[run.method], flag)
    space = search_space(suite, search, run)
    memory = check_trial_memory(run, budget, workers_per_trial)  # refused before Ray starts
    if memory is not None:
        print(f"{run.name}: a trial needs about {memory['gib']:.1f} GiB of GPU memory "
              f"(estimated); it gets {memory['share_gib']:.1f} GiB ({gpus_per_trial:g} of "
              f"{memory['gpu_memory_gib']:g} GiB)")
    name = run.slug
    storage_dir = Path(storage or default_storage(suite, run)).resolve()
    outputs = read_best_config(storage_dir)
    if outputs and outputs.get("run") != run.name:
        raise ConfigError(f"{storage_dir} holds the search of run {outputs.get('run')!r}, not "
                          f"{run.name!r}: give this search its own --storage")
    # trials in all: num_samples draws of the space, each over every grid combination
    expected = num_samples * math.prod(len(d["grid_search"]) for d in space.values()
                                       if isinstance(d, dict) and "grid_search" in d)
    experiment_dir = storage_dir / name
    if resume and not tune.Tuner.can_restore(str(experiment_dir)):
        raise ConfigError(f"nothing to resume in {experiment_dir}: no search was started "
                          "there (drop --resume to start one)")
    if resume:
        check_search_state(experiment_dir)
    elif experiment_dir.is_dir() and any(experiment_dir.iterdir()):
        # A new search signs everything in its folder: an older state must not be signed with
        # it (nor read back as this search's by Ray, which loads the newest state file).
        from datetime import datetime, timezone

        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        aside = experiment_dir.with_name(f"{name}.replaced-{stamp}")
        experiment_dir.rename(aside)
        print(f"A new search in {storage_dir}: the earlier search state is kept in {aside}")
    # --wandb alone: the default project; bench passes the suite's settings
    wandb_settings = (wandb if isinstance(wandb, WandbSettings)
                      else WandbSettings() if wandb else None)
    trial = TrialSpec(run=run,
                      max_epochs=max_epochs, metric=metric, seed=seed,
                      wandb_group=f"tune/{suite.name}/{name}" if wandb else None,
                      wandb=wandb_settings,
                      wandb_dir=str(storage_dir),  # W&B writes into its wandb/ folder
                      workers=workers_per_trial, use_gpu=gpus_per_trial > 0,
                      cpus_per_worker=cpus_per_trial / workers_per_trial,
                      gpus_per_worker=gpus_per_trial / workers_per_trial)
    started_ray, watchdog = not ray.is_initialized(), None
    if started_ray:
        if address:
            ray.init(address=address)
        else:  # on the loopback, and gone with this process even after a kill -9
            watchdog = start_local_ray()
    try:
        cluster = ray.cluster_resources()
        # a trial's resources sit on one node; a DDP trial's, each worker's share on one node
        check_fits_a_node({"CPU": cpus_per_trial / workers_per_trial,
                           "GPU": gpus_per_trial / workers_per_trial},
                          {"CPU": "--cpus-per-trial", "GPU": "--gpus-per-trial"},
                          "a trial" if workers_per_trial == 1 else "each of a trial's workers")
        if workers_per_trial == 1:
            trainable = tune.with_resources(functools.partial(train_trial, trial=trial),
                                            {"cpu": cpus_per_trial, "gpu": gpus_per_trial})
        else:  # the Tune trial only drives (no CPU, a byte of memory); the Train workers hold
            # the CPUs and GPUs
            trainable = tune.with_resources(
                functools.partial(train_ddp_trial, trial=trial,
                                  storage=str(storage_dir / name / "ddp")), {"cpu": 0, "memory": 1})
            fit = int(min(cluster.get("CPU", 0) // cpus_per_trial,
                          cluster.get("GPU", 0) // gpus_per_trial if gpus_per_trial else 1e9))
            max_concurrent = min(max_concurrent or fit, fit)
        if resume:  # its state was checked above; it keeps its signing callback
            tuner = tune.Tuner.restore(str(experiment_dir), trainable=trainable,
                                       resume_unfinished=True, resume_errored=False)
        else:
            tuner = tune.Tuner(
                trainable, param_space=space,
                tune_config=tune.TuneConfig(
                    metric=metric, mode=mode, num_samples=num_samples,
                    # a finished trial's worker runs the next one: imports and data once; not
                    # for a DDP trial, whose nested Ray Train run is still shutting down when
                    # Tune hands its actor on (the reset times out, and the slot it held is
                    # never freed: the search waits forever)
                    reuse_actors=reuse_workers and workers_per_trial == 1,
                    # the generator itself limits the trials at once: Tune ignores its own
                    # max_concurrent_trials beside a search generator (and says so)
                    search_alg=BasicVariantGenerator(random_state=seed,
                                                     max_concurrent=max_concurrent or 0),
                    scheduler=ASHAScheduler(time_attr="training_iteration", max_t=max_epochs,
                                            grace_period=grace_period,
                                            reduction_factor=reduction_factor)),
                run_config=tune.RunConfig(
                    name=name, storage_path=str(storage_dir),
                    failure_config=tune.FailureConfig(max_failures=max_failures),
                    # the latest epoch's checkpoint is all a resumed trial needs
                    checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
                    callbacks=[SignSearchState()]),
            )
        try:
            results = tuner.fit()
        finally:  # finished, stopped by Ctrl-C or failed: what Ray saved is ours, signed whole
            sign_search_state(experiment_dir)
        # Each trial's status as Ray saved it last: RUNNING or PENDING ones were cut off.
        saved = {Path(t.path).name: t.status
                 for t in tune.ExperimentAnalysis(str(experiment_dir)).trials}
    finally:
        if watchdog is not None:
            stop_local_ray(watchdog)
        elif started_ray:
            ray.shutdown()
    budget = {"num_samples": num_samples, "max_epochs": max_epochs, "grace_period": grace_period,
              "reduction_factor": reduction_factor, "seed": seed,
              "gpus_per_trial": gpus_per_trial, "trial_memory": memory}
    outputs = write_search_outputs(results, storage_dir, suite, run, metric, mode, budget,
                                   saved=saved, expected=expected)
    if wandb_settings is not None:
        record_search_summary(wandb_settings, group=trial.wandb_group, storage_dir=storage_dir)
    return outputs


def default_storage(suite: SuiteSettings, run: RunSpec) -> Path:
    """Where a search keeps its state and outputs unless told: ``results/tune/<suite>/<run>``."""
    return Path("results") / "tune" / suite.name / run.slug


#: What a ``best_config.yaml`` holds that a tuned run reads, and the type each must have.
BEST_CONFIG_FIELDS = {"method": str, "model": dict, "data": dict, "trainer": dict,
                      "metric": str, "best_value": (int, float),
                      "configurations_searched": int, "trials_failed": int}


def read_best_config(storage_dir: Path) -> dict[str, Any] | None:
    """The ``best_config.yaml`` of a finished search in ``storage_dir``, or None; a file that is
    not the mapping a search writes (:data:`BEST_CONFIG_FIELDS`) is a ConfigError naming it."""
    path = storage_dir / "best_config.yaml"
    if not path.is_file():
        return None
    try:
        best = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path} is not a search's best configuration (unreadable YAML: "
                          f"{' '.join(str(err).split())[:200]}); delete it to search again"
                          ) from None
    wrong = [key for key, kind in BEST_CONFIG_FIELDS.items()
             if not isinstance(best, dict) or not isinstance(best.get(key), kind)
             or isinstance(best.get(key), bool)]
    if wrong:
        raise ConfigError(f"{path} is not a search's best configuration ({wrong[0]} missing or "
                          f"not a {BEST_CONFIG_FIELDS[wrong[0]]!s}); delete it to search again")
    return best


def can_sample(kind: str, args: list[Any], value: Any) -> bool:
    """Whether a ``kind`` distribution over ``args`` (a suite's search space entry) can give
    ``value``.

    >>> can_sample("loguniform", [1e-4, 1e-1], 0.01), can_sample("uniform", [0.05, 1], -0.5)
    (True, False)
    >>> can_sample("choice", [64, 128], 128), can_sample("randint", [1, 4], 4)
    (True, False)
    """
    if kind in ("choice", "grid"):
        return value in args
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    if kind == "randint":
        return isinstance(value, int) and args[0] <= value < args[1]
    return args[0] <= value <= args[1]


def searched_values(best: dict[str, Any], run: RunSpec, search: SearchSpec | None,
                    path: Path) -> dict[str, Any]:
    """The values of the searched keys (``section.arg``) in a finished search's ``best``
    configuration, each one its space can sample; the rest of the file is not read: it lies in
    a results folder, where anyone may have edited it.

    Raises:
        ConfigError: naming the file, the key and the space, for a value the space cannot give.
    """
    spec = space_of(run, search)
    values = {}
    for key, dist in spec.items():
        section, _, arg = str(key).partition(".")
        if arg not in best[section]:
            raise ConfigError(f"{path}: {key} is missing; it is searched (delete the file to "
                              "search again)")
        (kind, args), = dist.items()
        if not can_sample(kind, args, best[section][arg]):
            raise ConfigError(f"{path}: {key} = {best[section][arg]!r} is not a value the search "
                              f"space gives ({kind} {args}); delete the file to search again")
        values[key] = best[section][arg]
    return values


#: ``trials.csv``'s status of a trial Ray saved as running or pending when the search stopped.
UNFINISHED = "unfinished (interrupted)"


def trial_status(error: bool, epochs: int, max_epochs: int, saved: str | None) -> str:
    """One trial's ``trials.csv`` status from its error, its epochs and Ray's saved status."""
    if error or saved == "ERROR":
        return "failed"
    if saved not in (None, "TERMINATED"):
        return UNFINISHED
    return "completed" if epochs >= max_epochs else "stopped early by ASHA"


def trial_config(result) -> dict[str, Any]:
    """A trial's sampled values. Ray restores a failed trial of a resumed search without its
    config, so the trial's own ``params.json`` (which keeps ``inf`` and ``nan``) fills in."""
    import json

    params = Path(result.path) / "params.json"
    if result.config is None and params.is_file():
        return json.loads(params.read_text())
    return result.config or {}


def write_search_outputs(results, storage_dir: Path, suite: SuiteSettings, run: RunSpec,
                         metric: str,
                         mode: str, budget: dict[str, Any], saved: dict[str, str] | None = None,
                         expected: int | None = None) -> Path:
    """``trials.csv`` and ``trials.png``; then, if every one of the ``expected`` trials has
    finished (``saved``: Ray's last saved status by trial directory name), ``best_config.yaml``
    with the machine and the budget beside the best value; else :class:`SearchInterrupted`."""
    import csv

    from benchmarks.infra.environment import describe_machine, machine

    max_epochs = budget["max_epochs"]
    saved = saved or {}
    configs = [trial_config(r) for r in results]
    keys = sorted({k for c in configs for k in c})
    rows, curves = [], {}
    for result, config in zip(results, configs, strict=True):
        metrics = result.metrics or {}
        trial_id = metrics.get("trial_id", Path(result.path).name)
        epochs = metrics.get("training_iteration", 0)
        rows.append({"trial_id": trial_id, **{k: config.get(k) for k in keys},
                     metric: metrics.get(metric), "epochs": epochs,
                     "devices": metrics.get("world_size", 1),
                     "status": trial_status(bool(result.error), epochs, max_epochs,
                                            saved.get(Path(result.path).name)),
                     "error": str(result.error).strip().splitlines()[-1] if result.error else ""})
        frame = result.metrics_dataframe
        if frame is not None and metric in frame:
            curves[trial_id] = (list(frame["training_iteration"]), list(frame[metric]))
    rows.sort(key=lambda r: str(r["trial_id"]))  # the order of creation, run after run
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["trial_id", *keys, metric, "epochs", "devices",
                                             "status", "error"])
    writer.writeheader()
    writer.writerows(rows)
    storage_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(storage_dir / "trials.csv", out.getvalue())
    write_atomic(storage_dir / "trials.png", trial_curves_png(curves, rows, metric, max_epochs))
    total = max(expected or 0, len(rows))  # the trials not started yet have no row
    unfinished = sum(r["status"] == UNFINISHED for r in rows) + total - len(rows)
    if unfinished:
        (storage_dir / "best_config.yaml").unlink(missing_ok=True)  # nothing may look finished
        raise SearchInterrupted(
            f"the search stopped with {unfinished} of {total} trials "
            f"unfinished; its state is saved in {storage_dir / run.slug} and trials.csv shows "
            "each trial. Continue it with the same command and --resume (clusterbench bench "
            "resumes it by itself).")
    failed = [r for r in rows if r["status"] == "failed"]
    scored = [r for r in rows if r[metric] is not None and r["status"] != "failed"]
    if not scored:
        raise RuntimeError(f"no trial reported {metric!r} ({len(failed)} failed); see "
                           f"trials.csv and the trial logs in {storage_dir}")
    best = (max if mode == "max" else min)(scored, key=lambda r: r[metric])
    best_run = apply_config(run, {k: best[k] for k in keys})
    write_atomic(storage_dir / "best_config.yaml", yaml.safe_dump({
        "suite": suite.name, "run": best_run.name, "method": best_run.method,
        "model": best_run.model, "data": best_run.data, "trainer": best_run.trainer,
        "metric": metric, "mode": mode, "best_value": best[metric], "trial_id": best["trial_id"],
        "configurations_searched": len(rows), "trials_failed": len(failed),
        "budget": {"scheduler": "ASHA", **budget}, "machine": describe_machine(machine()),
    }, sort_keys=False))
    stopped = sum(r["status"] == "stopped early by ASHA" for r in rows)
    print(f"{len(rows)} trials: {stopped} stopped early by ASHA, {len(failed)} failed. "
          f"Best {metric} = {best[metric]:.4f} ({best['trial_id']}). Wrote {storage_dir}/"
          "trials.csv, best_config.yaml, trials.png")
    return storage_dir


def trial_curves_png(curves: dict[str, tuple[list, list]], rows: list[dict], metric: str,
                     max_epochs: int) -> bytes:
    """:func:`trial_curves_figure` as PNG bytes."""
    return png_bytes(trial_curves_figure(curves, rows, metric, max_epochs), dpi=110)


def trial_curves_figure(curves: dict[str, tuple[list, list]], rows: list[dict], metric: str,
                        max_epochs: int):
    """The metric against the epoch for every trial, one labelled line each; the last point of a
    trial ASHA stopped is an x, of a completed one a dot, of a failed one a red square. The
    legend names each trial with its sampled settings and says what the markers mean."""
    plt = pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    by_id = {r["trial_id"]: r for r in rows}
    settings = [k for k in (rows[0] if rows else {})
                if k not in ("trial_id", metric, "epochs", "devices", "status", "error")]

    def label(trial_id: str) -> str:
        row = by_id.get(trial_id, {})
        said = ", ".join(f"{k.rsplit('.', 1)[-1]}={row[k]:.3g}" if isinstance(row.get(k), float)
                         else f"{k.rsplit('.', 1)[-1]}={row.get(k)}" for k in settings)
        return f"{trial_id}" + (f" ({said})" if said else "")

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for trial_id, (epochs, values) in sorted(curves.items()):
        # a dot at every epoch: a trial stopped after its first epoch is a single point
        (line,) = ax.plot(epochs, values, alpha=0.85, linewidth=1.2, marker="o", markersize=3,
                          label=label(trial_id))
        marker = {"completed": "o", "failed": "s"}.get(by_id.get(trial_id, {}).get("status"),
                                                        "x")
        ax.plot(epochs[-1:], values[-1:], marker=marker, markersize=7, linestyle="",
                color="red" if marker == "s" else line.get_color())
    ax.axvline(max_epochs, color="grey", linestyle=":", linewidth=1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch (ASHA's time unit; dotted: the budget's last epoch)")
    ax.set_ylabel(f"{metric} (the metric ASHA schedules on)")
    ax.set_title(f"Search: {len(curves)} trials", fontsize=10)
    ax.grid(alpha=0.3)
    trials = ax.legend(title="trial", fontsize=7, title_fontsize=8, loc="upper left",
                       bbox_to_anchor=(1.01, 1.0), frameon=False,
                       ncol=1 if len(curves) <= 16 else 2)
    ax.add_artist(trials)
    ends = [Line2D([], [], color="black", marker="x", linestyle="", label="stopped early by ASHA"),
            Line2D([], [], color="black", marker="o", linestyle="", label="completed"),
            Line2D([], [], color="red", marker="s", linestyle="", label="failed")]
    ax.legend(handles=ends, title="last point", fontsize=7, title_fontsize=8, loc="lower left",
              bbox_to_anchor=(1.01, 0.0), frameon=False)
    fig.tight_layout()
    return fig
