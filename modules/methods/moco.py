"""MoCo: a query encoder, a momentum key encoder and a queue of negatives."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from modules.blocks.distributed import gather_no_grad
from modules.blocks.heads import mlp
from modules.losses import HYPERPARAMETER_CHECKS, contrastive_criterion
from modules.methods.base import RepresentationModule
from modules.ranges import check_momentum


class MoCo(RepresentationModule):
    r"""MoCo (He et al., "Momentum Contrast for Unsupervised Visual Representation Learning",
    arXiv:1911.05722; v2's MLP projector, arXiv:2003.04297) with Kernel-InfoNCE's kernels on its
    logits (Tan et al., "Contrastive Learning is Spectral Clustering on Similarity Graph",
    arXiv:2303.15103, Table 4: ResNet18, temperature 0.1, and the Simple Sum kernel with
    :math:`\lambda = 0.8`).

    The key encoder is an exponential moving average of the query encoder,
    :math:`\theta_k \leftarrow m\,\theta_k + (1 - m)\,\theta_q`; each step's keys are enqueued
    and the oldest dropped. The loss is symmetrised over the two views (each view's queries
    against the other view's keys), the usual choice for CIFAR-sized runs:

    .. math::
        \mathcal{L} = \tfrac12\left[\ell(q_1, k_2) + \ell(q_2, k_1)\right],\quad
        \ell = \texttt{infonce}: \text{eq. 1};\ \texttt{laplacian}: \gamma = 1;\
        \texttt{sum}: \lambda\,\ell_{\gamma=1} + (1-\lambda)\,\ell_{\gamma=2}

    (see :func:`modules.losses.moco_loss`). The loss is looked up by name in
    :data:`modules.losses.CONTRASTIVE_LOSSES`, the table SimCLR shares (``infonce`` and
    ``nt_xent`` name the same loss), and called with ``queue=``. With several devices the keys
    are gathered before they are enqueued; MoCo's shuffled BatchNorm is not implemented.

    Where the paper and its authors' MoCo code differ, we follow the paper: the positive key
    stays in the denominator (eq. 1; the code leaves it out), and ``sum`` weighs the Laplacian
    term by :math:`\lambda = 0.8` at one temperature 0.1 (the code: :math:`\lambda = 0.2`,
    and 0.3 for the Gaussian term; ``lam=0.2, tau2=0.3`` set those, with eq. 1's
    denominator still).

    Args:
        loss: a name of :data:`modules.losses.CONTRASTIVE_LOSSES`.
        temperature: :math:`\tau` of ``infonce``/``nt_xent``, ``laplacian`` and
            ``exponential``.
        gamma: :math:`\gamma` of ``exponential``.
        tau1, tau2: the temperatures of the Laplacian and Gaussian terms of ``sum`` and
            ``concat_sum``; ``None`` (default): ``temperature`` (the paper's one temperature).
        lam: :math:`\lambda` of ``sum`` and ``concat_sum``.
        queue_size: :math:`K` negatives (4096 for CIFAR in MoCo's follow-ups).
        key_momentum: :math:`m` of eq. 2, the key encoder's moving-average coefficient. The
            optimiser's momentum is ``momentum`` (of :class:`RepresentationModule`, 0.9 by
            default); before the two had separate names ``momentum`` set both, so a config
            from then that sets ``momentum: 0.99`` still loads and trains as it did (SGD at
            0.99 too), with a warning.
        projector_hidden, projector_out: projector sizes.
        kwargs: backbone and optimiser arguments of
            :class:`modules.methods.base.RepresentationModule`.

    >>> model = MoCo(num_classes=10, input_shape=(1, 8, 8), backbone_width=8, queue_size=16)
    >>> model.training_step(([torch.rand(4, 1, 8, 8), torch.rand(4, 1, 8, 8)],
    ...                      torch.tensor([0, 1, 2, 3])), 0).shape
    torch.Size([])
    """

    def __init__(
        self,
        num_classes: int,
        input_shape: Sequence[int],
        loss: str = "infonce",
        temperature: float = 0.1,
        gamma: float = 0.5,
        tau1: float | None = None,
        tau2: float | None = None,
        lam: float = 0.8,
        queue_size: int = 4096,
        key_momentum: float = 0.99,
        projector_hidden: int = 2048,
        projector_out: int = 128,
        **kwargs,
    ) -> None:
        # the loss and its hyperparameters are checked first, so a bad value fails at once
        criterion, width_factor = contrastive_criterion(
            loss, "MoCo", temperature=temperature, gamma=gamma,
            tau1=temperature if tau1 is None else tau1,
            tau2=temperature if tau2 is None else tau2, lam=lam)
        check_momentum("key_momentum", key_momentum)
        if queue_size < 1:
            raise ValueError(f"queue_size must be at least 1, got {queue_size}")
        super().__init__(num_classes, input_shape, **kwargs)
        # the temperature stays: it is the taus' default
        self.forget_unused_arguments(set(HYPERPARAMETER_CHECKS) - set(criterion.keywords)
                                     - {"temperature"})
        self.criterion = criterion
        out = width_factor * projector_out
        self.projector = mlp([self.backbone.output_dim, projector_hidden, out])
        self.key_backbone = copy.deepcopy(self.backbone).requires_grad_(False)
        self.key_projector = copy.deepcopy(self.projector).requires_grad_(False)
        self.key_momentum = key_momentum
        if self.optimizer_name in ("sgd", "lars") and self.momentum > 0.95:
            warnings.warn(f"MoCo: momentum {self.momentum} is the {self.optimizer_name} "
                          "optimiser's; the key encoder's moving average is key_momentum "
                          f"({key_momentum}). Configs from before the two had separate names "
                          "set both with momentum", UserWarning, stacklevel=2)
        self.register_buffer("queue", F.normalize(torch.randn(queue_size, out), dim=1))
        self.register_buffer("queue_ptr", torch.zeros((), dtype=torch.long))
        self._keys: Tensor | None = None

    @torch.no_grad()
    def _momentum_update(self) -> None:
        r""":math:`\theta_k \leftarrow m\,\theta_k + (1 - m)\,\theta_q` (MoCo, arXiv:1911.05722,
        eq. 2) for every parameter at once: one multi-tensor ``lerp`` (a few kernels) instead of
        two per parameter (about 258 for ResNet18 and its projector)."""
        pairs = [(self.key_backbone, self.backbone), (self.key_projector, self.projector)]
        keys = [k for key_net, _ in pairs for k in key_net.parameters()]
        queries = [q.detach() for _, query_net in pairs for q in query_net.parameters()]
        torch._foreach_lerp_(keys, queries, 1.0 - self.key_momentum)
        key_buffers = [b for key_net, _ in pairs for b in key_net.buffers()]
        query_buffers = [b for _, query_net in pairs for b in query_net.buffers()]
        if key_buffers:  # BatchNorm statistics follow the query encoder
            torch._foreach_copy_(key_buffers, query_buffers)

    @torch.no_grad()
    def _enqueue(self, keys: Tensor) -> None:
        keys = gather_no_grad(keys)
        size = len(self.queue)
        idx = (self.queue_ptr + torch.arange(len(keys), device=keys.device)) % size
        self.queue[idx[-size:]] = keys[-size:].to(self.queue.dtype)
        self.queue_ptr.copy_((self.queue_ptr + len(keys)) % size)

    def on_train_start(self) -> None:
        """Says when the queue holds more keys than the data has images (MoCo's 4,096 on
        digits' 1,212): each image's older keys are then among its own negatives."""
        images = len(self.trainer.train_dataloader.dataset)
        if self.queue.shape[0] > images:
            warnings.warn(f"MoCo's queue_size {self.queue.shape[0]} is more than the "
                          f"{images} training images: each image's own earlier keys are among "
                          "its negatives; a queue_size below the training set avoids it",
                          stacklevel=1)

    def training_step(self, batch, batch_idx: int) -> Tensor:
        views, _ = batch
        if len(views) != 2:
            raise ValueError(f"MoCo contrasts exactly 2 views per image, got {len(views)}")
        if self.training:
            self._momentum_update()
        with torch.no_grad():
            keys = self.key_projector(self.key_backbone(self._backbone_input(torch.cat(views))))
        self._keys = F.normalize(keys.float(), dim=1)  # (2B, d): keys of view 1, then view 2
        loss = super().training_step(batch, batch_idx)
        self._enqueue(self._keys)
        return loss

    def objective(self, features: Tensor, n_views: int, labels: Tensor) -> Tensor:
        q1, q2 = self.projector(features).chunk(2)  # (B, d) each
        k1, k2 = self._keys.chunk(2)
        queue = self.queue.clone().detach()  # (K, d), the negatives of this step
        return 0.5 * (self.criterion(q1, k2, queue=queue) + self.criterion(q2, k1, queue=queue))
