"""Run a suite: every (run, seed), in this process or as Ray tasks on a cluster's devices, one
result file each, the leaderboard rebuilt as results arrive."""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from benchmarks.infra import stop_signals
from benchmarks.infra.atomic import is_disk_full, lost_own_file
from benchmarks.infra.errors import ConfigError
from benchmarks.infra.locking import FolderRefused, folder_lock
from benchmarks.infra.said import marked_then
from benchmarks.run.cache import already_done, run_dir, seed_folder
from benchmarks.run.local_ray import (
    check_fits_a_node,
    check_ray_address,
    joined,
    ray_messages_to,
    start_local_ray,
    stop_local_ray,
    worker_env,
)
from benchmarks.run.one import run_one
from benchmarks.run.spec import RunSpec
from benchmarks.run.trainer import RunOptions
from benchmarks.suites.config import Suite
from benchmarks.suites.leaderboard import write_leaderboard
from benchmarks.suites.preflight import check_data, suite_results_dir
from benchmarks.suites.searched import search_winners, seeds_to_train
from benchmarks.suites.started import StartWatch, lost_after_setting, said_file, started_marker
from benchmarks.suites.tally import Outcome, Tally

console = Console(stderr=True)


@dataclass
class Placement:
    """Where the (run, seed) jobs of a suite run.

    Without ``address`` and with ``parallel`` 1 (the default) they run one after another in this
    process. ``parallel`` N > 1 runs N at once as tasks of a local Ray instance sized to the
    machine (bound to 127.0.0.1). ``address`` (``auto``, ``HOST:PORT``, ``ray://HOST:PORT``)
    submits every job to that Ray cluster at once and lets Ray place it. A job takes
    ``gpus_per_run`` GPUs (default: 1 where the cluster has GPUs, else 0, and 0 for a run its
    suite pins to ``accelerator: cpu``; a fraction shares a
    GPU between small runs; above 1, the run is Lightning DDP over that many GPUs with
    ``data.batch_size`` split over them) and ``cpus_per_run`` CPUs; a task whose worker or node
    died is retried ``max_retries`` times, and the retry resumes from the run's checkpoint."""

    address: str | None = None
    parallel: int = 1
    gpus_per_run: float | None = None
    cpus_per_run: float = 1
    max_retries: int = 3
    #: How long the jobs may all wait for resources, none of them started (seconds).
    resource_wait: float = 1800

    @property
    def uses_ray(self) -> bool:
        return self.address is not None or self.parallel > 1

    def check(self) -> None:
        if not isinstance(self.parallel, int) or self.parallel < 1:
            raise ConfigError(f"--parallel must be a whole number of at least 1, got "
                              f"{self.parallel!r}")
        if self.gpus_per_run is not None and (
                self.gpus_per_run < 0 or self.gpus_per_run > 1
                and self.gpus_per_run != int(self.gpus_per_run)):
            raise ConfigError(f"--gpus-per-run must be a fraction up to 1 or a whole number of "
                              f"GPUs, got {self.gpus_per_run:g}")
        if self.cpus_per_run <= 0:
            raise ConfigError(f"--cpus-per-run must be positive, got {self.cpus_per_run:g}")
        if self.max_retries < 0:
            raise ConfigError(f"--max-retries must not be negative, got {self.max_retries}")
        if not self.resource_wait > 0:
            raise ConfigError(f"--resource-wait must be a positive number of seconds, got "
                              f"{self.resource_wait:g}")
        if self.uses_ray:
            lost_after_setting()  # a bad CLUSTERBENCH_LOST_AFTER_S, before anything is made
        if self.address is not None:
            check_ray_address(self.address)

    def devices(self, gpus: float) -> int | None:
        """Lightning devices of a job holding ``gpus`` GPUs (None: the run's own setting)."""
        return max(1, int(gpus)) if gpus else None


def run_job(settings, run: RunSpec, seed: int, suite_dir: str, options: RunOptions) -> dict:
    """One (run, seed) where it was placed: this process, or a Ray worker, where
    :func:`~benchmarks.infra.said.marked_then` calls it once it has marked its start."""
    return run_one(settings, run, seed, Path(suite_dir), options)


