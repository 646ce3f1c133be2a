"""The host's work in a training step, which a GPU waits on when the model is small.

A small model's step on a GPU (TransFusion's standalone blocks on Fashion-MNIST: a few hundred
kernels of microseconds) lasts as long as Python takes to issue it, so every host operation
the step does not need is time. Two were: ``self.log`` in every step (Lightning's bookkeeping,
about 0.7 ms a value on this CPU, although Lightning writes a step's values only every
``log_every_n_steps`` steps) and, in TransFusion, a second pass through the blocks for the
online probe's input that the loss had just computed. Both are gone; these tests hold that
nothing a user reads changed: the logged rows, the values callbacks read, the weights.
"""

from __future__ import annotations

import csv
from dataclasses import replace

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import CSVLogger

from benchmarks.run.checkpoint import EpochCheckpoint
from benchmarks.run.one import instantiate
from benchmarks.run.spec import RunSpec
from benchmarks.run.trainer import build_trainer
from modules.methods.base import RepresentationModule
from modules.methods.transfusion import FusionBlock, TransFusion

#: 90 training images at batch 8: 11 steps an epoch; a row every 4 steps leaves most unwritten.
RUN = RunSpec(name="simclr", method="simclr", model={"backbone_width": 4},
              data={"name": "digits", "batch_size": 8, "limit_per_class": 10},
              trainer={"max_epochs": 2, "accelerator": "cpu", "log_every_n_steps": 4})
FUSION = replace(RUN, name="transfusion", method="transfusion",
                 model={"backbone": "flatten", "num_blocks": 3, "optimizer": "adam",
                        "lr": 1e-3, "weight_decay": 0.0},
                 data={**RUN.data, "augmentation": "none", "n_views": 1})


