"""``clusterbench tune``: a Ray Tune ASHA search over one run of a suite's search space."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.cli.bench import add_gpu_arguments, add_wandb_arguments, check_address_first

if TYPE_CHECKING:
    from benchmarks.suites.config import Suite


def tune_main(ns: argparse.Namespace) -> int:
    """The search, on a local Ray instance or the cluster at ``--address``."""
    check_address_first(ns)
    from benchmarks.suites.config import load_suite

    tune_suite_run(load_suite(ns.suite, fast=ns.fast), ns.run, num_samples=ns.num_samples,
                   max_epochs=ns.max_epochs, grace_period=ns.grace_period,
                   reduction_factor=ns.reduction_factor, metric=ns.metric, mode=ns.mode,
                   cpus_per_trial=ns.cpus_per_trial, gpus_per_trial=ns.gpus_per_trial,
                   storage=ns.storage, address=ns.address, seed=ns.seed,
                   max_concurrent=ns.max_concurrent, resume=ns.resume,
                   wandb=search_wandb(ns), workers_per_trial=ns.workers_per_trial,
                   resource_wait=ns.resource_wait, fast_gpu=not ns.no_fast_gpu,
                   compile=not ns.no_compile)
    return 0


def tune_suite_run(suite: Suite, run_name: str | None = None, **options) -> Path:
    """ASHA over one run of ``suite`` (default: its first trained run), with the suite's search
    section as the defaults of ``options`` (:func:`tune.search.run_search`)."""
    from contextlib import nullcontext

    from benchmarks.infra.errors import ConfigError
    from benchmarks.infra.locking import folder_lock
    from benchmarks.suites.runner import Placement, ray_session
    from modules.methods import METHODS
    from tune.records import refuse_links
    from tune.search import default_storage, run_search, search_budget

    if run_name is None:
        trained = [r for r in suite.runs if METHODS[r.method].requires_training]
        if not trained:
            raise ConfigError(f"suite {suite.name!r} has no trained run to tune")
        run_name = trained[0].name
    run = suite.run(run_name)
    search_budget(suite.search, run, options)  # refused before its storage folder is made
    storage = Path(options.pop("storage", None) or default_storage(suite.settings, run)).resolve()
    refuse_links(storage)  # before the lock and Ray's log are written there
    address = options.get("address")
    # on a cluster, as bench's runs: the trials' own console lines stay on their nodes
    with folder_lock(storage, "search storage"), \
            ray_session(Placement(address=address), storage / "ray.log") if address \
            else nullcontext():
        return run_search(suite.settings, suite.search, run, storage=str(storage), **options)


def search_wandb(ns: argparse.Namespace):
    """The W&B project, entity and tags of the trials with ``--wandb``, else False."""
    from benchmarks.run.wandb_runs import WandbSettings

    if not ns.wandb:
        return False
    return WandbSettings(project=ns.wandb_project, entity=ns.wandb_entity,
                         tags=tuple(ns.wandb_tags or ()))


def add_parser(sub) -> None:
    """``clusterbench tune``'s options."""
    tune = sub.add_parser("tune", help="Ray Tune ASHA search over a suite's search space")
    tune.add_argument("suite", help="suite name or path, with a `search` section")
    tune.add_argument("--run", help="the suite run to tune (default: its first trained run)")
    # Defaults of None: the suite's search section decides, else SearchSpec's defaults.
    tune.add_argument("--num-samples", type=int, help="configurations to sample (default: the "
                      "suite's search.num_samples, else 8)")
    tune.add_argument("--max-epochs", type=int, help="ASHA's max_t, in epochs (default: the "
                      "suite's search.max_epochs, else 10)")
    tune.add_argument("--grace-period", type=int, help="ASHA's grace period in epochs (default 1)")
    tune.add_argument("--reduction-factor", type=float, help="ASHA's reduction factor (default 2)")
    tune.add_argument("--metric", help="metric ASHA schedules on (default online_val_acc)")
    tune.add_argument("--mode", choices=["max", "min"], help="default max")
    tune.add_argument("--cpus-per-trial", type=float, help="default 1")
    tune.add_argument("--gpus-per-trial", type=float, help="default 0; a fraction shares a GPU, "
                      "above 1 runs the trial as Lightning DDP over that many GPUs of one node")
    tune.add_argument("--workers-per-trial", type=int, help="DDP processes per trial (default: "
                      "--gpus-per-trial when above 1, else 1)")
    tune.add_argument("--storage", help="this search's directory (default: "
                      "results/tune/<suite>/<run>)")
    tune.add_argument("--address", help="an existing Ray cluster (auto or ray://host:port); "
                      "default: a local Ray instance")
    tune.add_argument("--max-concurrent", type=int, help="trials running at once (default: as "
                      "many as the resources allow)")
    tune.add_argument("--resource-wait", type=float, metavar="SECONDS",
                      help="fail when no trial has run for this long while trials wait for "
                      "resources (default 1800)")
    tune.add_argument("--resume", action="store_true",
                      help="continue an interrupted search from its storage directory")
    tune.add_argument("--wandb", action="store_true", help="log every trial to W&B, grouped by "
                      "search (offline without a login); nothing touches W&B without it")
    add_wandb_arguments(tune)
    add_gpu_arguments(tune)
    tune.add_argument("--fast", action="store_true", help="the suite's tiny budget")
    tune.add_argument("--seed", type=int, default=0, help="seed of the search and the trials")
