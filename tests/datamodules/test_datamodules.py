"""DigitsDataModule: splits, on-device views, evaluation loaders (offline, no Trainer)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from torch.utils.data import SequentialSampler

from datamodules import DATAMODULES, DigitsDataModule
from datamodules.augment import IntensityJitter, RandomAffine, RandomErase, digits_augment

N_DIGITS = 1797


def raw_images(x: torch.Tensor) -> list[bytes]:
    return [row.numpy().tobytes() for row in x.contiguous()]


def split_images(dm: DigitsDataModule) -> dict[str, torch.Tensor]:
    """Raw (un-normalised) images of each split, read back through the evaluation loaders."""
    out = {}
    for name, loader in (("train", dm.train_eval_dataloader()), ("val", dm.val_dataloader()),
                         ("test", dm.test_dataloader())):
        x = torch.cat([batch[0] for batch in loader])
        out[name] = x * dm.std + dm.mean
    return out


@pytest.fixture(scope="module")
def digits() -> DigitsDataModule:
    dm = DigitsDataModule(batch_size=64, seed=0)
    dm.setup()
    return dm


def test_registered_under_its_name() -> None:
    assert DATAMODULES["digits"] is DigitsDataModule
    assert DigitsDataModule.provenance == "real"


def test_split_sizes_cover_the_dataset(digits: DigitsDataModule) -> None:
    sizes = digits.split_sizes()
    assert set(sizes) == {"train", "val", "test"}
    assert sum(sizes.values()) == N_DIGITS
    assert sizes["test"] == pytest.approx(0.25 * N_DIGITS, abs=1)
    assert sizes["val"] == pytest.approx(0.1 * (N_DIGITS - sizes["test"]), abs=1)


def test_splits_partition_the_images(digits: DigitsDataModule) -> None:
    dataset = load_digits()
    everything = Counter((dataset.images / 16.0).astype(np.float32)[:, None][i].tobytes()
                         for i in range(N_DIGITS))
    splits = {name: Counter(raw_images(_snap(x)))
              for name, x in split_images(digits).items()}
    # No image in two splits, and together exactly the dataset (as a multiset).
    assert not (set(splits["train"]) & set(splits["val"]))
    assert not (set(splits["train"]) & set(splits["test"]))
    assert not (set(splits["val"]) & set(splits["test"]))
    assert splits["train"] + splits["val"] + splits["test"] == everything


def _snap(x: torch.Tensor) -> torch.Tensor:
    """Undo the float error of normalise/denormalise: pixels are multiples of 1/16."""
    return (torch.round(x * 16) / 16).to(torch.float32)


def test_test_split_is_fixed_and_val_split_follows_the_seed(digits: DigitsDataModule) -> None:
    other = DigitsDataModule(batch_size=64, seed=1)
    mine, theirs = split_images(digits), split_images(other)
    assert sorted(raw_images(_snap(mine["test"]))) == sorted(raw_images(_snap(theirs["test"])))
    assert set(raw_images(_snap(mine["val"]))) != set(raw_images(_snap(theirs["val"])))
    # The same seed gives the same validation split.
    again = split_images(DigitsDataModule(batch_size=64, seed=0))
    assert raw_images(_snap(mine["val"])) == raw_images(_snap(again["val"]))


def test_validation_split_is_stratified(digits: DigitsDataModule) -> None:
    labels = torch.cat([y for _, y in digits.val_dataloader()])
    counts = torch.bincount(labels, minlength=10)
    assert counts.min() >= counts.max() - 2


@pytest.mark.parametrize("val_fraction", [0.0, 1.0, -0.1, 1.5])
def test_val_fraction_outside_the_open_unit_interval_raises(val_fraction: float) -> None:
    with pytest.raises(ValueError, match="val_fraction"):
        DigitsDataModule(val_fraction=val_fraction)


def test_evaluation_loaders_are_unshuffled(digits: DigitsDataModule) -> None:
    for loader in (digits.val_dataloader(), digits.test_dataloader(),
                   digits.train_eval_dataloader()):
        assert isinstance(loader.sampler, SequentialSampler)
        first = torch.cat([y for _, y in loader])
        second = torch.cat([y for _, y in loader])
        assert torch.equal(first, second)
    train_loader = digits.train_dataloader()
    orders = [torch.cat([y for _, y in train_loader]) for _ in range(2)]
    assert not torch.equal(orders[0], orders[1])  # the training loader does shuffle


def test_train_eval_loader_is_normalised(digits: DigitsDataModule) -> None:
    x = torch.cat([batch[0] for batch in digits.train_eval_dataloader()])
    assert x.shape == (digits.split_sizes()["train"], 1, 8, 8)
    assert x.mean().item() == pytest.approx(0.0, abs=1e-4)
    assert x.std().item() == pytest.approx(1.0, abs=1e-3)


def test_test_loader_uses_training_statistics(digits: DigitsDataModule) -> None:
    # The test images, normalised with the training split's statistics, are not exactly
    # standardised themselves, but close; and undoing the normalisation gives pixels in [0, 1].
    x = torch.cat([batch[0] for batch in digits.test_dataloader()])
    raw = x * digits.std + digits.mean
    assert raw.min() >= -1e-5 and raw.max() <= 1 + 1e-5
    assert abs(x.mean().item()) < 0.1


def test_views_without_a_trainer(digits: DigitsDataModule) -> None:
    x, y = next(iter(digits.train_dataloader()))
    assert 0.0 <= x.min() and x.max() <= 1.0  # training batches arrive raw
    for n_views in (1, 2, 3):
        dm = DigitsDataModule(batch_size=64, n_views=n_views)
        dm.setup()  # the views are normalised with the training statistics
        views, labels = dm.on_after_batch_transfer((x, y), 0)
        assert isinstance(views, list) and len(views) == n_views
        assert all(v.shape == x.shape and v.dtype == x.dtype for v in views)
        assert torch.equal(labels, y)
        for a in range(n_views):
            for b in range(a + 1, n_views):
                assert not torch.equal(views[a], views[b])


def test_each_sample_gets_its_own_draw() -> None:
    dm = DigitsDataModule(batch_size=8)
    dm.setup()
    one = torch.from_numpy((load_digits().images[0] / 16.0).astype(np.float32))
    copies = one.expand(8, 1, 8, 8).contiguous()
    views, _ = dm.on_after_batch_transfer((copies, torch.zeros(8, dtype=torch.long)), 0)
    for view in views:
        distinct = {row.numpy().tobytes() for row in view}
        assert len(distinct) == 8


@pytest.mark.parametrize("augment", [RandomAffine(), RandomErase(p=1.0), IntensityJitter(),
                                     digits_augment()])
def test_augmentations_keep_shape_and_vary_per_sample(augment) -> None:
    torch.manual_seed(0)
    image = torch.rand(1, 1, 8, 8) * 0.8 + 0.1
    out = augment(image.expand(16, 1, 8, 8).contiguous())
    assert out.shape == (16, 1, 8, 8)
    assert len({row.numpy().tobytes() for row in out}) > 1


def test_random_erase_zeroes_one_square_per_sample() -> None:
    torch.manual_seed(0)
    out = RandomErase(p=1.0, size=3)(torch.ones(32, 1, 8, 8))
    zeros = (out == 0).squeeze(1)
    assert (zeros.sum(dim=(1, 2)) == 9).all()
    for mask in zeros:
        rows, cols = mask.nonzero(as_tuple=True)
        assert rows.max() - rows.min() == 2 and cols.max() - cols.min() == 2
    assert torch.equal(RandomErase(p=0.0)(torch.ones(4, 1, 8, 8)), torch.ones(4, 1, 8, 8))


def test_intensity_jitter_stays_in_unit_range() -> None:
    torch.manual_seed(0)
    out = IntensityJitter(contrast=(0.5, 2.0), noise_std=0.5)(torch.rand(64, 1, 8, 8))
    assert out.min() >= 0.0 and out.max() <= 1.0


def test_evaluation_batches_pass_through_under_a_trainer(digits: DigitsDataModule) -> None:
    from types import SimpleNamespace

    x, y = next(iter(digits.val_dataloader()))
    dm = DigitsDataModule(batch_size=64)
    dm.setup()
    try:
        dm.trainer = SimpleNamespace(training=False)  # validating or testing
        out_x, out_y = dm.on_after_batch_transfer((x, y), 0)
        assert out_x is x and out_y is y
        dm.trainer = SimpleNamespace(training=True)
        views, labels = dm.on_after_batch_transfer((x, y), 0)
        assert len(views) == dm.n_views and torch.equal(labels, y)
    finally:
        dm.trainer = None


def test_augmentation_none_gives_the_normalised_images_themselves():
    dm = DATAMODULES["digits"](batch_size=16, augmentation="none", n_views=2)
    x, y = next(iter(dm.train_dataloader()))
    views, labels = dm.on_after_batch_transfer((x, y), 0)
    expected = dm.normalise(x.float())
    for view in views:
        torch.testing.assert_close(view, expected)
    with pytest.raises(ValueError, match="none"):
        DATAMODULES["digits"](augmentation="colour")


def test_on_device_batches_are_the_loaders_batches_and_train_to_the_same_weights(tmp_path):
    """``data.on_device``: the training split kept on the device, shuffled there; the same
    batches as the DataLoader's, so the same training on the CPU, to the last digit."""
    import lightning.pytorch as pl

    from benchmarks.run.one import instantiate
    from benchmarks.run.spec import RunSpec
    from datamodules.base import DeviceBatches

    weights = []
    for on_device in (False, True):
        run = RunSpec(name="r", method="simclr", model={"backbone_width": 4},
                      data={"name": "digits", "batch_size": 16, "limit_per_class": 10,
                            "on_device": on_device})
        datamodule, model = instantiate(run, 0)
        trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, default_root_dir=tmp_path)
        trainer.fit(model, datamodule=datamodule)
        assert isinstance(trainer.train_dataloader, DeviceBatches) == on_device
        weights.append({k: v.clone() for k, v in model.state_dict().items()})
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
