"""Fashion-MNIST from wherever it is: the data root's files gzipped or not, else a system
package's folder (Debian's ``dataset-fashion-mnist``); every file checked against the md5 of the
official uncompressed file; and, where the package is installed, the real files themselves."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from sample_data import set_checksums

from datamodules import FashionMNISTDataModule
from datamodules.mnist import FASHION_MNIST_MD5, IDX_FILES
from datamodules.sample_files import write_mnist

DEBIAN_FOLDER = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture
def written(tmp_path, monkeypatch) -> tuple[Path, dict]:
    """Tiny files in the real format under ``tmp/FashionMNIST/raw``, their md5s expected."""
    data = write_mnist(tmp_path, "FashionMNIST", seed=5, n_train=60, n_test=20)
    set_checksums(monkeypatch, tmp_path)
    return tmp_path / "FashionMNIST" / "raw", data


def gzip_all(folder: Path) -> None:
    for name in IDX_FILES:
        with open(folder / name, "rb") as plain, gzip.open(folder / f"{name}.gz", "wb") as out:
            shutil.copyfileobj(plain, out)
        (folder / name).unlink()


def loaded(data_dir: Path) -> FashionMNISTDataModule:
    dm = FashionMNISTDataModule(data_dir=str(data_dir), val_fraction=0.2)
    dm.setup("fit")
    return dm


def test_gzipped_and_plain_files_give_the_same_images(written, tmp_path):
    folder, data = written
    plain = loaded(tmp_path)
    gzip_all(folder)
    zipped = loaded(tmp_path)
    for split in ("train", "val", "test"):
        a, b = plain._splits[split], zipped._splits[split]
        assert torch.equal(a.x[a.index], b.x[b.index]) and torch.equal(a.y[a.index], b.y[b.index])
    test = zipped._splits["test"]
    assert np.array_equal(test.x.numpy(), data["test_x"])
    assert "md5-verified official files" in zipped.source and str(folder) in zipped.source


def test_a_system_package_folder_is_used_when_the_data_root_has_none(written, tmp_path,
                                                                     monkeypatch, capsys):
    folder, data = written
    system = tmp_path / "usr-share" / "fashion-mnist"
    shutil.copytree(folder, system)
    gzip_all(system)  # as Debian ships them
    shutil.rmtree(folder)
    monkeypatch.setattr(FashionMNISTDataModule, "system_folders", (str(system),))
    dm = loaded(tmp_path / "empty-root")
    assert np.array_equal(dm._splits["test"].x.numpy(), data["test_x"])
    # the result's provenance and the log line both say where the data came from, and why
    assert str(system) in dm.source and "system package" in dm.source
    assert str(tmp_path / "empty-root" / "FashionMNIST" / "raw") in dm.source
    assert str(system) in capsys.readouterr().err
    # the data root's own files win over the package's
    shutil.copytree(system, folder)
    assert str(folder) in loaded(tmp_path).source


@pytest.mark.parametrize("damage, problem", [
    (lambda f: (f / "t10k-labels-idx1-ubyte").write_bytes(
        (f / "t10k-labels-idx1-ubyte").read_bytes()[:-1] + b"\x09"), "not the official file"),
    (lambda f: (f / "train-images-idx3-ubyte").unlink(), "missing: train-images-idx3-ubyte"),
])
def test_a_file_that_is_not_the_official_one_is_named(written, tmp_path, damage, problem):
    folder, _ = written
    damage(folder)
    with pytest.raises(FileNotFoundError, match=problem) as info:
        loaded(tmp_path)
    message = str(info.value)
    assert str(folder) in message and "\n" not in message


def test_a_truncated_gzip_is_named(written, tmp_path, monkeypatch):
    folder, _ = written
    gzip_all(folder)
    path = folder / "train-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(FileNotFoundError, match=r"train-images-idx3-ubyte\.gz cannot be read"):
        loaded(tmp_path)


def test_the_checksums_are_of_the_uncompressed_files():
    """Gzipped copies may be recompressed (Debian's are): only the uncompressed content is
    compared, so these must not be the checksums of the published .gz files."""
    published_gz = {"8d4fb7e6c68d591d4c3dfef9ec88bf0d", "25c81989df183df01b3e8a0aad5dffbe",
                    "bef4ecab320f06d8554ea6380940ec79", "bb300cfdad3c16e7a12a480ee83cd310"}
    assert set(FASHION_MNIST_MD5) == set(IDX_FILES)
    assert not published_gz & set(FASHION_MNIST_MD5.values())


@pytest.mark.system_data
@pytest.mark.skipif(not DEBIAN_FOLDER.is_dir(),
                    reason="real Fashion-MNIST not installed "
                           "(apt-get install dataset-fashion-mnist)")
def test_the_real_files_from_the_debian_package(tmp_path):
    dm = FashionMNISTDataModule(data_dir=str(tmp_path), val_fraction=0.1)
    dm.setup("fit")  # the md5 of every uncompressed file was checked on the way
    assert str(DEBIAN_FOLDER) in dm.source
    train, val, test = (dm._splits[s] for s in ("train", "val", "test"))
    assert (len(train), len(val), len(test)) == (54_000, 6_000, 10_000)
    assert train.x.shape[1:] == (1, 28, 28) and train.x.dtype == torch.uint8
    # the official splits are balanced: 6,000 training and 1,000 test images of each class
    assert torch.bincount(train.y, minlength=10).tolist() == [6_000] * 10
    assert torch.bincount(test.y[test.index], minlength=10).tolist() == [1_000] * 10
    assert torch.bincount(val.y[val.index], minlength=10).tolist() == [600] * 10
