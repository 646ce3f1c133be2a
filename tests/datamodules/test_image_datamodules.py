"""The image DataModules loaded from tiny files in their real on-disk formats.

CIFAR's pickled batches, MNIST's idx-ubyte files and a tiny-imagenet-200 folder of JPEGs are
written into temporary directories and read through the real DataModules (and, for CIFAR and
MNIST, through torchvision's dataset classes). torchvision checks every CIFAR file against the
md5 of the official release; these files are ours (:mod:`datamodules.sample_files`), so the
tests set the checksums torchvision expects to those of the files they wrote (``set_checksums``):
the check itself still runs, which also lets a test corrupt a file and see it caught. Nothing is
downloaded.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from sample_data import set_checksums
from torch.utils.data import SequentialSampler

from datamodules import (
    DATAMODULES,
    CIFAR10DataModule,
    CIFAR100DataModule,
    MNISTDataModule,
    TinyImageNetDataModule,
)
from datamodules.sample_files import wnid, write_all

IMAGE_MODULES = {"cifar10": (3, 32, 32, 10), "cifar100": (3, 32, 32, 100),
                 "mnist": (1, 28, 28, 10), "fashionmnist": (1, 28, 28, 10),
                 "tinyimagenet": (3, 64, 64, 200)}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("data")
    return root, write_all(root)


@pytest.fixture
def root(data_root, monkeypatch) -> Path:
    set_checksums(monkeypatch, data_root[0])
    return data_root[0]


@pytest.fixture
def written(data_root) -> dict:
    return data_root[1]


def make(name: str, root: Path, **kwargs):
    dm = DATAMODULES[name](data_dir=str(root), batch_size=kwargs.pop("batch_size", 16), **kwargs)
    dm.setup("fit")
    return dm


def eval_images(dm, loader) -> torch.Tensor:
    """Raw pixels (0-255) back from an evaluation loader."""
    x = torch.cat([batch[0] for batch in loader])
    return torch.round((x * dm.std + dm.mean) * 255)


# -- registry and metadata ---------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(IMAGE_MODULES))
def test_registered_with_metadata(name) -> None:
    cls = DATAMODULES[name]
    channels, h, w, classes = IMAGE_MODULES[name]
    assert cls.name == name and cls.provenance == "real"
    assert cls.source and "\n" not in cls.source
    assert cls.input_shape == (channels, h, w) and cls.num_classes == classes
    assert cls.__doc__


# -- loading ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(IMAGE_MODULES))
def test_loads_real_format_with_shapes_dtypes_and_splits(name, root, written) -> None:
    dm = make(name, root)
    channels, h, w, classes = IMAGE_MODULES[name]
    n_train, n_test = len(written[name]["train_y"]), len(written[name]["test_y"])
    sizes = dm.split_sizes()
    assert sizes["train"] + sizes["val"] == n_train and sizes["test"] == n_test
    assert sizes["val"] == pytest.approx(0.1 * n_train, abs=1)
    x, y = next(iter(dm.train_dataloader()))
    assert x.dtype == torch.uint8 and x.shape == (16, channels, h, w)  # raw, uint8 on the wire
    assert y.dtype == torch.long and 0 <= y.min() and y.max() < classes
    for loader in (dm.val_dataloader(), dm.test_dataloader(), dm.train_eval_dataloader()):
        assert isinstance(loader.sampler, SequentialSampler)
        ex, ey = next(iter(loader))
        assert ex.dtype == torch.float32 and ex.shape[1:] == (channels, h, w)
        assert ey.dtype == torch.long and 0 <= ey.min() and ey.max() < classes
    test_y = torch.cat([y for _, y in dm.test_dataloader()])
    assert torch.equal(test_y, torch.as_tensor(written[name]["test_y"], dtype=torch.long))


@pytest.mark.parametrize("name", ["cifar10", "cifar100", "mnist", "fashionmnist"])
def test_pixels_and_labels_match_the_files(name, root, written) -> None:
    dm = make(name, root)
    truth = written[name]
    for split, loader, source in (("train", dm.train_eval_dataloader(), "train"),
                                  ("val", dm.val_dataloader(), "train"),
                                  ("test", dm.test_dataloader(), "test")):
        index = dm.split_indices[split].numpy()
        pixels = eval_images(dm, loader).to(torch.uint8).numpy()
        np.testing.assert_array_equal(pixels, truth[f"{source}_x"][index])
        labels = torch.cat([y for _, y in loader]).numpy()
        np.testing.assert_array_equal(labels, truth[f"{source}_y"][index])


def test_tiny_imagenet_labels_follow_sorted_wnids_and_grey_jpegs_become_rgb(root) -> None:
    dm = make("tinyimagenet", root, batch_size=64)
    for loader in (dm.train_eval_dataloader(), dm.test_dataloader()):
        pixels = eval_images(dm, loader)
        labels = torch.cat([y for _, y in loader])
        rgb = pixels[:, :, 32, 32]
        colour = rgb[:, 0] != rgb[:, 1]  # the grey-scale training JPEGs have R = G = B
        assert (rgb[colour, 0] - labels[colour]).abs().max() <= 3  # red encodes the label
        assert (rgb[colour, 2] - (255 - labels[colour])).abs().max() <= 3
    assert dm.split_sizes()["test"] == 40  # the official validation set is the test split


def test_normalised_with_own_training_statistics(root) -> None:
    stats = {}
    for name in ("cifar10", "cifar100", "mnist"):
        dm = make(name, root, batch_size=64)
        x = torch.cat([batch[0] for batch in dm.train_eval_dataloader()])
        assert x.mean(dim=(0, 2, 3)).abs().max() < 1e-4
        assert (x.std(dim=(0, 2, 3)) - 1).abs().max() < 1e-3
        stats[name] = dm.mean
    assert stats["cifar10"].shape == (3, 1, 1) and stats["mnist"].shape == (1, 1, 1)
    assert not torch.allclose(stats["cifar10"], stats["cifar100"])  # CIFAR-100 gets its own


# -- the options ------------------------------------------------------------------------------
def test_class_subset_is_remapped_and_recorded(root, written) -> None:
    dm = make("mnist", root, classes=[7, 3, 5])
    assert dm.num_classes == 3 and dm.class_mapping == {3: 0, 5: 1, 7: 2}
    truth = written["mnist"]
    n_kept = int(np.isin(truth["train_y"], [3, 5, 7]).sum())
    assert dm.split_sizes()["train"] + dm.split_sizes()["val"] == n_kept
    for split, loader, source in (("train", dm.train_eval_dataloader(), "train"),
                                  ("val", dm.val_dataloader(), "train"),
                                  ("test", dm.test_dataloader(), "test")):
        original = truth[f"{source}_y"][dm.split_indices[split].numpy()]
        labels = torch.cat([y for _, y in loader]).tolist()
        assert labels == [dm.class_mapping[int(label)] for label in original]
        assert set(labels) == {0, 1, 2}


def test_class_subset_sizes_the_model(root) -> None:
    from modules.methods import METHODS

    dm = DATAMODULES["cifar10"](data_dir=str(root), classes=[0, 1, 2, 3, 4])
    assert dm.num_classes == 5 and CIFAR10DataModule.num_classes == 10  # the class is untouched
    model = METHODS["simclr"](num_classes=dm.num_classes, input_shape=dm.input_shape,
                              backbone_width=4)
    assert model.online_probe.out_features == 5


@pytest.mark.parametrize("name", ["cifar10", "tinyimagenet"])
def test_limit_per_class_is_deterministic_given_the_seed(name, root, written) -> None:
    dm = make(name, root, limit_per_class=1, seed=3)
    kept = torch.cat([dm.split_indices["train"], dm.split_indices["val"]])
    labels = written[name]["train_y"][kept.numpy()]
    assert len(kept) == dm.num_classes and sorted(labels) == list(range(dm.num_classes))
    again = make(name, root, limit_per_class=1, seed=3)
    assert torch.equal(again.split_indices["train"], dm.split_indices["train"])
    assert dm.split_sizes()["test"] == len(written[name]["test_y"])  # the test split is whole
    if name == "cifar10":  # 10 images a class to choose from: another seed, another subset
        other = make(name, root, limit_per_class=1, seed=4)
        assert not torch.equal(torch.sort(kept).values,
                               torch.sort(torch.cat([other.split_indices["train"],
                                                     other.split_indices["val"]])).values)


def test_train_fraction_keeps_a_share_of_each_class(root, written) -> None:
    dm = make("cifar10", root, train_fraction=0.5)
    kept = torch.cat([dm.split_indices["train"], dm.split_indices["val"]]).numpy()
    counts = np.bincount(written["cifar10"]["train_y"][kept], minlength=10)
    assert (counts == 5).all()  # half of each class's 10 images
    full = make("cifar10", root, train_fraction=1.0)
    assert sum(full.split_sizes()[s] for s in ("train", "val")) == 100


def test_classes_and_limit_combine(root) -> None:
    dm = make("cifar100", root, classes=[10, 20, 30], limit_per_class=2)
    assert sum(dm.split_sizes()[s] for s in ("train", "val")) == 6
    assert set(torch.cat([y for _, y in dm.test_dataloader()]).tolist()) == {0, 1, 2}


@pytest.mark.parametrize("n_views", [1, 2])
@pytest.mark.parametrize("name", sorted(IMAGE_MODULES))
def test_training_views_on_the_batch_device(name, n_views, root) -> None:
    dm = make(name, root, n_views=n_views, batch_size=8)
    x, y = next(iter(dm.train_dataloader()))
    views, labels = dm.on_after_batch_transfer((x, y), 0)
    assert isinstance(views, list) and len(views) == n_views and torch.equal(labels, y)
    for view in views:
        assert view.dtype == torch.float32 and view.shape == x.shape
        assert view.abs().max() < 50 and abs(view.mean()) < 3  # normalised, not 0-255
    if n_views == 2:
        assert not torch.equal(views[0], views[1])


def test_elastic_augmentation_option(root) -> None:
    dm = make("mnist", root, augmentation="elastic", n_views=2)
    x, y = next(iter(dm.train_dataloader()))
    views, _ = dm.on_after_batch_transfer((x, y), 0)
    assert views[0].shape == (16, 1, 28, 28) and not torch.equal(views[0], views[1])
    with pytest.raises(ValueError, match="unknown augmentation 'wobble'.*elastic"):
        MNISTDataModule(data_dir=str(root), augmentation="wobble")


def test_cifar100_superclasses(root, written) -> None:
    dm = make("cifar100", root)
    assert dm.fine_to_coarse.shape == (100,)
    assert torch.equal(dm.fine_to_coarse, torch.arange(100) % 20)  # the fake hierarchy
    for split, source in (("train", "train"), ("val", "train"), ("test", "test")):
        fine = written["cifar100"][f"{source}_y"][dm.split_indices[split].numpy()]
        assert dm.superclasses(split).tolist() == (fine % 20).tolist()
    _, y = next(iter(dm.train_dataloader()))
    assert torch.equal(dm.fine_to_coarse[y], y % 20)  # the coarse target of a training batch
    subset = make("cifar100", root, classes=[21, 42, 63])
    assert subset.fine_to_coarse.tolist() == [1, 2, 3]
    labels = torch.cat([y for _, y in subset.train_eval_dataloader()])
    assert torch.equal(subset.superclasses("train"), subset.fine_to_coarse[labels])


def test_one_fit_step_per_dataset(root, tmp_path) -> None:
    import lightning.pytorch as pl

    from modules.methods import METHODS

    for name in ("cifar10", "mnist"):
        dm = DATAMODULES[name](data_dir=str(root), batch_size=16)
        model = METHODS["simclr"](num_classes=dm.num_classes, input_shape=dm.input_shape,
                                  backbone_width=4)
        trainer = pl.Trainer(fast_dev_run=1, logger=False, enable_progress_bar=False,
                             enable_model_summary=False, default_root_dir=tmp_path,
                             accelerator="cpu")
        trainer.fit(model, datamodule=dm)
        assert torch.isfinite(trainer.callback_metrics["train_loss"])


# -- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(IMAGE_MODULES))
def test_missing_data_names_the_directory_and_the_remedy(name, tmp_path) -> None:
    dm = DATAMODULES[name](data_dir=str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError) as info:
        dm.setup()
    message = str(info.value)
    assert str(tmp_path / "empty") in message and "--data.download true" in message
    assert not (tmp_path / "empty").exists()  # nothing was downloaded or created


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.5])
def test_train_fraction_outside_unit_interval_raises(fraction) -> None:
    with pytest.raises(ValueError, match=f"train_fraction.*{fraction}"):
        CIFAR10DataModule(train_fraction=fraction)


@pytest.mark.parametrize("kwargs, match", [
    ({"classes": [3, 12]}, r"unknown class 12.*available classes: 0\.\.9"),
    ({"classes": []}, "at least one class"),
    ({"classes": [1, 1]}, "twice"),
    ({"limit_per_class": 0}, "limit_per_class.*0"),
    ({"limit_per_class": 2, "train_fraction": 0.5}, "not both"),
])
def test_bad_options_raise(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        MNISTDataModule(**kwargs)


def copy_dataset(root: Path, folder: str, tmp_path: Path) -> Path:
    shutil.copytree(root / folder, tmp_path / folder)
    return tmp_path


def test_torchvision_checks_the_cifar_checksums(data_root) -> None:
    # Without the test's checksums, torchvision's md5 check rejects the files we wrote.
    with pytest.raises(FileNotFoundError, match="failing torchvision's checksum: data_batch_1"):
        make("cifar10", data_root[0])


def test_corrupt_cifar_file_is_named(root, tmp_path, monkeypatch) -> None:
    copy = copy_dataset(root, "cifar-10-batches-py", tmp_path)
    with open(copy / "cifar-10-batches-py" / "data_batch_3", "ab") as f:
        f.write(b"garbage")
    with pytest.raises(FileNotFoundError, match="incomplete or corrupt.*data_batch_3"):
        make("cifar10", copy)
    (copy / "cifar-10-batches-py" / "test_batch").unlink()
    with pytest.raises(FileNotFoundError, match="test_batch") as info:
        make("cifar10", copy)
    assert str(copy / "cifar-10-batches-py") in str(info.value)


def test_truncated_mnist_file_is_reported(root, tmp_path) -> None:
    copy = copy_dataset(root, "MNIST", tmp_path)
    images = copy / "MNIST" / "raw" / "t10k-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:1000])
    with pytest.raises(FileNotFoundError, match="incomplete or corrupt") as info:
        make("mnist", copy)
    assert str(copy / "MNIST" / "raw") in str(info.value)
    (copy / "MNIST" / "raw" / "train-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match="train-labels-idx1-ubyte"):
        make("mnist", copy)


def png_header(width: int, height: int) -> bytes:
    """A PNG file's signature, header chunk and end: the size an image says it has, with no
    pixels (a decoder that trusted it would allocate width x height)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grey
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


