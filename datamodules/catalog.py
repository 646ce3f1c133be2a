"""The datasets clusterbench downloads, where each one lives under a data root, and the offline
checks of what is there (``clusterbench data``): for machines without a network, such as the
GPU nodes of many clusters, the data is fetched and verified on a machine with one, copied over,
and verified again there.

Verifying a dataset reads it through its own datamodule, with every check it makes before a
run: the official md5 of each CIFAR file (torchvision's) and of each MNIST / Fashion-MNIST file
(of its uncompressed content), the layout of ``tiny-imagenet-200`` and that every image decodes
(no official checksum exists for the extracted files).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torchvision.datasets import CIFAR10, CIFAR100, MNIST, FashionMNIST

from datamodules import tinyimagenet
from datamodules.mnist import FashionMNISTDataModule, MNISTDataModule


@dataclass(frozen=True)
class Entry:
    """One downloadable dataset: its folder under the data root and its download's size."""

    name: str
    folder: str
    download: str
    url: str


#: The datasets that need a download, in the order ``clusterbench data`` lists them: folders and
#: sources as their loaders know them. digits and iris ship with scikit-learn, the penguins with
#: palmerpenguins, and the rest are generated.
CATALOG = {e.name: e for e in (
    Entry("cifar10", CIFAR10.base_folder, "163 MiB", CIFAR10.url),
    Entry("cifar100", CIFAR100.base_folder, "161 MiB", CIFAR100.url),
    Entry("mnist", f"{MNISTDataModule.torchvision_name}/raw", "11 MiB", MNIST.mirrors[0]),
    Entry("fashionmnist", f"{FashionMNISTDataModule.torchvision_name}/raw", "30 MiB",
          f"{FashionMNIST.mirrors[0]} (or Debian's {FashionMNISTDataModule.system_package})"),
    Entry("tinyimagenet", tinyimagenet.FOLDER, "237 MiB", tinyimagenet.URL),
)}


def present(root: Path, name: str) -> bool:
    folder = Path(root) / CATALOG[name].folder
    return folder.is_dir() and any(folder.iterdir())


def system_copy(name: str) -> Path | None:
    """The folder of a system package that holds dataset ``name`` on this machine (Debian's
    ``dataset-fashion-mnist``), which its datamodule reads when the data root has none; else
    None."""
    from datamodules import DATAMODULES

    folders = getattr(DATAMODULES[name], "system_folders", ())
    return next((Path(f) for f in folders if Path(f).is_dir()), None)


def verify(root: Path, name: str) -> str | None:
    """None when ``name`` under ``root`` passes every check its datamodule makes before a run,
    else the one-line reason."""
    from datamodules import DATAMODULES

    try:
        DATAMODULES[name](data_dir=str(root)).load()
    except (FileNotFoundError, OSError, ValueError, RuntimeError) as err:
        return " ".join(str(err).split())
    return None


def fetch(root: Path, name: str) -> None:
    """Download ``name`` into ``root`` with its datamodule's own download (which checks what it
    fetched)."""
    from datamodules import DATAMODULES

    DATAMODULES[name](data_dir=str(root), download=True).prepare_data()
