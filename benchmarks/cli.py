"""``clusterbench``: fit, bench, tune, leaderboard and list.

Bad input (an unknown name, a misspelled key, a bad value, missing data) prints one clear line
and exits with status 2; a suite whose runs crashed exits with status 1.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from benchmarks.infra.atomic import DiskFull, is_disk_full
from benchmarks.infra.locking import FolderBusy
from benchmarks.infra.tensor_files import BadFile
from benchmarks.run.divergence import Diverged
from benchmarks.run.spec import Preempted
from benchmarks.suites.config import ConfigError, suggest

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # as a shell reports a process stopped by SIGINT
EXIT_PREEMPTED = 143  # as a shell reports a process stopped by SIGTERM


# -- the console -------------------------------------------------------------------------------
#: Where Lightning says what is not about the run: the accelerators it did not use ("GPU
#: available: False, used: False"), "Seed set to 0", the "Tip:" advertisements for its cloud
#: services, the batches a limit leaves, the device's environment variables.
LIGHTNING_CHATTER = ("lightning.pytorch.utilities.rank_zero",
                     "lightning.fabric.utilities.rank_zero", "lightning.fabric.utilities.seed",
                     "lightning.pytorch.accelerators.cuda")
#: What ``fit``, ``validate`` and ``test`` keep of it: which checkpoint they read, and the
#: advice to use a GPU's tensor cores (our runs on a GPU set TF32 themselves; a fit does not).
FIT_KEEPS = (r"^Restoring states from", r"^Loaded model weights from",
             r"^You are using a CUDA device")
#: Warnings about Lightning's own bookkeeping, said on every resume into a new log directory.
FIT_IGNORED_WARNINGS = (r"The dirpath has changed from",)


class Chatter(logging.Filter):
    """Drops Lightning's information lines (not its warnings) unless one of ``keep`` matches."""

    def __init__(self, keep: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.keep = [re.compile(pattern) for pattern in keep]

    def filter(self, record: logging.LogRecord) -> bool:
        return (record.levelno >= logging.WARNING
                or any(p.search(record.getMessage()) for p in self.keep))


@contextmanager
def quiet_lightning(keep: tuple[str, ...] = (), ignore: tuple[str, ...] = ()
                    ) -> Iterator[None]:
    """Lightning's boilerplate off the console for the command (:data:`LIGHTNING_CHATTER`,
    but the lines matching ``keep``), the deprecation notes of the libraries under it, which a
    user cannot act on, and the warnings matching ``ignore``; warnings about the run itself (a
    logging interval longer than an epoch, say) still show."""
    chatter = Chatter(keep)
    loggers = [logging.getLogger(name) for name in LIGHTNING_CHATTER]
    for logger in loggers:
        logger.addFilter(chatter)
    try:
        with warnings.catch_warnings():
            for category in (DeprecationWarning, FutureWarning):
                warnings.filterwarnings("ignore", category=category)
            for message in ignore:
                warnings.filterwarnings("ignore", message=message)
            yield
    finally:
        for logger in loggers:
            logger.removeFilter(chatter)


#: Words whose full stop ends no sentence (``Fig. 5``, ``Tan et al. (arXiv...)``, ``app. C``).
ABBREVIATIONS = {"al", "app", "cf", "ch", "e.g", "eq", "eqs", "fig", "figs", "fn", "i.e", "no",
                 "prop", "ref", "refs", "sec", "tab", "thm", "vs"}


def first_sentence(text: str | None) -> str:
    """The first sentence of a docstring or a description, on one line, without reST markup:
    up to the first full stop followed by a capital or by the end (not one inside
    ``modules.methods``, ``e.g. x`` or ``Fig. 5``). A first paragraph that runs on into a
    formula (``..., eq. 3:`` and a ``.. math::`` block after it) gives its opening clause, up
    to its first colon; the result always ends with a full stop.

    >>> first_sentence("SimCLR (arXiv:2002.05709) with NT-Xent,\\nor a kernel. Details.")
    'SimCLR (arXiv:2002.05709) with NT-Xent, or a kernel.'
    >>> first_sentence("TVAE, eq. 4-6: shared and specific parts, trained on\\n\\n.. math:: x")
    'TVAE, eq. 4-6.'
    >>> first_sentence("Tan et al. (arXiv:2303.15103) app. C spectral clustering")
    'Tan et al. (arXiv:2303.15103) app. C spectral clustering.'
    """
    paragraphs = (text or "").strip().split("\n\n")
    paragraph = " ".join(paragraphs[0].split())
    paragraph = re.sub(r":math:`([^`]*)`|``([^`]*)``", lambda m: m[1] or m[2], paragraph)
    for end in re.finditer(r"[.!?](?=\s+[A-Z]|$)", paragraph):
        word = re.search(r"(\S*)$", paragraph[:end.start()])[1].lower()
        if end.group() != "." or word not in ABBREVIATIONS:
            return paragraph[:end.end()]
    if len(paragraphs) > 1:  # the sentence goes on in a formula or a list
        paragraph = paragraph.split(": ")[0]
    paragraph = paragraph.rstrip(":,; ")
    return paragraph + "." if paragraph else ""


# -- fit, validate, test --------------------------------------------------------------------
#: LightningCLI's subcommands; ``--ckpt_path`` resumes a fit, or picks the weights to score.
LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test")
#: The flags whose value names a registered class: ``--model simclr``, ``--model.help simclr``.
CLASS_FLAGS = {"--model": "model", "--model.help": "model", "--data": "data",
               "--data.help": "data"}


def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _registry(section: str) -> tuple[dict[str, type], str, str]:
    """The registry behind ``--model`` or ``--data``, what it holds and its package."""
    from datamodules import DATAMODULES
    from modules.methods import METHODS

    if section == "model":
        return METHODS, "method", "modules"
    return DATAMODULES, "dataset", "datamodules"


def class_path(section: str, value: str) -> str:
    """A registered name, or a class path, as the class path LightningCLI imports. A path from
    before the methods moved into ``modules.methods`` (``modules.simclr.SimCLR``) is the
    registered class of that name; any other dotted path is left for LightningCLI to import (and
    refuse, if it names no LightningModule or ClusterDataModule).

    >>> class_path("model", "simclr"), class_path("model", "modules.simclr.SimCLR")
    ('modules.methods.simclr.SimCLR', 'modules.methods.simclr.SimCLR')
    """
    import importlib

    registry, what, package = _registry(section)
    if value in registry:
        return _class_path(registry[value])
    if "." not in value:
        raise ConfigError(f"unknown {what} {value!r}{suggest(value, set(registry))}")
    module = value.rpartition(".")[0]
    if module.split(".")[0] == package:
        try:
            importlib.import_module(module)
        except ImportError:  # a path from an earlier layout: the registered class of that name
            from benchmarks.suites.trained import moved_class

            if (moved := moved_class(registry, value)) is not None:
                return _class_path(moved)
            raise ConfigError(f"unknown {what} class {value!r}; accepted: a registered name "
                              f"({', '.join(sorted(registry))}) or its class path") from None
    return value


def fit_config(path: str) -> str:
    """A ``-c`` file as LightningCLI reads it: a ``clusterbench fit`` config, with registered
    names and earlier class paths translated (:func:`class_path`), or a search's
    ``best_config.yaml`` (``method``, ``model``, ``data`` with the dataset's ``name``,
    ``trainer``) turned into one. Returns ``path`` itself when nothing needed translating, else
    the translated config as a YAML string (which LightningCLI's ``--config`` takes too)."""
    import yaml

    try:
        raw = yaml.safe_load(Path(path).read_text())
    except OSError as err:
        raise ConfigError(f"config file {path!r} cannot be read: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path!r} is not valid YAML: {err}") from err
    if not isinstance(raw, dict):
        return path  # LightningCLI says what is wrong with it
    config = dict(raw)
    if "method" in raw and isinstance(raw.get("data"), dict):  # a search's best_config.yaml
        data = dict(raw["data"])
        if "name" not in data:
            raise ConfigError(f"{path}: data has no dataset name (data.name)")
        config = {"model": {"class_path": raw["method"], "init_args": raw.get("model") or {}},
                  "data": {"class_path": data.pop("name"), "init_args": data},
                  "trainer": raw.get("trainer") or {}}
    for section in ("model", "data"):
        value = config.get(section)
        if isinstance(value, str):
            config[section] = class_path(section, value)
        elif isinstance(value, dict) and isinstance(value.get("class_path"), str):
            config[section] = {**value, "class_path": class_path(section, value["class_path"])}
    return path if config == raw else yaml.safe_dump(config, sort_keys=False)


def translate_fit_args(args: list[str]) -> list[str]:
    """Registry names to class paths (``--model simclr`` ->
    ``--model modules.methods.simclr.SimCLR``, ``--model.help simclr`` too), earlier class
    paths to today's, a search's ``best_config.yaml`` given to ``-c`` to a fit config
    (:func:`fit_config`), and ``--logger wandb|csv`` to the Trainer's logger. Unknown names
    raise a ConfigError."""
    out, i = [], 0
    while i < len(args):
        arg = args[i]
        flag, eq, value = arg.partition("=")
        if flag in (*CLASS_FLAGS, "--logger", "-c", "--config"):
            if not eq:
                if i + 1 >= len(args):
                    raise ConfigError(f"{flag} needs a value")
                value, i = args[i + 1], i + 1
            if flag == "--logger":
                out += logger_args(value)
            elif flag in ("-c", "--config"):
                out += [flag, fit_config(value)]
            else:
                out += [flag, class_path(CLASS_FLAGS[flag], value)]
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


#: The options of ``clusterbench fit`` besides ``--model.*``, ``--data.*`` and ``--trainer.*``.
FIT_OPTIONS = ("--config", "--print_config", "--seed_everything", "--model", "--data",
               "--trainer", "--ckpt_path", "--logger", "--help")


def accepted_keys(section: str, path: str | None) -> set[str]:
    """The keys ``--<section>.KEY`` takes: the arguments of the Trainer or of the class at
    ``path`` (none known when it cannot be imported)."""
    import importlib

    from benchmarks.run.spec import RUNNER_DATA_KEYS, RUNNER_MODEL_KEYS, init_parameters

    if section == "trainer":
        import lightning.pytorch as pl

        return init_parameters(pl.Trainer, set())
    module, _, name = (path or "").rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return set()
    return init_parameters(cls, RUNNER_MODEL_KEYS if section == "model" else RUNNER_DATA_KEYS)


def argument_error(message: str) -> str:
    """jsonargparse's report of a bad command line or config (tens of lines, with the usage) as
    the one line that matters: an unknown key with the closest accepted one, or the key and
    what its value must be.

    >>> argument_error("unrecognized arguments: --ckpt_pth x.ckpt")
    "unknown option '--ckpt_pth' (did you mean '--ckpt_path'?); see clusterbench fit --help"
    """
    unknown = re.search(r'Parser key "(model|data)".*?class_path \'([\w.]+)\'.*?'
                        r"Option \'(\w+)\' is not accepted", message, re.S)
    if unknown:
        section, path, key = unknown.groups()
        cls = path.rpartition(".")[2]
        return (f"unknown key {key!r} in --{section}.* ({cls})"
                f"{suggest(key, accepted_keys(section, path))}")
    # on the command line, or in a config file
    extra = re.search(r"[Uu]nrecognized arguments: (\S+)|does not accept option '([^']+)'",
                      message)
    if extra:
        flag = "--" + (extra[1] or extra[2]).partition("=")[0].removeprefix("--")
        section, dot, key = flag.removeprefix("--").partition(".")
        if dot and section == "trainer":
            return (f"unknown key {key!r} in --trainer.*"
                    f"{suggest(key, accepted_keys('trainer', None))}")
        close = suggest(flag, FIT_OPTIONS).split(";")[0]
        return f"unknown option {flag!r}{close}; see clusterbench fit --help"
    message = re.sub(r"<class '(?:[\w]+\.)*(\w+)'>", r"\1", message)  # <class 'int'>: int
    message = re.sub(r"Expected an? ", "expected ", message)
    keys = re.findall(r'Parser key "([^"]+)"', message)
    reasons = [line.strip(" -") for line in message.splitlines()
               if re.match(r"\s+(- )?(expected|Got|Not a|Value|Does not|Import path|Type )", line)
               and "NoneType" not in line and "Union subtypes" not in line]
    if keys:
        given = re.search(r"Given value: (.*)", message)
        key = ".".join(k for k in keys)
        return (f"--{key}: {'; '.join(reasons) or message.splitlines()[0]}"
                + (f" (given: {given.group(1)})" if given and "NestedArg" not in given.group(1)
                   else ""))
    return " ".join(message.split())


def lightning_main(subcommand: str, args: list[str]) -> int:
    """LightningCLI over every registered method and datamodule: ``fit`` (``--ckpt_path``
    resumes), ``validate`` and ``test``. The resolved config, the git commit and the package
    versions are saved in the run's log directory."""
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

        def instantiate_classes(self) -> None:
            try:
                super().instantiate_classes()
            except ConfigError:
                raise
            except ValueError as err:  # jsonargparse passes on a constructor's ValueError
                raise ConfigError(constructor_errors(err)) from err

        def instantiate_trainer(self, **kwargs):
            # Rich's progress bar unless bars are off or the user chose one.
            trainer = self.config_init[self.subcommand].get("trainer") or {}
            callbacks = list(trainer.get("callbacks") or [])
            if trainer.get("enable_progress_bar") is not False and not any(
                    isinstance(c, ProgressBar) for c in callbacks):
                callbacks = [*callbacks, StepProgressBar()]
            # a non-finite training loss stops the fit at once (exit 1), as in a suite
            kwargs["callbacks"] = [StopOnDivergence(), *callbacks]
            return super().instantiate_trainer(**kwargs)

        def before_fit(self) -> None:
            trained.append(type(self.model).__name__)
            if not getattr(self.model, "requires_training", True):
                raise ConfigError(f"{type(self.model).__name__} is an untrained baseline: nothing "
                                  "to fit (use it in a suite: clusterbench bench)")

        def before_validate(self) -> None:
            self.check_step("validation_step", "validate")

        def before_test(self) -> None:
            self.check_step("test_step", "test")

        def check_step(self, step: str, subcommand: str) -> None:
            """Lightning's own check, before any data is read, said in one line."""
            from lightning.pytorch.utilities.model_helpers import is_overridden

            if not is_overridden(step, self.model):
                raise ConfigError(
                    f"{type(self.model).__name__} has no {step}, so there is nothing to "
                    f"{subcommand}; its test-split scores are the evaluation protocols': "
                    "clusterbench evaluate CHECKPOINT --suite SUITE")

    description = {"fit": "Train one method on one dataset (LightningCLI); --ckpt_path resumes.",
                   "validate": "Score a method on the validation split (LightningCLI); "
                   "--ckpt_path picks the weights.",
                   "test": "Score a method on the test split (LightningCLI); --ckpt_path picks "
                   "the weights."}
    # A misspelled key is an error, never the key it abbreviates (argparse's default).
    parser_kwargs = {name: {"prog": f"clusterbench {name}", "exit_on_error": False,
                            "allow_abbrev": False,
                            "description": f"{description[name]} Methods and datasets: "
                            "`clusterbench list`; e.g. --model simclr --data digits."}
                     for name in LIGHTNING_SUBCOMMANDS}
    # We pass translated arguments on purpose; LightningCLI warns when sys.argv also has some.
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
    trained: list[str] = []  # the model being fitted, for the divergence message
    try:
        cli = ClusterbenchCLI(
            pl.LightningModule, ClusterDataModule, subclass_mode_model=True,
            subclass_mode_data=True, args=[subcommand, *translate_fit_args(args)],
            seed_everything_default=0, auto_configure_optimizers=False,
            save_config_callback=SaveConfigAndEnvironment, save_config_kwargs={"overwrite": True},
            trainer_defaults={"max_epochs": 20,
                              "logger": lazy_instance(CSVLogger, save_dir="results/fit")},
            parser_kwargs={"prog": "clusterbench", "exit_on_error": False, "allow_abbrev": False,
                           **parser_kwargs})
    except argparse.ArgumentError as err:
        raise ConfigError(argument_error(str(err))) from err
    except Diverged as err:
        print(f"clusterbench: error: {' '.join([*trained, str(err)])}", file=sys.stderr)
        return 1
    trainer = cli.trainer
    log_dir = trainer.log_dir or trainer.default_root_dir
    if subcommand == "fit":
        checkpoint = getattr(trainer.checkpoint_callback, "best_model_path", "") or "none"
        print(f"{type(cli.model).__name__} on {type(cli.datamodule).__name__}: trained to "
              f"epoch {trainer.current_epoch} (step {trainer.global_step}); config, metrics and "
              f"environment in {log_dir}; checkpoint: {checkpoint}")
    return 0


# -- bench, leaderboard, list ------------------------------------------------------------------
def markdown_cells(line: str) -> list[str]:
    r"""The cells of a Markdown table row (``\|`` is a bar inside a cell).

    >>> markdown_cells(r"| simclr | 99.1 ± 0.2 | a \| b |")
    ['simclr', '99.1 ± 0.2', 'a | b']
    """
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [cell.strip().replace("\\|", "|") for cell in cells]


def print_report(markdown: str) -> None:
    """A leaderboard's Markdown on the terminal: its headings in bold, its notes as text and
    its tables as rich tables (as wide as they need when the output is not a terminal, so that
    a log file keeps one row a line)."""
    from rich import box
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(markdown_cells(lines[i]))
                i += 1
            header, body = rows[0], [r for r in rows[1:] if not all(
                re.fullmatch(r":?-+:?", c) for c in r)]
            table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
            for column in header:
                table.add_column(Text(column, style="bold"))
            for row in body:
                table.add_row(*(Text(cell) for cell in row))
            if not console.is_terminal:
                wanted = Measurement.get(console, console.options.update_width(10_000), table)
                console.width = max(console.width, wanted.maximum)
            console.print(table)
            continue
        if line.startswith("#"):
            console.print(Text(line.lstrip("#").strip(), style="bold"))
        elif line.startswith("- "):
            console.print(Text("• " + line[2:]))
        else:
            console.print(Text(line))
        i += 1


def print_leaderboard(results_dir: Path) -> None:
    print_report((results_dir / "leaderboard.md").read_text())
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
    from benchmarks.suites.config import load_suite, override_suite, suite_kind
    from benchmarks.suites.runner import check_values, run_suite, searched_runs

    if suite_kind(ns.suite) == "experiment":
        from benchmarks.experiments import EXPERIMENTS
        from benchmarks.suites.config import load_experiment_suite
        from benchmarks.suites.experiment import run_experiment_suite

        ignored = [flag for flag, given in (
            ("--runs", ns.runs), ("--logger wandb", ns.logger != "csv"),
            ("--accelerator", ns.accelerator), ("--address", ns.address),
            ("--parallel", ns.parallel != 1), ("--devices", ns.devices),
            ("--gpus-per-run", ns.gpus_per_run), ("--rerun", ns.rerun), ("--set", ns.set),
            ("--seeds", ns.seeds)) if given]
        if ignored:
            raise ConfigError(f"{ns.suite} is an experiment suite (kind: experiment): it has no "
                              f"runs to pick, log or place, so {', '.join(ignored)} would do "
                              "nothing; accepted: --results and --fast")

        results_dir = run_experiment_suite(
            load_experiment_suite(ns.suite, EXPERIMENTS, fast=ns.fast), ns.results)
        print_report((results_dir / "leaderboard.md").read_text())
        print(f"\nReport: {results_dir}/leaderboard.{{md,csv,html}}; figures: "
              f"{results_dir}/figures/")
        return 0
    options, placement = run_options(ns)
    suite = load_suite(ns.suite, fast=ns.fast)
    if ns.runs:
        for name in ns.runs:
            suite.run(name)
    if ns.set or ns.seeds:
        suite = override_suite(suite, ns.set or [], ns.seeds, ns.runs)
    # a bad value is bad input too, and a global batch the devices cannot share: refused
    # before anything trains
    devices = placement.devices(placement.gpus_per_run or 0) if placement.uses_ray else None
    gpus = placement.uses_ray and bool(placement.gpus_per_run)  # Ray tasks holding GPUs use them
    # a Ray cluster's runs train on its nodes, not necessarily on a machine like this one
    try:
        check_values(suite, ns.runs, replace(options, devices=devices or options.devices,
                                             accelerator="gpu" if gpus else options.accelerator),
                     here=placement.address is None)
    except ConfigError as err:
        if not suite.overrides:
            raise
        raise ConfigError(f"{err} (with --set {' --set '.join(ns.set)})") from err
    if not ns.no_search:  # a bad search space is bad input: say so before anything trains
        from tune.memory import check_trial_memory
        from tune.search import search_space

        for run in searched_runs(suite, ns.runs):
            search_space(suite.settings, suite.search, run)
            # and a trial that cannot fit its share of a GPU
            check_trial_memory(run, suite.search, suite.search.workers_per_trial)
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


def print_entries(title: str, entries: dict[str, str], width: int) -> None:
    """``title``, then one entry a line: the name, and its description wrapped beside it."""
    import textwrap

    print(title)
    column = max(map(len, entries)) + 4
    for name, description in entries.items():
        print(textwrap.fill(description, width=max(width, column + 30),
                            initial_indent=f"  {name:<{column - 2}}",
                            subsequent_indent=" " * column, break_on_hyphens=False))


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
    import shutil

    import yaml

    from benchmarks.experiments import EXPERIMENTS
    from benchmarks.suites.config import suites
    from datamodules import DATAMODULES
    from modules.methods import METHODS

    width = shutil.get_terminal_size((100, 24)).columns
    print_entries("Methods (--model NAME):",
                  {name: first_sentence(cls.__doc__) for name, cls in METHODS.items()}, width)
    print_entries("Datamodules (--data NAME):",
                  {name: f"[{cls.provenance}] {first_sentence(cls.source)}"
                   for name, cls in DATAMODULES.items()}, width)
    print_entries("Experiments (experiment: NAME in a kind: experiment suite):",
                  {name: first_sentence(function.__doc__)
                   for name, function in EXPERIMENTS.items()}, width)
    print_entries("Suites (clusterbench bench NAME):",
                  {name: first_sentence((yaml.safe_load(path.read_text()) or {})
                                        .get("description", ""))
                   for name, path in suites().items()}, width)
    return 0


def data_main(ns: argparse.Namespace) -> int:
    """``clusterbench data``: where each dataset goes and whether it is there; ``verify`` runs
    every check its datamodule makes (offline); ``fetch`` downloads and then verifies."""
    from datamodules import DATAMODULES
    from datamodules.base import default_data_dir
    from datamodules.catalog import CATALOG, fetch, present, verify

    if ns.action == "fetch":
        if not ns.names or ns.to is None:
            raise ConfigError("data fetch needs dataset names and --to DIR; accepted names: "
                              + ", ".join(CATALOG))
        root, names = Path(ns.to), ns.names
    else:
        if len(ns.names) > 1:
            raise ConfigError(f"data {ns.action} takes one data root, got {' '.join(ns.names)}")
        root, names = Path(ns.names[0]) if ns.names else default_data_dir(), list(CATALOG)
    unknown = [n for n in names if n not in CATALOG]
    if unknown:
        raise ConfigError(f"unknown dataset {unknown[0]!r}; accepted: {', '.join(CATALOG)}")
    if ns.action == "fetch":
        for name in names:
            print(f"{name}: downloading into {root / CATALOG[name].folder} ...", flush=True)
            try:
                fetch(root, name)
            except OSError as err:  # no network, refused, interrupted
                raise ConfigError(f"{name}: the download failed ({' '.join(str(err).split())})"
                                  ) from err
    print(f"data root: {root}" + ("" if ns.names or ns.action == "fetch"
                                  else " ($CLUSTERBENCH_DATA, else ~/.cache/clusterbench)"))
    print("| dataset | folder | download | status |\n|---|---|---|---|")
    failed = []
    for name in names:
        entry, here = CATALOG[name], present(root, name)
        status = "present" if here else f"absent (from {entry.url})"
        system = [f for f in getattr(DATAMODULES[name], "system_folders", ()) if Path(f).is_dir()]
        if not here and system:
            status = f"absent here; runs read the system package's {system[0]}"
        if ns.action in ("verify", "fetch") and here:
            problem = verify(root, name)
            status = "verified" if problem is None else f"FAILED: {problem}"
            failed += [name] if problem else []
        print(f"| {name} | {entry.folder} | {entry.download} | {status} |")
    if failed:
        print(f"clusterbench: error: {', '.join(failed)} failed verification (above)",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def tune_main(ns: argparse.Namespace) -> int:
    from benchmarks.run.local_ray import check_ray_address
    from benchmarks.suites.config import load_suite
    from benchmarks.suites.runner import tune_suite_run

    if ns.address is not None:
        check_ray_address(ns.address)
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
                   "--trainer.* -c config.yaml, --ckpt_path to resume; `clusterbench fit --help` "
                   "for all options)")
    sub.add_parser("validate", add_help=False,
                   help="score a method on the validation split (LightningCLI, as fit; "
                   "--ckpt_path picks the weights)")
    sub.add_parser("test", add_help=False,
                   help="score a method on the test split (LightningCLI, as fit; --ckpt_path "
                   "picks the weights)")

    bench = sub.add_parser("bench", help="run a suite and print its leaderboard")
    bench.add_argument("suite", nargs="?", default="smoke",
                       help="suite name (a YAML file in benchmarks/) or path; default: smoke")
    bench.add_argument("--results", default="results",
                       help="results root; the suite writes to RESULTS/<suite> (default: results)")
    bench.add_argument("--fast", action="store_true",
                       help="the suite's tiny budget (one seed, a few batches) to check the "
                       "plumbing; written to RESULTS/<suite>-fast")
    bench.add_argument("--runs", nargs="+", metavar="RUN", help="only these runs of the suite")
    bench.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="a setting for every run, over the suite's: data.ARG, trainer.ARG, "
                       "model.ARG (the runs whose method takes it) or evaluation.PROTOCOL.ARG; "
                       "VALUE is YAML (3, 1e-3, true, [10, 20]); repeatable. Results go to "
                       "RESULTS/<suite>+<settings>, never over the suite's own")
    bench.add_argument("--seeds", nargs="+", type=int, metavar="SEED",
                       help="these seeds instead of the suite's (finished seeds are reused)")
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
    data = sub.add_parser(
        "data", help="the datasets: where each goes, whether it is there and verified, and "
        "fetching them on a machine with a network (for nodes without one)")
    data.add_argument("action", nargs="?", choices=("list", "verify", "fetch"), default="list",
                      help="list (default): folders, sizes and presence under the data root; "
                      "verify [DIR]: every check a run makes, offline; fetch NAME... --to DIR: "
                      "download, then verify")
    data.add_argument("names", nargs="*", metavar="DIR|NAME",
                      help="list/verify: the data root (default $CLUSTERBENCH_DATA, else "
                      "~/.cache/clusterbench); fetch: the datasets")
    data.add_argument("--to", default=None, help="fetch: the data root to download into")
    add_report_parser(sub)
    return parser


def disk_full(err: OSError) -> str:
    """A full disk met outside our own writes (Lightning's, torch's): the same one line."""
    return str(DiskFull(err.filename or "a result file"))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in LIGHTNING_SUBCOMMANDS:
            with quiet_lightning(keep=FIT_KEEPS, ignore=FIT_IGNORED_WARNINGS):
                return lightning_main(argv[0], argv[1:])
        ns = build_parser().parse_args(argv)
        handlers = {"bench": bench_main, "evaluate": evaluate_main, "tune": tune_main,
                    "leaderboard": leaderboard_main, "list": list_main, "report": report_main,
                    "data": data_main}
        with quiet_lightning():
            return handlers[ns.command](ns)
    except (ConfigError, BadFile, FileNotFoundError, FolderBusy) as err:
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
