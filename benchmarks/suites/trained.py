"""``clusterbench evaluate``: score an already trained model with a suite's protocols.

The model is a ``clusterbench bench`` run (its seed folder: ``config.yaml`` and ``encoder.pt``)
or a ``clusterbench fit`` checkpoint (a ``.ckpt`` inside LightningCLI's log folder, whose
``config.yaml`` names the method and the data). Its result is written into the suite's results
folder, where the leaderboard reads it as one more row.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from benchmarks.infra.atomic import write_atomic
from benchmarks.infra.errors import ConfigError, resolve_name
from benchmarks.infra.locking import folder_lock
from benchmarks.infra.paths import check_name
from benchmarks.infra.yaml_files import dump_yaml, read_yaml
from benchmarks.run.cache import (
    ENCODER_FILE,
    kept_weights,
    load_weights,
    replace_directory,
    run_dir,
)
from benchmarks.run.checkpoint import lightning_checkpoint
from benchmarks.run.identity import resolved_config
from benchmarks.run.one import evaluate_and_record, instantiate
from benchmarks.run.result_schema import read_result
from benchmarks.run.spec import RUNNER_MODEL_KEYS, RunSpec
from benchmarks.suites.config import Suite, check_run_arguments
from benchmarks.suites.leaderboard import write_leaderboard
from benchmarks.suites.preflight import suite_results_dir
from modules.methods.pretrained import LIBRARIES as BACKBONE_LIBRARIES


def bench_run(folder: Path) -> tuple[RunSpec, int, dict[str, torch.Tensor] | None, int]:
    """The run, seed, weights (None for an untrained baseline) and epochs of a bench seed
    folder."""
    try:  # read as bounded data: a copied folder's file may be too large, deep or a FIFO
        config = read_yaml(folder / "config.yaml")
        run = RunSpec(**config["run"])
        seed = int(config["seed"])
    except (ConfigError, KeyError, TypeError, ValueError, OverflowError) as err:
        raise ConfigError(f"{folder} is not a bench run folder (runs/<run>/seed-<k> with "
                          f"config.yaml and {ENCODER_FILE}): {err}") from err
    check_read_run(run, f"{folder / 'config.yaml'}: run")
    state = kept_weights(folder)
    try:  # a result.json that is no run's result (an experiment's: KeyError) gives no epochs
        epochs = read_result(folder / "result.json")["epochs"]
    except (OSError, ValueError, KeyError):
        epochs = 0
    return run, seed, state, epochs


def check_read_run(run: RunSpec, where: str) -> None:
    """A run read from a results or log folder (which anyone may have edited) checked as a
    suite's runs are: a registered method and dataset, and arguments their signatures take."""
    from modules.methods import METHODS

    check_name(run.name, f"{where} name", nested=True)
    for section in ("model", "data", "trainer"):
        if not isinstance(getattr(run, section), dict):
            raise ConfigError(f"{where}.{section} must be a mapping, got "
                              f"{getattr(run, section)!r}")
    resolve_name(METHODS, run.method, f"method in {where}")
    check_run_arguments(run, where)


def built(run: RunSpec, seed: int, path: Path | None):
    """The datamodule and model of ``run``; a value they refuse is one line naming ``path``
    (None: the message names its file itself, as a backbone's weights file's does)."""
    try:
        return instantiate(run, seed)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{f'{path}: ' if path else ''}run {run.name!r}: {err}") from None


def moved_class(registry: dict[str, type], class_path: str) -> type | None:
    """The registered class that a class path from an earlier layout names
    (``modules.simclr.SimCLR``, written before the methods moved into ``modules.methods``): the
    one registered class of that name, or None.

    >>> from modules.methods import METHODS
    >>> moved_class(METHODS, "modules.simclr.SimCLR").__module__
    'modules.methods.simclr'
    """
    name = class_path.rpartition(".")[2]
    matches = [cls for cls in registry.values() if cls.__name__ == name]
    return matches[0] if len(matches) == 1 else None


def registry_name(registry: dict[str, type], class_path: str, what: str) -> str:
    for name, cls in registry.items():
        if class_path in (f"{cls.__module__}.{cls.__qualname__}", cls.__qualname__):
            return name
    if class_path.startswith(("modules.", "datamodules.")) and (
            moved := moved_class(registry, class_path)) is not None:
        return next(name for name, cls in registry.items() if cls is moved)
    raise ConfigError(f"the checkpoint's {what} {class_path!r} is not registered; "
                      f"available: {', '.join(registry)}")


def fit_run(checkpoint: Path) -> tuple[RunSpec, int, dict[str, torch.Tensor], int]:
    """The run, seed, weights and epochs of a ``clusterbench fit`` checkpoint, from the
    ``config.yaml`` LightningCLI saved in the checkpoint's log folder; the checkpoint is held to
    what ``fit --ckpt_path`` holds one to (:func:`lightning_checkpoint`), read first."""
    from datamodules import DATAMODULES
    from modules.methods import METHODS

    saved = lightning_checkpoint(checkpoint, "checkpoint", "weights")
    epoch = saved.get("epoch")  # informative only: an edited one gives no count of epochs
    epochs = epoch + 1 if type(epoch) is int and epoch >= 0 else 0
    config_file = next((p / "config.yaml" for p in checkpoint.parents
                        if (p / "config.yaml").is_file()), None)
    if config_file is None:
        raise ConfigError(f"no config.yaml beside or above {checkpoint}: evaluate reads the "
                          "method and the data of a fit checkpoint from its log folder")
    config = read_yaml(config_file)
    if not isinstance(config, dict):
        raise ConfigError(f"{config_file} must hold a mapping (LightningCLI's config), got "
                          f"{type(config).__name__}")
    model, data = config.get("model") or {}, config.get("data") or {}
    method = registry_name(METHODS, model.get("class_path", ""), "method")
    dataset = registry_name(DATAMODULES, data.get("class_path", ""), "dataset")
    model_args = {k: v for k, v in (model.get("init_args") or {}).items()
                  if k not in RUNNER_MODEL_KEYS}
    data_args = {k: v for k, v in (data.get("init_args") or {}).items() if k != "seed"}
    seed = int(config.get("seed_everything") or (data.get("init_args") or {}).get("seed") or 0)
    run = RunSpec(name=f"{method}-{config_file.parent.name}", method=method, model=model_args,
                  data={"name": dataset, **data_args})
    check_read_run(run, f"{config_file}: run")
    return run, seed, saved["state_dict"], epochs


