"""What a ``clusterbench fit -c FILE`` may hold, judged by its content wherever it lies: the
sections LightningCLI saves (or a search's ``best_config.yaml``), registered names or class
paths for the model and the datamodule, and plain values everywhere else, so that reading a
copied config never builds a callback, a plugin or a logger it names."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from benchmarks.infra.errors import ConfigError, suggest


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
    """A registered name or a class path as the class path LightningCLI imports; a legacy
    ``modules.<name>.<Class>`` path maps to the registered class, any other dotted path is left to
    LightningCLI.

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


#: The top-level keys of a ``-c`` file in LightningCLI's layout, as ``fit`` saves its config.
FIT_CONFIG_KEYS = ("seed_everything", "trainer", "model", "data", "ckpt_path", "weights_only",
                   "verbose")
#: The logger ``fit`` saves in its config by default (see :func:`cli_settings`): the one logger
#: a ``-c`` file may name, as it is the default anyway.
DEFAULT_LOGGER = {"class_path": "lightning.pytorch.loggers.CSVLogger",
                  "init_args": {"save_dir": "results/fit", "name": "lightning_logs",
                                "version": None, "prefix": "", "flush_logs_every_n_steps": 100}}


def checked_fit_config(config: dict[str, Any], path: str) -> dict[str, Any]:
    """A ``-c`` file judged by its content, wherever it lies (a copied ``best_config.yaml``
    runs as much code as one in a results folder): only :data:`FIT_CONFIG_KEYS`, no class
    to build besides a registered model and datamodule, no Trainer callbacks or plugins, a
    logger only as on/off (or the default one ``fit`` saved), ``weights_only`` unset or true,
    ``ckpt_path`` a local file. Returns the config without a default logger; anything else
    raises a one-line ConfigError naming the key and what is accepted."""
    for key in config:
        if key not in FIT_CONFIG_KEYS:
            close = suggest(str(key), set(FIT_CONFIG_KEYS)).split(";")[0]
            raise ConfigError(f"{path}: unknown top-level key {key!r}{close}; accepted: "
                              f"{', '.join(FIT_CONFIG_KEYS)} (or a search's best_config.yaml "
                              "as written)")
    for section in ("model", "data"):
        value = config.get(section)
        if isinstance(value, dict):
            for key, inner in value.items():
                if key != "class_path" and (where := class_path_inside(
                        inner, f"{section}.{key}")) is not None:
                    raise ConfigError(f"{path}: {where} names a class to build (class_path); "
                                      "accepted there: plain values")
    trainer = config.get("trainer")
    if trainer is not None and not isinstance(trainer, dict):
        raise ConfigError(f"{path}: trainer must be a mapping of Trainer settings, got "
                          f"{trainer!r}")
    trainer = dict(trainer or {})
    for key in ("callbacks", "plugins"):
        if trainer.get(key) not in (None, []):
            raise ConfigError(f"{path}: trainer.{key} is not accepted in a config file; "
                              "accepted: null or [] (callbacks and plugins are code)")
    if trainer.get("logger") == DEFAULT_LOGGER:
        del trainer["logger"]  # the default: the same CSVLogger in results/fit
    elif trainer.get("logger") is not None and not isinstance(trainer["logger"], bool):
        raise ConfigError(f"{path}: trainer.logger is not accepted as {trainer['logger']!r}; "
                          "accepted: null, true or false (choose one with --logger csv|wandb)")
    if (where := class_path_inside(trainer, "trainer")) is not None:
        raise ConfigError(f"{path}: {where} names a class to build (class_path); accepted "
                          "there: plain values")
    if config.get("weights_only") not in (None, True):
        raise ConfigError(f"{path}: weights_only must be null or true, got "
                          f"{config['weights_only']!r} (a checkpoint is read as tensors only)")
    ckpt = config.get("ckpt_path")
    if ckpt is not None and (not isinstance(ckpt, str) or "://" in ckpt):
        raise ConfigError(f"{path}: ckpt_path must be a local checkpoint file, got {ckpt!r}")
    return {**config, "trainer": trainer} if "trainer" in config else config


def registered_class_path(section: str, value: Any, path: str) -> str:
    """``value`` (a registered name or class path, or an earlier layout's) as the class path
    of a registered method or dataset; a ConfigError for any other class a file names."""
    import importlib

    registry, what, package = _registry(section)
    resolved = class_path(section, value) if isinstance(value, str) else ""
    module, _, name = resolved.rpartition(".")
    found = None
    if module.split(".")[0] == package:  # nothing outside the package is imported
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            found = None
    if found is None or found not in registry.values():
        raise ConfigError(f"{path}: {section}.class_path {value!r} is not a registered {what}; "
                          f"accepted: a registered name ({', '.join(sorted(registry))}) or its "
                          "class path")
    return _class_path(found)  # the class's own path, whichever module exported it


#: The top-level keys of a search's ``best_config.yaml``, as the search writes them.
BEST_CONFIG_KEYS = ("suite", "run", "method", "model", "data", "trainer", "metric", "mode",
                    "best_value", "trial_id", "configurations_searched", "trials_failed",
                    "tie_rule", "budget", "machine")


def best_config_as_fit_config(best: dict[str, Any], path: str) -> dict[str, Any]:
    """A search's ``best_config.yaml`` as a fit config, read as data, never as code: it lies in
    a results folder, so only a suite's Trainer keys are accepted and no value may name a
    ``class_path`` for LightningCLI to import and call."""
    for key in best:
        if key not in BEST_CONFIG_KEYS:
            raise ConfigError(f"{path}: unknown top-level key {key!r} in a search's best "
                              f"configuration; accepted: {', '.join(BEST_CONFIG_KEYS)}")
    data = dict(best["data"])
    if "name" not in data:
        raise ConfigError(f"{path}: data has no dataset name (data.name)")
    sections = {"model": best.get("model") or {}, "data": data,
                "trainer": best.get("trainer") or {}}
    for section, values in sections.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: {section} must be a mapping, got {values!r}")
        if (where := class_path_inside(values, section)) is not None:
            raise ConfigError(f"{path}: {where} names a class to build (class_path); a search's "
                              "best configuration holds plain values only")
    from benchmarks.run.spec import RUNNER_TRAINER_KEYS, init_parameters

    trainer_keys = init_parameters(pl.Trainer, RUNNER_TRAINER_KEYS)
    for key in sections["trainer"]:
        if key not in trainer_keys:
            raise ConfigError(f"{path}: trainer.{key} is not a Trainer setting a suite "
                              f"accepts{suggest(str(key), trainer_keys)}")
    return {"model": {"class_path": best["method"], "init_args": sections["model"]},
            "data": {"class_path": data.pop("name"), "init_args": data},
            "trainer": sections["trainer"]}


def class_path_inside(value: Any, where: str) -> str | None:
    """Where in ``value`` (nested mappings and lists) a mapping has a ``class_path`` key, or None.

    >>> class_path_inside({"lr": 0.1, "cbs": [{"class_path": "os.system"}]}, "trainer")
    'trainer.cbs[0]'
    """
    if isinstance(value, dict):
        if "class_path" in value:
            return where
        found = (class_path_inside(v, f"{where}.{k}") for k, v in value.items())
    elif isinstance(value, list):
        found = (class_path_inside(v, f"{where}[{i}]") for i, v in enumerate(value))
    else:
        return None
    return next((f for f in found if f is not None), None)
