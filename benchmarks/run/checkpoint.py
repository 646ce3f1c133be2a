"""Checkpoints a run resumes from (``last.ckpt`` at epoch ends and on a stop signal), what is
checked before Lightning reads one (:func:`lightning_checkpoint`: a file copied or edited fails in
one line, never half-way through Lightning's restore), and the per-epoch seeding and random
streams kept in the checkpoint
that make a resumed CPU run end where an uninterrupted one does, from an epoch's end or from
the middle of an epoch."""

from __future__ import annotations

import os
import random
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch

from benchmarks.infra.tensor_files import BadFile, load_tensors, state_mismatch
from benchmarks.run.stop import SavedOnStop

#: The checkpoint a run resumes from, in its ``checkpoints/`` folder.
LAST = "last.ckpt"
#: The checkpoint key holding the logged values at the time of the save (``online_val_acc``...).
LOGGED = "clusterbench_logged_metrics"
#: The key naming the Lightning version that wrote a checkpoint: Lightning reads it before
#: anything else (to upgrade an older checkpoint), so every load of a file without it fails.
VERSION_KEY = "pytorch-lightning_version"
#: What Lightning reads from a checkpoint to resume a fit, and the type each must have.
RESUME_FIELDS = {"epoch": int, "global_step": int, "state_dict": dict,
                 "optimizer_states": list, "lr_schedulers": list, "loops": dict}
#: What each stage reads from a checkpoint: ``fit`` resumes a training, ``validate`` and
#: ``test`` score its weights (and read their own loop's counters), ``weights`` is
#: ``clusterbench evaluate``'s read of the weights alone.
STAGES = ("fit", "validate", "test", "weights")
#: What is accepted, said after every refusal.
ACCEPTED = ("accepted: a checkpoint Lightning wrote (a clusterbench fit .ckpt, or a run's "
            "last.ckpt)")


def resumable_checkpoint(path: str | Path, what: str,
                         model_state: Mapping[str, Any] | None = None,
                         max_epochs: int | None = None) -> dict[str, Any]:
    """The checkpoint at ``path`` when Lightning can resume a fit from it
    (:func:`lightning_checkpoint` for ``fit``): a copied or edited file (``epoch: inf``, a key
    missing, no version, an empty ``state_dict``) would otherwise fail every later run at the
    same place.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile(suffix=".ckpt") as f:
    ...     torch.save({"epoch": float("inf"), "global_step": 2}, f.name)
    ...     resumable_checkpoint(f.name, "checkpoint")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    benchmarks.infra.tensor_files.BadFile: checkpoint ....ckpt: epoch = inf is not a count ...

    Raises:
        BadFile: one line naming the file and the field.
    """
    return lightning_checkpoint(path, what, "fit", model_state, max_epochs)


def lightning_checkpoint(path: str | Path, what: str, stage: str,
                         model_state: Mapping[str, Any] | None = None,
                         max_epochs: int | None = None) -> dict[str, Any]:
    """The checkpoint at ``path``, read as tensors only from a regular file of bounded size
    (:func:`load_tensors`), once everything Lightning reads from it for ``stage`` (one of
    :data:`STAGES`) is there and of its type, so that Lightning never fails on it half-way:

    - its version (:data:`VERSION_KEY`), with which Lightning upgrades it, and the upgrade;
    - a ``state_dict`` of tensors, not empty, and with ``model_state`` (the model's own, on any
      device, ``meta`` included) the same keys and shapes, as Lightning loads it strictly;
    - to resume a fit, each of :data:`RESUME_FIELDS` (``epoch`` and ``global_step`` counts),
      optimiser states as ``torch.optim`` saves them, scheduler states, the fit loop's counters
      (its epochs at most ``max_epochs``, as Lightning refuses more); to validate or test, that
      loop's counters where the file has loops;
    - the callbacks' states, where it has some, as mappings.

    Raises:
        BadFile: one line naming the file, the field and what is accepted.
    """
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {', '.join(STAGES)}, got {stage!r}")
    saved = load_tensors(path, what, mmap=True)
    if not isinstance(saved, dict):
        raise BadFile(f"{what} {path} holds a {type(saved).__name__}, not the mapping of a "
                      f"Lightning checkpoint; {ACCEPTED}")
    fields = RESUME_FIELDS if stage == "fit" else {"state_dict": dict}
    for key, kind in fields.items():
        if key not in saved:
            raise BadFile(f"{what} {path} has no {key!r}, which Lightning "
                          f"{'resumes' if stage == 'fit' else 'reads the weights'} from; "
                          f"{ACCEPTED}")
        value = saved[key]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise BadFile(f"{what} {path}: {key} = {str(value)[:40]} is not a count (an "
                          "integer of at least 0), so Lightning cannot resume from it")
        if not isinstance(value, kind):
            raise BadFile(f"{what} {path}: {key} is a {type(value).__name__}, not the "
                          f"{kind.__name__} Lightning {'resumes' if stage == 'fit' else 'reads'} "
                          "from")
    problem = (version_problem(saved) or state_problem(saved["state_dict"], model_state)
               or stage_problem(saved, stage, max_epochs))
    if problem is not None:
        raise BadFile(f"{what} {path}: {problem}; {ACCEPTED}")
    return saved