@pytest.mark.parametrize("damage, match", [
    (lambda f: (f / "train" / wnid(7) / "images" / f"{wnid(7)}_1.JPEG").unlink(), "unequal"),
    (lambda f: (f / "val" / "images" / "val_3.JPEG").unlink(), "val_3.JPEG"),
    (lambda f: (f / "wnids.txt").write_text(wnid(0) + "\n"), "1 classes, not 200"),
    (lambda f: (f / "val" / "val_annotations.txt").unlink(), "val_annotations.txt is missing"),
    (lambda f: (f / "val" / "images" / "val_5.JPEG").write_bytes(b"not a jpeg"), "decode"),
    # a decompression bomb: 57 bytes of header that would decode to 10^10 pixels
    (lambda f: (f / "val" / "images" / "val_5.JPEG").write_bytes(png_header(100_000, 100_000)),
     "val_5.JPEG"),
    (lambda f: (f / "val" / "images" / "val_5.JPEG").write_bytes(png_header(128, 64)),
     "val_5.JPEG is 128x64, not 64x64"),
])
def test_incomplete_tiny_imagenet_is_reported(damage, match, root, tmp_path) -> None:
    copy = copy_dataset(root, "tiny-imagenet-200", tmp_path)
    damage(copy / "tiny-imagenet-200")
    with pytest.raises(FileNotFoundError, match=match) as info:
        make("tinyimagenet", copy)
    assert str(copy / "tiny-imagenet-200") in str(info.value)


