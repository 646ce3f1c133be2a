"""Supervised contrastive learning: backbone + projector + SupCon loss over every view."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from modules.blocks.distributed import gather, gather_no_grad
from modules.blocks.heads import mlp
from modules.losses import supcon_loss
from modules.methods.base import RepresentationModule
from modules.ranges import check_positive


class SupCon(RepresentationModule):
    r"""SupCon: views of images of one class attract, all other rows repel.

    Khosla et al., "Supervised Contrastive Learning", arXiv:2004.11362, eq. 2
    (:math:`\mathcal{L}^{sup}_{out}`), the baseline of TransFusion's Table 3. With :math:`V` views
    of :math:`N` images, every one of the :math:`NV` rows :math:`i` is an anchor whose positives
    :math:`P(i)` are the other rows with its label:

    .. math::
        \mathcal{L} = \frac{1}{|I|}\sum_{i \in I} \frac{-1}{|P(i)|} \sum_{p \in P(i)}
        \log \frac{\exp(z_i \cdot z_p / \tau)}{\sum_{a \ne i} \exp(z_i \cdot z_a / \tau)}

    Args:
        temperature: :math:`\tau` (SupContrast's default 0.1).
        projector_hidden, projector_out: projector sizes (SupContrast: 2048 -> 128 on ResNet).
        kwargs: backbone and optimiser arguments of
            :class:`modules.methods.base.RepresentationModule`.

    >>> import torch
    >>> model = SupCon(num_classes=10, input_shape=(1, 8, 8), backbone_width=8)
    >>> model.training_step(([torch.rand(4, 1, 8, 8), torch.rand(4, 1, 8, 8)],
    ...                      torch.tensor([0, 1, 0, 1])), 0).shape
    torch.Size([])
    """

    def __init__(
        self,
        num_classes: int,
        input_shape: Sequence[int],
        temperature: float = 0.1,
        projector_hidden: int = 2048,
        projector_out: int = 128,
        **kwargs,
    ) -> None:
        check_positive("temperature", temperature)
        super().__init__(num_classes, input_shape, **kwargs)
        self.projector = mlp([self.backbone.output_dim, projector_hidden, projector_out])
        self.temperature = temperature

    def objective(self, features: Tensor, n_views: int, labels: Tensor) -> Tensor:
        z = self.projector(features)  # z: (V * B, d), view-major
        z = z.view(n_views, -1, z.shape[-1]).transpose(0, 1)  # z: (B, V, d)
        return supcon_loss(gather(z), gather_no_grad(labels), self.temperature)
