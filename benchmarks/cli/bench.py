"""``clusterbench bench``: run a suite (its runs over its seeds, its searches, or its
experiments) and print its leaderboard."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from benchmarks.cli.console import (
    EXIT_BAD_INPUT,
    print_leaderboard,
    print_report,
    written_leaderboard,
)
from benchmarks.infra.errors import ConfigError, suggest
from benchmarks.suites.suite_file import BUDGETS


def bench_main(ns: argparse.Namespace) -> int:
    """Every run of the suite (or those of ``--runs``), checked before any trains; exit 1 when
    a run failed, 2 when a run had no data or a setting its data cannot take."""
    check_budget_name(ns.budget)
    check_address_first(ns)
    from benchmarks.suites.config import load_suite
    from benchmarks.suites.overrides import override_suite
    from benchmarks.suites.runner import run_suite
    from benchmarks.suites.suite_file import suite_kind

    if suite_kind(ns.suite) == "experiment":
        return bench_experiments(ns)
    options, placement = run_options(ns)
    if ns.fast and ns.budget not in ("full", "fast"):
        raise ConfigError(f"--fast and --budget {ns.budget} ask for two budgets: give one")
    suite = load_suite(ns.suite, fast=ns.fast, budget=ns.budget)
    for name in ns.runs or ():
        suite.run(name)
    if ns.set or ns.seeds:
        suite = override_suite(suite, ns.set or [], ns.seeds, ns.runs)
    check_before_training(suite, ns, options, placement)
    results_dir, failed, bad_input = run_suite(
        suite, ns.results, options=options, placement=placement, only=ns.runs,
        search=not ns.no_search)
    if (results_dir / "leaderboard.md").exists():
        print_leaderboard(results_dir)
    if failed:
        print(f"clusterbench: {len(failed)} run(s) failed: {', '.join(sorted(failed))}",
              file=sys.stderr)
        return 1
    if bad_input:
        print(f"clusterbench: {len(bad_input)} run(s) had no data, or a setting their data "
              f"cannot take (said above): {', '.join(bad_input)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def check_budget_name(budget: str) -> None:
    """``--budget`` is one of :data:`BUDGETS`, said in one line naming the value and those
    accepted (argparse's ``choices`` would print the whole usage, 16 lines, above its error)."""
    if budget not in BUDGETS:
        raise ConfigError(f"--budget {budget} is not a budget{suggest(budget, BUDGETS)}")


def check_address_first(ns: argparse.Namespace) -> None:
    """``--address`` checked before torch loads: a wrong one is said in a second, not after the
    imports (about 10 s on two cores)."""
    if ns.address is not None:
        from benchmarks.run.local_ray import check_ray_address

        check_ray_address(ns.address)


def bench_experiments(ns: argparse.Namespace) -> int:
    """A ``kind: experiment`` suite: its experiments' report; the run flags would do nothing,
    so they are refused."""
    from benchmarks.experiments import EXPERIMENTS
    from benchmarks.suites.experiment import load_experiment_suite, run_experiment_suite

    ignored = [flag for flag, given in (
        ("--runs", ns.runs), ("--logger wandb", ns.logger != "csv"),
        ("--accelerator", ns.accelerator), ("--address", ns.address),
        ("--parallel", ns.parallel != 1), ("--devices", ns.devices),
        ("--gpus-per-run", ns.gpus_per_run), ("--rerun", ns.rerun), ("--set", ns.set),
        ("--seeds", ns.seeds), ("--budget ci", ns.budget == "ci")) if given]
    if ignored:
        raise ConfigError(f"{ns.suite} is an experiment suite (kind: experiment): it has no "
                          f"runs to pick, log or place, so {', '.join(ignored)} would do "
                          "nothing; accepted: --results and --fast")
    results_dir = run_experiment_suite(
        load_experiment_suite(ns.suite, EXPERIMENTS, fast=ns.fast or ns.budget == "fast"),
        ns.results)
    files = f"{results_dir}/leaderboard.{{md,csv,html}}"
    print_report(written_leaderboard(results_dir), files=files)
    print(f"\nReport: {files}; figures: {results_dir}/figures/")
    return 0


def run_options(ns: argparse.Namespace):
    """The run options and the placement of ``bench`` (and ``evaluate``'s logger)."""
    from benchmarks.run.trainer import RunOptions
    from benchmarks.run.wandb_runs import WandbSettings
    from benchmarks.suites.runner import Placement

    if ns.checkpoint_every < 1:
        raise ConfigError(f"--checkpoint-every must be at least 1 epoch, got "
                          f"{ns.checkpoint_every}")
    if ns.devices is not None and ns.devices < 1:
        raise ConfigError(f"--devices must be at least 1, got {ns.devices}")
    options = RunOptions(logger=ns.logger, accelerator=ns.accelerator, devices=ns.devices,
                         progress=not ns.no_progress and sys.stdout.isatty(),
                         checkpoint_every=ns.checkpoint_every,
                         fast_gpu=not ns.no_fast_gpu, compile=not ns.no_compile,
                         rerun=ns.rerun, rerun_changed=ns.rerun_changed,
                         wandb=WandbSettings(project=ns.wandb_project, entity=ns.wandb_entity,
                                             tags=tuple(ns.wandb_tags or ())))
    placement = Placement(address=ns.address, parallel=ns.parallel,
                          gpus_per_run=ns.gpus_per_run, cpus_per_run=ns.cpus_per_run,
                          max_retries=ns.max_retries, resource_wait=ns.resource_wait)
    placement.check()
    return options, placement


def check_before_training(suite, ns: argparse.Namespace, options, placement) -> None:
    """A bad value, a global batch the devices cannot share, a search's first cut inside a
    warm-up, a bad search space and a trial that cannot fit its share of a GPU are bad input:
    refused before anything trains."""
    from benchmarks.suites.config import check_search_first_cut
    from benchmarks.suites.preflight import check_values

    devices = placement.devices(placement.gpus_per_run or 0) if placement.uses_ray else None
    gpus = placement.uses_ray and bool(placement.gpus_per_run)  # Ray tasks holding GPUs use them
    # a Ray cluster's runs train on its nodes, not necessarily on a machine like this one
    accelerator = options.accelerator or ("gpu" if gpus else None)
    try:
        if not ns.no_search:  # loaded with each first cut after its warm-up: a --set moves one
            check_search_first_cut(suite, str(suite.path), ns.runs)
        check_values(suite, ns.runs, replace(options, devices=devices or options.devices,
                                             accelerator=accelerator),
                     here=placement.address is None)
    except ConfigError as err:
        if not suite.overrides:
            raise
        raise ConfigError(f"{err} (with --set {' --set '.join(ns.set)})") from err
    if ns.no_search:
        return
    from tune.memory import check_trial_memory
    from tune.search import checked_space

    for run in suite.searched_runs(ns.runs):
        checked_space(suite.settings, suite.search, run)
        check_trial_memory(run, suite.search, suite.search.workers_per_trial)


def add_parser(sub) -> None:
    """``clusterbench bench``'s options."""
    bench = sub.add_parser("bench", help="run a suite and print its leaderboard")
    bench.add_argument("suite", nargs="?", default="smoke",
                       help="suite name (a YAML file in benchmarks/) or path; default: smoke")
    bench.add_argument("--results", default="results",
                       help="results root; the suite writes to RESULTS/<suite> (default: results)")
    bench.add_argument("--fast", action="store_true",
                       help="the suite's tiny budget (one seed, a few batches) to check the "
                       "plumbing; written to RESULTS/<suite>-fast")
    bench.add_argument("--budget", default="full", metavar="{" + ",".join(BUDGETS) + "}",
                       help="the suite's budget: full (default), fast (= --fast) or ci (short "
                       "runs whose numbers compare commits, minutes on a CPU; in the suites "
                       "with a ci section); written to RESULTS/<suite>-<budget>")
    bench.add_argument("--runs", nargs="+", metavar="RUN", help="only these runs of the suite")
    bench.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="a setting for every run, over the suite's: data.ARG, trainer.ARG, "
                       "model.ARG (the runs whose method takes it) or evaluation.PROTOCOL.ARG; "
                       "VALUE is YAML (3, 1e-3, true, [10, 20]); repeatable. Results go to "
                       "RESULTS/<suite>+<settings>, never over the suite's own")
    bench.add_argument("--seeds", nargs="+", type=int, metavar="SEED",
                       help="these seeds instead of the suite's (finished seeds are reused)")
    add_training_arguments(bench)
    add_placement_arguments(bench)
    add_wandb_arguments(bench)


