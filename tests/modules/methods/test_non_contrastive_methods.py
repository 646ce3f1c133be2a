"""BYOL, Barlow Twins and VICReg as their papers build them: each objective is its loss on the
projections (and, for BYOL, the target's), BYOL's target is the moving average of eq. 1 on the
cosine schedule (replayed by a loop over a Trainer's steps), the heads have the papers' shapes,
Barlow Twins' biases and norms learn at their own rate, and the three train through ``bench``
on a tiny digits suite."""

from __future__ import annotations

import copy
import json
import math

import lightning.pytorch as pl
import pytest
import torch
from tiny_suites import write_suite

from benchmarks.cli import main
from datamodules import DATAMODULES
from modules.losses import barlow_twins_loss, byol_loss, vicreg_loss
from modules.methods import BYOL, BarlowTwins, TrainingViews, VICReg

TINY = {"num_classes": 10, "input_shape": (1, 8, 8), "backbone_width": 4,
        "projector_hidden": 16, "projector_out": 8}


def views_and_labels(size: int = 8, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(size, 1, 8, 8, generator=g) for _ in range(2)], torch.arange(size) % 3


# -- BYOL ---------------------------------------------------------------------------------------
def test_a_byol_step_is_its_loss_on_the_predictions_and_the_targets_projections():
    """Step 0 (target = online): the online predictions of both views against the target's
    projections of the other view, by hand, plus the probe's loss."""
    torch.manual_seed(0)
    model = BYOL(predictor_hidden=16, **TINY)
    views, labels = views_and_labels()
    reference = copy.deepcopy(model)
    loss = model.training_step((views, labels), 0)
    x = torch.cat(views)  # both views in one batch, as the step passes them
    features = reference.backbone(x)
    p1, p2 = reference.predictor(reference.projector(features)).chunk(2)
    with torch.no_grad():
        z1, z2 = reference.target_projector(reference.target_backbone(x)).chunk(2)
    probe = torch.nn.functional.cross_entropy(reference.online_probe(features[:8]), labels)
    expected = byol_loss(p1, p2, z1, z2) + probe
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_byol_trains_the_online_network_and_predictor_never_the_target():
    torch.manual_seed(0)
    model = BYOL(predictor_hidden=16, **TINY)
    model.training_step(views_and_labels(), 0).backward()
    for module in (model.backbone, model.projector, model.predictor):
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters())
    for module in (model.target_backbone, model.target_projector):
        assert all(not p.requires_grad and p.grad is None for p in module.parameters())


def test_byol_refuses_other_than_two_views():
    model = BYOL(predictor_hidden=16, **TINY)
    features = torch.randn(12, model.backbone.output_dim)
    step = TrainingViews([torch.zeros(4, 1, 8, 8)] * 3, features, torch.zeros(4),
                         torch.randn(12, 8))
    with pytest.raises(ValueError, match="exactly 2 views per image, got 3"):
        model.views_objective(step)


def naive_ema(target: list[float], online: list[float], tau: float) -> list[float]:
    return [tau * xi + (1 - tau) * theta for xi, theta in zip(target, online, strict=True)]


def flat(modules) -> list[float]:
    return [float(v) for m in modules for p in m.parameters() for v in p.detach().double()
            .flatten()]


def test_byols_target_is_the_moving_average_of_eq_1_over_a_trainers_steps(tmp_path):
    """The target after 3 optimiser steps equals eq. 1 replayed number by number in Python
    floats, from the online weights at the start of each step, with tau_k of §3.2's cosine
    schedule, 1 - (1 - 0.9)(cos(pi k / 3) + 1) / 2."""
    torch.manual_seed(0)
    model = BYOL(predictor_hidden=16, target_momentum=0.9, **TINY)
    online_at_step = []

    class Record(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            online_at_step.append(flat([pl_module.backbone, pl_module.projector]))

    start = flat([model.target_backbone, model.target_projector])
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=3, limit_val_batches=0, logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, default_root_dir=tmp_path,
                         accelerator="cpu", callbacks=[Record()])
    trainer.fit(model, datamodule=DATAMODULES["digits"](batch_size=16))
    assert len(online_at_step) == 3
    expected = start
    for k, online in enumerate(online_at_step):
        expected = naive_ema(expected, online, 1 - 0.1 * (math.cos(math.pi * k / 3) + 1) / 2)
    got = flat([model.target_backbone, model.target_projector])
    assert len(got) == len(expected) > 500
    assert max(abs(g - e) for g, e in zip(got, expected, strict=True)) < 1e-6
    online_now = flat([model.backbone, model.projector])
    assert max(abs(g - o) for g, o in zip(got, online_now, strict=True)) > 1e-4  # it lags


def test_byol_heads_are_the_papers_mlps():
    with torch.device("meta"):
        model = BYOL(num_classes=10, input_shape=(3, 32, 32), backbone="resnet18")
    for head, sizes in ((model.projector, [(512, 4096), (4096, 256)]),
                        (model.predictor, [(256, 4096), (4096, 256)])):
        assert [type(m).__name__ for m in head] == ["Linear", "BatchNorm1d", "ReLU", "Linear"]
        assert [(m.in_features, m.out_features) for m in head[::3]] == sizes
    assert model.momentum_target.momentum == 0.996
    assert model.momentum_target.schedule == "cosine"


