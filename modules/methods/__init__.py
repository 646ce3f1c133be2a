"""The methods: thin LightningModules composed of a backbone, a projector and a loss.

``METHODS`` is the one registry of methods: registered name -> class. The CLI, the suites and
notebooks look names up here.
"""


from modules.methods.barlow_twins import BarlowTwins
from modules.methods.base import RepresentationModule, TrainingViews
from modules.methods.byol import BYOL
from modules.methods.moco import MoCo
from modules.methods.pixels import RawPixels
from modules.methods.pretrained import PretrainedBackbone
from modules.methods.random_init import RandomInitBackbone
from modules.methods.simclr import SimCLR
from modules.methods.supcon import SupCon
from modules.methods.tensorized import (
    Autoencoder,
    PartiallyTensorizedAutoencoder,
    TensorizedAutoencoder,
    TensorizedContrastive,
    TensorizedRBM,
    TensorizedVAE,
)
from modules.methods.transfusion import TransFusion
from modules.methods.vicreg import VICReg

METHODS: dict[str, type] = {
    "simclr": SimCLR,
    "supcon": SupCon,
    "transfusion": TransFusion,
    "moco": MoCo,
    "byol": BYOL,
    "barlow_twins": BarlowTwins,
    "vicreg": VICReg,
    "pixels": RawPixels,
    "pretrained": PretrainedBackbone,
    "random_init": RandomInitBackbone,
    "ae": Autoencoder,
    "tae": TensorizedAutoencoder,
    "ptae": PartiallyTensorizedAutoencoder,
    "tvae": TensorizedVAE,
    "tcl": TensorizedContrastive,
    "trbm": TensorizedRBM,
}

__all__ = ["BYOL", "METHODS", "Autoencoder", "BarlowTwins", "MoCo",
           "PartiallyTensorizedAutoencoder", "PretrainedBackbone", "RandomInitBackbone",
           "RawPixels", "RepresentationModule", "SimCLR", "SupCon", "TensorizedAutoencoder",
           "TensorizedContrastive", "TensorizedRBM", "TensorizedVAE", "TrainingViews",
           "TransFusion", "VICReg"]
