"""GENERATED files in the real on-disk formats of the image datasets, and checksums for them.

The real datasets cannot be downloaded everywhere (offline CI, GPU nodes without a network), yet
their loaders must be exercised: these writers produce tiny CIFAR-10/100 pickles, MNIST /
Fashion-MNIST idx files and a ``tiny-imagenet-200`` folder of JPEGs, with random pixels and
balanced labels. Everything they write is generated, never a result to quote.

torchvision checks every CIFAR file against the official md5, and clusterbench checks
Fashion-MNIST's; :func:`generated_checksums` lists the class attributes that make those checks
expect the generated files instead (the checks themselves still run). Only tests and the GPU
acceptance check's rehearsal runs set them.
"""

from __future__ import annotations

import hashlib
import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def dump(path: Path, entry: dict) -> None:
    with open(path, "wb") as f:
        pickle.dump(entry, f, protocol=2)  # the official pickles are Python 2's protocol 2


def balanced_labels(n: int, classes: int, rng: np.random.Generator) -> np.ndarray:
    return rng.permutation(np.arange(n) % classes)


def write_cifar10(root: Path, per_batch: int = 20, n_test: int = 20) -> dict:
    """``cifar-10-batches-py`` with five training batches, a test batch and ``batches.meta``:
    dicts with ``data`` (N, 3072) uint8 rows, channel-major as in the release, and ``labels``."""
    rng = np.random.default_rng(0)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    images, labels = [], []
    for i in range(1, 6):
        x = rng.integers(0, 256, (per_batch, 3, 32, 32), dtype=np.uint8)
        y = balanced_labels(per_batch, 10, rng)
        names = [f"img_{i}_{k}.png" for k in range(len(y))]
        dump(folder / f"data_batch_{i}", {"batch_label": f"training batch {i} of 5",
                                           "labels": y.tolist(), "data": x.reshape(-1, 3072),
                                           "filenames": names})
        images.append(x)
        labels.append(y)
    test_x = rng.integers(0, 256, (n_test, 3, 32, 32), dtype=np.uint8)
    test_y = balanced_labels(n_test, 10, rng)
    dump(folder / "test_batch", {"batch_label": "testing batch 1 of 1", "labels": test_y.tolist(),
                                 "data": test_x.reshape(-1, 3072),
                                 "filenames": [f"test_{k}.png" for k in range(n_test)]})
    dump(folder / "batches.meta", {"label_names": ["airplane", "automobile", "bird", "cat",
                                                   "deer", "dog", "frog", "horse", "ship",
                                                   "truck"],
                                   "num_cases_per_batch": per_batch, "num_vis": 3072})
    return {"train_x": np.concatenate(images), "train_y": np.concatenate(labels),
            "test_x": test_x, "test_y": test_y}


def write_cifar100(root: Path, n_train: int = 300, n_test: int = 100) -> dict:
    """``cifar-100-python`` with ``train``, ``test`` (``fine_labels`` and ``coarse_labels``)
    and ``meta``. The fake superclass of fine class ``f`` is ``f % 20``."""
    rng = np.random.default_rng(1)
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        x = rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)
        fine = balanced_labels(n, 100, rng)
        dump(folder / split, {"filenames": [f"{split}_{k}.png" for k in range(n)],
                              "batch_label": f"{split}ing batch 1 of 1",
                              "fine_labels": fine.tolist(), "coarse_labels": (fine % 20).tolist(),
                              "data": x.reshape(-1, 3072)})
        out[f"{split}_x"], out[f"{split}_y"] = x, fine
    dump(folder / "meta", {"fine_label_names": [f"fine{k}" for k in range(100)],
                           "coarse_label_names": [f"coarse{k}" for k in range(20)]})
    return out


def write_idx(folder: Path, prefix: str, images: np.ndarray, labels: np.ndarray) -> None:
    """MNIST's idx files: big-endian magic (0x0803 images, 0x0801 labels), sizes, raw bytes."""
    n, h, w = images.shape
    (folder / f"{prefix}-images-idx3-ubyte").write_bytes(
        struct.pack(">IIII", 0x0803, n, h, w) + images.astype(np.uint8).tobytes())
    (folder / f"{prefix}-labels-idx1-ubyte").write_bytes(
        struct.pack(">II", 0x0801, n) + labels.astype(np.uint8).tobytes())


