"""Methods: the registry, hyperparameter records, and a fast_dev_run of each on digits."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from benchmarks.config import init_parameters
from datamodules import DATAMODULES
from modules import METHODS, SimCLR
from modules.losses import nt_xent_loss


def test_registry_names_are_lower_case_and_classes_say_whether_they_train():
    for name, cls in METHODS.items():
        assert name == name.lower()
        assert isinstance(cls.requires_training, bool)
        assert (cls.__doc__ or "").strip(), f"{name} has no docstring"


@pytest.mark.parametrize("name", sorted(METHODS))
def test_hparams_record_every_argument_so_a_checkpoint_rebuilds_the_model(name):
    model = METHODS[name](num_classes=10, input_shape=(1, 8, 8))
    assert set(model.hparams) == init_parameters(METHODS[name], set())


def test_simclr_checkpoint_round_trip_restores_arguments_and_weights(tmp_path):
    model = SimCLR(num_classes=10, input_shape=(1, 8, 8), backbone_width=4, temperature=0.3,
                   lr=0.02, projector_hidden=16)
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=1, logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path, accelerator="cpu")
    trainer.fit(model, datamodule=DATAMODULES["digits"](batch_size=16))
    trainer.save_checkpoint(tmp_path / "model.ckpt")
    restored = SimCLR.load_from_checkpoint(tmp_path / "model.ckpt")
    assert restored.temperature == 0.3 and restored.lr == 0.02
    x = torch.randn(3, 1, 8, 8)
    torch.testing.assert_close(restored.eval().encode(x), model.eval().encode(x))


def test_simclr_objective_is_nt_xent_of_the_projected_views():
    torch.manual_seed(0)
    model = SimCLR(num_classes=10, input_shape=(1, 8, 8), backbone_width=4, temperature=0.25)
    features = torch.randn(2 * 6, model.backbone.output_dim)
    z = model.projector(features)
    expected = nt_xent_loss(z[:6], z[6:], temperature=0.25)
    torch.testing.assert_close(model.objective(features, 2, torch.zeros(6)), expected)
    with pytest.raises(ValueError, match="n_views=3"):
        model.objective(torch.randn(18, model.backbone.output_dim), 3, torch.zeros(6))


def test_online_probe_never_trains_the_backbone():
    torch.manual_seed(0)
    model = SimCLR(num_classes=10, input_shape=(1, 8, 8), backbone_width=4)
    model.objective = lambda features, n_views, labels: features.sum() * 0.0  # probe loss only
    views, labels = [torch.randn(8, 1, 8, 8)] * 2, torch.randint(0, 10, (8,))
    model.training_step((views, labels), 0).backward()
    assert all(p.grad is None or not p.grad.any() for p in model.backbone.parameters())
    assert model.online_probe.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("name", sorted(n for n, c in METHODS.items() if c.requires_training))
def test_fast_dev_run_on_digits(name, tmp_path):
    model = METHODS[name](num_classes=10, input_shape=(1, 8, 8), backbone_width=4)
    trainer = pl.Trainer(fast_dev_run=2, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=tmp_path, accelerator="cpu")
    trainer.fit(model, datamodule=DATAMODULES["digits"](batch_size=32))
    assert torch.isfinite(trainer.callback_metrics["train_loss"])
    assert 0.0 <= float(trainer.callback_metrics["online_val_acc"]) <= 1.0
