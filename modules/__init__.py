"""Methods (LightningModules), losses, backbones and heads.

``METHODS`` is the one registry of methods: registered name -> class. The CLI, the suites and
notebooks look names up here.
"""

from modules.base import RepresentationModule
from modules.moco import MoCo
from modules.pixels import RawPixels
from modules.simclr import SimCLR
from modules.supcon import SupCon
from modules.transfusion import TransFusion

METHODS: dict[str, type] = {
    "simclr": SimCLR,
    "supcon": SupCon,
    "transfusion": TransFusion,
    "moco": MoCo,
    "pixels": RawPixels,
}

__all__ = ["METHODS", "MoCo", "RawPixels", "RepresentationModule", "SimCLR", "SupCon",
           "TransFusion"]
