"""Ray Tune ASHA search over a suite run's hyperparameters.

The suite's ``search`` section maps ``model.<arg>``, ``data.<arg>`` or ``trainer.<arg>`` to one
distribution: ``{loguniform: [low, high]}``, ``{uniform: [low, high]}``,
``{choice: [a, b, ...]}``, ``{randint: [low, high]}`` (high exclusive) or ``{grid: [a, b, ...]}``.
Each trial is a normal Lightning Trainer (:mod:`tune.trial`) that reports the metric (default
``online_val_acc``) once per validation epoch, so ASHA's time unit is the epoch. A search keeps
its own records (:mod:`tune.records`), never Ray's pickles, so it can be continued after any
stop.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.infra import stop_signals
from benchmarks.infra.errors import ConfigError, Preempted
from benchmarks.run.local_ray import (
    ResourcesNeverFree,
    check_fits_a_node,
    joined,
    ray_messages_to,
    start_local_ray,
    stop_local_ray,
    worker_env,
)
from benchmarks.run.spec import (
    RUNNER_DATA_KEYS,
    RUNNER_MODEL_KEYS,
    RUNNER_TRAINER_KEYS,
    RunSpec,
    SuiteSettings,
    check_keys,
    init_parameters,
)
from benchmarks.run.wandb_runs import SearchWandb, WandbSettings, record_search_summary
from modules.ranges import check_positive
from tune.memory import check_trial_memory
from tune.outputs import read_best_config, write_decisions, write_search_outputs
from tune.records import read_records, refuse_links
from tune.spec import SearchSpec
from tune.trial import TrialSpec, train_trial

DISTRIBUTIONS = ("loguniform", "uniform", "choice", "randint", "grid")


def space_of(run: RunSpec, search: SearchSpec | None) -> dict[str, Any]:
    """The search space of ``run`` as the suite file gives it: the run's own ``search``
    mapping, or else the suite's ``search.space`` (``{}`` without either)."""
    return run.search if run.search is not None else (search.space if search else {})


def checked_space(suite: SuiteSettings, search: SearchSpec | None, run: RunSpec
                  ) -> dict[str, Any]:
    """:func:`space_of` with each key checked against the run's method, datamodule and trainer
    arguments and each distribution's arguments; ConfigError naming the first bad entry."""
    import lightning.pytorch as pl

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
    return spec


#: How long a search waits for resources while no trial runs, unless told (seconds).
RESOURCE_WAIT_S = 1800.0


