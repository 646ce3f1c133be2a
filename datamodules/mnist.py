"""MNIST and Fashion-MNIST from their official idx-ubyte files, held as ``uint8`` tensors.

The folders are torchvision's: ``<data_dir>/MNIST/raw`` and ``<data_dir>/FashionMNIST/raw`` with
the four idx-ubyte files, each uncompressed or gzipped (``<name>.gz``, as they are published).
When the data root has none of them, a dataset also looks in the folders a system package
installs (Debian's ``dataset-fashion-mnist``: ``/usr/share/datasets/fashion-mnist``), and says
where the data came from in a log line and in :attr:`ClusterDataModule.source`, which every
result records.

Fashion-MNIST's files are checked against the md5 of the official *uncompressed* files: a gzipped
copy may be recompressed (Debian's are), so the checksums of the published ``.gz`` files that
torchvision uses do not apply to it, while the uncompressed content is the same.
"""

from __future__ import annotations

import gzip
import hashlib
import sys
import zlib
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from datamodules.augment import elastic_augment, greyscale_simclr_augment, mnist_augment
from datamodules.base import ClusterDataModule, TensorSplits, shown_path
from datamodules.image_decoding import open_regular
from datamodules.torchvision_datasets import corrupt, not_found

#: The (dataset, folder) pairs this process has named already: one line each, not one a run.
_ANNOUNCED: set[tuple[str, Path]] = set()

IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte")

#: md5 of the official uncompressed Fashion-MNIST files (github.com/zalandoresearch/fashion-mnist,
#: gunzipped), as published beside the ``.gz`` checksums by earlier torchvision releases.
FASHION_MNIST_MD5 = {
    "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
    "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
    "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
    "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
}

#: The largest idx file read (MNIST's training images are 47 MB uncompressed).
MAX_IDX_BYTES = 256 * 2**20

#: The idx magic numbers: unsigned bytes, 3 dimensions (images) or 1 (labels).
IDX_MAGIC = {3: 0x0803, 1: 0x0801}


def find_file(folder: Path, name: str) -> Path | None:
    """``folder/name``, else ``folder/name.gz``, else None."""
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def read_idx_bytes(path: Path, dims: int, limit: int = MAX_IDX_BYTES) -> bytes:
    """The content of the idx file ``path`` of ``dims`` dimensions, gunzipped when its name ends
    in ``.gz``, read no further than the size its header declares (and at most ``limit``
    bytes), so a gzip bomb is refused after one byte too many instead of filling the memory.
    Only a regular file is opened. ``ValueError`` says what is too large."""
    header = 4 * (1 + dims)
    with open_regular(path) as raw:
        stream = gzip.GzipFile(fileobj=raw, mode="rb") if path.suffix == ".gz" else raw
        head = stream.read(header)
        if len(head) < header:
            return head  # parse_idx names the short header
        shape = tuple(int.from_bytes(head[4 * (i + 1):4 * (i + 2)], "big") for i in range(dims))
        expected = header + int(np.prod(shape, dtype=object))
        if expected > limit:
            raise ValueError(f"its header {shape} declares {expected:,} bytes, more than the "
                             f"{limit:,} an idx file may hold")
        content = head + stream.read(expected - header + 1)
    if len(content) > expected:
        raise ValueError(f"it holds more than the {expected:,} bytes its header {shape} declares "
                         "(reading stopped there)")
    return content


def parse_idx(content: bytes, dims: int) -> np.ndarray:
    """An idx-ubyte array of ``dims`` dimensions (LeCun's format: a big-endian magic number, the
    sizes, then the unsigned bytes), or ``ValueError`` saying what does not fit.

    >>> parse_idx(bytes([0, 0, 8, 1, 0, 0, 0, 2, 7, 9]), 1)
    array([7, 9], dtype=uint8)
    """
    header = 4 * (1 + dims)
    if len(content) < header:
        raise ValueError(f"{len(content)} bytes, shorter than the {header}-byte header")
    magic = int.from_bytes(content[:4], "big")
    if magic != IDX_MAGIC[dims]:
        raise ValueError(f"magic number {magic:#06x}, expected {IDX_MAGIC[dims]:#06x}")
    shape = tuple(int.from_bytes(content[4 * (i + 1):4 * (i + 2)], "big") for i in range(dims))
    expected = header + int(np.prod(shape))
    if len(content) != expected:
        raise ValueError(f"{len(content)} bytes where its header {shape} needs {expected}")
    return np.frombuffer(content, dtype=np.uint8, offset=header).reshape(shape)


