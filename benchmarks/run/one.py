"""One (run, seed): build it, train it (resuming from its checkpoint), evaluate it, write it.

Everything the suite runner, the Ray tasks it places on a cluster, the search and
``clusterbench evaluate`` do with a single configuration goes through here; this module reads
no suite file and knows nothing of leaderboards or the command line.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import yaml

from benchmarks.infra.atomic import write_atomic
from benchmarks.infra.environment import LOADED_FROM, environment
from benchmarks.infra.locking import seed_lock
from benchmarks.infra.tensor_files import load_tensors
from benchmarks.protocols.assignment import assignment_ari  # noqa: F401 - callers import it here
from benchmarks.protocols.evaluate import (
    check_evaluation_sizes,
    evaluate_encoder,
    protocol_metrics,
)
from benchmarks.protocols.protocol import EvaluationLine, stderr_report
from benchmarks.run.checkpoint import LAST, LOGGED, EpochCheckpoint, EpochSeed, logged_metrics
from benchmarks.run.divergence import Diverged, StopOnDivergence
from benchmarks.run.progress import CurveEveryEpoch, StepProgressBar
from benchmarks.run.spec import (
    STAGING_SUFFIXES,
    ConfigError,
    Preempted,
    RunSpec,
    SuiteSettings,
    inside,
    suggest,
)
from benchmarks.run.wandb_runs import WandbSettings
from modules.methods.capabilities import ChannelsLastModel
from modules.ranges import check_count, check_count_or_fraction

LOGGERS = ("csv", "wandb")
#: The trained weights every run keeps (``torch.load(path, weights_only=True)`` reads them).
ENCODER_FILE = "encoder.pt"


@dataclass
class RunOptions:
    """How a run is carried out (not what it computes: that is the run and its suite settings).

    ``devices`` is always passed to Lightning: ``data.batch_size`` is the global batch, split
    evenly over them, and several devices train with DDP and global BatchNorm statistics.
    ``checkpoint_every`` epochs (and at the end, and on SIGTERM) ``last.ckpt`` is written;
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


#: What sits beside a seed's result folder ``seed-K``: the attempt that will replace it, the
#: result set aside while it does (``STAGING_SUFFIXES``) and the seed's lock.
SEED_SIBLINGS = ("", *STAGING_SUFFIXES, ".lock")


def seed_folder(suite_dir: Path, run: RunSpec, seed: int) -> Path:
    """``<suite_dir>/runs/<run slug>/seed-<k>``, unchecked: for reading a finished result (a
    driver deciding what to send out); anything that writes goes through :func:`run_dir`."""
    return suite_dir / "runs" / run.slug / f"seed-{seed}"


def run_dir(suite_dir: Path, run: RunSpec, seed: int) -> Path:
    """:func:`seed_folder`, checked with the folders beside it (:data:`SEED_SIBLINGS`) by
    :func:`inside`: each lies under ``suite_dir``, and neither they, nor what they hold, nor the
    folders above them is a symbolic link. Called before anything of the seed is written,
    resumed, deleted or renamed (a planted ``seed-K.attempt`` link would have the run write and
    delete through it, and be renamed into place as ``seed-K``)."""
    final = seed_folder(suite_dir, run, seed)
    for suffix in SEED_SIBLINGS:
        inside(suite_dir, final.with_name(final.name + suffix), tree=True)
    return final


def instantiate(run: RunSpec, seed: int, model_kwargs: dict[str, Any] | None = None):
    """Seed everything, then build the run's datamodule and its model sized for that data;
    ``model_kwargs`` replaces the run's model arguments (the value check drops the weights)."""
    from datamodules import DATAMODULES
    from modules.methods import METHODS

    pl.seed_everything(seed, workers=True, verbose=False)
    datamodule = DATAMODULES[run.dataset](**run.data_kwargs(), seed=seed)
    model = METHODS[run.method](num_classes=datamodule.num_classes,
                                input_shape=datamodule.input_shape,
                                **(run.model if model_kwargs is None else model_kwargs))
    return datamodule, model


def resolved_config(settings: SuiteSettings, run: RunSpec, seed: int) -> dict[str, Any]:
    """Everything a result depends on, as ``config.yaml`` and ``result.json`` record it; a
    finished result with the same configuration is not trained again."""
    config = {"suite": settings.name, "suite_file": settings.path, "fast": settings.fast,
              "seed": seed, "headline": settings.headline, "plots": settings.plots,
              "run": asdict(run), "evaluation": settings.evaluation}
    if settings.overrides:  # a result of the suite as its file says has no such key
        config["overrides"] = settings.overrides
    return json.loads(json.dumps(config, default=str))  # as it reads back from the files


