"""One Trainer for a bench run, a search trial and ``clusterbench fit``: the same training
callbacks, the same precision and the same GPU speed settings for the same run."""

from __future__ import annotations

import os

import lightning.pytorch as pl
import pytest
import torch
from tiny_suites import TINY_EVALUATION

import benchmarks.run.trainer as trainer_module
from benchmarks.cli import main
from benchmarks.run.checkpoint import EpochSeed
from benchmarks.run.divergence import StopOnDivergence
from benchmarks.run.one import run_one
from benchmarks.run.progress import CurveEveryEpoch
from benchmarks.run.spec import RunSpec, SuiteSettings
from benchmarks.run.trainer import RunOptions, build_trainer
from tune.trial import TrialSpec, build_trial

os.environ.setdefault("WANDB_MODE", "disabled")

RUN = RunSpec(name="simclr", method="simclr",
              model={"backbone_width": 4, "projector_hidden": 16, "projector_out": 8},
              data={"name": "digits", "batch_size": 8, "limit_per_class": 10},
              trainer={"max_epochs": 1, "accelerator": "cpu"})
#: ``clusterbench fit``'s command line for :data:`RUN`.
FIT_ARGS = ["fit", "--model", "simclr", "--model.backbone_width", "4",
            "--model.projector_hidden", "16", "--model.projector_out", "8", "--data", "digits",
            "--data.batch_size", "8", "--data.limit_per_class", "10",
            "--trainer.max_epochs", "1", "--trainer.accelerator", "cpu",
            "--trainer.enable_progress_bar", "false"]
#: The callbacks that change what a training computes or keeps: the stop at a non-finite loss,
#: each epoch's random streams, the training curve's interval.
TRAINING_CALLBACKS = (StopOnDivergence, EpochSeed, CurveEveryEpoch)


class Captured(Exception):
    """Raised in place of ``Trainer.fit``, once the path under test has built its Trainer."""


def capture_fit(monkeypatch) -> list[tuple[pl.Trainer, torch.nn.Module]]:
    seen: list[tuple[pl.Trainer, torch.nn.Module]] = []

    def fit(self, model, *args, **kwargs):
        seen.append((self, model))
        raise Captured

    monkeypatch.setattr(pl.Trainer, "fit", fit)
    return seen


def bench_trainer(tmp_path, monkeypatch):
    seen = capture_fit(monkeypatch)
    settings = SuiteSettings(name="paths", path=str(tmp_path / "paths.yaml"), 
                             evaluation={"knn": TINY_EVALUATION["knn"]})
    with pytest.raises(Captured):
        run_one(settings, RUN, 0, tmp_path / "results", RunOptions(progress=False))
    return seen[0]


def trial_trainer(tmp_path, monkeypatch):
    spec = TrialSpec(run=RUN, max_epochs=1, metric="online_val_acc", seed=0)
    _, model, trainer = build_trial(spec, {}, [])
    return trainer, model


def fit_trainer(tmp_path, monkeypatch):
    tmp_path.mkdir()
    monkeypatch.chdir(tmp_path)
    seen = capture_fit(monkeypatch)
    with pytest.raises(Captured):
        main(FIT_ARGS)
    return seen[0]


PATHS = {"bench": bench_trainer, "trial": trial_trainer, "fit": fit_trainer}


@pytest.fixture
def restore_backend_flags():
    """The speed settings switch process-wide flags: put them back after the test."""
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    flags = cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32
    yield
    cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32 = flags


