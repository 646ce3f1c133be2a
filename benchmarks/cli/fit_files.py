"""What ``clusterbench fit``, ``validate`` and ``test`` read and leave besides their config: the
checkpoint ``--ckpt_path`` names, checked before LightningCLI or Lightning opens it, the log
folder of a refused run, removed so that a refusal leaves nothing behind, and the checkpoint a
fit a signal stopped leaves, with the command that continues it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from benchmarks.cli.config_file import class_path_inside, registered_class_path
from benchmarks.infra.errors import ConfigError
from benchmarks.infra.tensor_files import BadFile
from benchmarks.run.stop import CheckpointOnStop


def checked_ckpt_path(path: Any, subcommand: str) -> None:
    """``--ckpt_path`` (or a ``-c`` file's ``ckpt_path``) held to what ``evaluate`` and a
    resumed bench run hold a checkpoint to, before LightningCLI or Lightning opens it: a regular
    file of bounded size, read as tensors only, with what Lightning reads for ``subcommand``
    (:func:`~benchmarks.run.checkpoint.lightning_checkpoint`), and hyperparameters that name no
    class but a registered method (LightningCLI builds the model they name).

    Raises:
        BadFile: one line naming the file and what is accepted (a FIFO is never waited on).
        ConfigError: the hyperparameters name another class.
    """
    from benchmarks.run.checkpoint import lightning_checkpoint

    if path is None:
        return
    if not isinstance(path, str) or not path:
        raise ConfigError(f"ckpt_path must be a checkpoint file, got {path!r}")
    saved = lightning_checkpoint(path, "ckpt_path", subcommand)
    hparams = saved.get("hyper_parameters", {})
    if not isinstance(hparams, dict):
        raise BadFile(f"ckpt_path {path}: hyper_parameters is a {type(hparams).__name__}, not "
                      "the mapping of a model's arguments")
    if "_class_path" in hparams:
        registered_class_path("model", hparams["_class_path"],
                              f"ckpt_path {path}: hyper_parameters")
    if (where := class_path_inside(hparams, "hyper_parameters")) is not None:
        raise ConfigError(f"ckpt_path {path}: {where} names a class to build (class_path); "
                          "accepted there: plain values")


#: What a run writes in its log folder before it reads any data: LightningCLI's config, the
#: environment (``SaveConfigAndEnvironment``) and the logger's hyperparameters.
SETUP_FILES = ("config.yaml", "environment.json", "hparams.yaml")


def remove_unused_log_folder(made: list[tuple[Path, Path]]) -> None:
    """Removes the log folder of a refused run (``version_N``, noted with the first of its
    parents it made, by ``ClusterbenchCLI.note_log_folder``) when it holds nothing but
    :data:`SETUP_FILES`, and those parents where they are empty: the next run's ``version_0``
    stays free, and no empty folder suggests a run that never was."""
    for log_dir, top in made:
        if not log_dir.is_dir() or any(
                path.is_dir() or path.name not in SETUP_FILES for path in log_dir.iterdir()):
            continue
        shutil.rmtree(log_dir)
        folder = log_dir
        while folder != top:
            folder = folder.parent
            try:
                folder.rmdir()  # only where empty: another run may have made a folder in it
            except OSError:
                break


def stopped_fit(fitted: list[str], stop: CheckpointOnStop, args: list[str]) -> str:
    """What a stopped ``fit`` says: its checkpoint, and the command that goes on from it."""
    if stop.path is None:
        return "nothing was saved; the same command starts the fit again"
    given = [a for i, a in enumerate(args)
             if a != "--ckpt_path" and not a.startswith("--ckpt_path=")
             and (i == 0 or args[i - 1] != "--ckpt_path")]
    return (f"{' '.join(fitted) or 'the fit'}: its checkpoint is {stop.path}; "
            f"clusterbench fit {' '.join(given)} --ckpt_path {stop.path} continues it")
