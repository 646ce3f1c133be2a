"""Barlow Twins: the cross-correlation of the two views' embeddings pulled towards the identity;
no negatives, no target network."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from modules.blocks.distributed import gather
from modules.blocks.heads import mlp
from modules.losses import barlow_twins_loss
from modules.methods.base import RepresentationModule
from modules.ranges import check_non_negative, check_positive


class BarlowTwins(RepresentationModule):
    r"""Barlow Twins: backbone, a three-layer projector and the redundancy-reduction loss.

    Zbontar, Jing, Misra, LeCun, Deny, "Barlow Twins: Self-Supervised Learning via Redundancy
    Reduction", ICML 2021, arXiv:2103.03230, eq. 1 (:func:`modules.losses.barlow_twins_loss`):

    .. math::
        \mathcal{L} = \sum_i (1 - \mathcal{C}_{ii})^2
        + \lambda \sum_i \sum_{j \ne i} \mathcal{C}_{ij}^2

    with :math:`\mathcal{C}` the cross-correlation of the two views' embeddings, each dimension
    standardised over the batch (the authors' ``BatchNorm1d(affine=False)``). The embeddings
    are gathered across devices first, so :math:`\mathcal{C}` is the global batch's, as the
    authors' code sums it over devices. The projector is Linear, BatchNorm, ReLU, Linear,
    BatchNorm, ReLU, Linear, without biases (the authors'), and biases and BatchNorm parameters
    learn at ``bias_lr_scale`` times the run's rate (the paper: 0.0048 against 0.2).

    Where this departs from the paper, and why:

    - the projector is 2048-2048-2048 by default, not 8192-8192-8192: the benchmark's small
      backbones give a few hundred features at most (128 for the small CNN, 512 for ResNet18),
      and two 8192 x 8192 layers (134M weights, 0.5 GiB in float32 before the optimiser's
      state) would outweigh them many times and dominate a CPU step; ``projector_hidden`` and
      ``projector_out`` set the paper's;
    - the two views pass the networks as one batch, so the projector's hidden BatchNorm layers
      see both views' statistics (every method here does so; the authors' code normalises each
      view on its own);
    - the optimiser is the run's: the paper's is LARS (``optimizer: lars``, timm's, trust
      coefficient 0.001) at 0.2 per 256 images (``lr: 0.2``; ``bias_lr_scale`` keeps biases and
      norms at 0.0048), weight decay 1.5e-6, biases and norms excluded from it and from LARS's
      adaptation (this project's default), 10 warm-up epochs then a cosine decay to 1/1000 of
      the rate (here: to 0), batch 2048 for 1000 epochs: a suite sets those.

    Args:
        num_classes, input_shape: set from the datamodule.
        off_diagonal_weight: :math:`\lambda \ge 0` (the paper's :math:`5 \cdot 10^{-3}`).
        projector_hidden, projector_out: the projector's sizes (see above).
        bias_lr_scale: (> 0) the biases' and normalisation parameters' learning rate as a factor
            of the run's (0.0048 / 0.2 = 0.024, the paper's); with ``exclude_bias_and_norm``
            false they are in the weights' group and learn at the run's rate.
        kwargs: backbone and optimiser arguments of
            :class:`modules.methods.base.RepresentationModule`.

    >>> import torch
    >>> model = BarlowTwins(num_classes=10, input_shape=(1, 8, 8), backbone_width=8,
    ...                     projector_hidden=32, projector_out=32)
    >>> model.training_step(([torch.rand(4, 1, 8, 8), torch.rand(4, 1, 8, 8)],
    ...                      torch.tensor([0, 1, 2, 3])), 0).shape
    torch.Size([])
    """

    def __init__(
        self,
        num_classes: int,
        input_shape: Sequence[int],
        off_diagonal_weight: float = 5e-3,
        projector_hidden: int = 2048,
        projector_out: int = 2048,
        bias_lr_scale: float = 0.024,
        **kwargs,
    ) -> None:
        check_non_negative("off_diagonal_weight", off_diagonal_weight)
        check_positive("bias_lr_scale", bias_lr_scale)
        super().__init__(num_classes, input_shape, **kwargs)
        self.projector = mlp([self.backbone.output_dim, projector_hidden, projector_hidden,
                              projector_out], bias=False)
        self.off_diagonal_weight, self.bias_lr_scale = off_diagonal_weight, bias_lr_scale

    def objective(self, features: Tensor, n_views: int, labels: Tensor) -> Tensor:
        if n_views != 2:
            raise ValueError(f"Barlow Twins correlates exactly 2 views per image, got {n_views}")
        z1, z2 = self.projector(features).chunk(2)  # (B, d) each, row i of both from image i
        # the global batch's cross-correlation
        return barlow_twins_loss(gather(z1), gather(z2), self.off_diagonal_weight)

    def optimizer_groups(self) -> list[dict]:
        """The default groups, the biases' and normalisation parameters' (the group without
        weight decay, of parameters with fewer than two dimensions) at ``bias_lr_scale``."""
        groups = super().optimizer_groups()
        if not self.exclude_bias_and_norm:
            return groups
        return [{**group, "lr_scale": self.bias_lr_scale}
                if all(p.ndim < 2 for p in group["params"]) else group for group in groups]
