"""One (run, seed): build it, train it (resuming from its checkpoint), evaluate it, write it.

The suite runner, its Ray tasks and ``clusterbench evaluate`` all go through here; it reads no
suite file and knows nothing of leaderboards or the command line.
"""

from __future__ import annotations

import io
import json
import shutil
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from benchmarks.infra import stop_signals
from benchmarks.infra.atomic import write_atomic
from benchmarks.infra.environment import environment
from benchmarks.infra.errors import ConfigError, Preempted
from benchmarks.infra.locking import seed_lock
from benchmarks.infra.tensor_files import load_tensors
from benchmarks.infra.yaml_files import dump_yaml
from benchmarks.protocols.assignment import assignment_ari  # noqa: F401 - callers import it here
from benchmarks.protocols.evaluate import (
    check_evaluation_sizes,
    evaluate_encoder,
    protocol_metrics,
)
from benchmarks.protocols.protocol import EvaluationLine, stderr_report
from benchmarks.run.cache import (
    ENCODER_FILE,
    encoder_state,
    evaluation_changed,
    finish_finalisation,
    finished_result,
    kept_weights,
    load_weights,
    replace_directory,
    resume_point,
    reusable,
    run_dir,
    set_aside_unreadable_result,
)
from benchmarks.run.checkpoint import LOGGED, EpochCheckpoint, logged_metrics
from benchmarks.run.curves import (
    join_curves,
    keep_earlier_curves,
    make_logger,
    time_summary,
    wandb_config,
)
from benchmarks.run.divergence import Diverged
from benchmarks.run.identity import configuration_hash, resolved_config
from benchmarks.run.spec import RunSpec, SuiteSettings
from benchmarks.run.trainer import (
    BuiltTrainer,
    RunOptions,
    build_trainer,
    check_global_batch,
    runs_on_gpu,
    trainer_settings,
)
from modules.ranges import check_settings


def instantiate(run: RunSpec, seed: int, model_kwargs: dict[str, Any] | None = None):
    """Seed everything, then build the run's datamodule and its model sized for that data;
    ``model_kwargs`` replaces the run's model arguments (the value check drops the weights)."""
    from datamodules import DATAMODULES
    from modules.methods import METHODS

    pl.seed_everything(seed, workers=True, verbose=False)
    datamodule = DATAMODULES[run.dataset](**run.data_kwargs(), seed=seed)
    check_settings(run.data_kwargs())  # a dataset's own sizes and scales (its base checks its)
    model = METHODS[run.method](num_classes=datamodule.num_classes,
                                input_shape=datamodule.input_shape,
                                **(run.model if model_kwargs is None else model_kwargs))
    return datamodule, model


def recorded_metrics(method: type, evaluation: dict[str, Any]) -> set[str]:
    """The metric names a result of ``method`` can hold under the suite's ``evaluation``: the
    protocols' (:func:`benchmarks.protocols.evaluate.protocol_metrics`) and, for a trained method,
    the online probe's validation accuracy."""
    names = protocol_metrics(evaluation, method)
    if method.requires_training:
        names |= {m for m in method.epoch_metrics if m.startswith("online_val")}
    return names


def run_one(settings: SuiteSettings, run: RunSpec, seed: int, suite_dir: Path,
            options: RunOptions | None = None) -> dict[str, Any]:
    """Train (when the method trains), evaluate, and write ``result.json``, ``config.yaml`` and
    ``encoder.pt``; returns the result (``"reused": True`` when one with the same configuration
    was there, unless ``options.rerun``).

    Everything goes into ``seed-N.attempt/``, which replaces ``seed-N/`` only once complete, and
    whose ``checkpoints/last.ckpt`` an attempt with the same configuration resumes from.
    """
    options = options or RunOptions()
    final = run_dir(suite_dir, run, seed)
    with seed_lock(final.with_name(final.name + ".lock"),
                   report=stderr_report(f"{run.name} seed {seed}")):
        return run_one_locked(settings, run, seed, final, options)


def run_one_locked(settings: SuiteSettings, run: RunSpec, seed: int, final: Path,
                   options: RunOptions) -> dict[str, Any]:
    """:func:`run_one` while it holds the seed folder's lock."""
    config = resolved_config(settings, run, seed)
    finish_finalisation(final, config)
    set_aside_unreadable_result(final)
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
    write_atomic(attempt / "config.yaml", dump_yaml(config))

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


#: What a re-evaluated result keeps of the training that made its weights.
TRAINING_FIELDS = ("epochs", "train_steps", "resumed_from_epoch", "devices", "train_seconds",
                   "device", "gpu_speed_settings", "compiled")


def reevaluate(settings: SuiteSettings, run: RunSpec, seed: int, final: Path,
               config: dict[str, Any], trained: dict[str, Any],
               options: RunOptions) -> dict[str, Any]:
    """Scores the weights kept in ``final`` with ``config``'s evaluation, without training; the
    new result (marked ``reevaluated``) replaces the old in one rename."""
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
    write_atomic(attempt / "config.yaml", dump_yaml(config))
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
    built, saver = run_trainer(model, run, seed, attempt, trainer_kwargs, options, logger)
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


def run_trainer(model, run: RunSpec, seed: int, attempt: Path, trainer_kwargs: dict[str, Any],
                options: RunOptions, logger, callbacks: Sequence[pl.Callback] = ()
                ) -> tuple[BuiltTrainer, EpochCheckpoint]:
    """The Trainer :func:`train` fits ``model`` with in ``attempt``, and its checkpoint saver:
    a bench run's :func:`~benchmarks.run.trainer.build_trainer` with the run's resolved Trainer
    settings, the saver, then ``callbacks`` (the training-throughput benchmark's pacing, which
    times this Trainer's step)."""
    saver = EpochCheckpoint(attempt / "checkpoints", options.checkpoint_every)
    built = build_trainer(run, "bench", model, seed=seed, options=options,
                          settings=trainer_kwargs, callbacks=[saver, *callbacks],
                          progress=options.progress, logger=logger, default_root_dir=attempt)
    return built, saver


def fit(trainer: pl.Trainer, model, datamodule, checkpoint: Path | None,
        saver: EpochCheckpoint, what: str) -> None:
    """``trainer.fit``, a stop said in one line: a stop signal (a scheduler's SIGTERM, Ctrl-C,
    :mod:`benchmarks.infra.stop_signals`) raises :class:`Preempted` naming it once the checkpoint
    of the step in flight is saved; a stop that could not wait for the step (a second signal) a
    ``KeyboardInterrupt`` naming the epoch and the last checkpoint; :class:`Diverged`
    propagates."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    try:
        trainer.fit(model, datamodule=datamodule,
                    ckpt_path=str(checkpoint) if checkpoint else None)
    except SIGTERMException as err:
        signum = stop_signals.received() or signal.SIGTERM
        raise Preempted(f"{what}: stopped by {stop_signals.signal_name(signum)}; its checkpoint "
                        f"is {saver.path}, the same command resumes it", signum=signum) from err
    except SystemExit:
        if not trainer.interrupted:
            raise
        # Lightning ends a fit stopped by Ctrl-C with exit status 1 and SIGINT ignored: put both
        # back (the command's own handler where it has one), so that the command says what
        # finished and exits 128 + the signal's number
        signal.signal(signal.SIGINT, signal.default_int_handler)
        stop_signals.reinstate(signal.SIGINT)
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
        "suite": settings.name, "run": run.name, "method": run.method,
        "dataset": datamodule.dataset_label,
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


