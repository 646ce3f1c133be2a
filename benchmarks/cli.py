"""``clusterbench``: fit, bench, tune, leaderboard and list.

Bad input (an unknown name, a misspelled key, a bad value, missing data) prints one clear line
and exits with status 2; a suite whose runs crashed exits with status 1.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import replace
from pathlib import Path

from benchmarks.infra.atomic import DiskFull, is_disk_full
from benchmarks.infra.locking import FolderBusy
from benchmarks.run.divergence import Diverged
from benchmarks.run.spec import Preempted
from benchmarks.suites.config import ConfigError, suggest

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # as a shell reports a process stopped by SIGINT
EXIT_PREEMPTED = 143  # as a shell reports a process stopped by SIGTERM


def _first_doc_line(obj) -> str:
    return ((obj.__doc__ or "").strip().splitlines() or [""])[0]


# -- fit ---------------------------------------------------------------------------------------
def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def translate_fit_args(args: list[str]) -> list[str]:
    """Registry names to class paths (``--model simclr`` ->
    ``--model modules.methods.simclr.SimCLR``) and
    ``--logger wandb|csv`` to the Trainer's logger. Unknown names raise a ConfigError."""
    from datamodules import DATAMODULES
    from modules.methods import METHODS

    registries = {"--model": (METHODS, "method"), "--data": (DATAMODULES, "dataset")}
    out, i = [], 0
    while i < len(args):
        arg = args[i]
        flag, eq, value = arg.partition("=")
        if flag in (*registries, "--logger"):
            if not eq:
                if i + 1 >= len(args):
                    raise ConfigError(f"{flag} needs a value")
                value, i = args[i + 1], i + 1
            if flag == "--logger":
                out += logger_args(value)
            else:
                registry, what = registries[flag]
                if value in registry:
                    value = _class_path(registry[value])
                elif "." not in value:  # a dotted class path is left for LightningCLI to import
                    raise ConfigError(f"unknown {what} {value!r}{suggest(value, set(registry))}")
                out += [flag, value]
        else:
            out.append(arg)
        i += 1
    return out


def logger_args(kind: str) -> list[str]:
    from benchmarks.run import LOGGERS
    from benchmarks.run.wandb_runs import wandb_logged_in

    if kind == "csv":
        return []  # the default
    if kind == "wandb":
        return ["--trainer.logger", "lightning.pytorch.loggers.WandbLogger",
                "--trainer.logger.project", "clusterbench", "--trainer.logger.save_dir",
                "results/fit", "--trainer.logger.offline", str(not wandb_logged_in()).lower()]
    raise ConfigError(f"unknown logger {kind!r}; available: {', '.join(LOGGERS)}")


def constructor_errors(err: ValueError) -> str:
    """The constructors' own messages from jsonargparse's report, which lists one error per
    candidate type under ``Errors:`` (the ``None`` candidate's is noise)."""
    lines = [line.strip(" -") for line in str(err).splitlines()
             if line.startswith("  - ") and "NoneType" not in line]
    return "; ".join(lines) or str(err)