def version_problem(saved: dict[str, Any]) -> str | None:
    """What keeps Lightning from reading the version of ``saved`` and upgrading it to its own
    layout (which it does, in place, before it reads anything else), or None once upgraded."""
    from lightning.pytorch.utilities.migration import migrate_checkpoint

    version = saved.get(VERSION_KEY)
    if not isinstance(version, str):
        return (f"{VERSION_KEY} is {'missing' if version is None else repr(version)[:40]}, "
                "the version of Lightning that wrote it (a text such as '2.6.0')")
    try:
        migrate_checkpoint(saved)
    except Exception as err:  # noqa: BLE001 - any failure of the upgrade is the file's
        return (f"Lightning cannot upgrade it from version {version[:40]!r} "
                f"({type(err).__name__}: {str(err)[:80]})")
    return None


def plain_key(key: str) -> str:
    """A state-dict key as the eager model names it: a compiled module (a run on a GPU) keeps
    its weights under ``_orig_mod.``, and a resumed run compiles it again.

    >>> plain_key("backbone._orig_mod.conv.weight")
    'backbone.conv.weight'
    """
    return key.replace("._orig_mod", "").removeprefix("_orig_mod.")


def state_problem(state: dict[Any, Any], model_state: Mapping[str, Any] | None) -> str | None:
    """What is wrong with a checkpoint's ``state_dict`` for Lightning's strict load, or None."""
    if not state:
        return "its state_dict is empty: it holds no weights"
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            return (f"state_dict[{str(key)[:80]!r}] is a {type(value).__name__}"
                    f"{'' if isinstance(key, str) else ' under a key that is not a text'}, "
                    "not a tensor")
    if model_state is None:
        return None
    own = {plain_key(k): v for k, v in model_state.items()}
    mismatch = state_mismatch(own, {plain_key(k): v for k, v in state.items()}, "the model")
    return None if mismatch is None else f"its state_dict does not fit the model: {mismatch}"


def stage_problem(saved: dict[str, Any], stage: str, max_epochs: int | None) -> str | None:
    """What Lightning reads for ``stage`` besides the weights (optimiser and scheduler states,
    its loop's counters, the callbacks' states) that is missing or of another type, or None."""
    if stage == "weights":
        return None
    if stage == "fit":
        problem = optimizer_problem(saved["optimizer_states"])
        if problem is not None:
            return problem
        for i, scheduler in enumerate(saved["lr_schedulers"]):
            if not isinstance(scheduler, dict):
                return f"lr_schedulers[{i}] is a {type(scheduler).__name__}, not a mapping"
    loops = saved.get("loops")
    if loops is not None or stage == "fit":
        problem = loop_problem(loops, f"{stage}_loop", max_epochs if stage == "fit" else None)
        if problem is not None:
            return problem
    callbacks = saved.get("callbacks")
    if callbacks is not None:
        if not isinstance(callbacks, dict):
            return f"callbacks is a {type(callbacks).__name__}, not a mapping"
        for key, value in callbacks.items():
            if not isinstance(value, dict):
                return f"callbacks[{str(key)[:80]!r}] is a {type(value).__name__}, not a mapping"
            if str(key).startswith("ModelCheckpoint") and not isinstance(
                    value.get("best_model_path"), str):
                return f"callbacks[{str(key)[:80]!r}] has no best_model_path (a text)"
    return None


