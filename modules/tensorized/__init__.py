"""Cluster-specific ("tensorized") representation learning: [CSRL] M. Sabanayagam,
O. Al-Dabooni, P. Esser, "Cluster Specific Representation Learning", arXiv:2412.03471.

The assignment mechanics (k-means++ initialisation, Lloyd steps, eq. 2 inference) are written
once in :mod:`modules.tensorized.base`; the objectives are pure functions in
:mod:`modules.tensorized.losses`.
"""

from modules.tensorized.ae import Autoencoder
from modules.tensorized.base import ClusterLinear, ClusterSpecificModule
from modules.tensorized.ptae import PartiallyTensorizedAutoencoder
from modules.tensorized.tae import CentredAutoencoder, TensorizedAutoencoder
from modules.tensorized.tcl import TensorizedContrastive
from modules.tensorized.trbm import TensorizedRBM
from modules.tensorized.tvae import TensorizedVAE

__all__ = ["Autoencoder", "CentredAutoencoder", "ClusterLinear", "ClusterSpecificModule",
           "PartiallyTensorizedAutoencoder", "TensorizedAutoencoder", "TensorizedContrastive",
           "TensorizedRBM", "TensorizedVAE"]
