"""``data.batch_size`` is the global batch: N devices train as one device does.

Two CPU processes (gloo, Lightning's DDP) each take half of every global batch and must
reach the weights of one process on the whole batch, with the same learning rate (scaled by the
global batch). This needs the per-device batch ``batch_size / N``, the same global batches on
1 and N devices (one seeded permutation per epoch, rank ``r`` taking every N-th index of it),
global BatchNorm statistics and, for TransFusion, no trainable parameter the loss never reaches
(DDP refuses those). torch's SyncBatchNorm runs on GPUs only (DDP refuses it in a CPU module:
"SyncBatchNorm layers only work with GPU modules"), so these CPU models have no BatchNorm and
``sync_batchnorm=True``, passed as the suite runner passes it, has nothing to convert.

The views are un-augmented (``augmentation="none"``): augmentations draw from each process's own
random stream, so two processes would not draw what one process draws for the same images.
"""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from start_method import start_method
from torch.multiprocessing import ProcessExitedException

from datamodules import DATAMODULES
from datamodules.base import ClusterDataModule, SplitDataset, TensorSplits
from modules.blocks.heads import mlp
from modules.methods import BarlowTwins, SimCLR, TransFusion, VICReg
from modules.methods.transfusion import TRANSFUSION_LOSSES

BATCH = 32  # the global batch


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def digits(batch_size: int = BATCH, **kwargs) -> ClusterDataModule:
    return DATAMODULES["digits"](batch_size=batch_size, augmentation="none", seed=0,
                                 limit_per_class=12, **kwargs)  # 108 training images


class RecordRankZero(pl.Callback):
    """Saves, from rank 0, the trained weights and the batch sizes the run used."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.global_rank == 0:
            torch.save({"state": {k: v.detach().clone() for k, v in
                                  pl_module.state_dict().items()},
                        "per_device_batch": trainer.train_dataloader.batch_size,
                        "global_batch": pl_module.global_batch_size()}, self.path)


def bn_free_simclr(dm: ClusterDataModule) -> SimCLR:
    # No BatchNorm: torch's SyncBatchNorm runs on GPUs only (DDP refuses it on CPU modules), and
    # per-process BatchNorm statistics are not those of the global batch.
    model = SimCLR(dm.num_classes, dm.input_shape, backbone="flatten", optimizer="sgd", lr=8.0)
    model.projector = mlp([model.backbone.output_dim, 32, 16], batch_norm=False)
    return model


def bn_free(cls, lr: float):
    """``cls`` on flattened pixels with a projector of two BatchNorm-free layers: a method whose
    loss reads the batch's statistics (Barlow Twins' cross-correlation, VICReg's variance and
    covariance) gathers the embeddings across devices, so that they are the global batch's.
    Without biases, as Barlow Twins' own projector: both losses are blind to a shift of the
    embeddings, so the last layer's bias never moves."""
    def build(dm: ClusterDataModule):
        model = cls(dm.num_classes, dm.input_shape, backbone="flatten", optimizer="sgd", lr=lr)
        model.projector = mlp([model.backbone.output_dim, 32, 16], batch_norm=False, bias=False)
        return model

    return build


METHODS = {  # large learning rates, so that three steps move the weights far from the tolerance
    "simclr": bn_free_simclr,
    "barlow_twins": bn_free(BarlowTwins, lr=0.05),
    "vicreg": bn_free(VICReg, lr=0.05),
    "transfusion": lambda dm: TransFusion(dm.num_classes, dm.input_shape, backbone="flatten",
                                          num_blocks=2, optimizer="sgd", lr=8.0),
}


