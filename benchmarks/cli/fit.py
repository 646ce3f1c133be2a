"""``clusterbench fit``, ``validate`` and ``test``: LightningCLI over every registered method
and datamodule, with registered names for class paths and every error in one line."""

from __future__ import annotations

import argparse
import functools
import io
import json
import operator
import re
import sys
import types
import typing
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from jsonargparse import lazy_instance
from lightning.pytorch.callbacks import ProgressBar
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.model_helpers import is_overridden

from benchmarks.cli.config_file import (
    best_config_as_fit_config,
    checked_fit_config,
    class_path,
    registered_class_path,
)
from benchmarks.cli.console import quiet_lightning
from benchmarks.cli.fit_files import checked_ckpt_path, remove_unused_log_folder, stopped_fit
from benchmarks.infra.atomic import write_atomic
from benchmarks.infra.environment import environment
from benchmarks.infra.errors import ConfigError, Preempted, suggest
from benchmarks.infra.tensor_files import BadFile
from benchmarks.run.divergence import Diverged
from benchmarks.run.stop import CheckpointOnStop
from datamodules import ClusterDataModule
from modules.ranges import check_settings

#: What ``fit``, ``validate`` and ``test`` keep of it: which checkpoint they read, and the
#: advice to use a GPU's tensor cores (our runs on a GPU set TF32 themselves; a fit does not).
FIT_KEEPS = (r"^Restoring states from", r"^Loaded model weights from",
             r"^You are using a CUDA device")
#: Warnings about Lightning's own bookkeeping, said on every resume into a new log directory.
FIT_IGNORED_WARNINGS = (r"The dirpath has changed from",)

#: The flags whose value names a registered class: ``--model simclr``, ``--model.help simclr``.
CLASS_FLAGS = {"--model": "model", "--model.help": "model", "--data": "data",
               "--data.help": "data"}


def fit_config(path: str) -> str:
    """A ``-c`` file as LightningCLI reads it: a fit config with names translated
    (:func:`class_path`), or a search's ``best_config.yaml`` turned into one, judged by its
    content (:func:`checked_fit_config`); returned as the checked YAML string."""
    import yaml

    from benchmarks.infra.yaml_files import read_yaml

    # bounded before LightningCLI reads it: a copied best_config.yaml may be a YAML bomb
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        return path  # LightningCLI says what is wrong with it
    config = dict(raw)
    if "method" in raw and isinstance(raw.get("data"), dict):  # a search's best_config.yaml
        config = best_config_as_fit_config(raw, path)
    config = checked_fit_config(config, path)
    for section in ("model", "data"):
        value = config.get(section)
        if isinstance(value, str):
            config[section] = registered_class_path(section, value, path)
        elif isinstance(value, dict) and "class_path" in value:
            config[section] = {**value, "class_path": registered_class_path(
                section, value["class_path"], path)}
    # the checked content, never the file again (it may have changed since it was read)
    return yaml.safe_dump(config, sort_keys=False)


def translate_fit_args(args: list[str]) -> list[str]:
    """The command line with registry names and legacy paths as class paths (:func:`class_path`),
    a ``best_config.yaml`` given to ``-c`` as a fit config, and ``--logger wandb|csv`` as the
    Trainer's logger; unknown names raise a ConfigError."""
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
    from benchmarks.run.curves import LOGGERS
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
        return init_parameters(pl.Trainer, set())
    module, _, name = (path or "").rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return set()
    return init_parameters(cls, RUNNER_MODEL_KEYS if section == "model" else RUNNER_DATA_KEYS)


