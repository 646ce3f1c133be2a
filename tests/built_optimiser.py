"""The optimiser a suite's run really builds, read back from a one-batch fit: its learning rate
and its parameter groups (the settings tests of the paper suites and the methods share it)."""

from __future__ import annotations

import lightning.pytorch as pl

from datamodules import DATAMODULES
from modules.methods import METHODS


def optimiser_learning_rate(run, tmp_path) -> float:
    """The learning rate the run's method hands its optimiser, with the run's optimiser, rate,
    batch size and gradient accumulation: the same method on digits with a small CNN, one
    step (the rate depends on the samples per step, not on the data or the backbone)."""
    return optimiser_settings(run, tmp_path)["initial_lr"]


def optimiser_settings(run, tmp_path, n_views: int = 1) -> dict:
    """The first parameter group of the optimiser the run's method builds (see
    :func:`optimiser_learning_rate`), its model being left as ``trainer.lightning_module``."""
    optimiser, module = built_optimiser(run, tmp_path, n_views)
    return {**optimiser.param_groups[0], "model": module}


def built_optimiser(run, tmp_path, n_views: int = 1):
    """The optimiser the run's method builds after one step (see
    :func:`optimiser_learning_rate`) and the model it trains."""
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
    return trainer.optimizers[0], module
