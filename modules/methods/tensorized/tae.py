r"""The fully tensorized autoencoder (TAE), [CSRL] section III-A, and the centred-autoencoder
machinery it shares with the partially tensorized one (:mod:`modules.methods.tensorized.ptae`).

Reference: [CSRL] M. Sabanayagam, O. Al-Dabooni, P. Esser, "Cluster Specific Representation
Learning", arXiv:2412.03471; the TAE is that of its reference [9], P. Esser, S. Mukherjee,
M. Sabanayagam, D. Ghoshdastidar, "Improved representation learning through tensorized
autoencoders", AISTATS 2023, arXiv:2212.01046.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from modules.blocks.heads import make_activation
from modules.losses.tensorized import assigned_loss, centred_reconstruction_losses
from modules.methods.tensorized.ae import layer_sizes
from modules.methods.tensorized.base import ClusterLinear, ClusterSpecificModule


class CentredAutoencoder(ClusterSpecificModule):
    r"""A reconstruction model on cluster-centred inputs whose last ``specific_layers`` encoder
    layers (and their mirrors, the first decoder layers) are cluster-specific, the rest shared:
    [CSRL] eq. 3 with

    .. math::

        \hat x_{i,j} = f_\Theta(f_{\Phi_j}(g_{\Psi_j}(g_\Omega(\tilde x_{i,j})))), \qquad
        \tilde x_{i,j} = x_i - c_j,

    and the per-point loss of :func:`~modules.losses.tensorized.centred_reconstruction_losses`
    (MSE plus the k-means penalty :math:`\lambda \|z_{i,j}\|^2`). All :math:`k` clusters are
    computed at once: shared layers act on the ``(B, k, .)`` tensor of centred inputs, the
    cluster-specific ones are
    :class:`~modules.methods.tensorized.base.ClusterLinear` einsums, so the
    cost of a step does not loop over the clusters (the paper's sequential implementation is
    why its runtime grew with k, its Figure 8).

    Subclasses set ``specific_layers``: ``None`` for all layers (TAE), 1 (PTAE).

    Args:
        num_classes, input_shape: set from the datamodule by the runner.
        n_clusters: :math:`k`; ``None`` uses ``num_classes``.
        embedding_dim, hidden_dim, num_layers: the encoder ``d -> hidden_dim -> ... ->
            embedding_dim`` (``num_layers`` linear layers), the decoder its mirror.
        activation: a name of :data:`modules.blocks.heads.ACTIVATIONS` between layers:
            ``"none"`` (linear, the paper's setting), ``"relu"``, ``"leaky_relu"``, ``"tanh"``.
        bias: biases in every layer (off, as in the authors' code).
        penalty: :math:`\lambda` of the k-means penalty.
        lr, weight_decay: Adam's.
    """

    #: How many layers at the embedding end (and their decoder mirrors) are cluster-specific;
    #: ``None``: all of them.
    specific_layers: int | None = None

    def __init__(self, num_classes: int, input_shape: Sequence[int],
                 n_clusters: int | None = None, embedding_dim: int = 1, hidden_dim: int = 2,
                 num_layers: int = 2, activation: str = "none", bias: bool = False,
                 penalty: float = 0.1, lr: float = 1e-2, weight_decay: float = 0.0) -> None:
        super().__init__(num_classes, input_shape, n_clusters=n_clusters, lr=lr,
                         weight_decay=weight_decay)
        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}")
        n_specific = num_layers if self.specific_layers is None else self.specific_layers
        if self.specific_layers is not None and num_layers <= n_specific:
            raise ValueError(f"{type(self).__name__} makes {n_specific} layer(s) "
                             f"cluster-specific and shares the rest: it needs num_layers >= "
                             f"{n_specific + 1}, got {num_layers}")
        if penalty < 0:
            raise ValueError(f"penalty must be non-negative, got {penalty}")
        self.penalty = penalty
        sizes = layer_sizes(self.input_dim, embedding_dim, hidden_dim, num_layers)
        k = self.n_clusters

        def layer(d_in: int, d_out: int, specific: bool) -> nn.Module:
            return ClusterLinear(k, d_in, d_out, bias) if specific else nn.Linear(d_in, d_out, bias)

        encoder, decoder = [], []
        for i in range(num_layers):
            if i > 0:
                encoder.append(make_activation(activation))
                decoder.append(make_activation(activation))
            encoder.append(layer(sizes[i], sizes[i + 1], i >= num_layers - n_specific))
            decoder.append(layer(sizes[num_layers - i], sizes[num_layers - i - 1],
                                 i < n_specific))
        self.encoder, self.decoder = nn.Sequential(*encoder), nn.Sequential(*decoder)

    def centred(self, x: Tensor) -> Tensor:
        """:math:`\\tilde x_{i,j} = x_i - c_j`: ``(B, *input_shape) -> (B, k, d)``."""
        return x.flatten(1).unsqueeze(1) - self.centres

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Returns the centred inputs, their reconstructions (both ``(B, k, d)``) and the
        embeddings ``(B, k, h)`` under every cluster."""
        centred = self.centred(x)  # centred: (B, k, d)
        z = self.encoder(centred)  # z: (B, k, h); a shared layer maps each cluster's copy
        return centred, self.decoder(z), z

    def pair_losses(self, x: Tensor) -> Tensor:
        centred, reconstruction, z = self(x)
        return centred_reconstruction_losses(reconstruction, centred, z, self.penalty)  # (B, k)

    def assignment_losses(self, x: Tensor) -> Tensor:
        return self.pair_losses(x)

    def objective(self, views: list[Tensor], labels: Tensor, assignment: Tensor) -> Tensor:
        return assigned_loss(self.pair_losses(views[0]), assignment)

    def embed_all(self, x: Tensor) -> Tensor:
        return self.encoder(self.centred(x))

    @torch.no_grad()
    def reconstruct(self, x: Tensor) -> Tensor:
        """The assigned cluster's reconstruction, moved back by its centre:
        :math:`c_s + \\hat x_{i,s}`, ``(B, *input_shape)`` (the de-noising output)."""
        _, reconstruction, _ = self(x)
        assignment = self.assign(x)
        rows = torch.arange(len(assignment), device=x.device)
        return (reconstruction[rows, assignment] + self.centres[assignment]).view(
            -1, *self.input_shape)


class TensorizedAutoencoder(CentredAutoencoder):
    r"""Fully tensorized autoencoder (TAE) of [CSRL] section III-A (its reference [9]): k
    independent encoder/decoder pairs on centred inputs, eq. 3 without shared parts,

    .. math::

        \min_{\{\Phi_j, \Psi_j\}_1^k, S} \sum_{i=1}^n \sum_{j=1}^k S_{j,i}
        \Big[\tfrac{1}{d}\|\tilde x_{i,j} - f_{\Phi_j}(g_{\Psi_j}(\tilde x_{i,j}))\|^2
        + \lambda \|g_{\Psi_j}(\tilde x_{i,j})\|^2\Big], \qquad \tilde x_{i,j} = x_i - c_j.

    TAE1: ``num_layers=1, embedding_dim=1``; TAE2: ``num_layers=2, hidden_dim=2,
    embedding_dim=1`` (each cluster an AE1 or AE2, so :math:`k` times their parameters).
    ``penalty`` is :math:`\lambda` (0.1 in the authors' notebook). Linear and bias-free by
    default, as AE1-AE3. Assignment, centres and inference: :class:`ClusterSpecificModule`.

    >>> tae = TensorizedAutoencoder(num_classes=3, input_shape=(6,), num_layers=1)
    >>> sum(p.numel() for p in tae.parameters())  # 3 x AE1 on d = 6
    36
    >>> tae.pair_losses(torch.zeros(4, 6)).shape
    torch.Size([4, 3])
    """