def argument_error(message: str) -> str:
    """jsonargparse's report of a bad command line (tens of lines) as the one line that matters.

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


class SaveConfigAndEnvironment(SaveConfigCallback):
    """LightningCLI's resolved config, and beside it the run's environment (commit, versions)."""

    def save_config(self, trainer, pl_module, stage) -> None:
        log_dir = Path(trainer.log_dir or trainer.default_root_dir)
        write_atomic(log_dir / "environment.json", json.dumps(environment(), indent=2))


class ClusterbenchCLI(LightningCLI):
    """LightningCLI with the datamodule's classes and input shape passed to the model, every
    constructor error in one line, Rich's progress bar, and a stop at the first non-finite
    loss; ``fitted`` collects the name of the model a ``fit`` trains (for its error line),
    ``made`` the log folder it is about to make (removed if the run is refused)."""

    def __init__(self, *args, fitted: list[str], made: list[tuple[Path, Path]],
                 interval_given: bool = False, channels_last_given: bool = False,
                 stop: CheckpointOnStop | None = None, **kwargs) -> None:
        self.fitted, self.made, self.interval_given = fitted, made, interval_given
        self.channels_last_given = channels_last_given
        self.stop = stop or CheckpointOnStop()
        super().__init__(*args, **kwargs)

    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("data.num_classes", "model.init_args.num_classes",
                              apply_on="instantiate")
        parser.link_arguments("data.input_shape", "model.init_args.input_shape",
                              apply_on="instantiate")
        for action in parser._actions:
            if action.dest.startswith("trainer.") and hasattr(action, "_typehint"):
                action._typehint = integer_first(action._typehint)

    def parse_arguments(self, parser, args) -> None:
        """The command line and config read, then the checkpoint it names checked
        (:func:`checked_ckpt_path`) before LightningCLI reads its hyperparameters, and read as
        tensors only by Lightning too."""
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        if subcommand in DESCRIPTIONS:
            config = self.config[subcommand]
            checked_ckpt_path(config.get("ckpt_path"), subcommand)
            if "weights_only" in config:
                config["weights_only"] = True  # null would leave it to torch's default

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except ConfigError:
            raise
        except ValueError as err:  # jsonargparse passes on a constructor's ValueError
            raise ConfigError(constructor_errors(err)) from err

    def instantiate_trainer(self, **kwargs):
        from benchmarks.run.trainer import check_trainer_values

        config = self.config[self.subcommand]
        trainer = self.config_init[self.subcommand].get("trainer") or {}
        try:  # the dataset's own settings and the Trainer's, as a suite's run is held to them
            if config["data"].get("init_args") is not None:
                check_settings(config["data"]["init_args"].as_dict())
        except ValueError as err:
            raise ConfigError(f"--data.{err}") from err
        try:
            check_trainer_values(config["trainer"].as_dict() if config.get("trainer") else {})
        except ValueError as err:
            raise ConfigError(f"--trainer.{err}") from err
        check_fit_accelerator(trainer)
        # LightningCLI merges the configured callbacks and the config saver, then calls this
        self.trainer_class = self.build_trainer
        return super().instantiate_trainer(**kwargs)

    def build_trainer(self, **settings: Any) -> pl.Trainer:
        """The Trainer a bench run gets (:func:`benchmarks.run.trainer.build_trainer`), keeping a
        logging interval or progress bar the user chose."""
        from benchmarks.run.spec import RunSpec
        from benchmarks.run.trainer import RunOptions, build_trainer

        callbacks = [*(settings.pop("callbacks", None) or []),
                     *([self.stop] if self.subcommand == "fit" else [])]
        progress = settings.get("enable_progress_bar") is not False and not any(
            isinstance(c, ProgressBar) for c in callbacks)
        name, hparams = type(self.model).__name__, getattr(self.model, "hparams", {})
        # the model's own channels_last only where the user set it, as a suite's wins on a GPU
        model = ({"channels_last": hparams["channels_last"]}
                 if self.channels_last_given and "channels_last" in hparams else {})
        run = RunSpec(name=name, method=name, model=model,
                      trainer={k: v for k, v in settings.items() if v is not None})
        seed = self.config[self.subcommand].get("seed_everything")
        seed = seed if isinstance(seed, int) and not isinstance(seed, bool) else 0
        # validate and test score as they always did, in the precision given; a fit's
        # checkpoint is read into an eager model (validate, test, evaluate), so its modules
        # are not compiled (a compiled module's weights are saved under other names)
        return build_trainer(run, "fit", self.model if self.subcommand == "fit" else None,
                             seed=seed,
                             options=RunOptions(compile=False), settings=settings,
                             callbacks=callbacks, progress=progress,
                             explicit_interval=self.interval_given).trainer

    def before_fit(self) -> None:
        self.note_log_folder()
        self.fitted.append(type(self.model).__name__)
        if not getattr(self.model, "requires_training", True):
            raise ConfigError(f"{type(self.model).__name__} is an untrained baseline: nothing "
                              "to fit (use it in a suite: clusterbench bench)")
        self.check_checkpoint("fit")

    def before_validate(self) -> None:
        self.note_log_folder()
        self.check_step("validation_step", "validate")
        self.check_checkpoint("validate")

    def before_test(self) -> None:
        self.note_log_folder()
        self.check_step("test_step", "test")
        self.check_checkpoint("test")

    def note_log_folder(self) -> None:
        """Notes the log folder this run is about to make, with the first of its parents that
        does not exist yet, for :func:`remove_unused_log_folder`; nothing when it exists."""
        log_dir = Path(self.trainer.log_dir or self.trainer.default_root_dir)
        top = None
        for folder in (log_dir, *log_dir.parents):
            if folder.exists():
                break
            top = folder
        if top is not None:
            self.made.append((log_dir, top))

    def check_checkpoint(self, subcommand: str) -> None:
        """The checkpoint held to the model built and the Trainer's ``max_epochs`` (Lightning
        loads its weights strictly and refuses more epochs than that), before any data is read
        or a log folder made."""
        from benchmarks.run.checkpoint import lightning_checkpoint

        path = self.config[subcommand].get("ckpt_path")
        if path is not None:
            lightning_checkpoint(path, "ckpt_path", subcommand, self.model.state_dict(),
                                 self.trainer.max_epochs)

    def check_step(self, step: str, subcommand: str) -> None:
        """Lightning's own check, before any data is read, said in one line."""
        if not is_overridden(step, self.model):
            raise ConfigError(
                f"{type(self.model).__name__} has no {step}, so there is nothing to "
                f"{subcommand}; its test-split scores are the evaluation protocols': "
                "clusterbench evaluate CHECKPOINT --suite SUITE")