def job_name(run: RunSpec, seed: int) -> str:
    return f"{run.name}/seed-{seed}"


def execute_here(jobs: list[tuple[RunSpec, int]], suite: Suite, suite_dir: Path,
                 options: RunOptions) -> Iterator[Outcome]:
    """The jobs one after another in this process (the default; the CPU smoke path)."""
    for run, seed in jobs:
        if console.is_terminal:  # beside the progress bars; a log gets the result line alone
            console.rule(f"[bold]{suite.name}[/]: {run.name} on {run.dataset}, seed {seed}")
        try:
            result = run_job(suite.settings, run, seed, str(suite_dir), options)
        except KeyboardInterrupt:
            raise
        except Exception as err:  # one broken run must not cost the others their results
            if input_error(err, suite_dir):
                yield Outcome(job_name(run, seed), error=str(err), bad_input=True)
                continue
            if is_disk_full(err):  # ... but a full disk would fail every one of them
                raise
            yield Outcome(job_name(run, seed), error=traceback.format_exc())
            continue
        yield Outcome(job_name(run, seed), result=result)


def input_error(err: BaseException | None, suite_dir: Path) -> bool:
    """Whether a run's ``err`` is for its user to mend, said in one line: data missing or
    corrupt, a setting the data cannot take, a seed still held elsewhere. A file missing from
    the suite's own results folder is not: clusterbench wrote it, and its loss is a crash, shown
    whole."""
    return (isinstance(err, (ConfigError, FolderRefused))
            or isinstance(err, FileNotFoundError) and not lost_own_file(err, suite_dir))


@contextmanager
def ray_session(placement: Placement, log: Path) -> Iterator[None]:
    """Ray for the suite's jobs (and its searches): the cluster at ``address``, or a local
    instance sized to the machine, on the loopback only; left as found afterwards. Ray's own
    messages go to ``log`` (:func:`benchmarks.run.local_ray.ray_messages_to`)."""
    with ray_messages_to(log):
        yield from _ray_session(placement)
    print(f"Ray's own messages: {log}", file=sys.stderr)


def _ray_session(placement: Placement) -> Iterator[None]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    started = not ray.is_initialized()
    if started:
        env = worker_env()
        if placement.address:
            with stop_signals.taken_back():  # ray.init's own SIGTERM handler exits unsaid
                ray.init(address=placement.address, runtime_env={"env_vars": env},
                         log_to_driver=False)
            print(joined(placement.address), file=sys.stderr)
        else:
            watchdog = start_local_ray(env)
    try:
        yield
    finally:
        if started and placement.address:
            ray.shutdown()
        elif started:
            stop_local_ray(watchdog)


def execute_on_ray(jobs: list[tuple[RunSpec, int]], suite: Suite, suite_dir: Path,
                   options: RunOptions, placement: Placement) -> Iterator[Outcome]:
    """Every job as a Ray task with its own CPUs and GPUs, yielded as each finishes. With
    ``parallel`` N and no address, N at a time."""
    import ray

    gpus = gpus_per_job(placement)
    check_pinned_cpu(jobs, placement, options)
    options = replace(options, progress=False)
    # the accelerator the user gave is kept: --accelerator cpu with GPUs per run holds them
    # (a cluster that declares GPUs it does not have, to rehearse placement) and trains on CPUs
    job_options = {g: replace(options, devices=placement.devices(g) or options.devices,
                              accelerator=options.accelerator or ("gpu" if g else "cpu"))
                   for g in {gpus, 0}}
    resources = {"num_cpus": placement.cpus_per_run, "max_retries": placement.max_retries,
                 "retry_exceptions": False}
    remote = ray.remote(marked_then)
    window = placement.parallel if placement.address is None else len(jobs)
    waiting = list(jobs)
    running: dict[Any, tuple[str, Path]] = {}  # the job's name, and where its result must be
    held = sorted({0 if pins_cpu(run, placement, options) else gpus for run, _ in jobs})
    needs = f"{' or '.join(f'{g:g}' for g in held)} GPU and {placement.cpus_per_run:g} CPU"
    watch = StartWatch(suite_dir, placement.resource_wait, needs)
    console.print(f"{suite.name}: {len(jobs)} run(s) as Ray tasks ({needs} each, "
                  f"{min(window, len(jobs))} at a time at most)")
    try:
        while waiting or running:
            while waiting and len(running) < window:
                run, seed = waiting.pop(0)
                if (done := already_done(suite.settings, run, seed, suite_dir, options)):
                    yield Outcome(job_name(run, seed), result=done)  # no task for it
                    continue
                name = job_name(run, seed)
                watch.submitted(name)
                takes = 0 if pins_cpu(run, placement, options) else gpus
                job = (run_job, (suite.settings, run, seed, str(suite_dir), job_options[takes]))
                ref = remote.options(name=name, num_gpus=takes, **resources).remote(
                    str(started_marker(suite_dir, name)), str(said_file(suite_dir, name)),
                    pickle.dumps(job))
                running[ref] = (name, seed_folder(suite_dir, run, seed))
            if not running:  # every job left was finished already
                break
            ready = next_finished(running, watch)
            yield ray_outcome(*running.pop(ready), ready, suite_dir)
    finally:
        for ref in running:  # Ctrl-C: what was still running stops with its checkpoint kept
            ray.cancel(ref, force=True)


