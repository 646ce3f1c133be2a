r"""The partially tensorized autoencoder (PTAE), [CSRL] section III-A, eq. 1 and 3.

Reference: [CSRL] M. Sabanayagam, O. Al-Dabooni, P. Esser, "Cluster Specific Representation
Learning", arXiv:2412.03471.
"""

from __future__ import annotations

from modules.methods.tensorized.tae import CentredAutoencoder


class PartiallyTensorizedAutoencoder(CentredAutoencoder):
    r"""Partially tensorized autoencoder (PTAE), [CSRL] eq. 3:

    .. math::

        \min_{\{\Phi_j, \Psi_j\}_1^k, \Theta, \Omega, S} \sum_{i=1}^n \sum_{j=1}^k S_{j,i}
        \Big[\tfrac{1}{d}\|\tilde x_{i,j} - \hat x_{i,j}\|^2 + \lambda \|z_{i,j}\|^2\Big],
        \qquad \hat x_{i,j} = f_\Theta(f_{\Phi_j}(z_{i,j})),\
        z_{i,j} = g_{\Psi_j}(g_\Omega(\tilde x_{i,j})),

    with :math:`\tilde x_{i,j} = x_i - c_j`. Only the embedding layer :math:`g_{\Psi_j}` and its
    mirror :math:`f_{\Phi_j}` are cluster-specific; the encoder :math:`g_\Omega` and decoder
    :math:`f_\Theta` are shared. The :math:`k` cluster-specific layers run as one einsum
    (:class:`~modules.methods.tensorized.base.ClusterLinear`),
    never a loop over clusters. The paper's
    PTAE is shaped as TAE2 (``num_layers=2, hidden_dim=2, embedding_dim=1``): without biases it
    has :math:`2d + 2k + 2k + 2d = 4d + 4k` parameters, as many as AE3 (:math:`h = C = k`), which
    the paper states. ``penalty`` is the k-means penalty's :math:`\lambda` (0 switches it off).

    >>> ptae = PartiallyTensorizedAutoencoder(num_classes=5, input_shape=(1, 28, 28))
    >>> sum(p.numel() for p in ptae.parameters())  # = AE3 on MNIST, C = 5
    3156
    """

    specific_layers = 1
