"""One trial of a search: the suite run with the trial's values, in one Ray Tune trial.

A trial on one node trains in its own process, or over several devices with Lightning DDP in
processes it spawns (no nested Ray Train run, so no placement group of its own to wait for or
leak). It reports the metric after each validation epoch once its checkpoint is on disk, and a
trial with a record first replays the epochs it holds (:mod:`tune.records`).
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from benchmarks.infra.said import said_to
from benchmarks.run.checkpoint import EpochCheckpoint
from benchmarks.run.divergence import Diverged
from benchmarks.run.spec import RunSpec
from benchmarks.run.wandb_runs import SearchWandb
from tune.records import SAID, TrialRecord, trial_folder


@dataclass
class TrialSpec:
    """What every trial of one search shares: the suite run, its budget and its records."""

    run: RunSpec
    max_epochs: int
    metric: str
    seed: int
    wandb: SearchWandb | None = None  # the trials' W&B runs, with --wandb
    devices: int = 1  # more than one: Lightning DDP over that many spawned processes
    fast_gpu: bool = True  # on a GPU: the run's speed settings (RunOptions.fast_gpu)
    compile: bool = True  # on a GPU, with fast_gpu: torch.compile (RunOptions.compile)
    state: str = "."  # the search's state folder (records in trials/)
    session: str = ""  # this start of the search: a retry here reruns a failed trial
    configs: list[dict[str, Any]] = field(default_factory=list)


def apply_config(run: RunSpec, config: dict[str, Any]) -> RunSpec:
    """A copy of ``run`` with the sampled ``section.arg`` values set."""
    run = copy.deepcopy(run)
    for key, value in config.items():
        section, _, arg = key.partition(".")
        if section in ("model", "data", "trainer"):
            getattr(run, section)[arg] = value
    return run


#: The datamodule this worker process set up last, by its data settings and seed: trials run in
#: reused workers (``reuse_actors``) and the trials of one search mostly share their data, so
#: reading, checking and splitting it (seconds for TinyImageNet) is paid once per worker.
PREPARED: dict[str, Any] = {}


def prepared(datamodule, run: RunSpec, seed: int):
    """``datamodule`` set up, or this process's earlier one with the same data settings and seed
    (they determine the splits entirely; a datamodule keeps no state between fits)."""
    key = json.dumps({"data": run.data, "seed": seed}, sort_keys=True, default=str)
    if key not in PREPARED:
        datamodule.setup("fit")
        PREPARED.clear()  # one dataset at a time: a search has one
        PREPARED[key] = datamodule
    return PREPARED[key]


class EndWandbRun(pl.Callback):
    """Ends the trial's W&B run with the fit, its exit code saying how (a run left open is
    abandoned when Ray ends the trial's process: no summary, no exit record). A trial ASHA
    stops ends with 0."""

    def __init__(self, logger) -> None:
        self.logger = logger

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            self.logger.experiment.finish(exit_code=0)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        stopped = isinstance(exception, SystemExit) and exception.code in (0, None)
        if trainer.is_global_zero:
            self.logger.experiment.finish(exit_code=0 if stopped else 1)


def trial_run(trial: TrialSpec, config: dict[str, Any]) -> RunSpec:
    """The suite run as a trial trains it: ``config``'s values set, at most the search's epochs."""
    run = apply_config(trial.run, config)
    run.trainer["max_epochs"] = trial.max_epochs
    return run


def build_trial(trial: TrialSpec, config: dict[str, Any], callbacks: list,
                number: int | None = None):
    """The trial's datamodule, model and Lightning Trainer (the suite run with ``config``), over
    ``trial.devices`` devices; with ``--wandb`` (``trial.wandb``), trial ``number``'s W&B run
    (:func:`trial_logger`) logs it."""
    from benchmarks.run.one import instantiate
    from benchmarks.run.trainer import RunOptions, build_trainer

    run = trial_run(trial, config)
    datamodule, model = instantiate(run, trial.seed)
    datamodule = prepared(datamodule, run, trial.seed)
    logger = trial_logger(trial, number, run, model, config) if number is not None else False
    # a non-finite loss fails the trial at once (Ray records the error)
    trainer = build_trainer(run, "trial", model, seed=trial.seed,
                            options=RunOptions(devices=trial.devices, fast_gpu=trial.fast_gpu,
                                               compile=trial.compile),
                            callbacks=[*callbacks, *([EndWandbRun(logger)] if logger else [])],
                            logger=logger, max_epochs=trial.max_epochs).trainer
    return datamodule, model, trainer


def trial_logger(trial: TrialSpec, number: int, run: RunSpec, model, config: dict[str, Any]):
    """Trial ``number``'s W&B run (:class:`~benchmarks.run.wandb_runs.SearchWandb`), its config
    nested as a bench run's (the run as resolved, and under ``hyperparameters`` the arguments its
    method uses), beside ``trial``: its number and the keys the search sampled; no logger
    without --wandb."""
    if trial.wandb is None:
        return False
    from benchmarks.run.cache import resolved_config
    from benchmarks.run.curves import wandb_config

    logged = wandb_config(resolved_config(trial.wandb.suite, run, trial.seed), model)
    logged["trial"] = {"number": number, "searched": sorted(config)}
    return trial.wandb.trial_logger(number, logged)


def reported(row: dict[str, Any]) -> dict[str, Any]:
    """What Tune gets for one record row."""
    return {k: v for k, v in row.items() if k != "epoch"} | {"epoch": row["epoch"]}


class TrialProgress(pl.Callback):
    """Each epoch: the record's new row (if it validated), the checkpoint (every rank), the
    epochs it holds, then the report to Tune; in that order so a kill loses at most the epoch
    in flight."""

    def __init__(self, record: TrialRecord, metric: str, report: bool) -> None:
        self.record, self.metric, self.report = record, metric, report
        self.saver = EpochCheckpoint(record.folder)
        self.row: dict[str, Any] | None = None
        self.seen = 0

    def on_validation_epoch_start(self, trainer: pl.Trainer,
                                  pl_module: pl.LightningModule) -> None:
        self.seen = 0

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        self.seen += len(batch[-1])  # (inputs, labels)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking and self.metric in trainer.callback_metrics:
            # the examples the metric was measured on, over every device (the kNN monitor
            # scores at most monitor_queries of each device's)
            seen = (min(self.seen, getattr(pl_module, "monitor_queries", self.seen))
                    if self.metric == "online_knn_acc" else self.seen)
            self.row = {self.metric: float(trainer.callback_metrics[self.metric]),
                        "world_size": trainer.world_size,
                        "metric_examples": seen * trainer.world_size}

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        epoch, row, self.row = trainer.current_epoch + 1, self.row, None
        if row is not None and trainer.is_global_zero:
            self.record.rows.append({"epoch": epoch, **row})
            self.record.save()
        self.saver.save(trainer)
        if trainer.is_global_zero:
            self.record.checkpointed = epoch
            self.record.save()
        if row is not None and self.report:
            from ray import tune

            tune.report(reported({"epoch": epoch, **row}))


def train_trial(config: dict[str, Any], trial: TrialSpec) -> None:
    """Ray Tune's trainable: the trial numbered ``config["trial"]``, reporting the metric
    every validation epoch (ASHA's time unit)."""
    index = config["trial"]
    folder = trial_folder(Path(trial.state), index)
    with said_to(folder / SAID):  # what it says to the user reaches the driver (TrialLines)
        train_recorded(trial, index, folder)


def train_recorded(trial: TrialSpec, index: int, folder: Path) -> None:
    """The trial numbered ``index`` from where its record in ``folder`` stands."""
    from ray import tune

    record = TrialRecord.open(folder, index, trial.configs[index])
    if record.error is not None and record.error_session != trial.session:
        return  # failed in an earlier start of this search: its record says so (TrialOutcomes)
    record.error = record.error_session = None
    record.rewind()
    for row in record.rows:  # what it reported before, as far as its checkpoint holds
        tune.report(reported(row))
    if record.checkpointed >= trial.max_epochs:
        return
    if record.checkpointed:
        print(f"clusterbench: trial {index:04d} resumes from its checkpoint at epoch "
              f"{record.checkpointed} of {trial.max_epochs}", file=sys.stderr, flush=True)
    record.attempts.append({"session": trial.session, "from_epoch": record.checkpointed})
    record.save()
    try:
        if trial.devices == 1:
            fit_here(trial, record)
        else:
            fit_spawned(trial, record)
    except Exception as err:
        failed = TrialRecord.open(record.folder, index, record.config)
        failed.error = str(err).strip().splitlines()[-1] if str(err).strip() else repr(err)
        failed.error_session = trial.session
        failed.save()
        if isinstance(err, Diverged):  # the same values diverge again: no retry (a new worker)
            return
        raise


def fit_here(trial: TrialSpec, record: TrialRecord) -> None:
    """The fit in the trial's own process, on one device."""
    progress = TrialProgress(record, trial.metric, report=True)
    datamodule, model, trainer = build_trial(trial, record.config, [progress], record.index)
    resume = record.checkpoint if record.checkpointed else None
    trainer.fit(model, datamodule=datamodule, ckpt_path=str(resume) if resume else None,
                weights_only=True)


def fit_spawned(trial: TrialSpec, record: TrialRecord) -> None:
    """The fit as Lightning DDP over ``trial.devices`` spawned processes, the trial's process
    reporting each epoch rank 0 records; a stopped trial kills what it spawned."""
    progress = TrialProgress(record, trial.metric, report=False)
    datamodule, model, trainer = build_trial(trial, record.config, [progress],
                                             record.index)
    resume = record.checkpoint if record.checkpointed else None
    failure: list[BaseException] = []

    def fit() -> None:
        try:
            trainer.fit(model, datamodule=datamodule, ckpt_path=str(resume) if resume else None,
                        weights_only=True)
        except BaseException as err:  # noqa: BLE001 - handed to the trial's thread
            failure.append(err)

    worker = threading.Thread(target=fit, name="ddp-fit", daemon=True)
    worker.start()
    sent = len(record.rows)
    try:
        while worker.is_alive():
            worker.join(timeout=0.5)
            sent = report_new_rows(record, sent)
    except BaseException:
        for child in multiprocessing.active_children():
            child.kill()
        raise
    if failure:
        raise failure[0]


def report_new_rows(record: TrialRecord, sent: int) -> int:
    """Reports to Tune the rows after the first ``sent`` that the trial's record on disk (as
    rank 0 last saved it) holds in its checkpoint; returns how many are sent now."""
    from ray import tune

    saved = TrialRecord.open(record.folder, record.index, record.config)  # empty until written
    held = [r for r in saved.rows if r["epoch"] <= saved.checkpointed]
    for row in held[sent:]:
        tune.report(reported(row))
    return max(sent, len(held))

