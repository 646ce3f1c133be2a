"""A stop signal while a fit trains stops it after the step in flight and its checkpoint is
saved; the fit resumed from that checkpoint, in the middle of an epoch, of a validation or at an
epoch's end, ends with the weights and values of an uninterrupted fit (on one CPU device), from
either loader (a DataLoader with workers, or the batches kept on the device); so does a fit
killed after its epoch-end checkpoint and resumed with loader workers (which used to draw the
shuffle of epoch 0 again for the first epoch resumed)."""

from __future__ import annotations

import os
import signal

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from benchmarks.infra import stop_signals
from benchmarks.run.checkpoint import RESUME_POINT, EpochCheckpoint, mid_epoch
from benchmarks.run.spec import RunSpec
from tune.trial import TrialSpec, build_trial

os.environ.setdefault("WANDB_MODE", "disabled")


def run_spec(**data) -> RunSpec:
    return RunSpec(name="simclr", method="simclr",
                   model={"backbone_width": 4, "projector_hidden": 16, "projector_out": 8},
                   data={"name": "digits", "batch_size": 8, "limit_per_class": 10, **data},
                   trainer={"max_epochs": 1, "accelerator": "cpu"})


class SignalAt(pl.Callback):
    """``signum`` to this process after training batch ``batch`` of epoch ``epoch`` (None: in
    that epoch's validation), as a scheduler's would come."""

    def __init__(self, signum: int, epoch: int, batch: int | None) -> None:
        self.signum, self.epoch, self.batch = signum, epoch, batch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if (trainer.current_epoch, batch_idx) == (self.epoch, self.batch):
            os.kill(os.getpid(), self.signum)

    def on_validation_batch_end(self, trainer, *args) -> None:
        if (self.batch is None and trainer.current_epoch == self.epoch
                and not trainer.sanity_checking):
            os.kill(os.getpid(), self.signum)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self.batch == "end" and trainer.current_epoch == self.epoch:
            os.kill(os.getpid(), self.signum)


class EndAfter(pl.Callback):
    """The fit ends after epoch ``epoch`` (its epoch-end checkpoint written), as a kill there
    would leave it; the schedule unchanged."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if trainer.current_epoch == self.epoch:
            trainer.should_stop = True


def fit(run: RunSpec, folder, stop=(), resume=None) -> tuple[dict, dict]:
    spec = TrialSpec(run=run, max_epochs=3, metric="online_val_acc", seed=0)
    datamodule, model, trainer = build_trial(spec, {}, [EpochCheckpoint(folder), *stop])
    trainer.fit(model, datamodule=datamodule, ckpt_path=resume, weights_only=True)
    return model.state_dict(), {k: float(v) for k, v in trainer.callback_metrics.items()}


@pytest.mark.parametrize(("signum", "batch", "data"), [
    (signal.SIGHUP, 3, {}),                          # mid-epoch
    (signal.SIGTERM, None, {}),                      # mid-validation
    (signal.SIGINT, 5, {"on_device": True}),         # mid-epoch, the batches on the device
    (signal.SIGUSR1, 2, {"num_workers": 1}),         # mid-epoch, a loader worker
    (signal.SIGTERM, "end", {"num_workers": 1}),     # at the epoch's end, a loader worker
])
def test_a_fit_stopped_by_a_signal_resumes_to_the_uninterrupted_fit(tmp_path, signum, batch,
                                                                     data):
    run = run_spec(**data)
    straight, straight_values = fit(run, tmp_path / "straight")
    with stop_signals.stop_handlers(), pytest.raises(SIGTERMException):
        fit(run, tmp_path / "stopped", [SignalAt(signum, 1, batch)])
        assert stop_signals.received() == signum
    saved = torch.load(tmp_path / "stopped/last.ckpt", weights_only=True)
    assert saved["epoch"] == (2 if batch == "end" else 1)  # where it stopped, not at the end
    assert mid_epoch(saved[RESUME_POINT]) == isinstance(batch, int)
    resumed, resumed_values = fit(run, tmp_path / "resumed",
                                  resume=str(tmp_path / "stopped/last.ckpt"))
    assert straight.keys() == resumed.keys()
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)
    assert resumed_values == straight_values


def test_a_fit_killed_after_an_epoch_resumes_with_loader_workers_to_the_uninterrupted_fit(
        tmp_path):
    run = run_spec(num_workers=1)
    straight, straight_values = fit(run, tmp_path / "straight")
    fit(run, tmp_path / "ended", [EndAfter(0)])
    resumed, resumed_values = fit(run, tmp_path / "resumed",
                                  resume=str(tmp_path / "ended/last.ckpt"))
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)
    assert resumed_values == straight_values