def train(run: RunSpec, tmp_path, name: str):
    """Two epochs as the runner trains, with the CSV logger; the trained model, the Trainer and
    the rows of metrics.csv."""
    datamodule, model = instantiate(run, 0)
    logger = CSVLogger(tmp_path, name=name, version=0)
    trainer = build_trainer(run, "bench", model,
                            callbacks=[EpochCheckpoint(tmp_path / name / "c")],
                            explicit_interval=True, logger=logger,
                            default_root_dir=tmp_path).trainer
    trainer.fit(model, datamodule=datamodule)
    with open(tmp_path / name / "version_0" / "metrics.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    return model, trainer, rows


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


#: A method of each training step that logs: the shared base's, the autoencoder's and the
#: cluster-specific models'.
LOGGING = {"simclr": {"backbone_width": 4}, "ae": {}, "tae": {}}


@pytest.mark.parametrize("method", sorted(LOGGING))
def test_a_step_logs_only_what_lightning_writes_and_the_callbacks_read(tmp_path, monkeypatch,
                                                                       method):
    import lightning.pytorch as pl

    import modules.methods.base as base
    import modules.methods.tensorized.ae as ae
    import modules.methods.tensorized.base as tensorized

    run = replace(RUN, name=method, method=method, model=LOGGING[method])
    calls = {"logged": 0}
    log = pl.LightningModule.log

    def counted(self, name, *args, **kwargs):
        if name in ("train_loss", "online_train_acc"):
            calls["logged"] += 1
        return log(self, name, *args, **kwargs)

    monkeypatch.setattr(pl.LightningModule, "log", counted)
    model, trainer, rows = train(run, tmp_path, "now")
    logged_now = calls["logged"]

    calls["logged"] = 0  # the same training, logging in every step as before
    for where in (base, ae, tensorized):
        monkeypatch.setattr(where, "step_values_read", lambda module, batch_idx: True)
    every_model, every_trainer, every_rows = train(run, tmp_path, "every")

    per_step = 2 if method == "simclr" else 1  # the online probe's accuracy beside the loss
    steps = trainer.global_step
    assert steps == every_trainer.global_step == 22
    assert calls["logged"] == per_step * steps
    # due: global steps 3, 7, 11, 15, 19 (every 4th) and each epoch's last (10, 21)
    assert logged_now == per_step * 7
    assert rows == every_rows  # every row Lightning wrote, value for value
    # Lightning wrote the values of every 4th step, and the epoch's last ones were logged too
    assert [r["step"] for r in rows if r.get("train_loss")] == ["3", "7", "11", "15", "19"]
    assert trainer.callback_metrics.keys() == every_trainer.callback_metrics.keys()
    for key, value in every_trainer.callback_metrics.items():
        assert torch.equal(trainer.callback_metrics[key], value), key
    assert same_weights(model, every_model)


def test_a_step_called_without_a_trainer_logs_its_values():
    _, model = instantiate(RUN, 0)
    assert model.step_values_read(0)


@pytest.mark.parametrize("n_views, passes", [(1, 1), (2, 2)])
def test_transfusion_embeds_a_batch_once_when_that_is_the_probes_input(tmp_path, monkeypatch,
                                                                        n_views, passes):
    """One view on one device: the probe's input is the loss's embedding, not a second pass
    through the blocks; with two views the probe embeds the first view's rows by themselves."""
    blocks = {"calls": 0}
    forward = FusionBlock.forward

    def counted(self, x):
        blocks["calls"] += 1
        return forward(self, x)

    monkeypatch.setattr(FusionBlock, "forward", counted)
    run = replace(FUSION, data={**FUSION.data, "n_views": n_views,
                                "augmentation": "none" if n_views == 1 else "default"})
    model, trainer, rows = train(run, tmp_path, "once")
    assert blocks["calls"] == trainer.global_step * passes * 2 + validation_passes(trainer)

    # the same training with the probe's input computed again: the same weights, probe included
    monkeypatch.setattr(TransFusion, "probe_embedding", RepresentationModule.probe_embedding)
    again, _, again_rows = train(run, tmp_path, "again")
    assert same_weights(model, again)
    assert rows == again_rows


def validation_passes(trainer: Trainer) -> int:
    """Block calls outside the training steps: the sanity check's and each epoch's validation
    batches, through the 2 blocks before the last."""
    batches = trainer.num_sanity_val_steps + trainer.max_epochs * sum(
        trainer.num_val_batches)
    return 2 * batches


def test_the_divergence_check_costs_a_step_one_copy_and_still_names_the_first_bad_step():
    from torch.utils._python_dispatch import TorchDispatchMode

    from benchmarks.run.divergence import Diverged, StopOnDivergence

    class Kernels(TorchDispatchMode):  # operations that compute (views are not kernels)
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not func._schema.name.startswith(("aten::select", "aten::view", "aten::reshape",
                                                 "aten::detach", "aten::alias")):
                self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    stop = StopOnDivergence(read_every=25)
    losses = torch.linspace(1, 2, 60)
    losses[37], losses[41] = float("nan"), float("inf")
    stop.record(losses[0], 0, 0)  # the buffer is allocated at the first record
    stop.check()
    raised_at = None
    for step in range(1, 60):
        counter = Kernels()
        with counter:
            stop.record(losses[step], epoch=step // 30, step=step)
        assert counter.ops == ["aten.copy_.default"], counter.ops
        if (step + 1) % 25 == 0:
            try:
                stop.check()
            except Diverged as err:
                raised_at, diverged = step, err
                break
    assert raised_at == 49  # the first check after step 37
    assert (diverged.epoch, diverged.step) == (1, 37) and diverged.loss != diverged.loss


def test_under_a_time_limit_every_step_logs(tmp_path, monkeypatch):
    """Lightning's Timer (``max_time``) stops the training after a step, from its batch-end
    hook, and Lightning then writes that step's values: they must be that step's own."""
    import lightning.pytorch as pl

    calls = {"logged": 0}
    log = pl.LightningModule.log

    def counted(self, name, *args, **kwargs):
        calls["logged"] += name == "train_loss"
        return log(self, name, *args, **kwargs)

    monkeypatch.setattr(pl.LightningModule, "log", counted)
    run = replace(RUN, trainer={**RUN.trainer, "max_time": {"days": 1}})
    _, trainer, _ = train(run, tmp_path, "timed")
    assert calls["logged"] == trainer.global_step == 22


def test_with_accumulated_gradients_the_written_rows_are_the_same(tmp_path, monkeypatch):
    import modules.methods.base as base

    run = replace(RUN, trainer={**RUN.trainer, "accumulate_grad_batches": 2,
                                "log_every_n_steps": 2})
    model, trainer, rows = train(run, tmp_path, "now")
    monkeypatch.setattr(base, "step_values_read", lambda module, batch_idx: True)
    every_model, _, every_rows = train(run, tmp_path, "every")
    assert [r for r in rows if r.get("train_loss")]  # rows were written
    assert rows == every_rows
    assert same_weights(model, every_model)
