r"""The tensorized contrastive model (TCL), [CSRL] section V.

Reference: [CSRL] M. Sabanayagam, O. Al-Dabooni, P. Esser, "Cluster Specific Representation
Learning", arXiv:2412.03471; elastic deformation: P. Simard, D. Steinkraus, J. Platt, "Best
practices for convolutional neural networks applied to visual document analysis", ICDAR 2003.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from modules.blocks.heads import mlp
from modules.losses.tensorized import normalised_triplet_losses
from modules.methods.tensorized.base import ClusterLinear, ClusterSpecificModule


def elastic_deform(x: Tensor, alpha: float, sigma: float,
                   generator: torch.Generator | None = None) -> Tensor:
    r"""Elastic deformation (Simard et al. 2003) of images ``(B, C, H, W)``, one field per image.

    A displacement field uniform in :math:`[-1, 1]` per pixel and axis is smoothed by a Gaussian
    of ``sigma`` pixels and scaled by ``alpha`` pixels; the image is resampled bilinearly at the
    displaced positions (border values outside). ``generator`` (a CPU generator) makes the fields
    reproducible; ``alpha = 0`` leaves the images unchanged.

    >>> x = torch.rand(3, 1, 8, 8)
    >>> torch.allclose(elastic_deform(x, alpha=0.0, sigma=1.0), x, atol=1e-6)
    True
    >>> elastic_deform(x, alpha=3.0, sigma=1.0).shape
    torch.Size([3, 1, 8, 8])
    """
    b, _, h, w = x.shape
    field = torch.rand(b, 2, h, w, generator=generator).to(x) * 2 - 1  # (B, 2, H, W): dx, dy
    radius = max(1, math.ceil(2 * sigma))
    taps = torch.arange(-radius, radius + 1, dtype=x.dtype, device=x.device)
    kernel = torch.exp(-0.5 * (taps / sigma) ** 2)
    kernel = kernel / kernel.sum()
    # Separable Gaussian blur of both components, edges replicated.
    field = F.conv2d(F.pad(field, (radius, radius, 0, 0), mode="replicate"),
                     kernel.view(1, 1, 1, -1).expand(2, 1, 1, -1), groups=2)
    field = F.conv2d(F.pad(field, (0, 0, radius, radius), mode="replicate"),
                     kernel.view(1, 1, -1, 1).expand(2, 1, -1, 1), groups=2)
    field = alpha * field  # displacement in pixels
    ys = torch.linspace(-1, 1, h, dtype=x.dtype, device=x.device)
    xs = torch.linspace(-1, 1, w, dtype=x.dtype, device=x.device)
    grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
    # align_corners=True: one pixel is 2 / (size - 1) in grid units.
    gx = grid_x + field[:, 0] * 2 / max(w - 1, 1)
    gy = grid_y + field[:, 1] * 2 / max(h - 1, 1)
    grid = torch.stack([gx, gy], dim=-1)  # (B, H, W, 2)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=True)


def sample_partner(valid: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """For every row ``i`` of the boolean ``valid`` (B, B), a uniformly drawn column ``m != i``
    with ``valid[i, m]``; a row without one draws among all ``m != i``.

    >>> valid = torch.tensor([[False, False, True], [True, False, False], [False, False, False]])
    >>> p = sample_partner(valid)
    >>> p[:2].tolist(), p[2].item() in (0, 1)
    ([2, 0], True)
    """
    b = valid.shape[0]
    if b == 1:
        return torch.zeros(1, dtype=torch.long, device=valid.device)
    others = ~torch.eye(b, dtype=torch.bool, device=valid.device)
    valid = valid & others
    weights = torch.where(valid.any(1, keepdim=True), valid, others).float()
    return torch.multinomial(weights, 1, generator=generator).squeeze(1)


class TensorizedContrastive(ClusterSpecificModule):
    r"""Tensorized contrastive learning (TCL), [CSRL] section V: a shared encoder
    :math:`g_\Omega` (two convolutional layers) and a cluster-specific linear layer
    :math:`g_{\Psi_j}`, :math:`z_{i,j} = g_{\Psi_j}(g_\Omega(x_i))`, trained on

    .. math::

        \min_{\{\Psi\}_1^k, \Omega, S} \frac{1}{n} \sum_{i=1}^n \sum_{j=1}^k S_{j,i}
        \big[\langle \bar z_{i,j}, \bar z^-_{i,j}\rangle
        - \langle \bar z_{i,j}, \bar z^+_{i,j}\rangle\big], \qquad \bar z = z / \|z\|.

    **Bounded objective.** The paper's :math:`\langle z, z^-\rangle - \langle z, z^+\rangle` on
    raw embeddings is unbounded below; this is the same triplet term on *normalised* embeddings
    (cosine similarities, :func:`~modules.losses.tensorized.normalised_triplet_losses`), in
    :math:`[-2, 2]`. No centring: the paper's TCL embeds :math:`x_i` itself.

    **Positives and negatives** (section V-B). Unsupervised (``supervised=False``): the positive
    is an elastic deformation of the anchor (:func:`elastic_deform`, drawn afresh each step), the
    negative a batch point of a *different current cluster* (any other point when
    :math:`k = 1` or when the batch has none), embedded by the anchor's cluster head.
    Supervised: the positive is another batch point of the anchor's class (if it has none, the
    elastic deformation of an image, or the anchor itself for vector data), the negative a point
    of another class. ``n_clusters=1`` is the
    standard CL of the paper's Figure 4.

    **Assignment loss** (eq. 2 and the Lloyd steps). The training loss needs a sampled negative
    from another cluster; to assign a point without one, the other clusters' centres
    :math:`c_m` stand in for their members, and the positive is an elastic deformation drawn
    from a fixed seed (so the assignment is deterministic):

    .. math::

        \mathcal{L}_{i,j} = \frac{1}{k-1}\sum_{m \ne j}
        \big[\langle \bar z_{i,j}, \bar g_{\Psi_j}(g_\Omega(c_m))\rangle
        - \langle \bar z_{i,j}, \bar z^+_{i,j}\rangle\big]

    (for :math:`k = 1`, :math:`-\langle \bar z, \bar z^+\rangle`).

    Args:
        num_classes, input_shape: set from the datamodule; images ``(C, H, W)`` get the two
            3x3 convolutions (``channels``, ReLU) and a 2x2 max-pool, vectors two linear layers
            of those widths.
        n_clusters: :math:`k` (``None``: ``num_classes``).
        embedding_dim: :math:`h` (128 in the paper).
        supervised: positives and negatives from the labels instead of augmentation/clusters.
        elastic_alpha, elastic_sigma: the deformation in pixels; ``None`` scales Simard et al.'s
            34 and 4 at 28 px to the image size (:math:`\sigma \propto H`,
            :math:`\alpha \propto H^2`, keeping the displacement's share of the image).
        lr, weight_decay: Adam's.

    >>> tcl = TensorizedContrastive(num_classes=3, input_shape=(1, 8, 8), embedding_dim=16)
    >>> x = torch.rand(4, 1, 8, 8)
    >>> tcl.embed_all(x).shape, tcl.assignment_losses(x).shape
    (torch.Size([4, 3, 16]), torch.Size([4, 3]))
    """

    #: Seed of the elastic positives of the assignment loss.
    assignment_seed = 0

    def __init__(self, num_classes: int, input_shape: Sequence[int],
                 n_clusters: int | None = None, embedding_dim: int = 128,
                 channels: Sequence[int] = (16, 32), supervised: bool = False,
                 elastic_alpha: float | None = None, elastic_sigma: float | None = None,
                 lr: float = 1e-3, weight_decay: float = 0.0) -> None:
        super().__init__(num_classes, input_shape, n_clusters=n_clusters, lr=lr,
                         weight_decay=weight_decay)
        if len(channels) != 2:
            raise ValueError(f"channels must give the two shared layers' widths, got {channels}")
        c1, c2 = (int(c) for c in channels)
        self.supervised = supervised
        self.is_image = len(self.input_shape) == 3
        if self.is_image:
            c, h, w = self.input_shape
            self.shared_encoder = nn.Sequential(  # g_Ω
                nn.Conv2d(c, c1, 3, padding=1), nn.ReLU(inplace=True),
                nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(inplace=True),
                nn.MaxPool2d(2), nn.Flatten())
            features = c2 * (h // 2) * (w // 2)
            scale = h / 28.0
            self.elastic_alpha = 34.0 * scale**2 if elastic_alpha is None else elastic_alpha
            self.elastic_sigma = 4.0 * scale if elastic_sigma is None else elastic_sigma
        else:
            # Flatten, then Linear-ReLU-Linear-ReLU (unpacked: the layers keep their names)
            self.shared_encoder = nn.Sequential(
                nn.Flatten(), *mlp([self.input_dim, c1, c2], batch_norm=False,
                                   last_activation=True))
            features = c2
            self.elastic_alpha = self.elastic_sigma = None
        self.head = ClusterLinear(self.n_clusters, features, embedding_dim)  # g_Ψj

    def embed_all(self, x: Tensor) -> Tensor:
        return self.head(self.shared_encoder(x))  # (B, k, h)

    def positive(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        if not self.is_image:
            raise ValueError("TCL's elastic positives need images (C, H, W); use supervised=True "
                             "or image data")
        return elastic_deform(x, self.elastic_alpha, self.elastic_sigma, generator)

    def assignment_losses(self, x: Tensor) -> Tensor:
        generator = torch.Generator().manual_seed(self.assignment_seed)
        z = self.embed_all(x)  # z: (B, k, h)
        z_pos = self.embed_all(self.positive(x, generator))  # (B, k, h)
        k = self.n_clusters
        if k == 1:
            return -F.cosine_similarity(z, z_pos, dim=-1)
        z_centres = self.embed_all(self.centres.view(k, *self.input_shape))  # [m, j]: g_Ψj(c_m)
        # losses[i, j, m] = <z_ij, z_j(c_m)> - <z_ij, z+_ij> (normalised), averaged over m != j.
        losses = normalised_triplet_losses(z.unsqueeze(2), z_pos.unsqueeze(2),
                                           z_centres.transpose(0, 1).unsqueeze(0))  # (B, k, k)
        off_diagonal = ~torch.eye(k, dtype=torch.bool, device=x.device)
        return (losses * off_diagonal).sum(-1) / (k - 1)

    def objective(self, views: list[Tensor], labels: Tensor, assignment: Tensor) -> Tensor:
        x = views[0]
        rows = torch.arange(len(x), device=x.device)
        z_all = self.embed_all(x)  # z_all: (B, k, h)
        if self.supervised:
            same = labels.unsqueeze(1) == labels.unsqueeze(0)  # (B, B)
            same &= ~torch.eye(len(x), dtype=torch.bool, device=x.device)
            partner = sample_partner(same)
            has_partner = same.any(1).view(-1, *[1] * (x.dim() - 1))
            fallback = self.positive(x) if self.is_image else x
            positives = torch.where(has_partner, x[partner], fallback)
            negative_ok = labels.unsqueeze(1) != labels.unsqueeze(0)
        else:
            positives = self.positive(x)
            negative_ok = assignment.unsqueeze(1) != assignment.unsqueeze(0)
        negatives = sample_partner(negative_ok)  # (B,) batch index of each anchor's negative
        z = z_all[rows, assignment]  # (B, h), anchor i under its cluster s_i
        z_pos = self.embed_all(positives)[rows, assignment]
        z_neg = z_all[negatives, assignment]  # the negative under the anchor's cluster head
        return normalised_triplet_losses(z, z_pos, z_neg).mean()
