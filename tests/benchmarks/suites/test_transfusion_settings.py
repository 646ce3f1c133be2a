"""The TransFusion suites train as the paper (Liu et al., "TransFusion: Contrastive Learning with
Attention Layers") says: without augmentation (appendix B, section 5.2), and Table 3's batch
sizes compared at one learning rate."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from benchmarks.suites.config import load_suite
from datamodules import DATAMODULES
from modules.methods import METHODS

#: Every TransFusion suite that trains a method on images.
TRANSFUSION_SUITES = ("transfusion_ablation", "transfusion_fusion", "transfusion_fusion_paper",
                      "transfusion_table3")


def trained_runs(suite: str):
    return [run for run in load_suite(suite).runs if METHODS[run.method].requires_training]


@pytest.mark.parametrize("suite", TRANSFUSION_SUITES)
def test_transfusion_suites_train_on_one_unaugmented_view(suite):
    for run in trained_runs(suite):
        assert run.data.get("augmentation") == "none", run.name
        assert run.data.get("n_views") == 1, run.name


@pytest.mark.parametrize("suite", ["transfusion_ablation", "transfusion_fusion"])
def test_offline_transfusion_suites_batches_are_the_plain_images(suite):
    run = trained_runs(suite)[0]
    datamodule = DATAMODULES[run.dataset](**run.data_kwargs())
    datamodule.setup("fit")
    images, _ = next(iter(datamodule.train_dataloader()))  # raw; views are made on the device
    views = datamodule.make_views(images)
    assert len(views) == 1
    # the view is the normalised image itself: nothing random was drawn
    assert torch.equal(views[0], datamodule.normalise(images))


def optimiser_learning_rate(run, tmp_path) -> float:
    """The learning rate the run's method hands its optimiser, with the run's optimiser, rate,
    batch size and gradient accumulation: the same method on digits with a small CNN, one
    step (the rate depends on the samples per step, not on the data or the backbone)."""
    return optimiser_settings(run, tmp_path)["initial_lr"]


def optimiser_settings(run, tmp_path, n_views: int = 1) -> dict:
    """The first parameter group of the optimiser the run's method builds (see
    :func:`optimiser_learning_rate`), its model being left as ``trainer.lightning_module``."""
    model = {k: v for k, v in run.model.items()
             if k not in ("backbone", "backbone_weights", "cifar_stem", "resize_to",
                          "channels_last")}
    module = METHODS[run.method](num_classes=10, input_shape=(1, 8, 8), backbone="small_cnn",
                                 backbone_width=4, **model)
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0, logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, default_root_dir=tmp_path,
                         accelerator="cpu", devices=1,
                         accumulate_grad_batches=run.trainer.get("accumulate_grad_batches", 1))
    trainer.fit(module, datamodule=DATAMODULES["digits"](
        batch_size=run.data["batch_size"], n_views=n_views, augmentation="none"))
    return {**trainer.optimizers[0].param_groups[0], "model": module}


def test_table3_compares_supcon_batch_sizes_at_one_learning_rate(tmp_path):
    # `lr` is per 256 samples; the paper compares batch 128 and 1024 at one rate, so the suite's
    # per-256 values must resolve to the same rate in the optimiser
    runs = {run.name: run for run in trained_runs("transfusion_table3")}
    supcon = [runs["supcon/batch128"], runs["supcon/batch1024"]]
    assert [run.data["batch_size"] for run in supcon] == [128, 1024]
    rates = [optimiser_learning_rate(run, tmp_path / run.slug) for run in supcon]
    assert rates[0] == pytest.approx(rates[1], rel=1e-12)
    # TransFusion's row (batch 128) trains at that rate too
    assert optimiser_learning_rate(runs["transfusion/1-block"], tmp_path / "tf") == (
        pytest.approx(rates[0], rel=1e-12))
