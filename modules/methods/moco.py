"""MoCo: a query encoder, a momentum key encoder, a queue of negatives and shuffled BatchNorm."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from modules.blocks.distributed import gather_no_grad, shuffle_across_devices, unshuffle, world_size
from modules.blocks.heads import mlp
from modules.blocks.split_batch_norm import set_batch_norm_splits, split_batch_norms
from modules.blocks.target_network import MomentumTarget, frozen_copy
from modules.losses import HYPERPARAMETER_CHECKS, contrastive_criterion
from modules.methods.base import RepresentationModule
from modules.ranges import check_count, check_momentum


class MoCo(RepresentationModule):
    r"""MoCo as its CIFAR-10 demo runs it, with Kernel-InfoNCE's kernels on its logits.

    He et al., "Momentum Contrast for Unsupervised Visual Representation Learning", CVPR 2020,
    arXiv:1911.05722; Tan et al., "Contrastive Learning is Spectral Clustering on Similarity
    Graph", arXiv:2303.15103, Table 4: ResNet18, temperature 0.1, the Simple Sum kernel with
    :math:`\lambda = 0.8`.

    The key encoder is an exponential moving average of the query encoder (eq. 2),
    :math:`\theta_k \leftarrow m\,\theta_k + (1 - m)\,\theta_q` at a constant :math:`m`, the
    base class's target network (:class:`modules.blocks.target_network.MomentumTarget`, updated
    at the start of each step); each step's keys are enqueued and the oldest dropped. One view
    gives the queries and the other the keys, as in MoCo's Algorithm 1, its demo's default and
    the Kernel-InfoNCE authors' MoCo code (``criterion(q, k)``):

    .. math::
        \mathcal{L} = \ell(q_1, k_2),\qquad
        \ell = \texttt{infonce}: \text{eq. 1};\ \texttt{laplacian}: \gamma = 1;\
        \texttt{sum}: \lambda\,\ell_{\gamma=1} + (1-\lambda)\,\ell_{\gamma=2}

    (see :func:`modules.losses.moco_loss`). ``symmetric=True`` adds the other direction,
    :math:`\ell(q_1, k_2) + \ell(q_2, k_1)` (a sum, as the demo's ``symmetric`` option, which
    its README says "behaves like 2x epochs") and enqueues both views' keys.

    Shuffled BatchNorm (§3.3): the global batch's BatchNorm statistics come from ``bn_splits``
    groups, as on MoCo's 8 GPUs; each device normalises ``bn_splits / devices`` groups of its
    images (:class:`modules.blocks.split_batch_norm.SplitBatchNorm`, the demo's emulation on one
    device), and the key encoder's images are shuffled across the global batch first (a real
    shuffle across devices under DDP, :func:`modules.blocks.distributed.shuffle_across_devices`),
    so a query and its key never share statistics. The projector is the authors' MoCo head,
    Linear-ReLU-Linear without BatchNorm (512-512-128 on ResNet18).

    Where the paper and its authors' MoCo code differ, we follow the paper: the positive key
    stays in the denominator (eq. 1; the code leaves it out), and ``sum`` weighs the Laplacian
    term by :math:`\lambda = 0.8` at one temperature 0.1 (the code: :math:`\lambda = 0.2`,
    and 0.3 for the Gaussian term; ``lam=0.2, tau2=0.3`` set those, with eq. 1's
    denominator still).

    Args:
        loss: a name of :data:`modules.losses.CONTRASTIVE_LOSSES` (``infonce`` and ``nt_xent``
            name the same loss).
        temperature: :math:`\tau` of ``infonce``/``nt_xent``, ``laplacian`` and
            ``exponential``.
        gamma: :math:`\gamma` of ``exponential``.
        tau1, tau2: the temperatures of the Laplacian and Gaussian terms of ``sum`` and
            ``concat_sum``; ``None`` (default): ``temperature`` (the paper's one temperature).
        lam: :math:`\lambda` of ``sum`` and ``concat_sum``.
        queue_size: :math:`K` negatives (4096 in the CIFAR-10 demo).
        key_momentum: :math:`m` of eq. 2. The optimiser's momentum is ``momentum``; a config
            from before the two had separate names that sets ``momentum: 0.99`` still loads and
            trains as it did (SGD at 0.99 too), with a warning.
        symmetric: both directions of the loss (see above); default one.
        bn_splits: BatchNorm groups of the global batch (8: the demo's, 64 images each at batch
            512); a multiple of the devices, dividing the per-device batch; 1 turns shuffled
            BatchNorm off on one device.
        projector_hidden, projector_out: projector sizes (512 and 128: the authors' head).
        kwargs: backbone and optimiser arguments of
            :class:`modules.methods.base.RepresentationModule`.

    >>> model = MoCo(num_classes=10, input_shape=(1, 8, 8), backbone_width=8, queue_size=16,
    ...              bn_splits=2)
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
        symmetric: bool = False,
        bn_splits: int = 8,
        projector_hidden: int = 512,
        projector_out: int = 128,
        **kwargs,
    ) -> None:
        # the loss and its hyperparameters are checked first, so a bad value fails at once
        criterion, width_factor = contrastive_criterion(
            loss, "MoCo", temperature=temperature, gamma=gamma,
            tau1=temperature if tau1 is None else tau1,
            tau2=temperature if tau2 is None else tau2, lam=lam)
        check_momentum("key_momentum", key_momentum)
        check_count("queue_size", queue_size)
        check_count("bn_splits", bn_splits)
        if not isinstance(symmetric, bool):
            raise ValueError(f"symmetric must be true or false, got {symmetric!r}")
        super().__init__(num_classes, input_shape, **kwargs)
        # the temperature stays: it is the taus' default
        self.forget_unused_arguments(set(HYPERPARAMETER_CHECKS) - set(criterion.keywords)
                                     - {"temperature"})
        self.criterion = criterion
        self.symmetric, self.bn_splits = symmetric, bn_splits
        out = width_factor * projector_out
        self.backbone = split_batch_norms(self.backbone)
        self.projector = mlp([self.backbone.output_dim, projector_hidden, out], batch_norm=False)
        self.key_backbone = frozen_copy(self.backbone)
        self.key_projector = frozen_copy(self.projector)
        self.momentum_target = MomentumTarget([self.backbone, self.projector],
                                              [self.key_backbone, self.key_projector],
                                              momentum=key_momentum, schedule="constant")
        self.key_momentum = key_momentum
        if self.optimizer_name in ("sgd", "lars") and self.momentum > 0.95:
            warnings.warn(f"MoCo: momentum {self.momentum} is the {self.optimizer_name} "
                          "optimiser's; the key encoder's moving average is key_momentum "
                          f"({key_momentum}). Configs from before the two had separate names "
                          "set both with momentum", UserWarning, stacklevel=2)
        self.register_buffer("queue", F.normalize(torch.randn(queue_size, out), dim=1))
        self.register_buffer("queue_ptr", torch.zeros((), dtype=torch.long))
        #: This step's keys (the target network's outputs): ``objective`` scores each query
        #: view against them, and the queue takes them after the step.
        self._keys: Tensor | None = None

    def _momentum_update(self) -> None:
        r""":math:`\theta_k \leftarrow m\,\theta_k + (1 - m)\,\theta_q` (MoCo, arXiv:1911.05722,
        eq. 2) for every parameter of the key encoder and its projector, the BatchNorm
        statistics copied (:func:`modules.blocks.target_network.moving_average_update`)."""
        self.momentum_target.update(self.key_momentum)

    @torch.no_grad()
    def _enqueue(self, keys: Tensor) -> None:
        keys = gather_no_grad(keys)
        size = len(self.queue)
        idx = (self.queue_ptr + torch.arange(len(keys), device=keys.device)) % size
        self.queue[idx[-size:]] = keys[-size:].to(self.queue.dtype)
        self.queue_ptr.copy_((self.queue_ptr + len(keys)) % size)

    def splits_per_device(self, batch_size: int) -> int:
        """The BatchNorm groups of one view on this device: ``bn_splits / devices``, refused
        (one line) when the devices do not divide ``bn_splits`` or the groups ``batch_size``."""
        devices = world_size()
        splits, left = divmod(self.bn_splits, devices)
        if left or batch_size % splits:
            raise ValueError(
                f"MoCo's bn_splits {self.bn_splits} must be a multiple of the {devices} "
                f"device(s) and bn_splits / devices must divide the per-device batch of "
                f"{batch_size}: set bn_splits to a divisor of the batch size (1 turns shuffled "
                "BatchNorm off on one device)")
        return splits

    def on_train_start(self) -> None:
        """Refuses a ``bn_splits`` the batch does not divide before the first step, and says
        when the queue holds more keys than the data has images (MoCo's 4,096 on digits'
        1,212): each image's older keys are then among its own negatives."""
        self.splits_per_device(self.trainer.train_dataloader.batch_size)
        images = len(self.trainer.train_dataloader.dataset)
        if self.queue.shape[0] > images:
            warnings.warn(f"MoCo's queue_size {self.queue.shape[0]} is more than the "
                          f"{images} training images: each image's own earlier keys are among "
                          "its negatives; a queue_size below the training set avoids it",
                          stacklevel=1)

    @torch.no_grad()
    def _keys_of(self, images: Tensor, splits: int) -> Tensor:
        """The normalised keys ``(B, d)`` of one view, its images shuffled across the global
        batch when BatchNorm is split (shuffled BN), and put back in their order."""
        shuffled = self.bn_splits > 1
        if shuffled:
            images, order = shuffle_across_devices(images)
        set_batch_norm_splits(self.key_backbone, splits)
        keys = self.momentum_target(self._backbone_input(images))  # (B, d), no gradient
        keys = F.normalize(keys.float(), dim=1)
        return unshuffle(keys, order) if shuffled else keys

    def target_outputs(self, views) -> Tensor:
        """The keys ``(V * B, d)`` of the key views, each query view's positives in its order:
        view 2's (then view 1's with ``symmetric``: q1-k2 and q2-k1), each view's from its own
        shuffled BatchNorm groups (:meth:`_keys_of`)."""
        splits = self.splits_per_device(views[0].shape[0])
        key_views = [views[1], views[0]] if self.symmetric else [views[1]]
        return torch.cat([self._keys_of(v, splits) for v in key_views])  # (V * B, d)

    def training_step(self, batch, batch_idx: int) -> Tensor:
        views, labels = batch
        if len(views) != 2:
            raise ValueError(f"MoCo contrasts exactly 2 views per image, got {len(views)}")
        splits = self.splits_per_device(labels.shape[0])
        self.update_target()
        self._keys = self.target_outputs(views)
        # one pass over the query views, each normalised in its own groups
        query_views = list(views) if self.symmetric else [views[0]]
        set_batch_norm_splits(self.backbone, splits * len(query_views))
        loss = self.online_step(query_views, labels, self._keys, batch_idx)
        self._enqueue(self._keys)
        return loss

    def objective(self, features: Tensor, n_views: int, labels: Tensor) -> Tensor:
        queries = self.projector(features).chunk(n_views)  # (B, d) per query view
        keys = self._keys.chunk(n_views)  # (B, d): each query's positive keys, in its order
        queue = self.queue.clone().detach()  # (K, d), the negatives of this step
        return sum(self.criterion(q, k, queue=queue) for q, k in zip(queries, keys, strict=True))
