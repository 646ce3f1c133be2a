"""MNIST and Fashion-MNIST through torchvision's dataset classes, held as ``uint8`` tensors.

The folders are torchvision's: ``<data_dir>/MNIST/raw`` and ``<data_dir>/FashionMNIST/raw`` with
the four uncompressed idx-ubyte files.
"""

from __future__ import annotations

from torch import nn

from datamodules.augment import elastic_augment, mnist_augment
from datamodules.base import ClusterDataModule, TensorSplits
from datamodules.torchvision_datasets import open_torchvision_split

IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte")


def _idx_splits(dm: ClusterDataModule, torchvision_name: str, title: str) -> TensorSplits:
    """Both official splits of a torchvision MNIST-style class as ``uint8`` ``(N, 1, 28, 28)``."""
    from torchvision import datasets

    cls = getattr(datasets, torchvision_name)
    folder = dm.data_dir / torchvision_name / "raw"
    if dm.download and not all((folder / name).is_file() for name in IDX_FILES):
        dm.prepare_data()
    where_from = (f"the four files {cls.mirrors[0]}<name>.gz, un-gzipped, into {folder}")
    splits = [open_torchvision_split(cls, dm.data_dir, train, folder, title,
                                     [(name, None) for name in IDX_FILES], where_from)
              for train in (True, False)]
    # .data is a (N, 28, 28) uint8 tensor: read directly, no per-sample PIL images.
    train, test = ((s.data.unsqueeze(1).contiguous(), s.targets.long()) for s in splits)
    return TensorSplits(*train, *test)


def _mnist_like_augment(augmentation: str) -> nn.Module:
    return elastic_augment(28) if augmentation == "elastic" else mnist_augment(28)


class MNISTDataModule(ClusterDataModule):
    """MNIST (LeCun et al., 1998): 28x28 grey-scale handwritten digits 0-9, the official 60,000
    training and 10,000 test images. Read through ``torchvision.datasets.MNIST`` from
    ``<data_dir>/MNIST/raw`` (``download=True`` fetches it). Held as ``uint8``. Augmentation
    ``"default"``: crop and small affine jitter (:func:`datamodules.augment.mnist_augment`);
    ``"elastic"``: elastic deformation (:func:`datamodules.augment.elastic_augment`).
    ``classes=[0, 1, 2, 3, 4]`` gives the five-digit subset of the cluster-specific paper.
    """

    name = "mnist"
    provenance = "real"
    source = "MNIST, 70,000 28x28 grey-scale handwritten digits (torchvision, official split)"
    num_classes = 10
    input_shape = (1, 28, 28)
    augmentations = ("default", "elastic")

    def prepare_data(self) -> None:
        if self.download:
            from torchvision.datasets import MNIST

            MNIST(root=str(self.data_dir), train=True, download=True)

    def load(self) -> TensorSplits:
        return _idx_splits(self, "MNIST", "MNIST")

    def train_augment(self) -> nn.Module:
        return _mnist_like_augment(self.augmentation)


class FashionMNISTDataModule(ClusterDataModule):
    """Fashion-MNIST (Xiao et al., 2017, arXiv:1708.07747): 28x28 grey-scale images of 10
    kinds of clothing, the official 60,000 training and 10,000 test images. Read through
    ``torchvision.datasets.FashionMNIST`` from ``<data_dir>/FashionMNIST/raw``. Held as
    ``uint8``. Augmentations as :class:`MNISTDataModule`.
    """

    name = "fashionmnist"
    provenance = "real"
    source = ("Fashion-MNIST, 70,000 28x28 grey-scale clothing images "
              "(torchvision, official split)")
    num_classes = 10
    input_shape = (1, 28, 28)
    augmentations = ("default", "elastic")

    def prepare_data(self) -> None:
        if self.download:
            from torchvision.datasets import FashionMNIST

            FashionMNIST(root=str(self.data_dir), train=True, download=True)

    def load(self) -> TensorSplits:
        return _idx_splits(self, "FashionMNIST", "Fashion-MNIST")

    def train_augment(self) -> nn.Module:
        return _mnist_like_augment(self.augmentation)
