"""VICReg: invariance between the two views, variance and covariance regularisation of each;
no negatives, no target network."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from modules.blocks.distributed import gather
from modules.blocks.heads import mlp
from modules.losses import vicreg_loss
from modules.methods.base import RepresentationModule
from modules.ranges import check_non_negative, check_positive


class VICReg(RepresentationModule):
    r"""VICReg: backbone, a three-layer expander and the variance-invariance-covariance loss.

    Bardes, Ponce, LeCun, "VICReg: Variance-Invariance-Covariance Regularization for
    Self-Supervised Learning", ICLR 2022, arXiv:2105.04906, eq. 1-6
    (:func:`modules.losses.vicreg_loss`):

    .. math::
        \ell(Z, Z') = \lambda\, s(Z, Z') + \mu\,\big[v(Z) + v(Z')\big]
        + \nu\,\big[c(Z) + c(Z')\big]

    with :math:`\lambda = \mu = 25`, :math:`\nu = 1`, :math:`\gamma = 1`,
    :math:`\epsilon = 10^{-4}`. The embeddings are gathered across devices first, so the
    variance and covariance are the global batch's, as the authors' code gathers them. The
    expander is Linear, BatchNorm, ReLU, Linear, BatchNorm, ReLU, Linear (its last layer
    without a bias, the authors').

    Where this departs from the paper, and why:

    - the loss weighs its terms as the authors' code does, with which the paper's coefficients
      were chosen: the invariance is a mean over the dimensions too (eq. 5 divided by d) and
      the variance term the mean of the two views' (eq. 6 sums them);
    - the expander is 2048-2048-2048 by default, not 8192-8192-8192: the benchmark's small
      backbones give a few hundred features at most, and two 8192 x 8192 layers (134M weights)
      would outweigh them many times and dominate a CPU step; ``projector_hidden`` and
      ``projector_out`` set the paper's;
    - the two views pass the networks as one batch, so the expander's BatchNorm layers see both
      views' statistics (every method here does so; the authors' code normalises each view on
      its own);
    - the optimiser is the run's: the paper's is LARS (``optimizer: lars``, timm's, trust
      coefficient 0.001) at 0.2 per 256 images (``lr: 0.2``), weight decay 1e-6, biases and
      norms excluded from it and from LARS's adaptation (this project's default), 10 warm-up
      epochs then a cosine decay to 1/1000 of the rate (here: to 0), batch 2048 for 1000
      epochs: a suite sets those.

    Args:
        num_classes, input_shape: set from the datamodule.
        invariance_weight, variance_weight, covariance_weight: :math:`\lambda, \mu, \nu \ge 0`.
        target_std: :math:`\gamma > 0`, the standard deviation each dimension is held at.
        variance_eps: :math:`\epsilon > 0` under the variance term's square root.
        projector_hidden, projector_out: the expander's sizes (see above).
        kwargs: backbone and optimiser arguments of
            :class:`modules.methods.base.RepresentationModule`.

    >>> import torch
    >>> model = VICReg(num_classes=10, input_shape=(1, 8, 8), backbone_width=8,
    ...                projector_hidden=32, projector_out=32)
    >>> model.training_step(([torch.rand(4, 1, 8, 8), torch.rand(4, 1, 8, 8)],
    ...                      torch.tensor([0, 1, 2, 3])), 0).shape
    torch.Size([])
    """

    def __init__(
        self,
        num_classes: int,
        input_shape: Sequence[int],
        invariance_weight: float = 25.0,
        variance_weight: float = 25.0,
        covariance_weight: float = 1.0,
        target_std: float = 1.0,
        variance_eps: float = 1e-4,
        projector_hidden: int = 2048,
        projector_out: int = 2048,
        **kwargs,
    ) -> None:
        for name, weight in (("invariance_weight", invariance_weight),
                             ("variance_weight", variance_weight),
                             ("covariance_weight", covariance_weight)):
            check_non_negative(name, weight)
        check_positive("target_std", target_std)
        check_positive("variance_eps", variance_eps)
        super().__init__(num_classes, input_shape, **kwargs)
        self.projector = mlp([self.backbone.output_dim, projector_hidden, projector_hidden,
                              projector_out], bias=False)
        self.weights = (invariance_weight, variance_weight, covariance_weight)
        self.target_std, self.variance_eps = target_std, variance_eps

    def objective(self, features: Tensor, n_views: int, labels: Tensor) -> Tensor:
        if n_views != 2:
            raise ValueError(f"VICReg compares exactly 2 views per image, got {n_views}")
        z1, z2 = self.projector(features).chunk(2)  # (B, d) each, row i of both from image i
        invariance, variance, covariance = self.weights
        # the global batch's variance and covariance
        return vicreg_loss(gather(z1), gather(z2), invariance_weight=invariance,
                           variance_weight=variance, covariance_weight=covariance,
                           target_std=self.target_std, eps=self.variance_eps)