def run_search(suite: SuiteSettings, search: SearchSpec | None, run: RunSpec,
               num_samples: int | None = None,
               max_epochs: int | None = None, grace_period: int | None = None,
               reduction_factor: float | None = None, metric: str | None = None,
               mode: str | None = None, cpus_per_trial: float | None = None,
               gpus_per_trial: float | None = None, storage: str | None = None,
               address: str | None = None, seed: int = 0,
               max_concurrent: int | None = None, resume: bool = False,
               wandb: bool | WandbSettings = False, max_failures: int = 1,
               workers_per_trial: int | None = None, reuse_workers: bool = True,
               resource_wait: float | None = None, fast_gpu: bool = True,
               compile: bool = True) -> Path:
    """ASHA over the run's search space; writes the search's outputs (:mod:`tune.outputs`) in
    the storage directory and returns it.

    Options left ``None`` come from the suite's ``search`` section. A failing trial is retried
    ``max_failures`` times (one that diverged is not: its values diverge again), then recorded as
    failed while the search goes on. ``resume`` continues a stopped search from its records;
    failed trials stay failed.

    Raises:
        ResourcesNeverFree: no trial ran for ``resource_wait`` seconds while some waited.
        tune.outputs.SearchInterrupted: stopped before every trial ended.
    """
    # Ray reports usage statistics to its servers unless told not to; nothing here touches the
    # network unless asked (an existing cluster keeps its own setting).
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Tune's newer console output prints its experiment table and a TensorBoard hint whatever
    # the verbosity; the older one, at verbosity 0, prints nothing: a line per trial instead
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    started = time.monotonic()
    budget, memory = checked_budget(suite, search, run, locals())
    if resource_wait is not None:
        try:
            check_positive("--resource-wait", resource_wait)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    storage_dir = Path(storage or default_storage(suite, run)).resolve()
    refuse_links(storage_dir)
    outputs = read_best_config(storage_dir)
    if outputs and outputs.get("run") != run.name:
        raise ConfigError(f"{storage_dir} holds the search of run {outputs.get('run')!r}, not "
                          f"{run.name!r}: give this search its own --storage")
    state = storage_dir / run.slug
    manifest = start_or_resume(state, run, space_of(run, search), budget, seed, resume)
    configs = manifest["configs"]
    search_wandb = None
    if wandb:  # its group is this search's (a resumed one keeps it); files in storage's wandb/
        search_wandb = SearchWandb(
            settings=wandb if isinstance(wandb, WandbSettings) else WandbSettings(), suite=suite,
            run=run.name, search_id=manifest["search_id"], storage=str(storage_dir))
    trial = TrialSpec(run=run, max_epochs=budget.max_epochs, metric=budget.metric, seed=seed,
                      wandb=search_wandb, devices=budget.workers_per_trial, state=str(state),
                      session=uuid.uuid4().hex, configs=configs, fast_gpu=fast_gpu,
                      compile=compile)
    from tune.asha import SignalASHA, decision_lines
    from tune.watch import TrialOutcomes

    outcomes = TrialOutcomes(budget.metric, state, configs)
    scheduler = SignalASHA(budget.metric, budget.mode, budget.max_epochs, budget.grace_period,
                           budget.reduction_factor)
    ray_log = storage_dir / "ray.log"
    with ray_messages_to(ray_log), ray_for_search(address):
        tuner = make_tuner(trial, budget, outcomes, scheduler, max_failures,
                           reuse_workers and budget.workers_per_trial == 1,
                           RESOURCE_WAIT_S if resource_wait is None else resource_wait)
        try:
            with handlers_kept(signal.SIGINT, signal.SIGUSR1), \
                    stop_signals.graceful_stop(stop_search):
                tuner.fit()
        except Exception as err:  # Tune wraps what a callback raises
            cause = err if isinstance(err, ResourcesNeverFree) else err.__cause__
            if isinstance(cause, ResourcesNeverFree):
                raise ResourcesNeverFree(str(cause)) from None
            raise
    decisions = decision_lines(scheduler.decisions, budget.metric)
    print("ASHA's decisions, by rung:\n  " + "\n  ".join(decisions)
          + f"\nRay's own messages: {ray_log}")
    write_decisions(storage_dir, scheduler.decisions)
    run_budget = {"num_samples": budget.num_samples, "max_epochs": budget.max_epochs,
                  "grace_period": budget.grace_period,
                  "reduction_factor": budget.reduction_factor, "seed": seed,
                  "gpus_per_trial": budget.gpus_per_trial, "trial_memory": memory,
                  "decisions": decisions}
    records = read_records(state, configs)
    run_budget["wall_seconds"] = round(time.monotonic() - started, 1)
    run_budget["starts"] = len({a["session"] for r in records for a in r.attempts}) or 1
    outputs = write_search_outputs(records, outcomes.ended, storage_dir,
                                   suite, run, budget.metric, budget.mode, run_budget,
                                   own_first=bool(manifest.get("own_first")))
    if search_wandb is not None:
        record_search_summary(search_wandb)
    return outputs


def checked_budget(suite: SuiteSettings, search: SearchSpec | None, run: RunSpec,
                   options: dict[str, Any]) -> tuple[SearchSpec, dict[str, Any] | None]:
    """The budget (:func:`search_budget`), its space and the trial's memory, checked before Ray
    starts; ConfigError naming the first bad value."""
    budget = search_budget(search, run, options)
    checked_space(suite, search, run)
    memory = check_trial_memory(run, budget, budget.workers_per_trial)
    if memory is not None:
        print(f"{run.name}: a trial needs about {memory['gib']:.1f} GiB of GPU memory "
              f"(estimated); it gets {memory['share_gib']:.1f} GiB ({budget.gpus_per_trial:g} "
              f"of {memory['gpu_memory_gib']:g} GiB)")
    return budget, memory


#: :func:`run_search`'s options that set the budget over the suite's ``search`` section.
BUDGET_OPTIONS = ("num_samples", "max_epochs", "grace_period", "reduction_factor", "metric",
                  "mode", "cpus_per_trial", "gpus_per_trial", "max_concurrent",
                  "workers_per_trial")