def optimizer_problem(states: list[Any]) -> str | None:
    """What keeps ``torch.optim.Optimizer.load_state_dict`` from reading each of ``states``
    (Lightning's ``optimizer_states``), or None; every method here trains with an optimiser."""
    if not states:
        return "optimizer_states is empty: no optimiser's state to resume"
    for i, state in enumerate(states):
        where = f"optimizer_states[{i}]"
        if not isinstance(state, dict) or not isinstance(state.get("state"), dict):
            return f"{where} has no 'state' mapping, as torch.optim saves one"
        groups = state.get("param_groups")
        if not isinstance(groups, list) or not groups:
            return f"{where} has no param_groups, as torch.optim saves them"
        for j, group in enumerate(groups):
            params = group.get("params") if isinstance(group, dict) else None
            if not isinstance(params, list) or not all(
                    isinstance(p, int) and not isinstance(p, bool) for p in params):
                return f"{where}.param_groups[{j}] has no list of parameter numbers (params)"
        for key, value in state["state"].items():
            if not isinstance(value, dict):
                return (f"{where}.state[{str(key)[:40]}] is a {type(value).__name__}, not a "
                        "parameter's state")
    return None


def loop_problem(loops: Any, loop: str, max_epochs: int | None) -> str | None:
    """What keeps Lightning from restoring ``loops[loop]``'s counters (a mapping of
    ``<child>.<counter>`` keys, as ``Loop.state_dict`` writes it), or None; a fit resumes its
    epoch from ``epoch_progress``, at most ``max_epochs``."""
    if not isinstance(loops, dict) or not isinstance(loops.get(loop), dict):
        return f"loops has no {loop} mapping, which Lightning restores its counters from"
    state = loops[loop]
    for key, value in state.items():
        where = f"loops.{loop}[{str(key)[:80]!r}]"
        if str(key).endswith("state_dict") and not isinstance(value, dict):
            return f"{where} is a {type(value).__name__}, not a mapping"
        if str(key).endswith("progress"):  # a counter Lightning restores (Progress classes)
            problem = progress_problem(value, str(key))
            if problem is not None:
                return f"{where} {problem}"
    if loop == "fit_loop":
        if "epoch_progress" not in state:
            return f"loops.{loop} has no epoch_progress, the epoch a fit resumes from"
        epochs = state["epoch_progress"]["current"].get("completed", 0)
        if max_epochs is not None and max_epochs >= 0 and epochs > max_epochs:
            return (f"loops.{loop} has {epochs} epochs completed, more than the run's "
                    f"max_epochs {max_epochs}")
    return None


def progress_problem(value: Any, key: str) -> str | None:
    """What keeps Lightning's progress tracker named ``key`` from loading ``value``, or None:
    each holds ``total`` and ``current`` counts, a batch's says whether it was the last one, an
    optimisation's holds its optimiser's ``step`` and ``zero_grad`` trackers.

    >>> progress_problem({"total": {"ready": 1}, "current": {"ready": "x"}}, "epoch_progress")
    "current['ready'] = 'x' is not a count"
    """
    if not isinstance(value, dict):
        return f"is a {type(value).__name__}, not a progress tracker's counts"
    if key.endswith("optim_progress"):  # the optimisation's: one optimiser's two trackers
        optimizer = value.get("optimizer")
        if not isinstance(optimizer, dict):
            return "has no optimizer progress"
        return next((f"optimizer.{name} {problem}" for name in ("step", "zero_grad")
                     if (problem := progress_problem(optimizer.get(name), name)) is not None),
                    None)
    if key.endswith("batch_progress") and not isinstance(value.get("is_last_batch"), bool):
        return "has no is_last_batch (true or false)"
    for part in ("total", "current"):
        counts = value.get(part)
        if not isinstance(counts, dict) or not counts:
            return f"has no {part} counts"
        for name, count in counts.items():
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                return f"{part}[{str(name)[:40]!r}] = {str(count)[:40]!r} is not a count"
    return None


