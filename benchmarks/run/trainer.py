"""The one place a Lightning Trainer is built (bench runs, search trials, ``clusterbench fit``,
the speed benchmarks and the experiments' models): placement, checks, GPU speed settings and
the callbacks every training needs, so that a search tunes under the numerics its best
configuration is retrained with.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import lightning.pytorch as pl
import torch

from benchmarks.infra.allocator import keep_freed_memory
from benchmarks.infra.errors import ConfigError, suggest
from benchmarks.run.checkpoint import EpochSeed
from benchmarks.run.divergence import StopOnDivergence
from benchmarks.run.progress import CurveEveryEpoch, StepProgressBar
from benchmarks.run.spec import RunSpec
from benchmarks.run.stop import StopAfterStep
from benchmarks.run.trainer_choices import check_trainer_choices
from benchmarks.run.wandb_runs import WandbSettings
from modules.methods.capabilities import ChannelsLastModel
from modules.ranges import MAX_EPOCHS, check_count, check_count_or_fraction, check_non_negative


@dataclass
class RunOptions:
    """How a run is carried out, not what it computes.

    ``data.batch_size`` is the global batch, split over ``devices`` (DDP with global BatchNorm);
    ``rerun`` retrains a run whose finished result has the same configuration."""

    logger: str = "csv"
    accelerator: str | None = None
    #: On a GPU: bf16, channels-last, cuDNN autotuning, TF32 (:func:`gpu_speed_settings`).
    fast_gpu: bool = True
    #: On a GPU (with ``fast_gpu``): ``torch.compile`` of the backbone and projector.
    compile: bool = True
    devices: int | None = None
    progress: bool = True
    checkpoint_every: int = 1
    rerun: bool = False
    #: Retrain a finished run whose result was computed by other code (another commit, or a
    #: working tree with changes): a cached results folder in CI is then not reused blindly.
    rerun_changed: bool = False
    wandb: WandbSettings = field(default_factory=WandbSettings)


def trainer_settings(run: RunSpec, options: RunOptions) -> dict[str, Any]:
    """The run's Trainer arguments with the placement made explicit: the command line's
    accelerator and devices win, ``devices`` defaults to 1 (never all GPUs), several devices mean
    DDP with global BatchNorm. ``max_epochs`` must be at least 1: Lightning takes 0 and -1
    silently."""
    settings = {"max_epochs": 10, "accelerator": "auto", **run.trainer}
    if options.accelerator:
        settings["accelerator"] = options.accelerator
    devices = options.devices if options.devices is not None else settings.get("devices", 1)
    if not isinstance(devices, int) or isinstance(devices, bool) or devices < 1:
        raise ConfigError(f"run {run.name!r}: devices must be a positive number of devices, "
                          f"got {devices!r}")
    settings["devices"] = devices
    try:
        check_trainer_values(settings)
    except ValueError as err:
        raise ConfigError(f"run {run.name!r}: trainer.{err}") from err
    on_gpu = runs_on_gpu(settings["accelerator"])
    if devices > 1:
        for key, value in ddp_settings(settings["accelerator"]).items():
            settings.setdefault(key, value)
    if on_gpu and options.fast_gpu:  # bf16 autocast unless the suite chose a precision
        settings.setdefault("precision", "bf16-mixed")
    return settings


#: Most steps or batches of a Trainer count.
MAX_STEPS = 10**9
#: The Trainer's counts a run checks, with the least and the most value of each: Lightning takes
#: a 0 in several without a word (``max_epochs: 0`` scores the untrained encoder) or fails only
#: once the model is built (``accumulate_grad_batches: 0``, ``check_val_every_n_epoch: 0``); a
#: count of 10**30 passes and fails later (``max_steps: -1`` is Lightning's "no limit").
TRAINER_COUNTS = {"max_epochs": (1, MAX_EPOCHS), "accumulate_grad_batches": (1, 10_000),
                  "check_val_every_n_epoch": (1, MAX_EPOCHS), "log_every_n_steps": (1, MAX_STEPS),
                  "min_epochs": (0, MAX_EPOCHS), "max_steps": (-1, MAX_STEPS),
                  "min_steps": (0, MAX_STEPS), "num_sanity_val_steps": (-1, MAX_STEPS),
                  "reload_dataloaders_every_n_epochs": (0, MAX_EPOCHS), "num_nodes": (1, 10_000)}
#: Its batch limits (a count or a fraction), with the least count: a run that trains on no
#: batch (``limit_train_batches: 0``) has nothing to score; a validation every
#: ``val_check_interval`` batches, or that fraction of an epoch.
TRAINER_LIMITS = {"limit_train_batches": 1, "limit_val_batches": 0, "limit_test_batches": 0,
                  "limit_predict_batches": 0, "overfit_batches": 0, "val_check_interval": 1}
#: The most gradient norm or value a clip may name (finite: ``inf`` or ``nan`` clips nothing).
MAX_GRADIENT_CLIP = 1e6


def check_trainer_values(settings: dict[str, Any]) -> None:
    """The counts, batch limits and gradient clip among a run's Trainer ``settings`` in their
    ranges (:data:`TRAINER_COUNTS`, :data:`TRAINER_LIMITS`, :data:`MAX_GRADIENT_CLIP`; ``None``
    where Lightning takes it means its default), and its choices of precision, time limit,
    strategy... ones Lightning builds and a run evaluates with
    (:func:`~benchmarks.run.trainer_choices.check_trainer_choices`); ``ValueError`` naming the
    first one out of range. ``bench`` and ``clusterbench fit`` both check their Trainer
    settings here."""
    check_trainer_choices(settings)
    for name, (low, high) in TRAINER_COUNTS.items():
        if settings.get(name) is not None or name == "max_epochs":
            check_count(name, settings.get(name), low=low, high=high)
    for name, low in TRAINER_LIMITS.items():
        if settings.get(name) is not None:
            check_count_or_fraction(name, settings[name], low=low, high=MAX_STEPS)
    if settings.get("gradient_clip_val") is not None:
        check_non_negative("gradient_clip_val", settings["gradient_clip_val"],
                           high=MAX_GRADIENT_CLIP)


def ddp_settings(accelerator: str) -> dict[str, Any]:
    """Trainer settings of one fit over several devices: one process per device, spawned for this
    fit so the caller gets the weights back; global BatchNorm on GPUs only (SyncBatchNorm has no
    CPU implementation)."""
    return {"strategy": "ddp_spawn", "sync_batchnorm": runs_on_gpu(accelerator)}


def runs_on_gpu(accelerator: str) -> bool:
    """Whether a run with this Trainer ``accelerator`` trains and is evaluated on a CUDA GPU:
    the one answer the Trainer settings, the speed settings and the result's ``device`` share."""
    return torch.cuda.is_available() and accelerator in ("auto", "gpu", "cuda")