def search_budget(search: SearchSpec | None, run: RunSpec, options: dict[str, Any]
                  ) -> SearchSpec:
    """The budget of a search of ``run``: the ``options`` given (not None) over ``search``'s,
    checked before anything is written: each value in its range, ASHA's first cut after the
    run's warm-up (:meth:`SearchSpec.check_run_first_cut`, as at the suite's load) and the
    metric. ConfigError names the first bad value as it was given: ``--grace-period`` from
    the options, ``search.grace_period`` from the suite."""
    from modules.methods import METHODS

    budget = (search or SearchSpec(space={})).with_options(
        **{key: options.get(key) for key in BUDGET_OPTIONS})

    def given(key: str) -> str:
        if options.get(key) is None:
            return f"search.{key}"
        return "--" + key.replace("_", "-")

    budget.check(given)
    budget.gpus_per_trial = budget.gpus_for(run)
    if not METHODS[run.method].requires_training:
        raise ConfigError(f"run {run.name!r} ({run.method}) trains nothing: there is nothing to "
                          "tune")
    budget.check_run_first_cut(run, given)
    budget.check_metric(METHODS[run.method], given)
    return budget


def own_values(run: RunSpec, space: dict[str, Any]) -> dict[str, Any] | None:
    """The run's own values of the searched keys, when the run sets every one of them to a value
    its distribution can give; else None."""
    checked = list(values_in_space(space, {"model": run.model, "data": run.data,
                                           "trainer": run.trainer}))
    if any(problem for _, _, problem in checked):
        return None
    return {key: value for key, value, _ in checked}


def start_or_resume(state: Path, run: RunSpec, space: dict[str, Any], budget: SearchSpec,
                    seed: int, resume: bool) -> dict[str, Any]:
    """The search's manifest: with ``resume`` the saved one (refused if absent or its settings
    differ), else a new one with a new ``search_id``, an earlier search kept aside. The first
    configuration is the run's own values where it sets them all (``own_first``), to measure the
    hand-set configuration on the same budget."""
    from tune.records import (
        as_json,
        check_same_search,
        new_search_id,
        read_manifest,
        sample_configs,
        write_manifest,
    )

    configs, own = sample_configs(space, budget.num_samples, seed), own_values(run, space)
    if own is not None:
        configs[0] = own
    manifest = as_json({"run": run.name, "seed": seed, "space": space,
                        "num_samples": budget.num_samples, "max_epochs": budget.max_epochs,
                        "grace_period": budget.grace_period,
                        "reduction_factor": budget.reduction_factor, "metric": budget.metric,
                        "mode": budget.mode, "configs": configs, "own_first": own is not None,
                        "search_id": new_search_id()})
    if resume:
        saved = read_manifest(state)
        if saved is None:
            raise ConfigError(f"nothing to resume in {state}: no search was started there "
                              "(drop --resume to start one)")
        check_same_search(state, saved, manifest)
        if not isinstance(saved.get("search_id"), str):  # started before searches had ids
            saved["search_id"] = new_search_id()
            write_manifest(state, saved)
        return saved
    if state.is_dir() and any(state.iterdir()):
        from datetime import datetime, timezone

        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        aside = state.with_name(f"{state.name}.replaced-{stamp}")
        state.rename(aside)
        print(f"A new search in {state.parent}: the earlier search state is kept in {aside}")
    write_manifest(state, manifest)
    return manifest


def can_resume(state: Path) -> bool:
    """Whether ``state`` holds a search that ``resume`` continues (its manifest)."""
    from tune.records import MANIFEST

    return (state / MANIFEST).is_file()


def stop_search(signum: int) -> None:
    """The graceful stop of a search on a stop signal (SIGTERM, SIGHUP, SLURM's SIGUSR1): Ray
    Tune's own, which Ctrl-C calls. Running trials stop where their records and checkpoints
    stand (losing at most the epoch in flight), ``trials.csv`` is written, and ``--resume``
    goes on."""
    if not stop_signals.call_handler(signal.SIGINT):
        raise Preempted(f"stopped by {stop_signals.signal_name(signum)}", signum=signum)