#: What a configuration's hash leaves out: the seed (seeds of one configuration are averaged),
#: where the suite file lives, and how the leaderboard shows it.
UNHASHED = ("seed", "suite_file", "headline", "plots")


def configuration_hash(config: dict[str, Any]) -> str:
    """A short hash of what a result depends on apart from its seed: seeds with equal hashes are
    the same experiment and may be averaged; a leaderboard never mixes two hashes in one row.

    >>> a = {"seed": 0, "run": {"name": "simclr", "trainer": {"max_epochs": 40}}}
    >>> configuration_hash(a) == configuration_hash({**a, "seed": 1})
    True
    >>> configuration_hash(a) == configuration_hash({**a, "run": {"name": "simclr",
    ...                                                           "trainer": {"max_epochs": 2}}})
    False
    """
    import hashlib

    kept = {k: v for k, v in config.items() if k not in UNHASHED}
    text = json.dumps(kept, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def same_configuration(a: dict[str, Any] | None, b: dict[str, Any]) -> bool:
    """Equal configurations; where the suite file lives (named or given by path) does not count."""
    if a is None:
        return False
    def strip(c: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in c.items() if k != "suite_file"}
    return strip(json.loads(json.dumps(a, default=str))) == strip(b)


def training_identity(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """What a run's training depends on: its configuration less the evaluation, how results
    are shown (headline, plots), the paper's numbers and where the suite file lives. Two
    configurations with the same identity train the same weights; an evaluation changed or added
    re-evaluates them (:func:`reevaluate`) instead of training again.

    >>> a = {"seed": 0, "run": {"name": "r", "paper": {}}, "evaluation": {"knn": {"k": [5]}}}
    >>> b = {**a, "evaluation": {"knn": {"k": [5, 20]}}, "headline": "knn5_top1"}
    >>> training_identity(a) == training_identity(b)
    True
    >>> training_identity(a) == training_identity({**a, "seed": 1})
    False
    """
    if config is None:
        return None
    config = json.loads(json.dumps(config, default=str))
    kept = {k: v for k, v in config.items()
            if k not in ("evaluation", "headline", "plots", "suite_file")}
    if isinstance(kept.get("run"), dict):
        kept["run"] = {k: v for k, v in kept["run"].items() if k != "paper"}
    return kept


def finished_result(final: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The ``result.json`` in ``final`` when it was computed with ``config``, else None."""
    path = final / "result.json"
    try:
        result = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return result if same_configuration(result.get("config"), config) else None


def resume_point(attempt: Path, config: dict[str, Any]) -> Path | None:
    """The checkpoint of an unfinished attempt at the same configuration, else None. A
    checkpoint that cannot be read (truncated by a full disk, overwritten) is said in one line
    and moved aside, beside the attempt, as ``<seed folder>.unreadable-last.ckpt``: the run
    starts again instead of failing on every later ``bench``."""
    import sys

    from benchmarks.infra.tensor_files import BadFile

    checkpoint = attempt / "checkpoints" / LAST
    try:
        earlier = yaml.safe_load((attempt / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    # an evaluation changed while the run trained does not discard its training
    if not checkpoint.is_file() or training_identity(earlier) != training_identity(config):
        return None
    try:
        saved = load_tensors(checkpoint, "checkpoint", mmap=True)
        int(saved["epoch"]), int(saved["global_step"])
    except (BadFile, KeyError, TypeError, ValueError) as err:
        aside = attempt.with_name(attempt.name.removesuffix(".attempt") + ".unreadable-last.ckpt")
        os.replace(checkpoint, aside)
        print(f"clusterbench: {err}; it is kept as {aside} and the run starts again",
              file=sys.stderr, flush=True)
        return None
    return checkpoint


def trainer_settings(run: RunSpec, options: RunOptions) -> dict[str, Any]:
    """The run's Trainer arguments with the placement made explicit: the command line's
    accelerator and devices override the suite's, ``devices`` defaults to 1 (never "all the
    GPUs there are"), and several devices mean DDP with global BatchNorm (SimCLR's global BN).
    ``max_epochs`` is at least 1: Lightning takes 0 (nothing trained, the untrained encoder
    scored) and -1 (no end) without a word."""
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


#: The Trainer's counts a run checks, with the least value of each: Lightning takes a 0 in
#: several without a word (``max_epochs: 0`` scores the untrained encoder) or fails only once the
#: model is built (``accumulate_grad_batches: 0``, ``check_val_every_n_epoch: 0``).
TRAINER_COUNTS = {"max_epochs": 1, "accumulate_grad_batches": 1, "check_val_every_n_epoch": 1,
                  "log_every_n_steps": 1, "min_epochs": 0}
#: Its batch limits (a count or a fraction), with the least count: a run that trains on no
#: batch (``limit_train_batches: 0``) has nothing to score.
TRAINER_LIMITS = {"limit_train_batches": 1, "limit_val_batches": 0, "limit_test_batches": 0}


def check_trainer_values(settings: dict[str, Any]) -> None:
    """The counts and batch limits among a run's Trainer ``settings`` in their ranges
    (:data:`TRAINER_COUNTS`, :data:`TRAINER_LIMITS`; ``None`` where Lightning takes it means
    its default); ``ValueError`` naming the first one out of range."""
    for name, low in TRAINER_COUNTS.items():
        if settings.get(name) is not None or name == "max_epochs":
            check_count(name, settings.get(name), low=low)
    for name, low in TRAINER_LIMITS.items():
        if settings.get(name) is not None:
            check_count_or_fraction(name, settings[name], low=low)


def ddp_settings(accelerator: str) -> dict[str, Any]:
    """The Trainer settings of one fit over several devices (``bench --gpus-per-run N``, a
    search's trial of N devices): one process per device, started for this fit alone, so the
    caller stays in the parent and gets the trained weights back; BatchNorm statistics over the
    global batch on GPUs (SimCLR's global BN). torch's SyncBatchNorm has no CPU implementation,
    so CPU processes keep their own."""
    return {"strategy": "ddp_spawn", "sync_batchnorm": runs_on_gpu(accelerator)}


def runs_on_gpu(accelerator: str) -> bool:
    """Whether a run with this Trainer ``accelerator`` trains and is evaluated on a CUDA GPU:
    the one answer the Trainer settings, the speed settings and the result's ``device`` share."""
    return torch.cuda.is_available() and accelerator in ("auto", "gpu", "cuda")


def gpu_speed_settings(run: RunSpec, options: RunOptions, on_gpu: bool,
                       devices: int = 1) -> dict[str, Any]:
    """What a run on a GPU gets beyond its suite's settings, by default (``--no-fast-gpu`` turns
    it off; a suite's own ``trainer.precision`` or ``model.channels_last`` wins): bf16 autocast
    (losses stay float32), channels-last convolutions, cuDNN's autotuner, TF32 matrix products,
    and ``torch.compile`` of the backbone and projector (falling back to eager, with a warning,
    where compilation fails; single-device runs only: a multi-device run's model is pickled into
    its spawned processes). Recorded in every result and shown in the leaderboard's header.

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
    """Turn on what :func:`gpu_speed_settings` chose, on this process and ``model``. Returns
    each compiled module's status, kept up to date as the run goes (the result records it):
    ``compiled``, or ``failed (reason)`` for a module whose compilation failed and which runs
    eagerly from then on (:func:`compile_or_eager`); the other modules stay compiled."""
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
    """``torch.compile(module)`` whose forward, should compiling it fail (a graph the backend
    cannot build, a compiler missing on the machine), runs the module eagerly instead, from then
    on, with a warning, and records ``status[name] = "failed (reason)"``; the other compiled
    modules are not affected (no process-wide ``suppress_errors``). An error that the eager
    forward raises too is the model's, and propagates. The parameters keep their names under
    ``_orig_mod.`` (:func:`encoder_state` writes the plain names)."""
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
    """The run's accelerator is one Lightning knows and this machine has, with at least the
    run's ``devices`` of it (CPU processes: at most one per core). Lightning would otherwise
    fail only once the data are loaded (no GPU), or start more DDP processes than the machine
    can run at once, which never finish.

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


def make_logger(kind: str, directory: Path, settings: SuiteSettings, run: RunSpec, seed: int,
                config: dict[str, Any], wandb: WandbSettings, trains: bool = True):
    """A CSV logger (``<directory>/logs/metrics.csv``, in the run's attempt folder), or one W&B
    run per (run, seed) that stays open for the evaluation (offline when this machine has no
    W&B login), its files in the suite's ``wandb/`` folder: the attempt folder is renamed when
    the run finishes, and the ``wandb sync`` path W&B prints must stay true."""
    from lightning.pytorch.loggers import CSVLogger

    from benchmarks.run.wandb_runs import make_wandb_logger

    if kind == "csv":
        return CSVLogger(save_dir=directory, name="logs", version="")
    if kind == "wandb":
        return make_wandb_logger(wandb, suite=settings.name, run=run.name, trains=trains,
                                 seed=seed, budget=settings.budget,
                                 save_dir=directory.parents[2],  # <suite>/runs/<run>/seed-k.attempt
                                 config=config)
    raise ConfigError(f"unknown logger {kind!r}; available: {', '.join(LOGGERS)}")


def keep_earlier_curves(logs: Path) -> None:
    """Lightning's CSV logger starts ``metrics.csv`` afresh; before a resume, what the earlier
    attempts logged is set aside to be put back in front by :func:`join_curves`."""
    current, earlier = logs / "metrics.csv", logs / "metrics.earlier.csv"
    if current.is_file():
        rows = read_rows(earlier) + read_rows(current)
        write_atomic(earlier, rows_csv(rows))
        current.unlink()


def join_curves(logs: Path, resumed_step: int) -> None:
    """``metrics.csv`` = the earlier attempts' rows before the step the run resumed at, then
    this attempt's."""
    earlier = logs / "metrics.earlier.csv"
    if not earlier.is_file():
        return
    kept = [r for r in read_rows(earlier) if int(float(r.get("step") or 0)) < resumed_step]
    write_atomic(logs / "metrics.csv", rows_csv(kept + read_rows(logs / "metrics.csv")))
    earlier.unlink()


def read_rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.open())) if path.is_file() else []


def rows_csv(rows: list[dict[str, str]]) -> str:
    columns = sorted({k for r in rows for k in r})
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def recorded_metrics(method: type, evaluation: dict[str, Any]) -> set[str]:
    """The metric names a result of ``method`` can hold under the suite's ``evaluation``: the
    protocols' (:func:`benchmarks.protocols.evaluate.protocol_metrics`: those the suite names,
    and the automatic ones ``method`` has the capability for, a cluster-specific model's own
    ``assignment_ari``) and the online probe's validation accuracy of a trained method (what
    :func:`train_and_evaluate` adds)."""
    names = protocol_metrics(evaluation, method)
    if method.requires_training:
        names |= {m for m in method.epoch_metrics if m.startswith("online_val")}
    return names


def encoder_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The trained weights the features come from (backbone, heads, blocks), without the online
    probe, which is a training-time monitor."""
    # a compiled module's weights sit under "_orig_mod.": the file keeps the plain names
    return {k.replace("._orig_mod", ""): v.detach().cpu() for k, v in model.state_dict().items()
            if not k.startswith("online_probe.")}


def run_one(settings: SuiteSettings, run: RunSpec, seed: int, suite_dir: Path,
            options: RunOptions | None = None) -> dict[str, Any]:
    """Train (when the method trains), evaluate, and write ``result.json``, ``config.yaml`` and
    ``encoder.pt``; returns the result (``"reused": True`` when it was already there).

    * A finished result computed with the same configuration is returned as it is, unless
      ``options.rerun``.
    * Everything is written into ``seed-N.attempt/``, which replaces ``seed-N/`` only once the
      result is complete: a crashing re-run leaves the earlier result as it was.
    * ``seed-N.attempt/checkpoints/last.ckpt`` is written every ``checkpoint_every`` epochs and
      on SIGTERM; an attempt with the same configuration resumes from it (a killed run, a Ray
      task retried on another node). The checkpoints are deleted once the result is written.
    """
    options = options or RunOptions()
    final = run_dir(suite_dir, run, seed)
    with seed_lock(final.with_name(final.name + ".lock"),
                   report=stderr_report(f"{run.name} seed {seed}")):
        return run_one_locked(settings, run, seed, final, options)


def computed_by_other_code(result: dict[str, Any]) -> bool:
    """Whether ``result`` was computed by code other than this process's: another commit, a
    working tree with uncommitted changes then or now, or an unknown one.

    >>> computed_by_other_code({"git": {"commit": "0" * 40, "dirty": False}})
    True
    """
    then, now = result.get("git") or {}, LOADED_FROM
    return (not then.get("commit") or then.get("commit") != now.get("commit")
            or bool(then.get("dirty")) or bool(now.get("dirty")))


def reusable(done: dict[str, Any] | None, options: RunOptions) -> bool:
    """A finished result with the same configuration is kept, unless ``options`` say to
    retrain it (``rerun``, or ``rerun_changed`` and other code computed it)."""
    return done is not None and not options.rerun and not (
        options.rerun_changed and computed_by_other_code(done))


def already_done(settings: SuiteSettings, run: RunSpec, seed: int, suite_dir: Path,
                 options: RunOptions) -> dict[str, Any] | None:
    """The finished result of ``run`` and ``seed`` under ``suite_dir`` with the same
    configuration (``"reused": True``), or None: what :func:`run_one` would return at once,
    read without its lock (a finished result is only ever replaced whole), so that a driver
    need not send such a job to another process or node."""
    if options.rerun:
        return None
    done = finished_result(seed_folder(suite_dir, run, seed),
                           resolved_config(settings, run, seed))
    return {**done, "reused": True} if reusable(done, options) else None


def run_one_locked(settings: SuiteSettings, run: RunSpec, seed: int, final: Path,
                   options: RunOptions) -> dict[str, Any]:
    """:func:`run_one` while it holds the seed folder's lock."""
    config = resolved_config(settings, run, seed)
    finish_finalisation(final)
    if reusable(done := finished_result(final, config), options):
        return {**done, "reused": True}
    trained = evaluation_changed(final, config)
    if reusable(trained, options):  # its weights are kept: scored again, not trained again
        return reevaluate(settings, run, seed, final, config, trained, options)
    trainer_kwargs = trainer_settings(run, options)
    check_global_batch(run, trainer_kwargs["devices"])
    attempt = final.with_name(final.name + ".attempt")
    checkpoint = None if options.rerun else resume_point(attempt, config)
    if checkpoint is None and attempt.exists():  # what an earlier attempt at another config left
        shutil.rmtree(attempt)
    attempt.mkdir(parents=True, exist_ok=True)
    write_atomic(attempt / "config.yaml", yaml.safe_dump(config, sort_keys=False))

    try:
        result = train_and_evaluate(settings, run, seed, attempt, config, trainer_kwargs,
                                    checkpoint, options)
    except BaseException:
        if options.logger == "wandb":  # the W&B run ends as failed, not left open
            import wandb

            if wandb.run is not None:
                wandb.run.finish(exit_code=1)
        raise
    if result["status"] == "diverged" and options.logger == "wandb":
        import wandb

        if wandb.run is not None:
            wandb.run.summary["diverged"] = result["error"]
            wandb.run.finish(exit_code=1)
    write_atomic(attempt / "result.json", json.dumps(result, indent=2, default=str))
    shutil.rmtree(attempt / "checkpoints", ignore_errors=True)  # encoder.pt holds the weights
    replace_directory(attempt, final)
    return result


def evaluation_changed(final: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The finished result in ``final`` whose training is ``config``'s but whose evaluation (or
    headline, plots, paper numbers) is not, with its weights kept; else None."""
    try:
        done = json.loads((final / "result.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(done, dict) or done.get("status") != "finished":
        return None
    if training_identity(done.get("config")) != training_identity(config):
        return None
    trains = (final / ENCODER_FILE).is_file() or not done.get("train_steps")
    return done if trains else None


#: What a re-evaluated result keeps of the training that made its weights.
TRAINING_FIELDS = ("epochs", "train_steps", "resumed_from_epoch", "devices", "train_seconds",
                   "device", "gpu_speed_settings", "compiled")


def kept_weights(folder: Path) -> dict[str, torch.Tensor] | None:
    """The encoder weights a run kept in its seed ``folder`` (:data:`ENCODER_FILE`), read without
    running code from the file; None where it kept none (a method that trains nothing)."""
    path = folder / ENCODER_FILE
    return load_tensors(path, "weights file") if path.is_file() else None


def load_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], source: Path,
                 builder: str = "its config", advice: str = "") -> None:
    """``state`` (read from ``source``) into ``model``: only the online probe, a training monitor
    that :func:`encoder_state` leaves out, may be missing; weights of another model are refused
    before they score anything."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith("online_probe.")]
    if missing or unexpected:
        raise ConfigError(f"the weights in {source} do not fit the model {builder} builds "
                          f"(missing {missing[:3]}, unexpected {unexpected[:3]}){advice}")


def reevaluate(settings: SuiteSettings, run: RunSpec, seed: int, final: Path,
               config: dict[str, Any], trained: dict[str, Any],
               options: RunOptions) -> dict[str, Any]:
    """Score the weights kept in ``final`` with ``config``'s evaluation, without training: the
    weights and training curves are carried into a new attempt, the protocols run, and the new
    result replaces the old in one rename (a kill leaves the old result whole). The result says
    which evaluation it came from (``reevaluated``)."""
    import sys

    start = time.perf_counter()
    print(f"clusterbench: {run.name} seed {seed}: the evaluation changed, the training did not: "
          "re-evaluating the kept weights", file=sys.stderr, flush=True)
    attempt = final.with_name(final.name + ".attempt")
    if attempt.exists():
        shutil.rmtree(attempt)
    attempt.mkdir(parents=True)
    if (final / ENCODER_FILE).is_file():
        shutil.copy2(final / ENCODER_FILE, attempt / ENCODER_FILE)
    if (final / "logs").is_dir():
        shutil.copytree(final / "logs", attempt / "logs")
    write_atomic(attempt / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    datamodule, model = instantiate(run, seed)
    if (state := kept_weights(attempt)) is not None:
        load_weights(model, state, final / ENCODER_FILE, builder=repr(run.name),
                     advice="; --rerun trains it again")
    datamodule.setup("fit")
    on_gpu = runs_on_gpu(trainer_settings(run, options)["accelerator"])
    model.to("cuda" if on_gpu else "cpu")
    result = evaluate_and_record(model, datamodule, settings, run, seed, attempt, config)
    result.update({k: trained[k] for k in TRAINING_FIELDS if k in trained})
    result["metrics"].update({k: v for k, v in trained.get("metrics", {}).items()
                              if k.startswith("online_val")})
    result["wall_seconds"] = time.perf_counter() - start
    result["reevaluated"] = {"trained_under": configuration_hash(trained["config"]),
                             "evaluation_seconds": result["wall_seconds"]}
    write_atomic(attempt / "result.json", json.dumps(result, indent=2, default=str))
    replace_directory(attempt, final)
    return result


def training_callbacks(seed: int, saver: EpochCheckpoint, progress: bool,
                       explicit_interval: bool = True) -> list[pl.Callback]:
    """A run's callbacks: the divergence check first (a diverged epoch is never saved), the
    checkpoint, the per-epoch seeding, the logging interval (an epoch's steps at most, unless
    the run set it: ``explicit_interval``) and the progress bar. None of them reads a value from
    the device inside a training step, but every ``READ_EVERY`` steps."""
    return [StopOnDivergence(), saver, EpochSeed(seed), CurveEveryEpoch(explicit_interval),
            *([StepProgressBar()] if progress else [])]


@dataclass
class Training:
    """What training a run left: its epochs and steps, the epoch it resumed from, the online
    probe's last values, and the divergence that stopped it, if one did."""

    epochs: int = 0
    steps: int = 0
    resumed_epoch: int | None = None
    online: dict[str, float] = field(default_factory=dict)
    diverged: Diverged | None = None


def train_and_evaluate(settings: SuiteSettings, run: RunSpec, seed: int, attempt: Path,
                       config: dict[str, Any], trainer_kwargs: dict[str, Any],
                       checkpoint: Path | None, options: RunOptions) -> dict[str, Any]:
    """The body of :func:`run_one`: train in ``attempt`` (from ``checkpoint`` when given), keep
    the weights, evaluate, and return the result (written by the caller)."""
    start = time.perf_counter()
    datamodule, model = instantiate(run, seed)
    check_against_data(settings, run, datamodule)
    on_gpu = runs_on_gpu(trainer_kwargs["accelerator"])
    speed = (gpu_speed_settings(run, options, on_gpu, trainer_kwargs["devices"])
             if model.requires_training else {})
    compiled = apply_gpu_speed_settings(model, speed)
    logger = (make_logger(options.logger, attempt, settings, run, seed,
                          wandb_config(config, model) if options.logger == "wandb" else config,
                          options.wandb, trains=model.requires_training)
              if options.logger == "wandb" or model.requires_training else None)
    training = Training()
    if model.requires_training:
        training = train(model, datamodule, settings, run, seed, attempt, config, trainer_kwargs,
                         checkpoint, options, logger)
    common = {"resumed_from_epoch": training.resumed_epoch, "devices": trainer_kwargs["devices"],
              "train_seconds": time.perf_counter() - start, "device": "gpu" if on_gpu else "cpu"}
    datamodule.setup("fit")
    if training.diverged is not None:  # a result that says so: the leaderboard shows it failed
        err = training.diverged
        return {**record(model, datamodule, settings, run, seed, config), **common,
                "status": "diverged", "error": str(err), "epochs": err.epoch,
                "train_steps": err.step, "wall_seconds": time.perf_counter() - start}
    model.to("cuda" if on_gpu else "cpu")
    result = evaluate_and_record(model, datamodule, settings, run, seed, attempt, config)
    result.update({**common, "epochs": training.epochs, "train_steps": training.steps,
                   "wall_seconds": time.perf_counter() - start, "gpu_speed_settings": speed,
                   "compiled": compiled})
    result["metrics"].update(training.online)
    if options.logger == "wandb":  # the same W&B run as the training curves
        from benchmarks.run.wandb_runs import record_evaluation

        record_evaluation(logger, result["metrics"], read_figures(attempt, result["figures"]),
                          result["notes"], extra_summary=time_summary(result))
    return result


def time_summary(result: dict[str, Any]) -> dict[str, float]:
    """A result's seconds as a W&B run's summary gives them, beside its ``eval/`` metrics: the
    training, the whole evaluation and each of its steps (``time/<step>_seconds``).

    >>> time_summary({"train_seconds": 9.5, "eval_seconds": 3.0, "protocol_seconds": {"knn": 2}})
    {'time/train_seconds': 9.5, 'time/eval_seconds': 3.0, 'time/knn_seconds': 2}
    """
    return {"time/train_seconds": result["train_seconds"],
            "time/eval_seconds": result["eval_seconds"],
            **{f"time/{step}_seconds": seconds
               for step, seconds in result.get("protocol_seconds", {}).items()}}


def wandb_config(config: dict[str, Any], model) -> dict[str, Any]:
    """A W&B run's config: the run as resolved, and under ``hyperparameters`` the model's
    arguments this configuration uses (not those it never reads)."""
    return {**config, "hyperparameters": {k: v for k, v in model.hparams.items()
                                          if k not in model.unused_arguments}}


def check_against_data(settings: SuiteSettings, run: RunSpec, datamodule) -> None:
    """The evaluation's settings against the sizes of the loaded splits, before the run trains:
    a ConfigError (bad input, one line) rather than a run that fails after its training."""
    try:
        check_evaluation_sizes(settings.evaluation, datamodule.split_sizes())
    except ValueError as err:
        raise ConfigError(f"run {run.name!r} on {run.dataset}: evaluation.{err}") from None


def train(model, datamodule, settings: SuiteSettings, run: RunSpec, seed: int, attempt: Path,
          config: dict[str, Any], trainer_kwargs: dict[str, Any], checkpoint: Path | None,
          options: RunOptions, logger) -> Training:
    """Fit ``model`` in ``attempt`` (from ``checkpoint`` when given, the curves of the
    attempts before kept) and write its weights; a diverged fit comes back with ``diverged``
    set and no weights written."""
    training, logged, resumed_step = Training(), {}, 0
    if checkpoint is not None:
        saved = load_tensors(checkpoint, "checkpoint", mmap=True)
        training.resumed_epoch, resumed_step = int(saved["epoch"]), int(saved["global_step"])
        logged = dict(saved.get(LOGGED, {}))
        if options.logger == "csv":
            keep_earlier_curves(attempt / "logs")
            logger = make_logger("csv", attempt, settings, run, seed, config, options.wandb)
    saver = EpochCheckpoint(attempt / "checkpoints", options.checkpoint_every)
    trainer = pl.Trainer(**trainer_kwargs, logger=logger,
                         callbacks=training_callbacks(
                             seed, saver, options.progress,
                             explicit_interval="log_every_n_steps" in run.trainer),
                         enable_progress_bar=options.progress, enable_checkpointing=False,
                         enable_model_summary=False, default_root_dir=attempt)
    try:
        fit(trainer, model, datamodule, checkpoint, saver, f"{run.name} seed {seed}")
    except Diverged as err:
        training.diverged = err
    if training.resumed_epoch is not None and options.logger == "csv":
        join_curves(attempt / "logs", resumed_step)
    if training.diverged is not None:
        return training
    training.epochs, training.steps = trainer.current_epoch, trainer.global_step
    if trainer_kwargs["devices"] > 1:  # the spawned processes kept the loop's counters
        saved = load_tensors(saver.path, "checkpoint", mmap=True)
        training.epochs, training.steps = int(saved["epoch"]) + 1, int(saved["global_step"])
    # what this fit logged, over what was logged before the checkpoint it resumed from (a run
    # resumed after its last epoch validates no more)
    logged.update(logged_metrics(trainer))
    training.online = {k: v for k, v in logged.items() if k.startswith("online_val")}
    write_atomic(attempt / ENCODER_FILE, torch_bytes(encoder_state(model)))
    return training


def fit(trainer: pl.Trainer, model, datamodule, checkpoint: Path | None,
        saver: EpochCheckpoint, what: str) -> None:
    """``trainer.fit``, a stop said in one line: SIGTERM (a scheduler's preemption) raises
    :class:`Preempted` once the checkpoint is saved, Ctrl-C a ``KeyboardInterrupt`` naming the
    epoch and the last checkpoint; :class:`Diverged` propagates."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    try:
        trainer.fit(model, datamodule=datamodule,
                    ckpt_path=str(checkpoint) if checkpoint else None)
    except SIGTERMException as err:
        raise Preempted(f"{what}: stopped by SIGTERM; its checkpoint is {saver.path}, the same "
                        "command resumes it") from err
    except SystemExit:
        if not trainer.interrupted:
            raise
        # Lightning ends a fit stopped by Ctrl-C with exit status 1 and SIGINT ignored: put both
        # back, so that the command says what finished and exits 130
        signal.signal(signal.SIGINT, signal.default_int_handler)
        raise KeyboardInterrupt(
            f"{what} stopped in epoch {trainer.current_epoch}"
            + (f", its last checkpoint is {saver.path}" if saver.path.is_file() else "")
        ) from None


def torch_bytes(state: dict[str, torch.Tensor]) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def read_figures(directory: Path, names: list[str]) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in names
            if (directory / name).is_file()}


def evaluate_and_record(model, datamodule, settings: SuiteSettings, run: RunSpec, seed: int,
                        directory: Path, config: dict[str, Any]) -> dict[str, Any]:
    """The suite's protocols on the trained ``model``, its figures written into ``directory``;
    returns the result record (without the training figures, which the caller adds)."""
    start = time.perf_counter()
    said = EvaluationLine(f"{run.name} seed {seed}")
    evaluation = evaluate_encoder(model, datamodule, settings.evaluation, seed, report=said)
    said.finish(time.perf_counter() - start)
    for name, png in evaluation.figures.items():
        write_atomic(directory / name, png)
    figures = list(evaluation.figures)
    if run.searched:  # the search behind this row, in its report
        trials_png = Path(run.searched["directory"]) / "trials.png"
        if trials_png.is_file():
            write_atomic(directory / "search-trials.png", trials_png.read_bytes())
            figures.append("search-trials.png")
    return {**record(model, datamodule, settings, run, seed, config),
            "metrics": evaluation.metrics, "notes": evaluation.notes, **evaluation.records,
            "figures": figures, "eval_seconds": time.perf_counter() - start,
            "protocol_seconds": evaluation.seconds}


def record(model, datamodule, settings: SuiteSettings, run: RunSpec, seed: int,
           config: dict[str, Any]) -> dict[str, Any]:
    """What every result says of its run, whether it was evaluated or it diverged."""
    return {
        "suite": settings.name, "run": run.name, "method": run.method, "dataset": run.dataset,
        "data_provenance": datamodule.provenance, "data_source": datamodule.source,
        "backbone": model.hparams.get("backbone", model.hparams.get("arch", "none")),
        "seed": seed, "budget": settings.budget,
        "epochs": 0, "train_steps": 0,
        "batch_size": datamodule.batch_size, "split_sizes": datamodule.split_sizes(),
        "status": "finished", "metrics": {}, "notes": {}, "per_layer": None, "figures": [],
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "search": run.searched,
        **environment(), "config": config, "config_hash": configuration_hash(config),
    }


def finish_finalisation(final: Path) -> None:
    """Finish what a kill left of a run's last step (``result.json`` written in
    ``seed-K.attempt``, then the folder renamed into place by :func:`replace_directory`): a
    complete attempt is renamed into place (its result is not trained again); an earlier result
    set aside as ``seed-K.replaced`` with nothing complete to replace it is put back; one left
    beside its replacement is removed."""
    attempt = final.with_name(final.name + ".attempt")
    old = final.with_name(final.name + ".replaced")
    try:
        complete = isinstance(json.loads((attempt / "result.json").read_text()), dict)
    except (OSError, ValueError):
        complete = False
    if complete:
        shutil.rmtree(attempt / "checkpoints", ignore_errors=True)
        replace_directory(attempt, final)
    elif old.is_dir() and not final.exists():
        old.rename(final)
    elif old.is_dir():
        shutil.rmtree(old)


def replace_directory(new: Path, target: Path) -> None:
    """Put the finished ``new`` directory in ``target``'s place. The old one is renamed aside
    first and removed after, so ``target`` always holds one whole result."""
    old = target.with_name(target.name + ".replaced")
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        target.rename(old)
    new.rename(target)
    if old.exists():
        shutil.rmtree(old)