def gpu_speed_settings(run: RunSpec, options: RunOptions, on_gpu: bool,
                       devices: int = 1) -> dict[str, Any]:
    """What a GPU run gets beyond its suite's settings unless ``--no-fast-gpu`` (a suite's own
    ``trainer.precision`` or ``model.channels_last`` wins): bf16 autocast (losses stay float32),
    channels-last, cuDNN autotuning, TF32, and ``torch.compile`` of the backbone and projector on
    a single device (a multi-device model is pickled into spawned processes).

    >>> run = RunSpec(name="r", method="simclr", trainer={"accelerator": "gpu"})
    >>> sorted(gpu_speed_settings(run, RunOptions(), on_gpu=True))
    ['channels_last', 'compile', 'cudnn_benchmark', 'precision', 'tf32']
    >>> gpu_speed_settings(run, RunOptions(), on_gpu=False)
    {}
    """
    if not on_gpu or not options.fast_gpu:
        return {}
    return {"precision": run.trainer.get("precision", "bf16-mixed"),
            "channels_last": run.model.get("channels_last", True), "cudnn_benchmark": True,
            "tf32": True, "compile": options.compile and devices == 1}


#: The modules :func:`apply_gpu_speed_settings` compiles, each on its own.
COMPILED_MODULES = ("backbone", "projector")


def apply_gpu_speed_settings(model, speed: dict[str, Any]) -> dict[str, str]:
    """Applies :func:`gpu_speed_settings` to this process and ``model``; returns each compiled
    module's status (``compiled`` or ``failed (reason)``), kept current as the run goes."""
    status: dict[str, str] = {}
    if not speed:
        return status
    torch.backends.cudnn.benchmark = speed["cudnn_benchmark"]
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = speed["tf32"]
    if speed["channels_last"] and isinstance(model, ChannelsLastModel):
        model.channels_last = True
        model.backbone = model.backbone.to(memory_format=torch.channels_last)
    if speed["compile"]:
        for name in COMPILED_MODULES:
            if isinstance(getattr(model, name, None), torch.nn.Module):
                setattr(model, name, compile_or_eager(getattr(model, name), name, status))
    return status