@contextmanager
def handlers_kept(*signals: signal.Signals) -> Iterator[None]:
    """Restores the handlers of ``signals`` afterwards: ``Tuner.fit`` leaves its own on SIGINT
    and SIGUSR1, which would swallow the next Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():  # Python allows no handler
        yield
        return
    before = {s: signal.getsignal(s) for s in signals}
    try:
        yield
    finally:
        for s, handler in before.items():
            if handler is not None:  # None: set outside Python, which Python cannot put back
                signal.signal(s, handler)


@contextmanager
def ray_for_search(address: str | None) -> Iterator[None]:
    """Ray for the search: the one already up, else the cluster at ``address``, else a local
    instance on the loopback that goes with this process even after a kill -9."""
    import ray

    started_ray, watchdog = not ray.is_initialized(), None
    if started_ray:
        if address:  # the trials' own output stays in Ray's logs on their nodes
            with stop_signals.taken_back():  # ray.init's own SIGTERM handler exits unsaid
                ray.init(address=address, runtime_env={"env_vars": worker_env()},
                         log_to_driver=False)
            print(joined(address), file=sys.stderr)
        else:
            watchdog = start_local_ray(worker_env())
    try:
        yield
    finally:
        if watchdog is not None:
            stop_local_ray(watchdog)
        elif started_ray:
            ray.shutdown()


def make_tuner(trial: TrialSpec, budget: SearchSpec, outcomes, scheduler,
               max_failures: int, reuse: bool, resource_wait: float):
    """The Tune run of this start of the search: one trial per configuration number; Ray's own
    files go to ``<state>/ray`` afresh."""
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    from tune.watch import ResourceWait, StopSignalsTaken, TrialLines

    cpus, gpus = budget.cpus_per_trial, budget.gpus_per_trial
    check_fits_a_node({"CPU": cpus, "GPU": gpus},
                      {"CPU": "--cpus-per-trial", "GPU": "--gpus-per-trial"}, "a trial")
    ray_files = Path(trial.state) / "ray"
    shutil.rmtree(ray_files, ignore_errors=True)  # never read back: the records are the state
    needs = f"{cpus:g} CPU" + (f" and {gpus:g} GPU" if gpus else "")
    return tune.Tuner(
        tune.with_resources(functools.partial(train_trial, trial=trial),
                            {"cpu": cpus, "gpu": gpus}),
        param_space={"trial": tune.grid_search(list(range(len(trial.configs))))},
        tune_config=tune.TuneConfig(
            metric=budget.metric, mode=budget.mode, num_samples=1,
            # a finished trial's worker runs the next one: imports and data once; not for a
            # DDP trial, whose spawned processes end with its own
            reuse_actors=reuse,
            # the generator itself limits the trials at once: Tune ignores its own
            # max_concurrent_trials beside a search generator (and says so)
            search_alg=BasicVariantGenerator(max_concurrent=budget.max_concurrent or 0),
            scheduler=scheduler),
        run_config=tune.RunConfig(
            name=ray_files.name, storage_path=str(ray_files.parent),
            verbose=0,  # no status tables: a line per trial ending (TrialOutcomes)
            failure_config=tune.FailureConfig(max_failures=max_failures),
            callbacks=[outcomes, ResourceWait(resource_wait, needs),
                       TrialLines(Path(trial.state)), StopSignalsTaken()]),
    )


def default_storage(suite: SuiteSettings, run: RunSpec) -> Path:
    """Where a search keeps its state and outputs unless told: ``results/tune/<suite>/<run>``."""
    return Path("results") / "tune" / suite.name / run.slug


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


def values_in_space(space: dict[str, Any], sections: dict[str, dict[str, Any]]):
    """Each searched key (``section.arg``) of ``space``, its value in ``sections`` (``{"model":
    {...}, ...}``) and what is wrong with it: None, :data:`MISSING`, or that the key's
    distribution cannot give it (:func:`can_sample`).

    >>> list(values_in_space({"model.lr": {"uniform": [0.1, 1]}, "data.batch_size":
    ...     {"choice": [64]}}, {"model": {"lr": 2.0}, "data": {}}))
    [('model.lr', 2.0, 'is not a value the search space gives (uniform [0.1, 1])'), \
('data.batch_size', None, 'is missing')]
    """
    for key, dist in space.items():
        section, _, arg = str(key).partition(".")
        (kind, args), = dist.items()
        given = sections.get(section) or {}
        if arg not in given:
            yield key, None, MISSING
        elif not can_sample(kind, args, given[arg]):
            yield (key, given[arg],
                   f"is not a value the search space gives ({kind} {args})")
        else:
            yield key, given[arg], None


#: :func:`values_in_space`'s word for a searched key that is not set.
MISSING = "is missing"


