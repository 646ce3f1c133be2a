"""`transfusion_fusion_paper`'s CIFAR-10 row (TransFusion section 5.1, Table 2: 15 blocks on the
flattened 32x32x3 images) trains at its learning rate: its loss stays finite at the row's full
width (3,072-dimensional blocks, 425M parameters) and in the precision the suite trains it in
(bf16-mixed), where a rate that trains the 784-dimensional Fashion-MNIST row can blow the
blocks' activations up within steps.

No CIFAR-10 here: the images are GENERATED (uniform random pixels written in CIFAR-10's files by
:func:`datamodules.sample_files.write_cifar10`), which checks the model's scale, not the data's.
"""

from __future__ import annotations

import math

import lightning.pytorch as pl
import pytest
import torch
from sample_data import set_checksums

from benchmarks.run.one import instantiate
from benchmarks.suites.config import load_suite
from datamodules.sample_files import write_cifar10

pytestmark = pytest.mark.slow  # 425M parameters: about 7 GB and half a minute on 2 cores


class TrainingLosses(pl.Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"] if isinstance(outputs, dict) else outputs))


def test_cifar10_row_keeps_a_finite_loss_at_full_width_on_its_fast_budget(tmp_path, monkeypatch):
    """The fast budget's data and steps (batch 32, two steps), at the row's full width, in the
    row's precision, not the fast budget's float32 (which says nothing of bf16's rounding), and
    at the Adam step the row takes at its own batch (``lr`` is per 256 samples and scales with
    the batch: the fast batch alone would take steps 8 times smaller than the row's)."""
    generated = tmp_path / "generated-cifar10"  # random pixels in CIFAR-10's format
    write_cifar10(generated, per_batch=20)
    monkeypatch.setenv("CLUSTERBENCH_DATA", str(generated))
    set_checksums(monkeypatch, generated)
    row = load_suite("transfusion_fusion_paper").run("cifar10/15-blocks")
    step_rate = row.model["lr"] * row.data["batch_size"] / 256
    precision = row.trainer["precision"]
    assert precision == "bf16-mixed"  # what this test measures in: a change is seen here first
    run = load_suite("transfusion_fusion_paper", fast=True).run("cifar10/15-blocks")
    batch = run.data["batch_size"]
    datamodule, model = instantiate(run, seed=0,
                                    model_kwargs={**run.model, "lr": step_rate * 256 / batch})
    width = 3 * 32 * 32
    assert len(model.blocks) == 15 and model.blocks[0].query.weight.shape == (width, width)
    settings = {**run.trainer, "precision": precision, "accelerator": "cpu", "devices": 1,
                "limit_val_batches": 0}
    assert (settings["max_epochs"], settings["limit_train_batches"]) == (1, 2)
    losses = TrainingLosses()
    trainer = pl.Trainer(**settings, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False,
                         default_root_dir=tmp_path, callbacks=[losses])
    trainer.fit(model, datamodule=datamodule)
    assert trainer.optimizers[0].param_groups[0]["initial_lr"] == pytest.approx(step_rate)
    # The two steps, then the loss the next step would take: at the rate the row had (Adam
    # 1e-3 per 256 samples) the embedding grew 6-fold in one step and overflowed to NaN in the
    # second.
    images, labels = next(iter(datamodule.train_dataloader()))
    (view,) = datamodule.make_views(images)
    with torch.no_grad(), trainer.precision_plugin.forward_context():  # as the steps ran
        losses.losses.append(float(model.objective(model.backbone(view), 1, labels)))
        embedding = model.encode(view)
    assert len(losses.losses) == 3
    assert all(math.isfinite(loss) for loss in losses.losses), losses.losses
    assert bool(torch.isfinite(embedding).all())