def next_finished(running: dict[Any, tuple[str, Path]], watch: StartWatch) -> Any:
    """The next of the ``running`` Ray tasks to finish, ``watch`` checked every few seconds."""
    import ray

    while True:
        ready, _ = ray.wait(list(running), num_returns=1, timeout=WAIT_POLL_S)
        if ready:
            watch.finished(running[ready[0]][0])
            return ready[0]
        watch.check([name for name, _ in running.values()])


#: How often the driver looks whether a waiting job has started (seconds).
WAIT_POLL_S = 2.0


def gpus_per_job(placement: Placement) -> float:
    """The GPUs each job takes (default: 1 where the Ray cluster has GPUs, else 0), refused when
    it, or the CPUs a job takes, is more than any one alive node has: no job would ever start."""
    import ray

    gpus = placement.gpus_per_run
    if gpus is None:
        gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
    check_fits_a_node({"GPU": gpus, "CPU": placement.cpus_per_run},
                      {"GPU": "--gpus-per-run", "CPU": "--cpus-per-run"}, "a run")
    return gpus


def pins_cpu(run: RunSpec, placement: Placement, options: RunOptions) -> bool:
    """A run whose suite pins ``trainer.accelerator: cpu`` holds no GPU by default: on a cluster
    with GPUs it trains on the CPUs, as its suite says."""
    return (run.trainer.get("accelerator") == "cpu" and placement.gpus_per_run is None
            and options.accelerator is None)


def check_pinned_cpu(jobs: list[tuple[RunSpec, int]], placement: Placement,
                     options: RunOptions) -> None:
    """``--gpus-per-run`` without ``--accelerator`` for a run its suite pins to the CPU: which one
    wins is the user's to say, in one line, before anything runs."""
    if not placement.gpus_per_run or options.accelerator is not None:
        return
    pinned = sorted({run.name for run, _ in jobs if run.trainer.get("accelerator") == "cpu"})
    if pinned:
        raise ConfigError(
            f"--gpus-per-run {placement.gpus_per_run:g} gives each run GPUs, but the suite pins "
            f"trainer.accelerator: cpu for {', '.join(pinned)}: add --accelerator gpu to train "
            "on them, or --accelerator cpu to hold them and train on the CPUs")


def ray_outcome(name: str, folder: Path, ready: Any, suite_dir: Path) -> Outcome:
    """What became of the finished Ray task ``ready`` (the job ``name``, whose result must be in
    ``folder`` of ``suite_dir``); a full disk is raised, since every other job would fail the
    same way."""
    import ray

    try:
        return seen_here(Outcome(name, result=ray.get(ready)), folder)
    except ray.exceptions.RayTaskError as err:
        cause = getattr(err, "cause", None)
        if is_disk_full(cause):
            raise cause from None
        bad_input = input_error(cause, suite_dir)
        return Outcome(name, error=str(cause) if bad_input else str(err), bad_input=bad_input)
    except ray.exceptions.RayError as err:  # the worker or its node died, retries spent
        return Outcome(name, error=str(err))