def train(method: str, devices: int, path) -> tuple[dict, dict]:
    """Three steps of ``method`` on ``devices`` CPU processes: (initial trainable parameters,
    rank 0's record)."""
    dm = digits()
    pl.seed_everything(0)
    model = METHODS[method](dm)
    initial = {k: p.detach().clone() for k, p in model.named_parameters() if p.requires_grad}
    trainer = pl.Trainer(accelerator="cpu", devices=devices,
                         # DDP forked where it is safe: the runner's own ddp_spawn trains
                         # the DDP trials of tests/benchmarks/suites/test_placement.py
                         strategy=f"ddp_{start_method()}" if devices > 1 else "auto",
                         sync_batchnorm=True,
                         max_epochs=1, limit_train_batches=3, limit_val_batches=0,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, deterministic=True,
                         callbacks=[RecordRankZero(str(path))])
    try:
        trainer.fit(model, datamodule=dm)
    except ProcessExitedException as err:
        # Now and then a gloo process aborts while it shuts down ("terminate called without an
        # active exception"), after the training. Rank 0's record is written at the end of the
        # training, which the ranks go through together (every step all-reduces): once it is
        # there, both ranks trained every step, and the crash came after.
        if "SIGABRT" not in str(err) or not Path(path).is_file():
            raise
    return initial, torch.load(path)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_two_processes_reach_the_weights_of_one_on_the_global_batch(method, tmp_path,
                                                                    monkeypatch) -> None:
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    initial, one = train(method, 1, tmp_path / "one.pt")
    _, two = train(method, 2, tmp_path / "two.pt")
    assert (one["per_device_batch"], two["per_device_batch"]) == (BATCH, BATCH // 2)
    assert one["global_batch"] == two["global_batch"] == BATCH  # the learning rate's scaling
    assert one["state"].keys() == two["state"].keys()
    for name, start in initial.items():  # every trainable parameter moved far beyond tolerance
        assert (one["state"][name] - start).abs().max() > 1e-3, name
    for name, want in one["state"].items():
        if method == "transfusion" and name.startswith("online_probe"):
            # Its input is the local first-view batch fused by the blocks (training_step of
            # modules/methods/base.py), which depends on how the batch is split: not compared.
            continue
        torch.testing.assert_close(two["state"][name], want, rtol=1e-4, atol=1e-5,
                                   msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("loss", TRANSFUSION_LOSSES)
def test_the_loss_reaches_every_trainable_transfusion_parameter(loss) -> None:
    # What DDP checks at every step, checked on one process for every loss.
    torch.manual_seed(0)
    model = TransFusion(10, (6,), backbone="flatten", num_blocks=2, loss=loss)
    params = {name: p for name, p in model.named_parameters()
              if p.requires_grad and not name.startswith("online_probe")}
    loss_value = model.objective(torch.randn(8, 6), 2, torch.tensor([0, 1, 2, 0]))
    grads = torch.autograd.grad(loss_value, list(params.values()), allow_unused=True)
    assert [name for name, g in zip(params, grads, strict=True) if g is None] == []


def test_the_ranks_batches_together_are_the_one_device_batch() -> None:
    dm = digits()
    one = [y for _, y in dm.train_dataloader()]
    per_rank = []
    for rank in range(2):
        dm.trainer = SimpleNamespace(world_size=2, global_rank=rank)
        per_rank.append(list(dm.train_dataloader()))
    dm.trainer = None
    assert len(one) == len(per_rank[0]) == len(per_rank[1]) == 108 // BATCH  # drop_last, global
    for step, labels in enumerate(one):
        x0, y0 = per_rank[0][step]
        x1, y1 = per_rank[1][step]
        assert len(y0) == len(y1) == BATCH // 2
        assert sorted((*y0.tolist(), *y1.tolist())) == sorted(labels.tolist())
    indices = [list(dm.train_dataloader().sampler)]
    for rank in range(2):  # the samples themselves, not only their labels
        dm.trainer = SimpleNamespace(world_size=2, global_rank=rank)
        indices.append(list(dm.train_dataloader().sampler))
    dm.trainer = None
    for step in range(len(one)):
        whole = indices[0][step * BATCH:(step + 1) * BATCH]
        halves = [part[step * BATCH // 2:(step + 1) * BATCH // 2] for part in indices[1:]]
        assert sorted(halves[0] + halves[1]) == sorted(whole)


def images(loader) -> list[torch.Tensor]:
    return [x for x, _ in loader]


def test_the_shuffle_of_an_epoch_depends_only_on_the_seed_and_the_epoch() -> None:
    loader = digits().train_dataloader()
    by_hand = [images(loader) for _ in range(3)]  # one loader, iterated three times
    loader = digits().train_dataloader()
    by_lightning = []
    for epoch in range(3):
        loader.sampler.set_epoch(epoch)  # what Lightning does at the start of every epoch
        by_lightning.append(images(loader))
    resumed = digits().train_dataloader()  # a fresh loader, as in a run resumed at epoch 2
    resumed.sampler.set_epoch(2)
    expected = images(resumed)
    for seen in (by_hand[2], by_lightning[2]):
        assert all(torch.equal(a, b) for a, b in zip(seen, expected, strict=True))
    assert not torch.equal(by_hand[2][0], by_hand[1][0])  # yet every epoch has its own order


class RecordLabels(pl.Callback):
    def __init__(self) -> None:
        self.labels: dict[int, list[torch.Tensor]] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.labels.setdefault(trainer.current_epoch, []).append(batch[1].clone())


def test_lightning_sets_the_epoch_of_the_training_sampler(tmp_path) -> None:
    dm = digits()
    record = RecordLabels()
    pl.seed_everything(0)
    model = TransFusion(dm.num_classes, dm.input_shape, backbone="flatten")
    pl.Trainer(accelerator="cpu", devices=1, max_epochs=2, limit_train_batches=2,
               limit_val_batches=0, logger=False, enable_checkpointing=False,
               enable_progress_bar=False, enable_model_summary=False,
               default_root_dir=tmp_path, callbacks=[record]).fit(model, datamodule=dm)
    loader = digits().train_dataloader()
    for epoch in (0, 1):
        loader.sampler.set_epoch(epoch)
        expected = [y for _, y in loader][:2]
        assert all(torch.equal(a, b) for a, b in zip(record.labels[epoch], expected, strict=True))


def test_a_batch_size_the_devices_cannot_share_is_refused() -> None:
    dm = digits(batch_size=30)
    assert dm.per_device_batch_size(1) == 30 and dm.per_device_batch_size(3) == 10
    with pytest.raises(ValueError, match=r"batch_size 30 .* 4 devices; use a multiple of 4"):
        dm.per_device_batch_size(4)
    dm.trainer = SimpleNamespace(world_size=4, global_rank=0)
    try:
        with pytest.raises(ValueError, match="batch_size 30"):
            dm.train_dataloader()
    finally:
        dm.trainer = None


class ByteImages(ClusterDataModule):
    """``uint8`` images, as the large image sets are stored."""

    name, provenance, source = "bytes", "generated", "random uint8 images"
    num_classes, input_shape = 2, (1, 4, 4)

    def load(self) -> TensorSplits:
        generator = torch.Generator().manual_seed(0)
        x = torch.randint(0, 256, (40, 1, 4, 4), dtype=torch.uint8, generator=generator)
        y = torch.arange(40) % 2
        return TensorSplits(x, y, x[:8], y[:8])


def test_training_batches_are_fetched_whole_and_stay_uint8(monkeypatch) -> None:
    def one_by_one(self, i):
        raise AssertionError("the sampler's batch must be fetched with __getitems__")

    monkeypatch.setattr(SplitDataset, "__getitem__", one_by_one)
    dm = ByteImages(batch_size=8, augmentation="none")
    dm.trainer = SimpleNamespace(world_size=2, global_rank=1)
    try:
        x, y = next(iter(dm.train_dataloader()))
    finally:
        dm.trainer = None
    assert x.dtype == torch.uint8 and x.shape == (4, 1, 4, 4) and y.shape == (4,)