def integer_first(hint: Any) -> Any:
    """An int-or-float annotation with ``int`` tried first, whatever order it came in.

    The Trainer says ``Optional[Union[int, float]]`` for its batch limits and validation interval
    (an int counts batches, a float is a fraction), but ``typing`` caches unions and counts
    ``Union[int, float]`` equal to ``Union[float, int]``: once a library imported earlier (Ray
    Tune does) built the other order, Lightning's annotation is that one, and jsonargparse, which
    tries a union's types in order, read ``--trainer.limit_val_batches 1`` as 1.0, the whole
    split. ``int | float`` is built anew each time, never taken from that cache.

    >>> import typing
    >>> integer_first(typing.Optional[typing.Union[float, int]])
    int | float | None
    >>> integer_first(typing.Optional[int])
    typing.Optional[int]
    """
    args = typing.get_args(hint)
    if typing.get_origin(hint) not in (typing.Union, types.UnionType) or not {int, float} <= set(
            args):
        return hint
    rest = tuple(a for a in args if a not in (int, float))
    return functools.reduce(operator.or_, rest, int | float)


def check_fit_accelerator(trainer: dict[str, Any]) -> None:
    """The Trainer's accelerator (and a whole number of devices) is one this machine has: one
    line, exit 2, before anything is built or a log folder made (Lightning raised only once it
    built the Trainer, a 38-line traceback)."""
    from benchmarks.run.trainer import check_accelerator_here

    accelerator, devices = trainer.get("accelerator", "auto"), trainer.get("devices", "auto")
    if not isinstance(accelerator, str):
        return  # an Accelerator object: the user's own
    check_accelerator_here(accelerator, devices if isinstance(devices, int) and devices > 0
                           else 1, "--trainer.")


#: What each of LightningCLI's subcommands does (``--ckpt_path`` resumes a fit, or picks the
#: weights to score), as its ``--help`` says.
DESCRIPTIONS = {"fit": "Train one method on one dataset (LightningCLI); --ckpt_path resumes.",
                "validate": "Score a method on the validation split (LightningCLI); "
                "--ckpt_path picks the weights.",
                "test": "Score a method on the test split (LightningCLI); --ckpt_path picks "
                "the weights."}


def subcommand_parsers() -> dict[str, dict]:
    """LightningCLI's parser settings of each subcommand: its usage line and description, and
    a misspelled key an error, never the key it abbreviates (argparse's default)."""
    return {name: {"prog": f"clusterbench {name}", "exit_on_error": False,
                   "allow_abbrev": False,
                   "description": f"{DESCRIPTIONS[name]} Methods and datasets: "
                   "`clusterbench list`; e.g. --model simclr --data digits."}
            for name in DESCRIPTIONS}


#: The flags after which LightningCLI prints a help text and exits.
HELP_FLAGS = ("--help", "-h", "--model.help", "--data.help", "--trainer.help")


