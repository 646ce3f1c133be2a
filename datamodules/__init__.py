"""DataModules. ``DATAMODULES`` is the one registry: registered name -> class."""

from datamodules.base import ClusterDataModule, TensorSplits, default_data_dir
from datamodules.cifar import CIFAR10DataModule, CIFAR100DataModule
from datamodules.digits import DigitsDataModule
from datamodules.generated import (
    BlobsDataModule,
    Lines3DDataModule,
    OrthogonalDataModule,
    ParallelLinesDataModule,
    SubspacesDataModule,
    TriangleDataModule,
)
from datamodules.image_folder import ImageFolderDataModule
from datamodules.mnist import FashionMNISTDataModule, MNISTDataModule
from datamodules.tabular import IrisDataModule, PenguinsDataModule
from datamodules.tinyimagenet import TinyImageNetDataModule
from datamodules.transformed_images import TransformedImagesDataModule

DATAMODULES: dict[str, type[ClusterDataModule]] = {
    "digits": DigitsDataModule,
    "cifar10": CIFAR10DataModule,
    "cifar100": CIFAR100DataModule,
    "mnist": MNISTDataModule,
    "fashionmnist": FashionMNISTDataModule,
    "tinyimagenet": TinyImageNetDataModule,
    "imagefolder": ImageFolderDataModule,
    "iris": IrisDataModule,
    "penguins": PenguinsDataModule,
    "blobs": BlobsDataModule,
    "subspaces": SubspacesDataModule,
    "parallel_lines": ParallelLinesDataModule,
    "orthogonal": OrthogonalDataModule,
    "triangle": TriangleDataModule,
    "lines3d": Lines3DDataModule,
    "transformed_images": TransformedImagesDataModule,
}

__all__ = ["DATAMODULES", "CIFAR10DataModule", "CIFAR100DataModule", "FashionMNISTDataModule",
           "ImageFolderDataModule",
           "MNISTDataModule", "TinyImageNetDataModule",
           "ClusterDataModule", "DigitsDataModule", "TensorSplits",
           "default_data_dir",
           "BlobsDataModule", "IrisDataModule", "Lines3DDataModule", "OrthogonalDataModule",
           "ParallelLinesDataModule", "PenguinsDataModule", "SubspacesDataModule",
           "TransformedImagesDataModule", "TriangleDataModule"]