def compile_or_eager(module: torch.nn.Module, name: str, status: dict[str, str],
                     **compile_options: Any) -> torch.nn.Module:
    """``torch.compile(module)`` that falls back to eager, with a warning and ``status[name] =
    "failed (reason)"``, when compiling fails; other modules are unaffected (no process-wide
    ``suppress_errors``), and an error the eager forward raises too propagates. Parameters gain
    the prefix ``_orig_mod.``."""
    import warnings

    compiled = torch.compile(module, **compile_options)
    compiled_forward, eager = compiled.forward, compiled._orig_mod.__call__
    status[name] = "compiled"

    def forward(*args: Any, **kwargs: Any) -> Any:
        try:
            return compiled_forward(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - eager decides whether it was the compiler
            out = eager(*args, **kwargs)  # the model's own error raises here
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            reason = f"{type(err).__name__}: {' '.join(lines[:2])[:200]}"  # what, then why
            status[name] = f"failed ({reason})"
            warnings.warn(f"torch.compile of the {name} failed, it runs eagerly: {reason}",
                          RuntimeWarning, stacklevel=2)
            compiled.forward = eager
            return out

    compiled.forward = forward
    return compiled


#: Lightning's accelerators that ``auto`` may pick, in the order it tries them (then ``cpu``),
#: and those ``gpu`` stands for.
AUTO_ACCELERATORS = ("tpu", "mps", "cuda")
GPU_ACCELERATORS = ("mps", "cuda")


def check_accelerator(run: RunSpec, settings: dict[str, Any]) -> None:
    """The run's accelerator is one this machine has, with at least ``devices`` of it (CPU: one
    process per core at most); Lightning would fail only after loading data, or hang.

    Raises:
        ConfigError: naming the run, the accelerator or the devices, and what this machine has.
    """
    check_accelerator_here(settings["accelerator"], settings["devices"], f"run {run.name!r}: ")


def check_accelerator_here(name: Any, devices: int, who: str) -> None:
    """:func:`check_accelerator` for an accelerator ``name`` and ``devices`` given by ``who``
    (the start of the message: ``"run 'simclr': "``, ``"--trainer."``)."""
    from lightning.pytorch.accelerators import AcceleratorRegistry

    known = set(AcceleratorRegistry.available_accelerators()) | {"auto", "gpu"}
    if not isinstance(name, str) or name not in known:
        raise ConfigError(f"{who}unknown accelerator {name!r}{suggest(name, known)}")
    given = name

    def available(kind: str) -> bool:
        return (kind in AcceleratorRegistry
                and AcceleratorRegistry[kind]["accelerator"].is_available())

    here = sorted(k for k in AcceleratorRegistry.available_accelerators() if available(k))
    if name == "auto":
        name = next((k for k in AUTO_ACCELERATORS if available(k)), "cpu")
    elif name == "gpu":
        name = next((k for k in GPU_ACCELERATORS if available(k)), "gpu")
    if name == "gpu" or not available(name):
        raise ConfigError(f"{who}accelerator {given!r} is not available on this machine; "
                          f"accepted here: {', '.join(here)}, auto")
    have = (os.cpu_count() or 1) if name == "cpu" else (
        AcceleratorRegistry[name]["accelerator"].auto_device_count())
    if devices > have:
        raise ConfigError(f"{who}devices {devices} is more than this machine's {have} {name} "
                          f"device(s); accepted: 1 to {have}")


def check_global_batch(run: RunSpec, devices: int) -> None:
    """``data.batch_size`` is the global batch: refuse one that does not split over ``devices``."""
    batch = run.data.get("batch_size")
    if batch is not None and devices > 1 and batch % devices:
        raise ConfigError(f"run {run.name!r}: data.batch_size {batch} is the global batch and "
                          f"must split evenly over {devices} devices; use a multiple of {devices}")


def training_callbacks(seed: int, callbacks: Sequence[pl.Callback], progress: bool,
                       explicit_interval: bool = True) -> list[pl.Callback]:
    """The callbacks of every training: the divergence check first (a diverged epoch is never
    saved), then ``callbacks``, per-epoch seeding, the logging interval, the stop after the step
    in flight on a stop signal and the progress bar; none reads the device inside a step but
    every ``READ_EVERY`` steps."""
    return [StopOnDivergence(), *callbacks, EpochSeed(seed), CurveEveryEpoch(explicit_interval),
            StopAfterStep(), *([StepProgressBar()] if progress else [])]


def cluster_plugins(given: dict[str, Any]) -> dict[str, Any]:
    """Under SLURM, Lightning's SLURM environment without its own requeue on SIGUSR1 (which
    would write an ``hpc_ckpt`` of its own and requeue the job behind the command's back): the
    command checkpoints and requeues itself (:mod:`benchmarks.infra.stop_signals`). Plugins the
    caller gives are kept."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    if given.get("plugins") is not None or not SLURMEnvironment.detect():
        return {}
    return {"plugins": [SLURMEnvironment(auto_requeue=False)]}


#: Who builds a Trainer, and the flags that follow from it. A bench run, a trial and a speed
#: benchmark save their own checkpoints (:class:`~benchmarks.run.checkpoint.EpochCheckpoint`)
#: and print no model summary; a trial and a speed benchmark validate no batches before
#: training (a trial's first report would wait for them); ``fit`` keeps LightningCLI's values,
#: which its user may set.
PURPOSES: dict[str, dict[str, Any]] = {
    "bench": {"enable_checkpointing": False, "enable_model_summary": False},
    "trial": {"enable_checkpointing": False, "enable_model_summary": False,
              "num_sanity_val_steps": 0},
    "fit": {},
    "perf": {"enable_checkpointing": False, "enable_model_summary": False,
             "num_sanity_val_steps": 0},
}


@dataclass
class BuiltTrainer:
    """A Trainer and what it turned on for its model: the GPU speed settings (``{}`` off a GPU)
    and each compiled module's status, which a result records."""

    trainer: pl.Trainer
    speed: dict[str, Any]
    compiled: dict[str, str]


def build_trainer(run: RunSpec, purpose: str, model: torch.nn.Module | None = None, *,
                  seed: int = 0, options: RunOptions | None = None,
                  settings: dict[str, Any] | None = None,
                  callbacks: Sequence[pl.Callback] = (), progress: bool = False,
                  explicit_interval: bool | None = None, **given: Any) -> BuiltTrainer:
    """The Trainer that trains ``model`` for ``run``, with the GPU speed settings and the
    callbacks of every training (:func:`training_callbacks`). A model trained on the CPU gets
    the allocator setting of CPU training instead
    (:func:`benchmarks.infra.allocator.keep_freed_memory`: a step reuses the memory the last
    one freed rather than taking it from the kernel again, page by page).

    Args:
        run: the run; its ``trainer`` section gives the settings (:func:`trainer_settings`).
        purpose: one of :data:`PURPOSES`.
        model: the model; ``None`` (or a method that trains nothing) gets no speed settings.
        seed: the run's seed, from which each epoch's random streams are drawn.
        options: placement and the GPU switches.
        settings: resolved Trainer settings used instead of the run's (LightningCLI's).
        callbacks: the caller's own, placed after the divergence check.
        progress: show the progress bar.
        explicit_interval: whether the run set ``log_every_n_steps`` (default: its trainer
            section says so).
        given: Trainer arguments only the caller knows (logger, folder, a trial's epochs).
    """
    if purpose not in PURPOSES:
        raise ValueError(f"unknown trainer purpose {purpose!r}; accepted: {', '.join(PURPOSES)}")
    options = options or RunOptions()
    arguments = {**(trainer_settings(run, options) if settings is None else settings),
                 **PURPOSES[purpose], **given}
    if purpose != "fit":
        arguments["enable_progress_bar"] = progress
    devices = arguments.get("devices", 1)
    trains = model is not None and getattr(model, "requires_training", True)
    speed = (gpu_speed_settings(run, options, runs_on_gpu(arguments.get("accelerator", "auto")),
                                devices if isinstance(devices, int) else 0)
             if trains else {})
    if speed and arguments.get("precision") is None:
        arguments["precision"] = speed["precision"]
    compiled = apply_gpu_speed_settings(model, speed)
    if trains and not runs_on_gpu(arguments.get("accelerator", "auto")):
        keep_freed_memory()
    if explicit_interval is None:
        explicit_interval = "log_every_n_steps" in run.trainer
    arguments["callbacks"] = training_callbacks(seed, callbacks, progress, explicit_interval)
    arguments.update(cluster_plugins(arguments))
    return BuiltTrainer(pl.Trainer(**arguments), speed, compiled)


def experiment_trainer(max_epochs: int, **overrides: Any) -> pl.Trainer:
    """A plain Trainer for an experiment's internal model (no run, no GPU settings): one CPU
    device, no logger, checkpoint, progress bar, model summary or sanity validation;
    ``overrides`` add or replace Trainer arguments (``limit_val_batches=0``, say)."""
    arguments = {"max_epochs": max_epochs, "accelerator": "cpu", "devices": 1, "logger": False,
                 "enable_progress_bar": False, **PURPOSES["perf"], **overrides}
    return pl.Trainer(**arguments, **cluster_plugins(arguments))