def fit_main(args: list[str]) -> int:
    """LightningCLI over every registered method and datamodule; the resolved config, the git
    commit and the package versions are saved in the run's log directory."""
    import json

    import lightning.pytorch as pl
    from jsonargparse import lazy_instance
    from lightning.pytorch.callbacks import ProgressBar
    from lightning.pytorch.cli import LightningCLI, SaveConfigCallback
    from lightning.pytorch.loggers import CSVLogger

    from benchmarks.infra.atomic import write_atomic
    from benchmarks.infra.environment import environment
    from benchmarks.run.divergence import StopOnDivergence
    from benchmarks.run.progress import StepProgressBar
    from datamodules import ClusterDataModule

    class SaveConfigAndEnvironment(SaveConfigCallback):
        def save_config(self, trainer, pl_module, stage) -> None:
            log_dir = Path(trainer.log_dir or trainer.default_root_dir)
            write_atomic(log_dir / "environment.json", json.dumps(environment(), indent=2))

    class ClusterbenchCLI(LightningCLI):
        def add_arguments_to_parser(self, parser) -> None:
            parser.link_arguments("data.num_classes", "model.init_args.num_classes",
                                  apply_on="instantiate")
            parser.link_arguments("data.input_shape", "model.init_args.input_shape",
                                  apply_on="instantiate")

        def instantiate_trainer(self, **kwargs):
            # Rich's progress bar unless bars are off or the user chose one.
            trainer = self.config_init.get("trainer") or {}
            callbacks = list(trainer.get("callbacks") or [])
            if trainer.get("enable_progress_bar") is not False and not any(
                    isinstance(c, ProgressBar) for c in callbacks):
                callbacks = [*callbacks, StepProgressBar()]
            # a non-finite training loss stops the fit at once (exit 1), as in a suite
            kwargs["callbacks"] = [StopOnDivergence(), *callbacks]
            return super().instantiate_trainer(**kwargs)

    # We pass translated arguments on purpose; LightningCLI warns when sys.argv also has some.
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
    try:
        cli = ClusterbenchCLI(
            pl.LightningModule, ClusterDataModule, subclass_mode_model=True,
            subclass_mode_data=True, args=translate_fit_args(args), run=False,
            seed_everything_default=0, auto_configure_optimizers=False,
            save_config_callback=SaveConfigAndEnvironment, save_config_kwargs={"overwrite": True},
            trainer_defaults={"max_epochs": 20,
                              "logger": lazy_instance(CSVLogger, save_dir="results/fit")},
            parser_kwargs={"prog": "clusterbench fit",
                           "description": "Train one method on one dataset (LightningCLI). "
                           "Methods: see `clusterbench list`; e.g. --model simclr --data digits."})
    except ValueError as err:  # jsonargparse passes on a constructor's ValueError: a bad value
        raise ConfigError(constructor_errors(err)) from err
    if not getattr(cli.model, "requires_training", True):
        raise ConfigError(f"{type(cli.model).__name__} is an untrained baseline: nothing to fit "
                          "(use it in a suite: clusterbench bench)")
    try:
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    except Diverged as err:
        print(f"clusterbench: error: {type(cli.model).__name__} {err}", file=sys.stderr)
        return 1
    return 0


# -- bench, leaderboard, list ------------------------------------------------------------------
def print_leaderboard(results_dir: Path) -> None:
    print((results_dir / "leaderboard.md").read_text())
    print(f"\nLeaderboard: {results_dir}/leaderboard.{{md,csv,html}}; per-run results and "
          f"configs: {results_dir}/runs/")


def run_options(ns: argparse.Namespace):
    """The run options and the placement of ``bench`` (and ``evaluate``'s logger)."""
    from benchmarks.run import RunOptions
    from benchmarks.run.wandb_runs import WandbSettings
    from benchmarks.suites.runner import Placement

    if ns.checkpoint_every < 1:
        raise ConfigError(f"--checkpoint-every must be at least 1 epoch, got "
                          f"{ns.checkpoint_every}")
    if ns.devices is not None and ns.devices < 1:
        raise ConfigError(f"--devices must be at least 1, got {ns.devices}")
    options = RunOptions(logger=ns.logger, accelerator=ns.accelerator, devices=ns.devices,
                         progress=not ns.no_progress, checkpoint_every=ns.checkpoint_every,
                         fast_gpu=not ns.no_fast_gpu, compile=not ns.no_compile,
                         rerun=ns.rerun,
                         wandb=WandbSettings(project=ns.wandb_project, entity=ns.wandb_entity,
                                             tags=tuple(ns.wandb_tags or ())))
    placement = Placement(address=ns.address, parallel=ns.parallel,
                          gpus_per_run=ns.gpus_per_run, cpus_per_run=ns.cpus_per_run,
                          max_retries=ns.max_retries)
    placement.check()
    return options, placement


