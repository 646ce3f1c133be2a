"""DataModules. ``DATAMODULES`` is the one registry: registered name -> class."""

from datamodules.base import ClusterDataModule, TensorSplits, default_data_dir
from datamodules.digits import DigitsDataModule

DATAMODULES: dict[str, type[ClusterDataModule]] = {
    "digits": DigitsDataModule,
}

__all__ = ["DATAMODULES", "ClusterDataModule", "DigitsDataModule", "TensorSplits",
           "default_data_dir"]