def plain_text(text: str) -> str:
    """``text`` with reST roles and literals as their plain text.

    >>> plain_text("a name of :data:`modules.losses.CONTRASTIVE_LOSSES`, ``None`` or :math:`k`")
    'a name of modules.losses.CONTRASTIVE_LOSSES, None or k'
    """
    text = re.sub(r":[a-z]+:`~?([^`]*)`", r"\1", text)
    return re.sub(r"``([^`]*)``", r"\1", text)


@contextmanager
def plain_help(args: list[str]) -> Iterator[None]:
    """LightningCLI's help (``--help``, ``--model.help NAME``) printed as plain text."""
    if not any(arg.partition("=")[0] in HELP_FLAGS for arg in args):
        yield
        return
    printed = io.StringIO()
    try:
        with redirect_stdout(printed):
            yield
    finally:
        sys.stdout.write(plain_text(printed.getvalue()))


def lightning_main(subcommand: str, args: list[str]) -> int:
    """LightningCLI over every registered method and datamodule: ``fit`` (``--ckpt_path``
    resumes), ``validate`` and ``test``. The resolved config, the git commit and the package
    versions are saved in the run's log directory."""
    # We pass translated arguments on purpose; LightningCLI warns when sys.argv also has some.
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
    fitted: list[str] = []  # the model being fitted, for the divergence message
    made: list[tuple[Path, Path]] = []  # the log folder it makes, removed if it is refused
    stop = CheckpointOnStop()  # where a fit a signal stopped saved its checkpoint
    try:
        with plain_help(args):
            cli = ClusterbenchCLI(pl.LightningModule, ClusterDataModule,
                                  **cli_settings(subcommand, args), fitted=fitted, made=made,
                                  stop=stop)
    except argparse.ArgumentError as err:
        raise ConfigError(argument_error(str(err))) from err
    except SIGTERMException as err:  # a stop signal, after the step in flight
        raise Preempted(stopped_fit(fitted, stop, args)) from err
    except Diverged as err:
        print(f"clusterbench: error: {' '.join([*fitted, str(err)])}", file=sys.stderr)
        return 1
    except (ConfigError, BadFile, FileNotFoundError):  # refused: exit 2 (benchmarks.cli.main)
        remove_unused_log_folder(made)
        raise
    if subcommand == "fit":
        print_fitted(cli)
    return 0


def cli_settings(subcommand: str, args: list[str]) -> dict[str, Any]:
    """ClusterbenchCLI's settings: any registered method and datamodule, the arguments
    translated (:func:`translate_fit_args`), seed 0, the config and environment saved, 20 epochs
    and a CSV logger in ``results/fit`` by default, and a misspelled key an error."""
    return {"subclass_mode_model": True, "subclass_mode_data": True,
            "args": [subcommand, *translate_fit_args(args)], "seed_everything_default": 0,
            "auto_configure_optimizers": False,
            "save_config_callback": SaveConfigAndEnvironment,
            "save_config_kwargs": {"overwrite": True},
            "trainer_defaults": {"max_epochs": 20,
                                 "logger": lazy_instance(CSVLogger, save_dir="results/fit")},
            "parser_kwargs": {"prog": "clusterbench", "exit_on_error": False,
                              "allow_abbrev": False, **subcommand_parsers()},
            "interval_given": given(args, "log_every_n_steps"),
            "channels_last_given": given(args, "channels_last")}


def given(args: list[str], key: str) -> bool:
    """Whether the command line, or a ``-c`` config it names, sets ``key``."""
    for i, arg in enumerate(args):
        if key in arg:
            return True
        if arg in ("-c", "--config") and i + 1 < len(args) and Path(args[i + 1]).is_file():
            if key in Path(args[i + 1]).read_text(errors="replace"):
                return True
    return False


def print_fitted(cli: ClusterbenchCLI) -> None:
    """Where a finished fit left its config, metrics, environment and checkpoint."""
    trainer = cli.trainer
    log_dir = trainer.log_dir or trainer.default_root_dir
    checkpoint = getattr(trainer.checkpoint_callback, "best_model_path", "") or "none"
    print(f"{type(cli.model).__name__} on {type(cli.datamodule).__name__}: trained to "
          f"epoch {trainer.current_epoch} (step {trainer.global_step}); config, metrics and "
          f"environment in {log_dir}; checkpoint: {checkpoint}")


def main(subcommand: str, args: list[str]) -> int:
    """``clusterbench fit|validate|test ARGS``, with Lightning's boilerplate off the console."""
    with quiet_lightning(keep=FIT_KEEPS, ignore=FIT_IGNORED_WARNINGS):
        return lightning_main(subcommand, args)