class _IdxDataModule(ClusterDataModule):
    """Shared by MNIST and Fashion-MNIST: the four idx-ubyte files (gzipped or not) of
    ``<data_dir>/<folder_name>/raw`` or of a system package's folder, 28x28 grey-scale,
    ``default``, ``elastic`` or ``simclr`` augmentation."""

    #: torchvision's class name, also the folder name; ``title`` names the data in messages.
    torchvision_name: ClassVar[str]
    title: ClassVar[str]
    #: Folders a system package installs the files into, tried when the data root has none, and
    #: that package's name (for the remedy when its files are corrupt).
    system_folders: ClassVar[tuple[str, ...]] = ()
    system_package: ClassVar[str] = ""
    #: md5 of each uncompressed file; a file not listed is not checked.
    checksums: ClassVar[dict[str, str]] = {}
    provenance = "real"
    num_classes = 10
    input_shape = (1, 28, 28)
    augmentations = ("default", "elastic", "simclr")

    @property
    def folder(self) -> Path:
        return self.data_dir / self.torchvision_name / "raw"

    def where_from(self) -> str:
        from torchvision import datasets

        mirror = getattr(datasets, self.torchvision_name).mirrors[0]
        return f"the four files {mirror}<name>.gz, gzipped or not, into {self.folder}"

    def data_folder(self) -> tuple[Path, str]:
        """The folder the files are read from, and how it was found (for the log line and the
        result's provenance)."""
        if any(find_file(self.folder, name) for name in IDX_FILES):
            return self.folder, "the data root"
        for system in map(Path, self.system_folders):
            if all(find_file(system, name) for name in IDX_FILES):
                return system, (f"a system package's folder: {shown_path(self.folder)} has "
                                "none")
        return self.folder, "the data root"

    def corrupt(self, folder: Path, problem: str) -> str:
        if folder == self.folder:
            return corrupt(self.title, folder, problem, self.where_from())
        return (f"{self.title} in {folder} (a system package's folder) is incomplete or corrupt: "
                f"{problem}. Reinstall the package (apt-get install --reinstall "
                f"{self.system_package}), or put the files into {self.folder}.")

    def read_checked(self, folder: Path, path: Path, name: str) -> np.ndarray:
        """The array in ``path`` (the file ``name``, maybe gzipped), after its md5 check."""
        try:
            content = read_idx_bytes(path, 3 if "images" in name else 1)
        except (OSError, EOFError, zlib.error) as err:
            raise FileNotFoundError(self.corrupt(
                folder, f"{path.name} cannot be read ({type(err).__name__}: {err})")) from err
        except ValueError as err:
            raise FileNotFoundError(self.corrupt(folder, f"{path.name}: {err}")) from err
        want, got = self.checksums.get(name), hashlib.md5(content).hexdigest()
        if want is not None and got != want:
            raise FileNotFoundError(self.corrupt(
                folder, f"{path.name} is not the official file (md5 of its uncompressed "
                f"content {got}, official {want})"))
        try:
            return parse_idx(content, 3 if "images" in name else 1)
        except ValueError as err:
            raise FileNotFoundError(self.corrupt(folder, f"{path.name}: {err}")) from err

    def prepare_data(self) -> None:
        folder, _ = self.data_folder()
        if self.download and not any(find_file(folder, name) for name in IDX_FILES):
            from torchvision import datasets

            getattr(datasets, self.torchvision_name)(root=str(self.data_dir), train=True,
                                                     download=True)

    def load(self) -> TensorSplits:
        self.prepare_data()
        folder, found_in = self.data_folder()
        if not folder.is_dir():
            raise FileNotFoundError(not_found(self.title, folder, IDX_FILES, self.where_from()))
        paths = {name: find_file(folder, name) for name in IDX_FILES}
        missing = [name for name, path in paths.items() if path is None]
        if missing:
            raise FileNotFoundError(self.corrupt(folder, f"missing: {', '.join(missing)} "
                                                 "(nor its .gz)"))
        arrays = {name: self.read_checked(folder, path, name) for name, path in paths.items()}
        splits = []
        for prefix, split in (("train", "training"), ("t10k", "test")):
            x, y = arrays[f"{prefix}-images-idx3-ubyte"], arrays[f"{prefix}-labels-idx1-ubyte"]
            if len(x) != len(y):
                raise FileNotFoundError(self.corrupt(
                    folder, f"{len(x)} images but {len(y)} labels in the {split} split"))
            # x: (N, 28, 28) uint8 -> (N, 1, 28, 28), copied out of the read-only buffer
            splits += [torch.from_numpy(x.copy()).unsqueeze(1),
                       torch.from_numpy(y.astype(np.int64))]
        verified = "md5-verified official files" if self.checksums else "files"
        self.source = f"{type(self).source} [{verified} from {shown_path(folder)}, {found_in}]"
        if (self.title, folder) not in _ANNOUNCED:
            _ANNOUNCED.add((self.title, folder))
            print(f"{self.title}: {verified} read from {shown_path(folder)} ({found_in})",
                  file=sys.stderr)
        return TensorSplits(*splits)

    def train_augment(self) -> nn.Module:
        if self.augmentation == "simclr":
            return greyscale_simclr_augment(28)
        return elastic_augment(28) if self.augmentation == "elastic" else mnist_augment(28)