def epoch_seed(seed: int, epoch: int, rank: int) -> int:
    """The seed of one device's random streams in one epoch, a function of the run's seed, the
    epoch and the rank only: ranks draw different augmentations, and a resumed epoch draws the
    same ones as an uninterrupted run.

    >>> epoch_seed(0, 1, 0) == epoch_seed(0, 1, 0), epoch_seed(0, 1, 0) != epoch_seed(0, 1, 1)
    (True, True)
    """
    return int(np.random.SeedSequence([seed, epoch, rank]).generate_state(1, np.uint64)[0]
               % 2**63)


class EpochSeed(pl.Callback):
    """Seeds torch (CPU and CUDA), NumPy and Python at the start of every training epoch with
    :func:`epoch_seed`, and keeps where a checkpoint stands within its epoch
    (:data:`RESUME_POINT`): the batches trained and, on one device, the random streams as they
    were. A fit resumed from a checkpoint saved in the middle of an epoch (a stop signal's)
    trains the rest of that epoch on the batches and streams an uninterrupted run would: its
    datamodule's next loader starts after the trained batches
    (:meth:`~datamodules.base.ClusterDataModule.start_within`), and the streams are put back
    before its first batch. On several devices the streams kept are those of rank 0 only, so
    each rank seeds the epoch again: close to an uninterrupted run, not identical."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.resumed: dict[str, Any] | None = None  # the mid-epoch point a fit resumes from

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.seed_epoch(trainer)

    def seed_epoch(self, trainer: pl.Trainer) -> None:
        value = epoch_seed(self.seed, trainer.current_epoch, trainer.global_rank)
        torch.manual_seed(value)
        np.random.seed(value % 2**32)
        random.seed(value)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # a fit resumed in the middle of an epoch starts no epoch (Lightning calls no
        # on_train_epoch_start): its streams are set here, before its first batch's views
        point, self.resumed = self.resumed, None
        if point is None:
            return
        if point["world_size"] == trainer.world_size == 1:
            set_random_streams(point["streams"])
        else:
            self.seed_epoch(trainer)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict) -> None:
        progress = trainer.fit_loop.epoch_loop.batch_progress.current
        # the batches trained: a save in on_train_batch_end (a DDP rank's stop) comes before
        # Lightning counts the batch completed
        checkpoint[RESUME_POINT] = {
            "epoch": trainer.current_epoch, "batches": progress.processed,
            "of": int(trainer.num_training_batches)
            if trainer.num_training_batches != float("inf") else -1,
            "world_size": trainer.world_size, "streams": random_streams()}

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict) -> None:
        from datamodules.base import ClusterDataModule

        first = first_epoch_trained(checkpoint)
        point = checkpoint.get(RESUME_POINT)
        batches = point["batches"] if mid_epoch(point) and point["epoch"] == first else 0
        if batches:
            self.resumed = point
        if first is None or not isinstance(trainer.datamodule, ClusterDataModule):
            return
        # the loader is made, and with workers its first indices drawn, before Lightning sets
        # the sampler's epoch: it starts at the epoch the fit trains first (the shuffle of
        # epoch 0 again, before: every resume with loader workers drifted from an
        # uninterrupted run), after the batches already trained
        trainer.datamodule.start_within(first, batches)
        if batches:  # Lightning's warning of a mid-epoch resume on a loader that cannot
            warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that "
                                    "ended before the epoch ended")


def first_epoch_trained(checkpoint: dict) -> int | None:
    """The epoch a fit resumed from ``checkpoint`` trains first: the epochs whose batches all ran
    (Lightning's ``processed``, counted before the epoch-end hooks that save a checkpoint; one
    stopped in the middle is trained on from where it stopped); None for a checkpoint without
    Lightning's counters.

    >>> first_epoch_trained({"loops": {"fit_loop": {"epoch_progress": {"current": {
    ...     "ready": 3, "started": 3, "processed": 2, "completed": 2}}}}})
    2
    """
    try:
        processed = checkpoint["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"]
    except (KeyError, TypeError):
        return None
    return processed if isinstance(processed, int) and not isinstance(processed, bool) else None


#: The checkpoint key of where it stands within its epoch (:class:`EpochSeed`).
RESUME_POINT = "clusterbench_resume_point"


def mid_epoch(point: Any) -> bool:
    """Whether a checkpoint's :data:`RESUME_POINT` lies inside an epoch: some of its batches
    trained, not all.

    >>> point = {"epoch": 0, "batches": 3, "of": 8, "world_size": 1, "streams": {}}
    >>> mid_epoch(point), mid_epoch({**point, "batches": 8}), mid_epoch(None)
    (True, False, False)
    """
    if not isinstance(point, dict) or not isinstance(point.get("streams"), dict):
        return False
    counts = [point.get(k) for k in ("epoch", "batches", "of", "world_size")]
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
        return False
    _, batches, of, _ = counts
    return 0 < batches and (of < 0 or batches < of)


def random_streams() -> dict[str, Any]:
    """torch's (CPU and, once used, CUDA), NumPy's and Python's random states, as tensors and
    plain values that ``torch.load(weights_only=True)`` reads."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, state, gauss_next = random.getstate()
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],
            "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": pos,
                      "has_gauss": has_gauss, "gauss": gauss},
            "python": {"version": version, "state": list(state), "gauss_next": gauss_next}}


