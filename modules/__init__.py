"""Methods (LightningModules), losses, backbones and heads.

``METHODS`` is the one registry of methods: registered name -> class. The CLI, the suites and
notebooks look names up here.
"""

from modules.base import RepresentationModule
from modules.moco import MoCo
from modules.pixels import RawPixels
from modules.simclr import SimCLR
from modules.supcon import SupCon
from modules.tensorized import (
    Autoencoder,
    PartiallyTensorizedAutoencoder,
    TensorizedAutoencoder,
    TensorizedContrastive,
    TensorizedRBM,
    TensorizedVAE,
)
from modules.transfusion import TransFusion

METHODS: dict[str, type] = {
    "simclr": SimCLR,
    "supcon": SupCon,
    "transfusion": TransFusion,
    "moco": MoCo,
    "pixels": RawPixels,
    "ae": Autoencoder,
    "tae": TensorizedAutoencoder,
    "ptae": PartiallyTensorizedAutoencoder,
    "tvae": TensorizedVAE,
    "tcl": TensorizedContrastive,
    "trbm": TensorizedRBM,
}

__all__ = ["METHODS", "Autoencoder", "MoCo", "PartiallyTensorizedAutoencoder", "RawPixels",
           "RepresentationModule", "SimCLR", "SupCon", "TensorizedAutoencoder",
           "TensorizedContrastive", "TensorizedRBM", "TensorizedVAE", "TransFusion"]
