"""BYOL: an online network predicts a moving-average target network's projection of the other
view; no negatives."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from modules.blocks.heads import mlp
from modules.blocks.target_network import MomentumTarget, frozen_copy
from modules.losses import byol_loss
from modules.methods.base import RepresentationModule, TrainingViews
from modules.ranges import check_momentum


class BYOL(RepresentationModule):
    r"""BYOL: the online backbone, projector and predictor regress the target network's
    projection of the other view; the target is a moving average of the online backbone and
    projector.

    Grill et al., "Bootstrap Your Own Latent: A New Approach to Self-Supervised Learning",
    NeurIPS 2020, arXiv:2006.07733. With :math:`q_\theta` the predictor on the online
    projection and :math:`z'_\xi` the target's projection, the loss is eq. 2 symmetrised
    (:func:`modules.losses.byol_loss`),

    .. math::
        \mathcal{L}^{\text{BYOL}} = \big\lVert \bar q_\theta(z^1_\theta) - \bar z'^{2}_\xi
        \big\rVert_2^2 + \big\lVert \bar q_\theta(z^2_\theta) - \bar z'^{1}_\xi \big\rVert_2^2,

    the target follows eq. 1, :math:`\xi \leftarrow \tau\,\xi + (1 - \tau)\,\theta`, with
    :math:`\tau` rising from :math:`\tau_{\text{base}} = 0.996` to 1 over the training by §3.2's
    cosine schedule (:mod:`modules.blocks.target_network`, the base class's target network). The
    projector and the predictor are §3.2's MLPs: Linear (4096), BatchNorm, ReLU, Linear (256).

    Where this departs from the paper, and why:

    - the moving-average step runs at the start of each training step, from the weights the
      previous optimiser step left (eq. 3 runs it after each step: the same updates but the last,
      which no step reads); with gradient accumulation it runs once per accumulated batch;
    - :math:`K` of the schedule is the Trainer's estimate of the run's optimiser steps (the
      paper's total steps);
    - the two views pass the networks as one batch, so BatchNorm's statistics are both views'
      (every method here does so; the authors' code normalises each view on its own);
    - the optimiser is the run's: the paper's is LARS (``optimizer: lars``, timm's, trust
      coefficient 0.001) at 0.2 per 256 images (``lr: 0.2``, scaled to the batch as the paper
      does), weight decay 1.5e-6, biases and BatchNorm parameters excluded from both (this
      project's default), 10 warm-up epochs then cosine decay, batch 4096 for 1000 epochs: a
      suite sets those.

    Args:
        num_classes, input_shape: set from the datamodule.
        projector_hidden, projector_out: the projector's sizes (4096 and 256).
        predictor_hidden: the predictor's hidden size (4096; its output is ``projector_out``).
        target_momentum: :math:`\tau_{\text{base}}` in [0, 1) (0.996).
        momentum_schedule: ``cosine`` (the paper's) or ``constant`` (:math:`\tau` kept at
            ``target_momentum``).
        kwargs: backbone and optimiser arguments of
            :class:`modules.methods.base.RepresentationModule`.

    >>> import torch
    >>> model = BYOL(num_classes=10, input_shape=(1, 8, 8), backbone_width=8,
    ...              projector_hidden=32, predictor_hidden=32, projector_out=16)
    >>> model.training_step(([torch.rand(4, 1, 8, 8), torch.rand(4, 1, 8, 8)],
    ...                      torch.tensor([0, 1, 2, 3])), 0).shape
    torch.Size([])
    """

    def __init__(
        self,
        num_classes: int,
        input_shape: Sequence[int],
        projector_hidden: int = 4096,
        projector_out: int = 256,
        predictor_hidden: int = 4096,
        target_momentum: float = 0.996,
        momentum_schedule: str = "cosine",
        **kwargs,
    ) -> None:
        check_momentum("target_momentum", target_momentum)
        super().__init__(num_classes, input_shape, **kwargs)
        # BYOL's MLPs end without a bias (the target normalises their outputs)
        self.projector = mlp([self.backbone.output_dim, projector_hidden, projector_out],
                             bias=False)
        self.predictor = mlp([projector_out, predictor_hidden, projector_out], bias=False)
        self.target_backbone = frozen_copy(self.backbone)
        self.target_projector = frozen_copy(self.projector)
        self.momentum_target = MomentumTarget([self.backbone, self.projector],
                                              [self.target_backbone, self.target_projector],
                                              momentum=target_momentum,
                                              schedule=momentum_schedule)

    def views_objective(self, step: TrainingViews) -> Tensor:
        if step.n_views != 2:
            raise ValueError(f"BYOL predicts one view from the other: exactly 2 views per "
                             f"image, got {step.n_views}")
        p1, p2 = self.predictor(self.projector(step.features)).chunk(2)  # (B, d) each
        z1, z2 = step.targets.chunk(2)  # (B, d) each: the target's projections, no gradient
        return byol_loss(p1, p2, z1, z2)
