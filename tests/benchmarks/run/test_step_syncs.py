"""No host-device synchronisation inside a training step.

Reading a GPU value on the host (``loss.item()``, ``float(loss)``, a progress bar showing the
loss) waits for the GPU's queue to drain; once a step, it leaves a fast GPU idle while Python
issues the next step. On the CPU such a read shows up as ``aten._local_scalar_dense`` (and a
copy to another device as ``aten._to_copy``): counted here with a ``TorchDispatchMode`` over two
epochs of training, as the suite runner and a search trial configure it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from lightning.pytorch import Callback, Trainer
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.run.checkpoint import EpochCheckpoint
from benchmarks.run.one import instantiate
from benchmarks.run.progress import READ_EVERY
from benchmarks.run.spec import RunSpec
from benchmarks.run.trainer import build_trainer
from modules.methods import METHODS

RUN = RunSpec(name="simclr", method="simclr", model={"backbone_width": 4},
              data={"name": "digits", "batch_size": 8, "limit_per_class": 10},
              trainer={"max_epochs": 2, "accelerator": "cpu"})


class CountHostReads(TorchDispatchMode):
    """Counts the operations that read a device value on the host, by training step.

    The optimisers' step counters are host tensors by design (torch keeps them on the CPU unless
    ``capturable``): reading them is no synchronisation on a GPU, so they are not counted."""

    READS = {"aten._local_scalar_dense.default", "aten.is_nonzero.default",
             "aten.nonzero.default"}

    def __init__(self, trainer: Trainer) -> None:
        super().__init__()
        self.trainer = trainer
        self.step: int | None = None  # the batch in flight (None: outside the batch loop)
        self.reads: dict[int | None, list[str]] = {}

    def host_tensor(self, tensor) -> bool:
        return isinstance(tensor, torch.Tensor) and any(
            state.get("step") is tensor for optimizer in self.trainer.optimizers
            for state in optimizer.state.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name in self.READS and not (args and self.host_tensor(args[0])):
            self.reads.setdefault(self.step, []).append(name)
        return func(*args, **(kwargs or {}))


class MarkSteps(Callback):
    def __init__(self, mode: CountHostReads) -> None:
        self.mode = mode

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.mode.step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # a step lasts until the next one starts (loading, moving and augmenting its batch
        # count); after an epoch's last one, validation and the epoch's end may read: not steps
        if batch_idx + 1 == trainer.num_training_batches:
            self.mode.step = None


def count_reads(trainer: Trainer, model, datamodule) -> dict[int | None, list[str]]:
    mode = CountHostReads(trainer)
    trainer.callbacks.append(MarkSteps(mode))  # last: its batch end comes after the others'
    with mode:
        trainer.fit(model, datamodule=datamodule)
    return mode.reads


def steps_between_reads(reads: dict, steps: int) -> list[int]:
    """The steps that read the device although no periodic reading was due."""
    due = {s for s in range(steps) if (s + 1) % READ_EVERY == 0}
    return sorted(s for s in reads if s is not None and s not in due)


@pytest.mark.parametrize("progress", [True, False])
def test_the_runners_training_step_reads_nothing_from_the_device(tmp_path, progress):
    datamodule, model = instantiate(RUN, 0)
    saver = EpochCheckpoint(tmp_path / "checkpoints")
    trainer = build_trainer(RUN, "bench", model, callbacks=[saver], progress=progress,
                            explicit_interval=True, logger=False,
                            default_root_dir=tmp_path).trainer
    reads = count_reads(trainer, model, datamodule)
    assert trainer.global_step >= 2 * 6  # two epochs of several steps each
    assert steps_between_reads(reads, trainer.global_step) == [], reads


#: The smallest network of each method whose default is not already small (the CNN's width).
SMALL = {"backbone_width": 4}


@pytest.mark.parametrize("method", [name for name, cls in METHODS.items()
                                    if cls.requires_training and name != RUN.method])
def test_no_methods_training_step_reads_from_the_device(method, tmp_path):
    """Every method that trains, through the runner's Trainer: a GPU would wait in every step
    for a read (the tensorized models asked the device whether a Lloyd step was done)."""
    from modules.methods.base import RepresentationModule

    cls = METHODS[method]
    run = replace(RUN, name=method, method=method,
                  model=SMALL if issubclass(cls, RepresentationModule) else {})
    datamodule, model = instantiate(run, 0)
    trainer = build_trainer(run, "bench", model, callbacks=[EpochCheckpoint(tmp_path / "c")],
                            explicit_interval=True, logger=False,
                            default_root_dir=tmp_path).trainer
    reads = count_reads(trainer, model, datamodule)
    assert trainer.global_step >= 2 * 6
    assert steps_between_reads(reads, trainer.global_step) == [], reads


def test_a_search_trials_training_step_reads_nothing_from_the_device():
    from tune.trial import TrialSpec, build_trial

    spec = TrialSpec(run=RUN, max_epochs=2, metric="online_val_acc", seed=0)
    datamodule, model, trainer = build_trial(spec, {}, callbacks=[])
    reads = count_reads(trainer, model, datamodule)
    assert trainer.global_step >= 2 * 6
    assert steps_between_reads(reads, trainer.global_step) == [], reads


def test_the_counter_sees_a_read_inside_a_step(tmp_path):
    """The instrument itself: a step that logs ``loss.item()`` is caught."""
    datamodule, model = instantiate(RUN, 0)
    step = type(model).training_step

    def reading_step(self, batch, batch_idx):
        loss = step(self, batch, batch_idx)
        self.log("loss_on_host", loss.item())
        return loss

    model.training_step = reading_step.__get__(model)
    trainer = build_trainer(RUN, "bench", model, callbacks=[EpochCheckpoint(tmp_path)],
                            explicit_interval=True, logger=False,
                            default_root_dir=tmp_path).trainer
    reads = count_reads(trainer, model, datamodule)
    assert len(steps_between_reads(reads, trainer.global_step)) >= trainer.global_step - 2