def add_training_arguments(bench: argparse.ArgumentParser) -> None:
    """How each run trains: its logger, device, speed settings, checkpoints and reruns."""
    bench.add_argument("--logger", default="csv", choices=["csv", "wandb"],
                       help="csv (default) or wandb (offline when this machine has no W&B login)")
    bench.add_argument("--accelerator",
                       help="Lightning accelerator (cpu, gpu, auto), overriding the suite's")
    bench.add_argument("--no-progress", action="store_true", help="hide the progress bars "
                       "(they show only on a terminal)")
    add_gpu_arguments(bench)
    bench.add_argument("--no-search", action="store_true",
                       help="skip the suite's search section (no Ray Tune search, no +tuned rows)")
    bench.add_argument("--devices", type=int,
                       help="devices per run in this process (default: the suite's, else 1); "
                       "data.batch_size stays the global batch, split over them")
    bench.add_argument("--checkpoint-every", type=int, default=1, metavar="EPOCHS",
                       help="write each run's last.ckpt every EPOCHS epochs (default 1; also at "
                       "the end and on SIGTERM)")
    bench.add_argument("--rerun", action="store_true",
                       help="retrain runs whose result already holds the same configuration "
                       "(default: skip them, resume unfinished ones from their checkpoint)")
    bench.add_argument("--rerun-changed", action="store_true",
                       help="retrain runs whose result was computed by other code (another "
                       "commit, or uncommitted changes): a cached results folder in CI")


