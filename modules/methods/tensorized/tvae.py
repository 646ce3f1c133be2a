r"""The tensorized variational autoencoder (TVAE), [CSRL] section IV, eq. 4-6.

Reference: [CSRL] M. Sabanayagam, O. Al-Dabooni, P. Esser, "Cluster Specific Representation
Learning", arXiv:2412.03471; the VAE is D. P. Kingma, M. Welling, arXiv:1312.6114.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from modules.blocks.heads import make_activation, mlp
from modules.blocks.strided_conv import StridedConvDecoder, StridedConvEncoder
from modules.losses.tensorized import assigned_loss, tvae_losses, tvae_reconstruction_losses
from modules.methods.tensorized.base import (
    ClusterLinear,
    ClusterSpecificModule,
    InputScale,
    load_input_scale,
)

RECONSTRUCTIONS = ("bce", "mse")
#: The shared encoder :math:`g_\Omega` and decoder :math:`f_\Theta`: one linear layer each, or
#: a small CNN (appendix C, Figure 10: "CNN encoder and decoder").
ENCODERS = ("mlp", "cnn")
#: Widths of the CNN's two stride-2 convolutions (the Keras and PyTorch MNIST VAE examples'; the
#: paper does not give its CNN).
CNN_CHANNELS = (32, 64)


class TensorizedVAE(ClusterSpecificModule):
    r"""Tensorized VAE, [CSRL] eq. 4-6: shared and cluster-specific encoder and decoder,

    .. math::

        \min_{\{\Phi_j, \Psi_j\}_1^k, \Theta, \Omega, S} \sum_{i=1}^n \sum_{j=1}^k S_{j,i}
        \big[\mathrm{Rec}_{i,j} + \mathrm{KL}(q_{\Psi_j,\Omega}(z_j | x_i) \,\|\,
        \mathcal N(0, I))\big],

    :math:`\mu_{i,j} = g^\mu_{\Psi_j}(g_\Omega(\tilde x_{i,j}))`,
    :math:`\log\sigma^2_{i,j} = g^\sigma_{\Psi_j}(g_\Omega(\tilde x_{i,j}))`,
    :math:`\tilde x_{i,j} = x_i - c_j`, the decoder :math:`f_\Theta(f_{\Phi_j}(z_{i,j}))` and the
    reparameterisation :math:`z_{i,j} = \mu_{i,j} + \sigma_{i,j} \odot \varepsilon`,
    :math:`\varepsilon \sim \mathcal N(0, I)`. (The paper prints :math:`\sigma^2 \odot
    \varepsilon` and the authors' code multiplies by :math:`\log\sigma^2`; the standard
    :math:`\sigma = \exp(\tfrac12\log\sigma^2)` is used here.) With ``encoder="mlp"`` (the
    default) every map is one layer (:math:`g_\Omega`: ``d -> hidden_dim`` with LeakyReLU 0.2;
    :math:`g^\mu_{\Psi_j}`, :math:`g^\sigma_{\Psi_j}`: ``hidden_dim -> embedding_dim``;
    :math:`f_{\Phi_j}`: ``embedding_dim -> hidden_dim``, LeakyReLU; :math:`f_\Theta`:
    ``hidden_dim -> d``), the paper's "one layer, hidden dimension 200, embedding dimension 2".
    The cluster-specific maps run for all clusters in one einsum. ``n_clusters=1`` is the
    standard VAE (centred on the data mean).

    Shared encoder and decoder (``encoder``):

    - ``"mlp"`` (section IV, Figure 3): the one-layer maps above.
    - ``"cnn"`` (appendix C, Figure 10: Fashion-MNIST "with BCE loss and CNN encoder and
      decoder"): :math:`g_\Omega` is :class:`~modules.blocks.strided_conv.StridedConvEncoder`
      (3x3 convolutions of stride 2 with 32 and 64 maps, 28 -> 14 -> 7, then a linear layer to
      ``hidden_dim``, LeakyReLU 0.2 after each) and :math:`f_\Theta` its mirror
      :class:`~modules.blocks.strided_conv.StridedConvDecoder` (LeakyReLU, a linear layer to
      64x7x7, transposed convolutions 64 -> 32 -> C of stride 2, 7 -> 14 -> 28, linear output).
      The cluster-specific maps are unchanged. *Departure*: the paper does not give its CNN's
      layers; these are the standard small ones of the Keras and PyTorch VAE examples for MNIST
      (conv 32/64, stride 2), with the decoder a mirror of the encoder (the Keras example adds
      a third, stride-1 transposed convolution) and the model's LeakyReLU instead of their
      ReLU. Needs images ``(C, H, W)`` with H and W divisible by 4.

    Reconstruction (:func:`~modules.losses.tensorized.tvae_losses`):

    - ``"bce"`` (section IV): sigmoid output, Bernoulli likelihood of the image in [0, 1], the
      normalised input mapped back with the datamodule's statistics (read at fit start). Footnote
      6 writes the BCE against the *centred* :math:`\tilde x_{i,j}`, which lies outside [0, 1]
      and is no Bernoulli mean (the authors' code squashes it through a sigmoid); here the
      encoder sees the centred input and the decoder predicts the image itself.
    - ``"mse"`` (appendix C): linear output, :math:`\tfrac12\|\tilde x_{i,j} -
      \hat\mu_{i,j}\|^2`.

    Training samples :math:`z`; the assignment (eq. 2, Lloyd steps, validation) uses the
    deterministic loss at :math:`z = \mu`. ``encode`` gives :math:`\mu_{i,s}`; ``decode(z, j)``
    maps latent codes through cluster :math:`j`'s decoder to images (for the latent-space
    figure).

    >>> vae = TensorizedVAE(num_classes=3, input_shape=(1, 8, 8), hidden_dim=16)
    >>> vae.assignment_losses(torch.zeros(4, 1, 8, 8)).shape, vae.decode(torch.zeros(5, 2), 1).shape
    (torch.Size([4, 3]), torch.Size([5, 1, 8, 8]))
    >>> cnn = TensorizedVAE(num_classes=3, input_shape=(1, 28, 28), encoder="cnn")
    >>> cnn.encode_all(torch.zeros(4, 1, 28, 28))[0].shape, cnn.decode(torch.zeros(5, 2), 0).shape
    (torch.Size([4, 3, 2]), torch.Size([5, 1, 28, 28]))
    """

    def __init__(self, num_classes: int, input_shape: Sequence[int],
                 n_clusters: int | None = None, embedding_dim: int = 2, hidden_dim: int = 200,
                 reconstruction: str = "bce", encoder: str = "mlp", lr: float = 1e-3,
                 weight_decay: float = 0.0) -> None:
        super().__init__(num_classes, input_shape, n_clusters=n_clusters, lr=lr,
                         weight_decay=weight_decay)
        if reconstruction not in RECONSTRUCTIONS:
            raise ValueError(f"unknown reconstruction {reconstruction!r}; available: "
                             f"{', '.join(RECONSTRUCTIONS)}")
        if encoder not in ENCODERS:
            raise ValueError(f"unknown encoder {encoder!r}; available: {', '.join(ENCODERS)}")
        self.reconstruction, self.encoder = reconstruction, encoder
        k, d = self.n_clusters, self.input_dim
        if encoder == "mlp":
            self.shared_encoder = mlp([d, hidden_dim], batch_norm=False, activation="leaky_relu",
                                      last_activation=True)  # g_Ω: Linear, LeakyReLU(0.2)
        else:  # g_Ω: two stride-2 convolutions, Linear, LeakyReLU(0.2) after each
            self.shared_encoder = StridedConvEncoder(self.input_shape, hidden_dim, CNN_CHANNELS)
        self.mean = ClusterLinear(k, hidden_dim, embedding_dim)  # g^μ_Ψj
        self.log_var = ClusterLinear(k, hidden_dim, embedding_dim)  # g^σ_Ψj
        self.cluster_decoder = ClusterLinear(k, embedding_dim, hidden_dim)  # f_Φj
        if encoder == "mlp":
            self.shared_decoder = nn.Sequential(make_activation("leaky_relu"),
                                                nn.Linear(hidden_dim, d))  # f_Θ
        else:  # f_Θ: LeakyReLU, Linear, two stride-2 transposed convolutions
            self.shared_decoder = nn.Sequential(
                make_activation("leaky_relu"),
                StridedConvDecoder(hidden_dim, self.input_shape, CNN_CHANNELS))
        self.scale = InputScale(self.input_shape)

    def on_fit_start(self) -> None:
        load_input_scale(self, self.scale)
        super().on_fit_start()

    def centred(self, x: Tensor) -> Tensor:
        return x.flatten(1).unsqueeze(1) - self.centres  # (B, k, d)

    def encode_all(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """:math:`\\mu_{i,j}` and :math:`\\log\\sigma^2_{i,j}`, each ``(B, k, h)``."""
        hidden = self.shared_encoder(self.centred(x))  # hidden: (B, k, l)
        return self.mean(hidden), self.log_var(hidden).clamp(-20.0, 20.0)

    def decode_all(self, z: Tensor) -> Tensor:
        """Decoder outputs ``(B, k, d)`` of codes ``(B, k, h)``, cluster j's decoder on slot j."""
        return self.shared_decoder(self.cluster_decoder(z))

    def target(self, x: Tensor) -> Tensor:
        if self.reconstruction == "bce":
            return self.scale.to_unit(x).flatten(1)  # (B, d) image in [0, 1]
        return self.centred(x)  # (B, k, d)

    def pair_losses(self, x: Tensor, sample: bool) -> Tensor:
        mean, log_var = self.encode_all(x)
        z = mean + (0.5 * log_var).exp() * torch.randn_like(mean) if sample else mean
        return tvae_losses(self.decode_all(z), self.target(x), mean, log_var,
                           self.reconstruction)  # (B, k)

    @torch.no_grad()
    def reconstruction_losses(self, x: Tensor) -> Tensor:
        """The reconstruction term :math:`\\mathrm{Rec}_{i,j}` alone (the BCE summed over the
        pixels, in nats, or the halved squared error), decoded at :math:`z = \\mu`: ``(B, k)``."""
        mean, _ = self.encode_all(x)
        return tvae_reconstruction_losses(self.decode_all(mean), self.target(x),
                                          self.reconstruction)

    def assignment_losses(self, x: Tensor) -> Tensor:
        return self.pair_losses(x, sample=False)

    def objective(self, views: list[Tensor], labels: Tensor, assignment: Tensor) -> Tensor:
        return assigned_loss(self.pair_losses(views[0], sample=True), assignment)

    def embed_all(self, x: Tensor) -> Tensor:
        return self.encode_all(x)[0]

    @torch.no_grad()
    def decode(self, z: Tensor, cluster: int) -> Tensor:
        """Images ``(n, *input_shape)`` decoded from codes ``z`` (n, h) by cluster ``cluster``:
        the sigmoid output (``"bce"``), or the output moved back by the centre and mapped to
        image units (``"mse"``)."""
        k = self.n_clusters
        codes = z.unsqueeze(1).expand(-1, k, -1)  # (n, k, h): every cluster sees the codes
        out = self.decode_all(codes)[:, cluster]  # (n, d)
        if self.reconstruction == "bce":
            return torch.sigmoid(out).view(-1, *self.input_shape)
        return self.scale.to_unit((out + self.centres[cluster]).view(-1, *self.input_shape))

    @torch.no_grad()
    def reconstruct(self, x: Tensor) -> Tensor:
        """The assigned cluster's reconstruction at :math:`z = \\mu`, in normalised units."""
        mean, _ = self.encode_all(x)
        out = self.decode_all(mean)  # (B, k, d)
        assignment = self.assign(x)
        rows = torch.arange(len(assignment), device=x.device)
        picked = out[rows, assignment]
        if self.reconstruction == "bce":
            return self.scale.from_unit(torch.sigmoid(picked).view(-1, *self.input_shape))
        return (picked + self.centres[assignment]).view(-1, *self.input_shape)
