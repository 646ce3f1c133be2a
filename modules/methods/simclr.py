"""SimCLR with the NT-Xent loss or one of Kernel-InfoNCE's kernels: backbone + projector + loss."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from modules.blocks.distributed import gather
from modules.blocks.heads import mlp
from modules.losses import HYPERPARAMETER_CHECKS, contrastive_criterion
from modules.methods.base import RepresentationModule


class SimCLR(RepresentationModule):
    r"""SimCLR: backbone, MLP projector and NT-Xent or a Kernel-InfoNCE loss.

    Chen et al., arXiv:2002.05709 (eq. 1, NT-Xent); Tan et al., "Contrastive Learning is
    Spectral Clustering on Similarity Graph", arXiv:2303.15103 (eq. 7-8, Table 2 kernels).
    Two augmented views of each image go through the backbone :math:`f` and the projector
    :math:`g` (Linear, BatchNorm, ReLU, Linear; appendix B: 2048 hidden, 128 out, 256 for the
    concatenation kernel), and :math:`z = g(f(x))` is scored by the chosen loss:

    .. math::
        \mathcal{L} = \frac{1}{2N}\sum_{k=1}^{2N} -\log
        \frac{K(z_k, z_{p(k)})}{\sum_{j\ne k} K(z_k, z_j)}, \qquad
        K(x, y) = \exp(-\lVert x - y\rVert^\gamma / \tau)

    ``nt_xent`` (also named ``infonce``; cosine similarity, :math:`\gamma = 2` up to the
    temperature), ``laplacian`` (:math:`\gamma = 1`), ``exponential`` (any :math:`\gamma`, e.g.
    0.5), ``sum`` (:math:`\lambda` Laplacian at :math:`\tau_1` + :math:`(1-\lambda)` Gaussian
    at :math:`\tau_2`) and ``concat_sum`` (the same on the two halves of a doubled projection).
    Embeddings are gathered across devices before the loss, so negatives span the global batch.
    The loss is looked up by name in :data:`modules.losses.CONTRASTIVE_LOSSES`, the table MoCo
    shares, with the hyperparameters it takes bound from the arguments below.

    Args:
        num_classes, input_shape: set from the datamodule.
        loss: a name of :data:`modules.losses.CONTRASTIVE_LOSSES`.
        temperature: :math:`\tau` of ``nt_xent``, ``laplacian`` and ``exponential``.
        gamma: :math:`\gamma` of ``exponential``.
        tau1, tau2, lam: :math:`\tau_1, \tau_2, \lambda` of ``sum`` and ``concat_sum``.
        projector_hidden, projector_out: projector sizes (``concat_sum`` doubles the output).
        projector_bias: whether the projector's last layer has a bias (its hidden layer, followed
            by BatchNorm, has none either way). Lightning Bolts' ``Projection``, which the
            Kernel-InfoNCE authors' code trains, has none (``kernel_infonce_table1`` sets false).
        kwargs: backbone and optimiser arguments of
            :class:`modules.methods.base.RepresentationModule`.

    >>> import torch
    >>> model = SimCLR(num_classes=10, input_shape=(1, 8, 8), loss="sum", backbone_width=8)
    >>> model.training_step(([torch.rand(4, 1, 8, 8), torch.rand(4, 1, 8, 8)],
    ...                      torch.tensor([0, 1, 2, 3])), 0).shape
    torch.Size([])
    """

    def __init__(
        self,
        num_classes: int,
        input_shape: Sequence[int],
        loss: str = "nt_xent",
        temperature: float = 0.5,
        gamma: float = 0.5,
        tau1: float = 0.5,
        tau2: float = 0.5,
        lam: float = 0.5,
        projector_hidden: int = 2048,
        projector_out: int = 128,
        projector_bias: bool = True,
        **kwargs,
    ) -> None:
        # the loss and its hyperparameters are checked first, so a bad value fails at once
        criterion, width_factor = contrastive_criterion(
            loss, "SimCLR", temperature=temperature, gamma=gamma, tau1=tau1, tau2=tau2, lam=lam)
        super().__init__(num_classes, input_shape, **kwargs)
        self.forget_unused_arguments(set(HYPERPARAMETER_CHECKS) - set(criterion.keywords))
        self.criterion = criterion
        self.projector = mlp([self.backbone.output_dim, projector_hidden,
                              width_factor * projector_out], bias=projector_bias)
        self.temperature = temperature

    def objective(self, features: Tensor, n_views: int, labels: Tensor) -> Tensor:
        if n_views != 2:
            raise ValueError(f"SimCLR contrasts exactly 2 views per image, got n_views={n_views}")
        z = self.projector(features)  # z: (2B, out)
        z1, z2 = z.chunk(2)  # z1, z2: (B, out), row i of each from image i
        return self.criterion(gather(z1), gather(z2))  # negatives over the global batch

