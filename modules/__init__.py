"""Methods (LightningModules), losses, backbones and heads.

``METHODS`` is the one registry of methods: registered name -> class. The CLI, the suites and
notebooks look names up here.
"""

from modules.base import RepresentationModule
from modules.pixels import RawPixels
from modules.simclr import SimCLR

METHODS: dict[str, type] = {
    "simclr": SimCLR,
    "pixels": RawPixels,
}

__all__ = ["METHODS", "RawPixels", "RepresentationModule", "SimCLR"]