@pytest.mark.parametrize("on_gpu", [False, True])
def test_bench_trial_and_fit_train_alike(on_gpu, tmp_path, monkeypatch, restore_backend_flags):
    """On a GPU (``runs_on_gpu`` answering yes, on this CPU) every path trains in bf16 with
    channels-last convolutions, TF32 and cuDNN's autotuner; off it, in float32 as it always did.
    ``torch.compile`` is the bench run's and the trial's; a fit's checkpoint is read into an
    eager model by ``validate``, ``test`` and ``evaluate``, so a fit compiles nothing."""
    if on_gpu:
        monkeypatch.setattr(trainer_module, "runs_on_gpu", lambda accelerator: True)
    built = {name: path(tmp_path / name, monkeypatch) for name, path in PATHS.items()}
    for name, (trainer, model) in built.items():
        kinds = [type(c) for c in trainer.callbacks if isinstance(c, TRAINING_CALLBACKS)]
        assert kinds == list(TRAINING_CALLBACKS), (name, kinds)
        assert trainer.precision == ("bf16-mixed" if on_gpu else "32-true"), name
        assert model.channels_last == on_gpu, name
        compiled = isinstance(model.backbone, torch._dynamo.eval_frame.OptimizedModule)
        assert compiled == (on_gpu and name != "fit"), name
    if on_gpu:
        assert torch.backends.cudnn.benchmark and torch.backends.cuda.matmul.allow_tf32
    seeds = {name: next(c.seed for c in t.callbacks if isinstance(c, EpochSeed))
             for name, (t, _) in built.items()}
    assert seeds == {"bench": 0, "trial": 0, "fit": 0}


def test_a_suites_precision_wins_over_the_gpu_default(monkeypatch, restore_backend_flags):
    from benchmarks.run.one import instantiate

    monkeypatch.setattr(trainer_module, "runs_on_gpu", lambda accelerator: True)
    run = RunSpec(**{**RUN.__dict__, "trainer": {**RUN.trainer, "precision": "32-true"}})
    _, model = instantiate(run, 0)
    built = build_trainer(run, "bench", model, options=RunOptions(compile=False), logger=False)
    assert built.trainer.precision == "32-true" and built.speed["precision"] == "32-true"


def test_an_unknown_purpose_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"unknown trainer purpose 'tune'; accepted: bench, "):
        build_trainer(RUN, "tune")


def test_a_trial_resumed_from_its_checkpoint_trains_as_the_uninterrupted_one(tmp_path):
    """A search started again resumes each trial from its last epoch's checkpoint: with each
    epoch's random streams drawn from the seed and the epoch, the resumed trial's weights are
    the uninterrupted trial's (on the CPU). Without it, the resumed epoch drew the streams of
    the first epoch again."""
    from benchmarks.run.checkpoint import EpochCheckpoint

    class StopAfterFirstEpoch(pl.Callback):  # a killed search, its schedule still 2 epochs long
        def on_train_epoch_end(self, trainer, pl_module) -> None:
            trainer.should_stop = True

    def trial(folder, stop: list, resume=None) -> dict[str, torch.Tensor]:
        spec = TrialSpec(run=RUN, max_epochs=2, metric="online_val_acc", seed=0)
        datamodule, model, trainer = build_trial(spec, {},
                                                 [EpochCheckpoint(folder), *stop])
        trainer.fit(model, datamodule=datamodule, ckpt_path=resume, weights_only=True)
        return model.state_dict()

    straight = trial(tmp_path / "straight", [])
    trial(tmp_path / "first", [StopAfterFirstEpoch()])
    resumed = trial(tmp_path / "resumed", [], resume=str(tmp_path / "first" / "last.ckpt"))
    assert straight.keys() == resumed.keys()
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)


def test_no_module_but_the_factory_builds_a_trainer():
    """Bench, trials, ``fit``, the speed benchmarks and the experiments all get their Trainer
    from :mod:`benchmarks.run.trainer`."""
    import ast

    from repository import ROOT

    builders = []
    for path in sorted([*(ROOT / "benchmarks").rglob("*.py"), *(ROOT / "tune").rglob("*.py")]):
        if path == ROOT / "benchmarks" / "run" / "trainer.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and (getattr(node.func, "attr", None) == "Trainer"
                                               or getattr(node.func, "id", None) == "Trainer"):
                builders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not builders, builders