def seen_here(outcome: Outcome, folder: Path) -> Outcome:
    """``outcome``, if this driver can read the result its node wrote in ``folder``; else a
    failure naming the node and the path: a results folder the nodes do not share would leave
    results only on the node that wrote them, and a leaderboard without them."""
    if (folder / "result.json").is_file():
        return outcome
    node = (outcome.result or {}).get("machine", {}).get("hostname", "another node")
    return Outcome(outcome.name, error=(
        f"{outcome.name}: its result was written on {node} to {folder / 'result.json'}, which "
        "this driver cannot read: --results must be a folder every node of the cluster shares "
        "(a network file system mounted at the same path)"))


def run_suite(suite: Suite, results_root: str | Path = "results",
              options: RunOptions | None = None, placement: Placement | None = None,
              only: list[str] | None = None, search: bool = True
              ) -> tuple[Path, list[str], list[str]]:
    """Run every (run, seed) of ``suite`` where ``placement`` says; a run that crashes, or whose
    data are missing, is reported and leaves no result, and the others go on. A (run, seed)
    whose result holds the same configuration is not trained again (``options.rerun`` forces),
    and an unfinished one resumes from its checkpoint. The leaderboard is rebuilt after every
    result, so a long suite has a partial one at any time. With ``search`` and a suite search
    section, each searched run's best configuration is then retrained as ``<run>+tuned`` for the
    suite's full budget and seeds (:func:`tune.best.best_run`). Returns the suite's results
    directory, the crashed run/seed names and those whose data were missing."""
    options = options or RunOptions()
    placement = placement or Placement()
    suite_dir = suite_results_dir(suite, results_root)
    runs = [suite.run(name) for name in only] if only else list(suite.runs)
    tally = Tally(suite_dir)
    if search and suite.searched_runs(only):  # a link in a search's folder stops all at once
        from tune.records import refuse_links

        refuse_links(suite_dir / "search", suite_dir)
    if placement.address is None:  # a cluster's nodes have their own data folders
        check_data(runs, suite, suite_dir, options)
    with folder_lock(suite_dir, f"suite {suite.name!r}'s results folder"), \
            ray_session(placement, suite_dir / "ray.log") if placement.uses_ray \
            else nullcontext():
        try:
            train_jobs(runs, suite, suite_dir, options, placement, tally)
        except KeyboardInterrupt as err:  # Ctrl-C or another stop signal
            write_leaderboard(suite_dir)  # with every result finished so far
            raise tally.interrupted(err, len(runs) * len(suite.seeds)) from None
        for run, tuned in search_winners(suite, only, suite_dir, placement.address, options,
                                         tally, search):
            train_jobs([tuned], suite, suite_dir, options, placement, tally,
                       seeds_to_train(suite, run, tuned, suite_dir, tally))
        if write_leaderboard(suite_dir) and options.logger == "wandb":
            from benchmarks.run.wandb_runs import record_leaderboard

            record_leaderboard(options.wandb, label=suite.settings.label,
                               content=suite_content(suite), suite_dir=suite_dir)
    return suite_dir, tally.failed, tally.bad_input


def suite_content(suite: Suite) -> dict[str, Any]:
    """What the suite is as resolved (its runs, seeds, settings, search, budget and ``--set``
    settings), not where its file lies: what its leaderboard's W&B run is a function of."""
    return {key: value for key, value in asdict(suite).items() if key != "path"}


def train_jobs(runs: list[RunSpec], suite: Suite, suite_dir: Path, options: RunOptions,
               placement: Placement, tally: Tally, seeds: list[int] | None = None) -> None:
    """Every seed of ``runs`` (or those of ``seeds``), here or on the Ray cluster, each outcome
    into ``tally``."""
    jobs = [(run, seed) for run in runs for seed in (suite.seeds if seeds is None else seeds)]
    tally.total += len(jobs)
    for run, seed in jobs:  # a link planted in any seed's folders stops all before one trains
        run_dir(suite_dir, run, seed)
    outcomes = (execute_on_ray(jobs, suite, suite_dir, options, placement)
                if placement.uses_ray else execute_here(jobs, suite, suite_dir, options))
    for outcome in outcomes:
        tally.record(outcome)
