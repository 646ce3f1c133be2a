"""Cluster-specific ("tensorized") representation learning: [CSRL] M. Sabanayagam,
O. Al-Dabooni, P. Esser, "Cluster Specific Representation Learning", arXiv:2412.03471.

The assignment mechanics (k-means++ initialisation, Lloyd steps, eq. 2 inference) are written
once in :mod:`modules.methods.tensorized.base`; the objectives are pure functions in
:mod:`modules.losses.tensorized`.
"""

from modules.methods.tensorized.ae import Autoencoder
from modules.methods.tensorized.base import ClusterLinear, ClusterSpecificModule
from modules.methods.tensorized.ptae import PartiallyTensorizedAutoencoder
from modules.methods.tensorized.tae import CentredAutoencoder, TensorizedAutoencoder
from modules.methods.tensorized.tcl import TensorizedContrastive
from modules.methods.tensorized.trbm import TensorizedRBM
from modules.methods.tensorized.tvae import TensorizedVAE

__all__ = ["Autoencoder", "CentredAutoencoder", "ClusterLinear", "ClusterSpecificModule",
           "PartiallyTensorizedAutoencoder", "TensorizedAutoencoder", "TensorizedContrastive",
           "TensorizedRBM", "TensorizedVAE"]