# -- Barlow Twins and VICReg --------------------------------------------------------------------
@pytest.mark.parametrize("cls", [BarlowTwins, VICReg])
def test_the_projector_has_three_layers_without_biases(cls):
    with torch.device("meta"):
        model = cls(num_classes=10, input_shape=(3, 32, 32), backbone="resnet18",
                    projector_hidden=8192, projector_out=8192)
    assert [type(m).__name__ for m in model.projector] == [
        "Linear", "BatchNorm1d", "ReLU", "Linear", "BatchNorm1d", "ReLU", "Linear"]
    linears = model.projector[::3]
    assert [(m.in_features, m.out_features) for m in linears] == [(512, 8192), (8192, 8192),
                                                                  (8192, 8192)]
    assert all(m.bias is None for m in linears)


def test_barlow_twins_objective_is_its_loss_on_the_projected_views():
    torch.manual_seed(0)
    model = BarlowTwins(off_diagonal_weight=0.01, **TINY)
    features = torch.randn(12, model.backbone.output_dim)
    z1, z2 = model.projector(features).chunk(2)
    torch.testing.assert_close(model.objective(features, 2, torch.zeros(6)),
                               barlow_twins_loss(z1, z2, off_diagonal_weight=0.01))
    with pytest.raises(ValueError, match="exactly 2 views per image, got 3"):
        model.objective(torch.randn(18, model.backbone.output_dim), 3, torch.zeros(6))


def test_vicreg_objective_is_its_loss_with_its_weights():
    torch.manual_seed(0)
    model = VICReg(invariance_weight=2.0, variance_weight=3.0, covariance_weight=0.5,
                   target_std=1.5, variance_eps=1e-3, **TINY)
    features = torch.randn(12, model.backbone.output_dim)
    z1, z2 = model.projector(features).chunk(2)
    expected = vicreg_loss(z1, z2, invariance_weight=2.0, variance_weight=3.0,
                           covariance_weight=0.5, target_std=1.5, eps=1e-3)
    torch.testing.assert_close(model.objective(features, 2, torch.zeros(6)), expected)


@pytest.mark.parametrize("exclude", [True, False])
def test_barlow_twins_biases_and_norms_learn_at_their_own_rate(tmp_path, exclude):
    """The paper's 0.0048 for biases and BatchNorm parameters against 0.2 for weights, both
    per 256 images: with lr 0.2 the first group learns at 0.2 and the second at 0.0048 (scaled
    to the batch); with exclude_bias_and_norm false every parameter learns at the run's rate."""
    model = BarlowTwins(optimizer="lars", lr=0.2, exclude_bias_and_norm=exclude, **TINY)
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0, logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, default_root_dir=tmp_path,
                         accelerator="cpu")
    trainer.fit(model, datamodule=DATAMODULES["digits"](batch_size=64))
    *groups, probe = trainer.optimizers[0].param_groups
    rate = 0.2 * 64 / 256
    if exclude:
        weights, norms = groups
        assert all(p.ndim > 1 for p in weights["params"]) and weights["initial_lr"] == rate
        assert all(p.ndim < 2 for p in norms["params"])
        assert norms["initial_lr"] == pytest.approx(0.0048 * 64 / 256)
    else:
        assert [g["initial_lr"] for g in groups] == [rate]
    assert probe["initial_lr"] == model.probe_lr


@pytest.mark.parametrize("cls, setting, value, message", [
    (BarlowTwins, "off_diagonal_weight", -0.1, "off_diagonal_weight must be >= 0, got -0.1"),
    (BarlowTwins, "bias_lr_scale", 0.0, "bias_lr_scale must be > 0, got 0.0"),
    (VICReg, "variance_weight", -1.0, "variance_weight must be >= 0, got -1.0"),
    (VICReg, "variance_eps", 0.0, "variance_eps must be > 0, got 0.0"),
    (VICReg, "target_std", 0.0, "target_std must be > 0, got 0.0"),
    (BYOL, "target_momentum", 1.0, r"target_momentum must be in \[0, 1\), got 1.0"),
    (BYOL, "momentum_schedule", "linear",
     "momentum_schedule must be one of constant, cosine, got 'linear'"),
])
def test_a_bad_setting_is_refused_when_the_method_is_built(cls, setting, value, message):
    with pytest.raises(ValueError, match=message):
        cls(**TINY, **{setting: value})


# -- a tiny suite ------------------------------------------------------------------------------
def test_the_three_train_and_are_evaluated_through_bench(tmp_path, capsys):
    suite = write_suite(tmp_path / "non_contrastive.yaml", [
        {"name": "byol", "method": "byol",
         "model": {"backbone_width": 4, "projector_hidden": 32, "projector_out": 16,
                   "predictor_hidden": 32}},
        {"name": "barlow", "method": "barlow_twins",
         "model": {"backbone_width": 4, "projector_hidden": 32, "projector_out": 32}},
        {"name": "vicreg", "method": "vicreg",
         "model": {"backbone_width": 4, "projector_hidden": 32, "projector_out": 32}},
    ])
    root = tmp_path / "results"
    assert main(["bench", str(suite), "--results", str(root), "--no-progress"]) == 0
    for run, method in (("byol", "byol"), ("barlow", "barlow_twins"), ("vicreg", "vicreg")):
        result = json.loads((root / f"non_contrastive/runs/{run}/seed-0/result.json").read_text())
        assert result["method"] == method and result["train_steps"] == 2
        assert {"knn5_top1", "linear_probe_top1"} <= set(result["metrics"])
    # a setting above its bound is refused before anything trains, as any other
    assert main(["bench", str(suite), "--results", str(tmp_path / "no"),
                 "--set", "model.variance_weight=1000000000.0"]) == 2
    assert "variance_weight must be >= 0 and at most 10000, got 1000000000.0" in (
        capsys.readouterr().err)
