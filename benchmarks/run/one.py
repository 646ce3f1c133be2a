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
from benchmarks.run.checkpoint import LAST, LOGGED, EpochCheckpoint, logged_metrics
from benchmarks.run.divergence import Diverged
from benchmarks.run.spec import (
    STAGING_SUFFIXES,
    ConfigError,
    Preempted,
    RunSpec,
    SuiteSettings,
    inside,
)
from benchmarks.run.trainer import (
    RunOptions,
    build_trainer,
    check_global_batch,
    runs_on_gpu,
    trainer_settings,
)
from benchmarks.run.wandb_runs import WandbSettings

LOGGERS = ("csv", "wandb")
#: The trained weights every run keeps (``torch.load(path, weights_only=True)`` reads them).
ENCODER_FILE = "encoder.pt"


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


@dataclass
class Training:
    """What training a run left: its epochs and steps, the epoch it resumed from, the online
    probe's last values, and the divergence that stopped it, if one did."""

    epochs: int = 0
    steps: int = 0
    resumed_epoch: int | None = None
    online: dict[str, float] = field(default_factory=dict)
    diverged: Diverged | None = None
    #: The GPU speed settings its Trainer turned on, and each compiled module's status.
    speed: dict[str, Any] = field(default_factory=dict)
    compiled: dict[str, str] = field(default_factory=dict)


def train_and_evaluate(settings: SuiteSettings, run: RunSpec, seed: int, attempt: Path,
                       config: dict[str, Any], trainer_kwargs: dict[str, Any],
                       checkpoint: Path | None, options: RunOptions) -> dict[str, Any]:
    """The body of :func:`run_one`: train in ``attempt`` (from ``checkpoint`` when given), keep
    the weights, evaluate, and return the result (written by the caller)."""
    start = time.perf_counter()
    datamodule, model = instantiate(run, seed)
    check_against_data(settings, run, datamodule)
    on_gpu = runs_on_gpu(trainer_kwargs["accelerator"])
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
                   "wall_seconds": time.perf_counter() - start,
                   "gpu_speed_settings": training.speed, "compiled": training.compiled})
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
    built = build_trainer(run, "bench", model, seed=seed, options=options,
                          settings=trainer_kwargs, callbacks=[saver], progress=options.progress,
                          logger=logger, default_root_dir=attempt)
    trainer, training.speed, training.compiled = built.trainer, built.speed, built.compiled
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
