"""TinyImageNet: the standard ``tiny-imagenet-200`` folder, decoded once into ``uint8``.

Layout (as unpacked from the official zip)::

    <data_dir>/tiny-imagenet-200/wnids.txt                    200 WordNet ids, one a line
    <data_dir>/tiny-imagenet-200/train/<wnid>/images/*.JPEG   500 per class
    <data_dir>/tiny-imagenet-200/val/images/*.JPEG            10,000
    <data_dir>/tiny-imagenet-200/val/val_annotations.txt      file, wnid, box (tab-separated)

The official test images have no public labels, so the test split is the official validation
set, and the validation split is held out of the training images.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from torch import nn

from datamodules.augment import SimCLRAugment
from datamodules.base import ClusterDataModule, TensorSplits
from datamodules.image_decoding import open_regular, to_eight_bit
from datamodules.torchvision_datasets import corrupt, not_found

URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
#: md5 of the official zip, as torchvision-style loaders check it.
ZIP_MD5 = "90528d7ca1a48142e341f4ef8d21d0de"
FOLDER = "tiny-imagenet-200"
SIDE = 64
NUM_CLASSES = 200
WHERE_FROM = f"unzip {URL} into the data root"


def decode_images(paths: list[Path], folder: Path) -> np.ndarray:
    """``(N, 3, 64, 64)`` ``uint8`` RGB pixels of the JPEGs ``paths``, decoded in threads (PIL
    releases the GIL while decoding). Grey-scale JPEGs (TinyImageNet has some) become RGB; a
    16-bit or float image is scaled to 0-255 from its own range, any other mode refused
    (:func:`datamodules.image_decoding.to_eight_bit`). Only regular files are opened."""
    from PIL import Image, UnidentifiedImageError

    out = np.empty((len(paths), 3, SIDE, SIDE), dtype=np.uint8)

    def decode(i: int) -> None:
        try:
            with open_regular(paths[i]) as file, Image.open(file) as image:
                # the size from the header, before anything is decoded: a decompression bomb
                # (a small file that decodes to gigapixels) is refused unread
                if image.size != (SIDE, SIDE):
                    raise FileNotFoundError(corrupt(
                        "TinyImageNet", folder, f"{paths[i]} is {image.size[0]}x"
                        f"{image.size[1]}, not {SIDE}x{SIDE}", WHERE_FROM))
                pixels = np.asarray(to_eight_bit(image, 3))
        except FileNotFoundError:
            raise
        except (OSError, ValueError, UnidentifiedImageError, Image.DecompressionBombError) as err:
            problem = f"cannot decode {paths[i]}: {err}"
            raise FileNotFoundError(corrupt("TinyImageNet", folder, problem, WHERE_FROM)) from err
        out[i] = pixels.transpose(2, 0, 1)

    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        list(pool.map(decode, range(len(paths))))
    return out


def read_tiny_imagenet(folder: Path) -> TensorSplits:
    """The training images and the official validation set (as the test split) of ``folder``,
    labelled by the position of their WordNet id in the sorted ``wnids.txt`` (the order of
    torchvision's ``ImageFolder`` over ``train/``).

    An interrupted download or unzip shows as a ``wnids.txt`` without 200 ids, classes with
    unequal numbers of training images (the official set has 500 each), a missing annotation
    file or a listed validation image that is not there: each raises ``FileNotFoundError``.
    """
    def fail(problem: str) -> FileNotFoundError:
        return FileNotFoundError(corrupt("TinyImageNet", folder, problem, WHERE_FROM))

    wnids_file = folder / "wnids.txt"
    if not wnids_file.is_file():
        raise fail("wnids.txt is missing")
    wnids = sorted({line.strip() for line in wnids_file.read_text().splitlines() if line.strip()})
    if len(wnids) != NUM_CLASSES:
        raise fail(f"wnids.txt lists {len(wnids)} classes, not {NUM_CLASSES}")
    label = {wnid: i for i, wnid in enumerate(wnids)}
    per_class = {wnid: sorted((folder / "train" / wnid / "images").glob("*.JPEG"))
                 for wnid in wnids}
    counts = {len(images) for images in per_class.values()}
    if min(counts) == 0 or len(counts) > 1:
        fewest = min(per_class, key=lambda wnid: len(per_class[wnid]))
        raise fail(f"classes have unequal numbers of training images (from {min(counts)} to "
                   f"{max(counts)}; {folder / 'train' / fewest / 'images'} has the fewest)")
    train_paths = [path for wnid in wnids for path in per_class[wnid]]
    train_y = [label[wnid] for wnid in wnids for _ in per_class[wnid]]
    annotations = folder / "val" / "val_annotations.txt"
    if not annotations.is_file():
        raise fail("val/val_annotations.txt is missing")
    test_paths, test_y = [], []
    for number, line in enumerate(annotations.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 or fields[1] not in label:
            raise fail(f"line {number} of val_annotations.txt names no known class: {line!r}")
        test_paths.append(folder / "val" / "images" / fields[0])
        test_y.append(label[fields[1]])
    missing = [p for p in test_paths if not p.is_file()]
    if not test_paths or missing:
        raise fail(f"{len(missing)} of the {len(test_paths)} validation images listed in "
                   f"val_annotations.txt are missing" + (f", e.g. {missing[0]}" if missing else ""))
    return TensorSplits(torch.from_numpy(decode_images(train_paths, folder)),
                        torch.as_tensor(train_y, dtype=torch.long),
                        torch.from_numpy(decode_images(test_paths, folder)),
                        torch.as_tensor(test_y, dtype=torch.long))


class TinyImageNetDataModule(ClusterDataModule):
    """TinyImageNet (Stanford CS231n): 64x64 colour images of 200 ImageNet classes, 100,000
    training images (500 a class) and the 10,000-image official validation set, used as the
    test split since the official test labels are not public; ``val_fraction`` of the training
    images are held out for validation. Read from ``<data_dir>/tiny-imagenet-200``;
    ``download=True`` fetches and unpacks the official zip (about 240 MB). The JPEGs are decoded
    once per ``setup`` into ``uint8`` (1.2 GB for the training images; never converted to float
    as a whole). Augmentation: SimCLR's recipe with Gaussian blur and colour jitter of strength
    1.0 (:class:`datamodules.augment.SimCLRAugment`).

    The jitter strength is the Kernel-InfoNCE authors' (Tan, Zhang, Yang, Yuan, "Contrastive
    Learning is Spectral Clustering on Similarity Graph", ICLR 2024, arXiv:2303.15103): the
    paper says only that its augmentation is "identical to the default transformation strategy
    provided by PyTorch Lightning", and the authors' ``simclr_module.py`` gives its ImageNet and
    TinyImageNet branch Lightning Bolts' ``SimCLRTrainDataTransform`` with ``jitter_strength``
    1.0 (brightness, contrast, saturation 0.8, hue 0.2; probability 0.8) and Gaussian blur, where
    its CIFAR branch sets 0.5. Departure: that branch normalises with ImageNet's statistics;
    like every dataset here, TinyImageNet is normalised with its own training split's.
    """

    name = "tinyimagenet"
    provenance = "real"
    source = ("TinyImageNet, 110,000 64x64 colour images of 200 ImageNet classes "
              "(cs231n zip; test = official val)")
    num_classes = NUM_CLASSES
    input_shape = (3, SIDE, SIDE)

    @property
    def folder(self) -> Path:
        return self.data_dir / FOLDER

    def prepare_data(self) -> None:
        if self.download and not (self.folder / "wnids.txt").is_file():
            from torchvision.datasets.utils import download_and_extract_archive

            download_and_extract_archive(URL, download_root=str(self.data_dir), md5=ZIP_MD5)

    def load(self) -> TensorSplits:
        if self.download:
            self.prepare_data()
        if not self.folder.is_dir():
            raise FileNotFoundError(not_found(
                "TinyImageNet", self.folder,
                ["wnids.txt", "train/<wnid>/images/*.JPEG", "val/images/*.JPEG",
                 "val/val_annotations.txt"], WHERE_FROM))
        return read_tiny_imagenet(self.folder)

    def train_augment(self) -> nn.Module:
        return SimCLRAugment(SIDE, jitter=1.0)  # blur at 64 px
