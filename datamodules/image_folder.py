"""Your own images as a dataset: one folder per class, the layout of torchvision's
``ImageFolder``, so a folder of PNGs or JPEGs is benchmarked like CIFAR without writing a
DataModule (``data: {name: imagefolder, folder: /path/to/images}`` in a suite)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from torch import nn

from datamodules.augment import mnist_augment, simclr_augment
from datamodules.base import ClusterDataModule, TensorSplits
from datamodules.image_decoding import ImageRefused, decode_image

#: The image files a class folder may hold (the case of the suffix does not matter).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
#: The test split's seed when it is drawn from the images: every run's seed sees the same one.
TEST_SPLIT_SEED = 0
#: The most pixels an image may have (a 7000x7000 photograph): a larger header is refused
#: before decoding, as a decompression bomb would be.
MAX_PIXELS = 50_000_000
#: The images :meth:`ImageFolderDataModule.check_files` decodes at a time.
CHECK_CHUNK = 4096


def class_files(folder: Path) -> dict[str, list[Path]]:
    """``class name -> its image files``, both sorted by name, of the class folders in
    ``folder`` (hidden folders and other files are ignored)."""
    return {d.name: sorted(p for p in d.rglob("*")
                           if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
            for d in sorted(folder.iterdir()) if d.is_dir() and not d.name.startswith(".")}


def decode(paths: list[Path], size: int, channels: int) -> np.ndarray:
    """``(N, channels, size, size)`` ``uint8`` pixels of the images at ``paths``, each brought
    to 8-bit RGB (3 channels) or grey (1) in its own range (16-bit grey scaled by 65535, float
    in [0, 1]: :func:`datamodules.image_decoding.to_eight_bit`) and resized to ``size`` x
    ``size`` (bilinear), decoded in threads. A file that is not a regular file or not an image,
    an image of a mode not accepted, or one whose header claims more than :data:`MAX_PIXELS`,
    is a FileNotFoundError of one line naming it (a damaged file without Pillow's words, which
    name its reader object: ``<_io.BufferedReader name=6>``)."""
    from PIL import Image

    out = np.empty((len(paths), channels, size, size), dtype=np.uint8)

    def one(i: int) -> None:
        try:
            image = decode_image(paths[i], channels, MAX_PIXELS)
            pixels = np.asarray(image.resize((size, size), Image.BILINEAR))
        except ImageRefused as err:
            raise FileNotFoundError(f"image folder: cannot decode {paths[i]}: {err}") from err
        except (OSError, ValueError, EOFError, SyntaxError, Image.DecompressionBombError) as err:
            if isinstance(err, OSError) and err.errno is not None:  # the system's: no
                raise FileNotFoundError(  # permission, or gone since the folder was listed
                    f"image folder: cannot read {paths[i]}: {err.strerror}") from err
            raise FileNotFoundError(f"image folder: cannot decode {paths[i]}: it is not a "
                                    "readable image (damaged, truncated or not an image at "
                                    "all)") from err
        out[i] = pixels.transpose(2, 0, 1) if channels == 3 else pixels[None]

    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        list(pool.map(one, range(len(paths))))
    return out


class ImageFolderDataModule(ClusterDataModule):
    """Images in one folder per class (``folder/<class>/*.png``), labelled by the class
    folders' names in sorted order. With ``folder/train/<class>/`` and ``folder/test/<class>/``
    those are the splits; otherwise ``test_fraction`` of each class is drawn (seeded, the same
    for every run seed) as the test split. Every image is converted to RGB (``channels`` 3) or
    grey (1) and resized to ``image_size`` x ``image_size``; augmentation: SimCLR's recipe
    (:func:`datamodules.augment.simclr_augment`) for colour images, the MNIST recipe for grey.

    Args:
        folder: the images' folder.
        image_size: the side the images are resized to (at least 8).
        channels: 3 (RGB) or 1 (grey).
        test_fraction: the share of each class held out as the test split, in (0, 1), when
            the folder has no ``train/`` and ``test/`` folders.
        **kwargs: :class:`datamodules.base.ClusterDataModule`'s.
    """

    name = "imagefolder"
    provenance = "real"
    source = ("your images, one folder per class (data.folder; train/ and test/ folders, or "
              "a seeded test_fraction)")
    num_classes = 0  # the class folders', set when the module is built
    input_shape = (3, 32, 32)

    def __init__(self, folder: str, image_size: int = 32, channels: int = 3,
                 test_fraction: float = 0.2, **kwargs) -> None:
        if not isinstance(image_size, int) or image_size < 8:
            raise ValueError(f"image_size must be an integer of at least 8, got {image_size!r}")
        if channels not in (1, 3):
            raise ValueError(f"channels must be 1 or 3, got {channels!r}")
        if not 0.0 < test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
        self.folder, self.image_size, self.channels = Path(folder), image_size, channels
        self.test_fraction = test_fraction
        self.input_shape = (channels, image_size, image_size)
        self.num_classes = len(self.class_names())
        super().__init__(**kwargs)

    def split_folders(self) -> tuple[Path, Path | None]:
        """The training images' folder, and the test images' (None: drawn from the former)."""
        train, test = self.folder / "train", self.folder / "test"
        return (train, test) if train.is_dir() and test.is_dir() else (self.folder, None)

    def class_names(self) -> list[str]:
        """The class folders' names, sorted: class k is the k-th."""
        if not self.folder.is_dir():
            raise FileNotFoundError(f"image folder not found: looked in {self.folder} (expected "
                                    "one folder of images per class, or train/ and test/ "
                                    "folders that each hold one per class)")
        names = [name for name, files in class_files(self.split_folders()[0]).items() if files]
        if len(names) < 2:
            raise FileNotFoundError(f"image folder {self.folder} has {len(names)} class folder(s) "
                                    "with images; a dataset needs at least 2")
        return names

    def load(self) -> TensorSplits:
        names = self.class_names()
        train_folder, test_folder = self.split_folders()
        train = class_files(train_folder)
        if test_folder is None:
            train, test = self.drawn_test_split({name: train[name] for name in names})
        else:
            test = class_files(test_folder)
            unknown = sorted(set(test) - set(names))
            if unknown:
                raise FileNotFoundError(f"image folder {test_folder} has classes the training "
                                        f"images lack: {', '.join(unknown)}")
        return TensorSplits(*self.tensors(train, names), *self.tensors(test, names))

    def drawn_test_split(self, files: dict[str, list[Path]]
                         ) -> tuple[dict[str, list[Path]], dict[str, list[Path]]]:
        """``test_fraction`` of each class (at least one image, one left to train on) as the
        test split, drawn with :data:`TEST_SPLIT_SEED`."""
        rng = np.random.default_rng(TEST_SPLIT_SEED)
        train, test = {}, {}
        for name, paths in files.items():
            order = rng.permutation(len(paths))
            count = min(len(paths) - 1, max(1, round(self.test_fraction * len(paths))))
            test[name] = [paths[i] for i in sorted(order[:count])]
            train[name] = [paths[i] for i in sorted(order[count:])]
        return train, test

    def tensors(self, files: dict[str, list[Path]], names: list[str]
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """The images of ``files`` as ``uint8`` tensors and their labels (positions in
        ``names``)."""
        paths = [p for name in names for p in files.get(name, [])]
        labels = [k for k, name in enumerate(names) for _ in files.get(name, [])]
        pixels = decode(paths, self.image_size, self.channels)
        return torch.from_numpy(pixels), torch.tensor(labels, dtype=torch.long)

    def check_files(self) -> None:
        """Every image decodes as :meth:`load` decodes it, so that a damaged one stops a suite
        before its first run instead of each run as it starts."""
        folders = [f for f in self.split_folders() if f is not None]
        paths = [p for f in folders for files in class_files(f).values() for p in files]
        for start in range(0, len(paths), CHECK_CHUNK):  # bounded memory for a large folder
            decode(paths[start:start + CHECK_CHUNK], self.image_size, self.channels)

    @property
    def dataset_label(self) -> str:
        """``imagefolder:<the folder's name>`` (``imagefolder:pets`` for ``/data/pets``)."""
        return f"{self.name}:{Path(os.path.abspath(self.folder)).name or self.folder}"

    def train_augment(self) -> nn.Module:
        return (simclr_augment(self.image_size) if self.channels == 3
                else mnist_augment(self.image_size))
