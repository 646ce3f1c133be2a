"""CIFAR-10 and CIFAR-100 through torchvision's dataset classes, held as ``uint8`` tensors.

The folders are torchvision's: ``<data_dir>/cifar-10-batches-py`` and
``<data_dir>/cifar-100-python``. torchvision checks every file's md5 before reading it.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch
from torch import Tensor, nn

from datamodules.augment import simclr_augment
from datamodules.base import ClusterDataModule, TensorSplits
from datamodules.torchvision_datasets import corrupt, open_torchvision_split


def _cifar_splits(dm: ClusterDataModule, torchvision_name: str,
                  title: str) -> tuple[TensorSplits, Path, str]:
    """Both official splits of a torchvision CIFAR class as ``uint8`` ``(N, 3, 32, 32)``, the
    folder they were read from, and where to get them (for error messages)."""
    from torchvision import datasets

    cls = getattr(datasets, torchvision_name)
    folder = dm.data_dir / cls.base_folder
    if dm.download and not folder.is_dir():
        dm.prepare_data()
    files = [*cls.train_list, *cls.test_list, (cls.meta["filename"], cls.meta["md5"])]
    where_from = f"extract {cls.url} into {dm.data_dir}"
    splits = [open_torchvision_split(cls, dm.data_dir, train, folder, title, files, where_from)
              for train in (True, False)]
    # .data is (N, 32, 32, 3) uint8: read directly, no per-sample PIL images.
    tensors = [(torch.from_numpy(s.data).permute(0, 3, 1, 2).contiguous(),
                torch.as_tensor(s.targets, dtype=torch.long)) for s in splits]
    return TensorSplits(*tensors[0], *tensors[1]), folder, where_from


class CIFAR10DataModule(ClusterDataModule):
    """CIFAR-10 (Krizhevsky, 2009): 32x32 colour images of 10 classes, the official 50,000
    training and 10,000 test images; ``val_fraction`` of the training images are held out for
    validation. Read through ``torchvision.datasets.CIFAR10`` from
    ``<data_dir>/cifar-10-batches-py`` (``download=True`` fetches it). Held in memory as
    ``uint8``; normalised with its own training statistics. Augmentation: SimCLR's recipe
    (:func:`datamodules.augment.simclr_augment`).
    """

    name = "cifar10"
    provenance = "real"
    source = "CIFAR-10, 60,000 32x32 colour images of 10 classes (torchvision, official split)"
    num_classes = 10
    input_shape = (3, 32, 32)

    def prepare_data(self) -> None:
        if self.download:  # torchvision skips the download when the files pass its md5 check
            from torchvision.datasets import CIFAR10

            CIFAR10(root=str(self.data_dir), train=True, download=True)

    def load(self) -> TensorSplits:
        return _cifar_splits(self, "CIFAR10", "CIFAR-10")[0]

    def train_augment(self) -> nn.Module:
        return simclr_augment(32)


class CIFAR100DataModule(ClusterDataModule):
    """CIFAR-100 (Krizhevsky, 2009): 32x32 colour images, 100 fine classes grouped into 20
    coarse superclasses; the official 50,000 training and 10,000 test images. Labels ``y`` are
    the fine classes. Read through ``torchvision.datasets.CIFAR100`` from
    ``<data_dir>/cifar-100-python``; the coarse labels, which torchvision's class drops, are
    read from the same (md5-checked) pickles. Its own normalisation statistics (not
    CIFAR-10's); SimCLR's augmentation.

    The superclasses (for TransFusion's hierarchical target), after ``setup()``:

    - ``fine_to_coarse``: ``(num_classes,)`` long tensor, the superclass of each (possibly
      remapped, see ``classes``) fine label, so a training batch's labels ``y`` give their
      superclasses as ``dm.fine_to_coarse.to(y.device)[y]``;
    - :meth:`superclasses` ``(split)``: the superclass of every sample of ``"train"``,
      ``"val"`` or ``"test"``, in the order of that split's evaluation loader
      (``train_eval_dataloader`` for ``"train"``).

    Superclass numbers are CIFAR's own ``0..19`` (``num_superclasses``), not remapped.
    """

    name = "cifar100"
    provenance = "real"
    source = ("CIFAR-100, 60,000 32x32 colour images of 100 classes in 20 superclasses "
              "(torchvision, official split)")
    num_classes = 100
    num_superclasses = 20
    input_shape = (3, 32, 32)

    def prepare_data(self) -> None:
        if self.download:
            from torchvision.datasets import CIFAR100

            CIFAR100(root=str(self.data_dir), train=True, download=True)

    def load(self) -> TensorSplits:
        splits, folder, where_from = _cifar_splits(self, "CIFAR100", "CIFAR-100")
        coarse = {}
        for split, file_name in (("train", "train"), ("test", "test")):
            with open(folder / file_name, "rb") as f:  # already md5-checked by torchvision
                entry = pickle.load(f, encoding="latin1")
            if "coarse_labels" not in entry:
                raise FileNotFoundError(corrupt("CIFAR-100", folder,
                                                f"{file_name} has no coarse_labels", where_from))
            coarse[split] = torch.as_tensor(entry["coarse_labels"], dtype=torch.long)
            n_images = len(splits.train_y if split == "train" else splits.test_y)
            if len(coarse[split]) != n_images:
                raise FileNotFoundError(corrupt(
                    "CIFAR-100", folder, f"{file_name} has {len(coarse[split])} coarse labels "
                    f"for {n_images} images", where_from))
        self._coarse = coarse
        mapping = torch.full((type(self).num_classes,), -1, dtype=torch.long)
        mapping[splits.train_y] = coarse["train"]
        if self.class_mapping is not None:
            mapping = mapping[torch.tensor(list(self.class_mapping))]
        self.fine_to_coarse = mapping
        return splits

    def superclasses(self, split: str = "train") -> Tensor:
        """The coarse label (0-19) of every sample of ``split``, in its evaluation order."""
        self.setup()
        official = self._coarse["test" if split == "test" else "train"]
        return official[self.split_indices[split]]

    def train_augment(self) -> nn.Module:
        return simclr_augment(32)