class MNISTDataModule(_IdxDataModule):
    """MNIST (LeCun et al., 1998): 28x28 grey-scale handwritten digits 0-9, the official 60,000
    training and 10,000 test images, from ``<data_dir>/MNIST/raw`` (the idx-ubyte files,
    gzipped or not; ``download=True`` fetches them through ``torchvision.datasets.MNIST``). Held
    as ``uint8``. Augmentation ``"default"``: crop and small affine jitter
    (:func:`datamodules.augment.mnist_augment`); ``"elastic"``: elastic deformation
    (:func:`datamodules.augment.elastic_augment`); ``"simclr"``: SimCLR's crops, flips,
    brightness and contrast for grey-scale (:func:`datamodules.augment.greyscale_simclr_augment`).
    ``classes=[0, 1, 2, 3, 4]`` gives the
    five-digit subset of the cluster-specific paper.
    """

    name = "mnist"
    torchvision_name, title = "MNIST", "MNIST"
    source = "MNIST, 70,000 28x28 grey-scale handwritten digits (official split)"


class FashionMNISTDataModule(_IdxDataModule):
    """Fashion-MNIST (Xiao et al., 2017, arXiv:1708.07747): 28x28 grey-scale images of 10
    kinds of clothing, the official 60,000 training and 10,000 test images, from
    ``<data_dir>/FashionMNIST/raw`` (gzipped or not; ``download=True`` fetches them through
    ``torchvision.datasets.FashionMNIST``) or, when the data root has none, from Debian's
    ``dataset-fashion-mnist`` package (``apt-get install dataset-fashion-mnist``). Each file is
    checked against the md5 of the official uncompressed file. Held as ``uint8``.
    Augmentations as :class:`MNISTDataModule`.
    """

    name = "fashionmnist"
    torchvision_name, title = "FashionMNIST", "Fashion-MNIST"
    source = "Fashion-MNIST, 70,000 28x28 grey-scale clothing images (official split)"
    system_folders = ("/usr/share/datasets/fashion-mnist",)
    system_package = "dataset-fashion-mnist"
    checksums = FASHION_MNIST_MD5