def write_mnist(root: Path, name: str, seed: int, n_train: int = 100, n_test: int = 30) -> dict:
    rng = np.random.default_rng(seed)
    folder = root / name / "raw"
    folder.mkdir(parents=True)
    out = {}
    for prefix, split, n in (("train", "train", n_train), ("t10k", "test", n_test)):
        x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        y = balanced_labels(n, 10, rng)
        write_idx(folder, prefix, x, y)
        out[f"{split}_x"], out[f"{split}_y"] = x[:, None], y
    return out


def wnid(k: int) -> str:
    return f"n{1000000 + 7919 * k:08d}"


def write_tiny_imagenet(root: Path, per_class: int = 2, n_val: int = 40) -> dict:
    """``tiny-imagenet-200`` with all 200 classes, ``per_class`` training JPEGs each, and
    ``n_val`` validation JPEGs with ``val_annotations.txt``. Every image is one flat colour
    whose red value is ``label`` (JPEG keeps a flat colour within a grey level or two); one
    training image per class is saved grey-scale, as some real ones are."""
    folder = root / "tiny-imagenet-200"
    wnids = [wnid(k) for k in range(200)]  # label = position in the sorted list
    (folder / "val" / "images").mkdir(parents=True)
    (folder / "wnids.txt").write_text("\n".join(reversed(wnids)) + "\n")  # order must not matter

    def save(path: Path, label: int, grey: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        colour = (label, 100, 255 - label)
        image = Image.new("RGB", (64, 64), colour)
        (image.convert("L") if grey else image).save(path, "JPEG", quality=95)

    for label, name in enumerate(wnids):
        for k in range(per_class):
            save(folder / "train" / name / "images" / f"{name}_{k}.JPEG", label, grey=k == 0)
        (folder / "train" / name / f"{name}_boxes.txt").write_text("")
    val_y = np.arange(n_val) * 5 % 200
    lines = [f"val_{k}.JPEG\t{wnids[y]}\t0\t0\t63\t63" for k, y in enumerate(val_y)]
    for k, y in enumerate(val_y):
        save(folder / "val" / "images" / f"val_{k}.JPEG", int(y))
    (folder / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return {"train_y": np.repeat(np.arange(200), per_class), "test_y": val_y}


def write_all(root: Path) -> dict[str, dict]:
    """Every image dataset's generated files under ``root``; what each holds, by dataset."""
    return {"cifar10": write_cifar10(root), "cifar100": write_cifar100(root),
            "mnist": write_mnist(root, "MNIST", seed=2),
            "fashionmnist": write_mnist(root, "FashionMNIST", seed=3),
            "tinyimagenet": write_tiny_imagenet(root)}


def generated_checksums(root: Path, fashion: bool = True) -> list[tuple[type, str, Any]]:
    """``(class, attribute, value)`` triples that make torchvision (CIFAR) and clusterbench
    (Fashion-MNIST, unless ``fashion`` is false: real files keep the official sums) expect the
    md5 sums of the files under ``root``: a test sets them with ``monkeypatch.setattr``, a
    rehearsal process with ``setattr``."""
    from torchvision.datasets import CIFAR10, CIFAR100

    from datamodules.mnist import FashionMNISTDataModule

    triples: list[tuple[type, str, Any]] = []
    for cls in (CIFAR10, CIFAR100):
        folder = root / cls.base_folder
        if not folder.is_dir():
            continue
        for attr in ("train_list", "test_list"):
            triples.append((cls, attr, [[name, md5(folder / name)]
                                        for name, _ in getattr(cls, attr)]))
        triples.append((cls, "meta", dict(cls.meta, md5=md5(folder / cls.meta["filename"]))))
    folder = root / "FashionMNIST" / "raw"
    if fashion and folder.is_dir():
        names = FashionMNISTDataModule.checksums
        triples.append((FashionMNISTDataModule, "checksums",
                        {name: md5(folder / name) for name in names}))
    return triples