def test_download_is_never_attempted_unless_asked(root, monkeypatch) -> None:
    import torchvision.datasets.utils as tv_utils

    def no_network(*args, **kwargs):
        raise AssertionError("tried to download")

    monkeypatch.setattr(tv_utils, "download_and_extract_archive", no_network)
    monkeypatch.setattr("torchvision.datasets.cifar.download_and_extract_archive", no_network)
    monkeypatch.setattr("torchvision.datasets.mnist.download_and_extract_archive", no_network)
    for name in IMAGE_MODULES:
        dm = DATAMODULES[name](data_dir=str(root))
        dm.prepare_data()
        dm.setup()
    # With download=True and the data in place, nothing is fetched either.
    for cls in (CIFAR10DataModule, CIFAR100DataModule, MNISTDataModule, TinyImageNetDataModule):
        dm = cls(data_dir=str(root), download=True)
        dm.prepare_data()
        dm.setup()


@pytest.mark.parametrize(("name", "folder"), [
    ("cifar10", "cifar-10-batches-py"), ("cifar100", "cifar-100-python"),
    ("mnist", "MNIST/raw"), ("fashionmnist", "FashionMNIST/raw"),
    ("tinyimagenet", "tiny-imagenet-200"),
])
def test_download_true_fetches_missing_data_through_torchvision(name, folder, root, tmp_path,
                                                                monkeypatch) -> None:
    """With the data missing and ``download=True``, the real torchvision download path runs; the
    network fetch (``download_and_extract_archive``) is replaced by a copy of the test files."""
    import shutil

    import torchvision.datasets.utils as tv_utils

    fetched = []

    def fake_fetch(url, download_root, *args, **kwargs):
        fetched.append(url)
        target = Path(download_root)
        source = root / folder
        if folder.endswith("/raw"):  # torchvision's MNIST fetches into <root>/<Name>/raw
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copytree(source, target / Path(folder).name, dirs_exist_ok=True)

    monkeypatch.setattr(tv_utils, "download_and_extract_archive", fake_fetch)
    monkeypatch.setattr("torchvision.datasets.cifar.download_and_extract_archive", fake_fetch)
    monkeypatch.setattr("torchvision.datasets.mnist.download_and_extract_archive", fake_fetch)
    empty = tmp_path / "fresh"
    dm = DATAMODULES[name](data_dir=str(empty), download=True, batch_size=16)
    dm.prepare_data()
    dm.setup("fit")
    assert fetched and all(url.startswith("http") for url in fetched)
    assert dm.num_classes == IMAGE_MODULES[name][3]
    assert tuple(next(iter(dm.val_dataloader()))[0].shape[1:]) == IMAGE_MODULES[name][:3]
