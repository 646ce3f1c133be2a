"""SimCLR: backbone + MLP projector + NT-Xent."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from modules.base import RepresentationModule
from modules.heads import mlp
from modules.losses import nt_xent_loss


class SimCLR(RepresentationModule):
    r"""SimCLR: backbone, MLP projector and the NT-Xent loss (Chen et al., arXiv:2002.05709).

    The loss is SimCLR's eq. 1, which is Kernel-InfoNCE's eq. 1 (arXiv:2303.15103).

    Two augmented views of each image go through the backbone :math:`f` and the projector
    :math:`g` (Linear, BatchNorm, ReLU, Linear: Kernel-InfoNCE's appendix B uses 2048 hidden and
    128 output units), and :math:`z = g(f(x))` is scored by

    .. math::
        \mathcal{L} = \frac{1}{2N}\sum_{k=1}^{2N} -\log
        \frac{\exp(\mathrm{sim}(z_k, z_{p(k)})/\tau)}
             {\sum_{j\ne k}\exp(\mathrm{sim}(z_k, z_j)/\tau)}

    Args:
        num_classes: classes of the online probe.
        input_shape: one input's shape, e.g. ``(1, 8, 8)``.
        projector_hidden, projector_out: projector sizes.
        temperature: :math:`\tau`.
        kwargs: the backbone and optimiser arguments of
            :class:`modules.base.RepresentationModule`.

    >>> import torch
    >>> model = SimCLR(num_classes=10, input_shape=(1, 8, 8), backbone_width=8)
    >>> model.training_step(([torch.rand(4, 1, 8, 8), torch.rand(4, 1, 8, 8)],
    ...                      torch.tensor([0, 1, 2, 3])), 0).shape
    torch.Size([])
    """

    def __init__(
        self,
        num_classes: int,
        input_shape: Sequence[int],
        projector_hidden: int = 2048,
        projector_out: int = 128,
        temperature: float = 0.5,
        **kwargs,
    ) -> None:
        super().__init__(num_classes, input_shape, **kwargs)
        self.projector = mlp([self.backbone.output_dim, projector_hidden, projector_out])
        self.temperature = temperature

    def objective(self, features: Tensor, n_views: int, labels: Tensor) -> Tensor:
        if n_views != 2:
            raise ValueError(f"SimCLR contrasts exactly 2 views per image, got n_views={n_views}")
        z = self.projector(features)  # z: (2B, projector_out)
        z1, z2 = z.chunk(2)  # z1, z2: (B, projector_out)
        return nt_xent_loss(z1, z2, self.temperature)