def set_random_streams(streams: dict[str, Any]) -> None:
    """The random states :func:`random_streams` kept, put back."""
    torch.set_rng_state(streams["torch"])
    if streams["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(streams["cuda"])
    n = streams["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"],
                         n["has_gauss"], n["gauss"]))
    py = streams["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss_next"]))


def logged_metrics(trainer: pl.Trainer) -> dict[str, float]:
    """The scalar values logged so far (the last epoch's and the last validation's)."""
    return {k: float(v) for k, v in trainer.callback_metrics.items()
            if isinstance(v, (int, float)) or v.numel() == 1}


class EpochCheckpoint(SavedOnStop):
    """Writes ``<dirpath>/last.ckpt`` atomically every ``every`` epochs, after the last, and on
    a stop signal (a scheduler's preemption, :class:`StopAfterStep`) after the step in flight.

    It holds Lightning's full state as plain tensors that ``torch.load(weights_only=True)`` reads.
    With :class:`EpochSeed`, a resume continues exactly as the uninterrupted run on the CPU, from
    an epoch's end or, on one device, from the middle of an epoch (a stop signal's checkpoint).
    """

    def __init__(self, dirpath: str | Path, every: int = 1) -> None:
        if every < 1:
            raise ValueError(f"checkpoint_every must be at least 1 epoch, got {every}")
        self.dirpath, self.every = Path(dirpath), every

    @property
    def path(self) -> Path:
        return self.dirpath / LAST

    def save(self, trainer: pl.Trainer) -> None:
        for logger in trainer.loggers:  # the curves on disk reach as far as the checkpoint
            logger.save()
        tmp = self.dirpath / f".{LAST}.tmp"
        # every rank takes part, rank 0 writes; the full state (weights_only=False means
        # optimiser and loops too), which a resume needs
        trainer.save_checkpoint(tmp, weights_only=False)
        if trainer.is_global_zero:
            os.replace(tmp, self.path)
        trainer.strategy.barrier("checkpoint")

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        epoch = trainer.current_epoch + 1
        if epoch % self.every == 0 or epoch >= (trainer.max_epochs or epoch):
            self.save(trainer)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict) -> None:
        # A run killed after its last checkpoint resumes with nothing left to train, so no
        # validation runs again: the values of the last one travel with the weights.
        checkpoint[LOGGED] = logged_metrics(trainer)

    def save_on_stop(self, trainer: pl.Trainer) -> None:
        self.save(trainer)