def add_placement_arguments(bench: argparse.ArgumentParser) -> None:
    """Where the runs train: this process, a local Ray instance or a Ray cluster."""
    bench.add_argument("--address", help="run every (run, seed) and the searches as Ray tasks on "
                       "this Ray cluster (auto, HOST:PORT or ray://HOST:PORT); --results must be "
                       "storage every node reaches")
    bench.add_argument("--parallel", type=int, default=1, metavar="N",
                       help="without --address: N (run, seed) jobs at once on a local Ray "
                       "instance (default 1: one after another in this process)")
    bench.add_argument("--gpus-per-run", type=float, metavar="G",
                       help="GPUs of each Ray task (default: 1 on a cluster with GPUs, else 0); "
                       "a fraction shares a GPU, above 1 runs DDP over G GPUs")
    bench.add_argument("--cpus-per-run", type=float, default=1, metavar="C",
                       help="CPUs of each Ray task (default 1)")
    bench.add_argument("--max-retries", type=int, default=3,
                       help="Ray retries of a task whose worker or node died; the retry resumes "
                       "from the run's checkpoint (default 3)")
    bench.add_argument("--resource-wait", type=float, default=1800, metavar="SECONDS",
                       help="fail when the Ray tasks have all waited this long for resources, "
                       "none of them started (default 1800)")


def add_gpu_arguments(parser: argparse.ArgumentParser) -> None:
    """The GPU speed switches of ``bench`` and ``tune`` (runs and search trials alike)."""
    parser.add_argument("--no-fast-gpu", action="store_true",
                        help="on a GPU, train with the suite's settings only: no bf16 default, "
                        "channels-last, cuDNN autotuning, TF32 or torch.compile")
    parser.add_argument("--no-compile", action="store_true",
                        help="on a GPU, no torch.compile of the backbone and projector")


def add_wandb_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the W&B runs go (``bench --logger wandb``, ``tune --wandb``)."""
    parser.add_argument("--wandb-project", default="clusterbench",
                        help="W&B project of the runs (bench --logger wandb, tune --wandb; "
                        "default: clusterbench)")
    parser.add_argument("--wandb-entity", help="W&B entity (team or user; default: yours)")
    parser.add_argument("--wandb-tags", nargs="+", metavar="TAG", help="tags of every W&B run")
