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


class _IdxDataModule(ClusterDataModule):
    """Shared by MNIST and Fashion-MNIST: torchvision's class ``torchvision_name`` (its folder
    ``<data_dir>/<torchvision_name>/raw``), 28x28 grey-scale, ``default`` or ``elastic``
    augmentation."""

    #: torchvision's class name, also its folder name; ``title`` names the data in messages.
    torchvision_name: str
    title: str
    provenance = "real"
    num_classes = 10
    input_shape = (1, 28, 28)
    augmentations = ("default", "elastic")

    def prepare_data(self) -> None:
        if self.download:
            from torchvision import datasets

            getattr(datasets, self.torchvision_name)(root=str(self.data_dir), train=True,
                                                     download=True)

    def load(self) -> TensorSplits:
        return _idx_splits(self, self.torchvision_name, self.title)

    def train_augment(self) -> nn.Module:
        return elastic_augment(28) if self.augmentation == "elastic" else mnist_augment(28)


class MNISTDataModule(_IdxDataModule):
    """MNIST (LeCun et al., 1998): 28x28 grey-scale handwritten digits 0-9, the official 60,000
    training and 10,000 test images. Read through ``torchvision.datasets.MNIST`` from
    ``<data_dir>/MNIST/raw`` (``download=True`` fetches it). Held as ``uint8``. Augmentation
    ``"default"``: crop and small affine jitter (:func:`datamodules.augment.mnist_augment`);
    ``"elastic"``: elastic deformation (:func:`datamodules.augment.elastic_augment`).
    ``classes=[0, 1, 2, 3, 4]`` gives the five-digit subset of the cluster-specific paper.
    """

    name = "mnist"
    torchvision_name, title = "MNIST", "MNIST"
    source = "MNIST, 70,000 28x28 grey-scale handwritten digits (torchvision, official split)"


class FashionMNISTDataModule(_IdxDataModule):
    """Fashion-MNIST (Xiao et al., 2017, arXiv:1708.07747): 28x28 grey-scale images of 10
    kinds of clothing, the official 60,000 training and 10,000 test images. Read through
    ``torchvision.datasets.FashionMNIST`` from ``<data_dir>/FashionMNIST/raw``. Held as
    ``uint8``. Augmentations as :class:`MNISTDataModule`.
    """

    name = "fashionmnist"
    torchvision_name, title = "FashionMNIST", "Fashion-MNIST"
    source = ("Fashion-MNIST, 70,000 28x28 grey-scale clothing images "
              "(torchvision, official split)")