def bench_main(ns: argparse.Namespace) -> int:
    from benchmarks.suites.config import load_suite, suite_kind
    from benchmarks.suites.runner import check_values, run_suite, searched_runs

    if suite_kind(ns.suite) == "experiment":
        from benchmarks.experiments import EXPERIMENTS
        from benchmarks.suites.config import load_experiment_suite
        from benchmarks.suites.experiment import run_experiment_suite

        ignored = [flag for flag, given in (
            ("--runs", ns.runs), ("--logger wandb", ns.logger != "csv"),
            ("--accelerator", ns.accelerator), ("--address", ns.address),
            ("--parallel", ns.parallel != 1), ("--devices", ns.devices),
            ("--gpus-per-run", ns.gpus_per_run), ("--rerun", ns.rerun)) if given]
        if ignored:
            raise ConfigError(f"{ns.suite} is an experiment suite (kind: experiment): it has no "
                              f"runs to pick, log or place, so {', '.join(ignored)} would do "
                              "nothing; accepted: --results and --fast")

        results_dir = run_experiment_suite(
            load_experiment_suite(ns.suite, EXPERIMENTS, fast=ns.fast), ns.results)
        print((results_dir / "leaderboard.md").read_text())
        print(f"\nReport: {results_dir}/leaderboard.{{md,csv,html}}; figures: "
              f"{results_dir}/figures/")
        return 0
    options, placement = run_options(ns)
    suite = load_suite(ns.suite, fast=ns.fast)
    if ns.runs:
        for name in ns.runs:
            suite.run(name)
    # a bad value is bad input too, and a global batch the devices cannot share: refused
    # before anything trains
    devices = placement.devices(placement.gpus_per_run or 0) if placement.uses_ray else None
    gpus = placement.uses_ray and bool(placement.gpus_per_run)  # Ray tasks holding GPUs use them
    # a Ray cluster's runs train on its nodes, not necessarily on a machine like this one
    check_values(suite, ns.runs, replace(options, devices=devices or options.devices,
                                         accelerator="gpu" if gpus else options.accelerator),
                 here=placement.address is None)
    if not ns.no_search:  # a bad search space is bad input: say so before anything trains
        from tune.search import search_space

        for run in searched_runs(suite, ns.runs):
            search_space(suite.settings, suite.search, run)
    results_dir, failed, missing_data = run_suite(
        suite, ns.results, options=options, placement=placement, only=ns.runs,
        search=not ns.no_search)
    if (results_dir / "leaderboard.md").exists():
        print_leaderboard(results_dir)
    if failed:
        print(f"clusterbench: {len(failed)} run(s) failed: {', '.join(sorted(failed))}",
              file=sys.stderr)
        return 1
    if missing_data:
        print(f"clusterbench: {len(missing_data)} run(s) had no data: {', '.join(missing_data)}",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def evaluate_main(ns: argparse.Namespace) -> int:
    from benchmarks.suites.config import load_suite
    from benchmarks.suites.trained import evaluate_trained

    suite = load_suite(ns.suite, fast=ns.fast)
    directory, result = evaluate_trained(Path(ns.path), suite, ns.results, name=ns.name,
                                         accelerator=ns.accelerator)
    shown = ", ".join(f"{k} {v:.4f}" for k, v in result["metrics"].items())
    print(f"{result['run']} seed {result['seed']}: {shown}")
    print(f"Result: {directory}/result.json")
    print_leaderboard(directory.parent.parent.parent)
    return 0


def leaderboard_main(ns: argparse.Namespace) -> int:
    from benchmarks.suites.leaderboard import write_leaderboard

    directory = Path(ns.results_dir)
    if not directory.is_dir():
        raise ConfigError(f"results directory {str(directory)!r} does not exist")
    from benchmarks.infra.locking import folder_lock

    with folder_lock(directory):
        if not write_leaderboard(directory):
            raise ConfigError(f"no result.json files under {str(directory)!r}: run a suite "
                              "first (clusterbench bench SUITE --results DIR)")
    print_leaderboard(directory)
    return 0


# -- report ------------------------------------------------------------------------------------
def report_main(ns: argparse.Namespace) -> int:
    from benchmarks.suites.report import write_report

    path = write_report(ns.results_dir, ns.out, note=ns.note)
    print(f"Wrote {path}")
    return 0


def add_report_parser(sub) -> None:
    report = sub.add_parser("report", help="write docs/results/<suite>.md (the leaderboard "
                            "tables, commit, machine, versions, seeds and budget) from a suite's "
                            "results directory")
    report.add_argument("results_dir", help="a suite's results directory, e.g. results/smoke")
    report.add_argument("--out", default="docs/results",
                        help="folder of the page (default: docs/results)")
    report.add_argument("--note", help="one line the page shows beside the facts read from the "
                        "results, e.g. that the machine was shared with other jobs")


def list_main(ns: argparse.Namespace) -> int:
    import yaml

    from benchmarks.experiments import EXPERIMENTS
    from benchmarks.suites.config import suites
    from datamodules import DATAMODULES
    from modules.methods import METHODS

    print("Methods (--model NAME):")
    for name, cls in METHODS.items():
        print(f"  {name:<14} {_first_doc_line(cls)}")
    print("Datamodules (--data NAME):")
    for name, cls in DATAMODULES.items():
        print(f"  {name:<14} [{cls.provenance}] {cls.source}")
    print("Experiments (experiment: NAME in a kind: experiment suite):")
    for name, function in EXPERIMENTS.items():
        print(f"  {name:<14} {_first_doc_line(function)}")
    print("Suites (clusterbench bench NAME):")
    for name, path in suites().items():
        description = (yaml.safe_load(path.read_text()) or {}).get("description", "")
        print(f"  {name:<14} {description}")
    return 0


def tune_main(ns: argparse.Namespace) -> int:
    from benchmarks.suites.config import load_suite
    from benchmarks.suites.runner import tune_suite_run

    tune_suite_run(load_suite(ns.suite, fast=ns.fast), ns.run, num_samples=ns.num_samples,
                   max_epochs=ns.max_epochs, grace_period=ns.grace_period,
                   reduction_factor=ns.reduction_factor, metric=ns.metric, mode=ns.mode,
                   cpus_per_trial=ns.cpus_per_trial, gpus_per_trial=ns.gpus_per_trial,
                   storage=ns.storage, address=ns.address, seed=ns.seed,
                   max_concurrent=ns.max_concurrent, resume=ns.resume, wandb=ns.wandb,
                   workers_per_trial=ns.workers_per_trial)
    return 0


def add_wandb_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wandb-project", default="clusterbench",
                        help="W&B project with --logger wandb (default: clusterbench)")
    parser.add_argument("--wandb-entity", help="W&B entity (team or user; default: yours)")
    parser.add_argument("--wandb-tags", nargs="+", metavar="TAG", help="tags of every W&B run")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="clusterbench",
        description="Benchmark suite for clustering-aware representation learning.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("fit", add_help=False,
                   help="train one method on one dataset (LightningCLI: --model NAME --data NAME "
                   "--trainer.* -c config.yaml; `clusterbench fit --help` for all options)")

    bench = sub.add_parser("bench", help="run a suite and print its leaderboard")
    bench.add_argument("suite", nargs="?", default="smoke",
                       help="suite name (a YAML file in benchmarks/) or path; default: smoke")
    bench.add_argument("--results", default="results",
                       help="results root; the suite writes to RESULTS/<suite> (default: results)")
    bench.add_argument("--fast", action="store_true",
                       help="the suite's tiny budget (one seed, a few batches) to check the "
                       "plumbing; written to RESULTS/<suite>-fast")
    bench.add_argument("--runs", nargs="+", metavar="RUN", help="only these runs of the suite")
    bench.add_argument("--logger", default="csv", choices=["csv", "wandb"],
                       help="csv (default) or wandb (offline when this machine has no W&B login)")
    bench.add_argument("--accelerator",
                       help="Lightning accelerator (cpu, gpu, auto), overriding the suite's")
    bench.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    bench.add_argument("--no-fast-gpu", action="store_true",
                       help="on a GPU, train with the suite's settings only: no bf16 default, "
                       "channels-last, cuDNN autotuning, TF32 or torch.compile")
    bench.add_argument("--no-compile", action="store_true",
                       help="on a GPU, no torch.compile of the backbone and projector")
    bench.add_argument("--no-search", action="store_true",
                       help="skip the suite's search section (no Ray Tune search, no +tuned rows)")
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
    bench.add_argument("--devices", type=int,
                       help="devices per run in this process (default: the suite's, else 1); "
                       "data.batch_size stays the global batch, split over them")
    bench.add_argument("--checkpoint-every", type=int, default=1, metavar="EPOCHS",
                       help="write each run's last.ckpt every EPOCHS epochs (default 1; also at "
                       "the end and on SIGTERM)")
    bench.add_argument("--rerun", action="store_true",
                       help="retrain runs whose result already holds the same configuration "
                       "(default: skip them, resume unfinished ones from their checkpoint)")
    add_wandb_arguments(bench)

    evaluate = sub.add_parser(
        "evaluate", help="score a trained run (a bench run folder or a `clusterbench fit` "
        "checkpoint) with a suite's protocols; the result joins the suite's leaderboard")
    evaluate.add_argument("path", help="a bench run's seed folder (runs/<run>/seed-<k>, with "
                          "encoder.pt) or a fit checkpoint (.ckpt)")
    evaluate.add_argument("--suite", required=True, help="the suite whose protocols score it")
    evaluate.add_argument("--results", default="results", help="results root (default: results)")
    evaluate.add_argument("--name", help="its row on the leaderboard (default: the run's name "
                          "+ '@evaluated', or the fit's model and version)")
    evaluate.add_argument("--fast", action="store_true", help="the suite's --fast settings")
    evaluate.add_argument("--accelerator", help="cpu, gpu or auto (default: auto)")

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
                      "above 1 runs the trial as Lightning DDP over that many GPUs (Ray Train)")
    tune.add_argument("--workers-per-trial", type=int, help="DDP workers per trial (Ray Train "
                      "TorchTrainer; default: --gpus-per-trial when above 1, else 1)")
    tune.add_argument("--storage", help="this search's directory (default: "
                      "results/tune/<suite>/<run>)")
    tune.add_argument("--address", help="an existing Ray cluster (auto or ray://host:port); "
                      "default: a local Ray instance")
    tune.add_argument("--max-concurrent", type=int, help="trials running at once (default: as "
                      "many as the resources allow)")
    tune.add_argument("--resume", action="store_true",
                      help="continue an interrupted search from its storage directory")
    tune.add_argument("--wandb", action="store_true", help="log every trial to W&B, grouped by "
                      "search (offline without a login); nothing touches W&B without it")
    tune.add_argument("--fast", action="store_true", help="the suite's tiny budget")
    tune.add_argument("--seed", type=int, default=0, help="seed of the search and the trials")

    leaderboard = sub.add_parser("leaderboard",
                                 help="rebuild the leaderboard files from per-run results")
    leaderboard.add_argument("results_dir", help="a suite's results directory, e.g. results/smoke")

    sub.add_parser("list", help="registered methods, datamodules, experiments and suites")
    add_report_parser(sub)
    return parser


def disk_full(err: OSError) -> str:
    """A full disk met outside our own writes (Lightning's, torch's): the same one line."""
    return str(DiskFull(err.filename or "a result file"))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "fit":
            return fit_main(argv[1:])
        ns = build_parser().parse_args(argv)
        handlers = {"bench": bench_main, "evaluate": evaluate_main, "tune": tune_main,
                    "leaderboard": leaderboard_main, "list": list_main, "report": report_main}
        return handlers[ns.command](ns)
    except (ConfigError, FileNotFoundError, FolderBusy) as err:
        print(f"clusterbench: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as err:
        if not is_disk_full(err):
            raise
        print(f"clusterbench: error: {err if isinstance(err, DiskFull) else disk_full(err)}",
              file=sys.stderr)
        return 1
    except Preempted as err:  # SIGTERM: the run's checkpoint is saved
        print(f"clusterbench: preempted: {err}", file=sys.stderr)
        return EXIT_PREEMPTED
    except KeyboardInterrupt as err:  # Ctrl-C; a search says how to resume it
        print(f"clusterbench: interrupted{': ' + str(err) if str(err) else ''}", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