def backbone_run(arch: str, weights: str | None, suite: Suite
                 ) -> tuple[RunSpec, int, None, int]:
    """The run of a public backbone by name (method ``pretrained``), its weights read by the
    method from the local file ``weights``, on the data of the suite's first run; seed 0."""
    if arch.partition(":")[0] not in BACKBONE_LIBRARIES:
        raise ConfigError(f"backbone {arch!r}: its library is none of "
                          f"{', '.join(BACKBONE_LIBRARIES)} (e.g. torchvision:resnet18)")
    if weights is None:
        raise ConfigError(f"{arch} needs --weights FILE: a local file of its weights (a "
                          "torch.save of its state dict; nothing is downloaded)")
    if not Path(weights).is_file():
        raise ConfigError(f"--weights {weights}: no such file")
    run = RunSpec(name=f"{arch.replace(':', '-')}@{Path(weights).stem}", method="pretrained",
                  model={"arch": arch, "weights": str(Path(weights).resolve())},
                  data=dict(suite.runs[0].data))
    check_read_run(run, "--weights run")
    return run, 0, None, 0


def evaluate_trained(path: Path, suite: Suite, results_root: str | Path = "results",
                     name: str | None = None, accelerator: str | None = None,
                     weights: str | None = None) -> tuple[Path, dict[str, Any]]:
    """Score the model at ``path`` with ``suite``'s protocols on the data it was trained on
    (a backbone by name, ``torchvision:resnet18`` with its ``weights`` file, on the data of the
    suite's first run); write ``runs/<name>/seed-<k>/result.json`` under the suite's results
    folder and rebuild its leaderboard. Returns that folder and the result."""
    if ":" in str(path) and not path.exists():  # a backbone by name
        run, seed, state, epochs = backbone_run(str(path), weights, suite)
        default_name = run.name
        path = Path(weights) if weights else path
    elif weights is not None:
        raise ConfigError(f"--weights is for a backbone by name (torchvision:NAME, timm:NAME); "
                          f"{path} carries its own weights")
    elif path.is_dir():
        run, seed, state, epochs = bench_run(path)
        default_name = f"{run.name}@evaluated"
    elif path.suffix == ".ckpt" and (path.exists() or path.is_symlink()):  # a FIFO: one line
        run, seed, state, epochs = fit_run(path)
        default_name = run.name
    else:
        raise ConfigError(f"{path} is neither a bench run folder, a .ckpt file nor a backbone "
                          "by name (torchvision:NAME or timm:NAME with --weights FILE)")
    if name is not None:
        check_name(name, "--name", nested=True)
    run = replace(run, name=name or default_name, searched=None, paper={})
    datamodule, model = built(run, seed, None if weights else path)  # a file names itself
    if state is not None:
        load_weights(model, state, path)
    elif model.requires_training:
        raise ConfigError(f"{path} has no {ENCODER_FILE}: it was written before runs kept "
                          "their weights, or its training did not finish")
    use_gpu = torch.cuda.is_available() and accelerator in (None, "auto", "gpu", "cuda")
    model.to("cuda" if use_gpu else "cpu")
    suite_dir = suite_results_dir(suite, results_root)
    with folder_lock(suite_dir, f"suite {suite.name!r}'s results folder"):
        return write_evaluation(model, datamodule, suite, suite_dir, run, seed, path, epochs,
                                use_gpu)


def write_evaluation(model, datamodule, suite: Suite, suite_dir: Path, run: RunSpec, seed: int,
                     path: Path, epochs: int, use_gpu: bool) -> tuple[Path, dict[str, Any]]:
    """The body of :func:`evaluate_trained`, under the suite folder's lock."""
    settings = suite.settings
    final = run_dir(suite_dir, run, seed)
    attempt = final.with_name(final.name + ".attempt")
    if attempt.exists():
        shutil.rmtree(attempt)
    attempt.mkdir(parents=True)
    config = resolved_config(settings, run, seed)
    write_atomic(attempt / "config.yaml", dump_yaml(config))
    datamodule.setup("fit")
    result = evaluate_and_record(model, datamodule, settings, run, seed, attempt, config)
    result.update({"epochs": epochs, "train_seconds": 0.0,
                   "wall_seconds": result["eval_seconds"], "evaluated_from": str(path.resolve()),
                   "device": "gpu" if use_gpu else "cpu"})
    write_atomic(attempt / "result.json", json.dumps(result, indent=2, default=str))
    replace_directory(attempt, final)
    write_leaderboard(suite_dir)
    return final, result
