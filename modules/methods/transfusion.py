"""TransFusion: attention blocks with ReLU affinities, trained to match a target affinity."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from modules.blocks.distributed import gather, gather_no_grad
from modules.losses import TRANSFUSION_KINDS, supcon_loss, transfusion_loss
from modules.methods.base import RepresentationModule
from modules.ranges import check_positive

#: Appendix B's losses on the affinity (:data:`modules.losses.TRANSFUSION_KINDS`, the kinds of
#: :func:`modules.losses.transfusion_loss`) and SupCon's InfoNCE on the queries.
TRANSFUSION_LOSSES = (*TRANSFUSION_KINDS, "supcon")
FUSION_SCALES = ("mean", "sum")


class FusionBlock(nn.Module):
    r"""One TransFusion block (Liu et al., "TransFusion: Contrastive Learning with Attention
    Layers", eq. 1-2) over a set of :math:`n` samples :math:`X \in \mathbb{R}^{n \times m}`:

    .. math::
        A = (X W_Q)(X W_K)^\top, \qquad X' = \mathrm{ReLU}(A)\,(X W_V) + X

    :math:`W_V` starts at zero, so a new block passes its input through unchanged.

    ``scale="mean"`` (default) divides the fused term by the number of samples :math:`n`. This is
    eq. 2 with :math:`W_V` reparameterised as :math:`W_V / n` (the same functions), and it is what
    makes a stack of blocks trainable: with the literal sum, a 5-block standalone model on digits
    (Adam, 20 epochs) went to NaN at lr 2e-3 and, at lr 2e-4, to activations of 1e8 and a 10%
    linear probe; with the mean it stayed below 25 and reached 95% (measured, 2-core CPU).
    ``scale="sum"`` is eq. 2 as printed.

    >>> block = FusionBlock(4)
    >>> x = torch.randn(6, 4)
    >>> out, a = block(x)
    >>> out.shape, a.shape, bool(torch.equal(out, x))
    (torch.Size([6, 4]), torch.Size([6, 6]), True)
    """

    def __init__(self, dim: int, scale: str = "mean") -> None:
        super().__init__()
        if scale not in FUSION_SCALES:
            raise ValueError(f"unknown fusion scale {scale!r}; available: "
                             f"{', '.join(FUSION_SCALES)}")
        self.scale = scale
        self.query = nn.Linear(dim, dim, bias=False)
        self.key = nn.Linear(dim, dim, bias=False)
        self.value = nn.Linear(dim, dim, bias=False)
        nn.init.zeros_(self.value.weight)

    def affinity(self, x: Tensor) -> Tensor:
        return self.query(x) @ self.key(x).T  # (n, n)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        a = self.affinity(x)  # a: (n, n)
        fused = torch.relu(a) @ self.value(x)  # (n, m)
        if self.scale == "mean":
            fused = fused / x.shape[0]
        return fused + x, a  # (n, m), (n, n)


class TransFusion(RepresentationModule):
    r"""TransFusion: L fusion blocks on a backbone's features (the head, TransFusion's Table 3
    uses one block on ResNet18) or on the flattened input (``backbone: flatten``, the standalone
    model of its Tables 1-2: 5 blocks on FashionMNIST, 15 on CIFAR-10).

    The last block's affinity :math:`A^L` is trained towards the target affinity :math:`Y` of
    eq. 3 (1 for another sample of the class, ``eps`` for one of the same superclass) by the
    loss of eq. 4-5 (``jsd_sq``) or the ablations of appendix B (``kl_sq``, ``kl_relu``,
    ``kl_sm``, ``supcon``: SupCon's InfoNCE on the last block's queries, eq. 8). The embedding is
    the input of the last block, :math:`X^{L-1}` ("the final embeddings are X^{d-1}"). Blocks mix
    the samples of a batch, so embeddings depend on the batch they are computed in; features are
    gathered across devices first, so the blocks see the global batch.

    The loss never reaches the last block's :math:`W_V` (it uses :math:`A^L`, not the block's
    output :math:`X^L`), nor, in the ``supcon`` ablation, its :math:`W_K` (eq. 8 uses the queries
    only). Those are built as constants (``requires_grad=False``), since DDP refuses a trainable
    parameter that gets no gradient; so TransFusion trains on several devices without
    ``find_unused_parameters``. :math:`W_V` stays 0, so the last block's output would equal its
    input, :math:`X^{L-1}`; :meth:`layer_outputs` stops at the embedding, as the paper's layers
    do. Both remain the block's :math:`W_V` and :math:`W_K` of eq. 1-2 (and in checkpoints).

    Args:
        num_blocks: L.
        loss: one of :data:`TRANSFUSION_LOSSES`.
        eps: the target's superclass affinity (with ``hierarchical``).
        hierarchical: use the datamodule's superclasses (CIFAR-100's 20 coarse labels) in Y.
        temperature: :math:`\tau` of the ``supcon`` ablation.
        include_diagonal: keep the diagonal of :math:`A` in :math:`g(A)` (eq. 4-5 as printed)
            instead of leaving the self-pair out (default); see
            :func:`modules.losses.transfusion_loss`. Not used by ``supcon``.
        fusion_scale: ``mean`` (eq. 2 with :math:`W_V/n`; stable) or ``sum`` (eq. 2 as
            printed); see :class:`FusionBlock`.
        kwargs: backbone and optimiser arguments of
            :class:`modules.methods.base.RepresentationModule`.

    >>> model = TransFusion(num_classes=10, input_shape=(1, 8, 8), backbone="flatten",
    ...                     num_blocks=3)
    >>> [tuple(x.shape) for x in model.layer_outputs(torch.randn(5, 1, 8, 8))]  # X^0, X^1, X^2
    [(5, 64), (5, 64), (5, 64)]
    """

    def __init__(
        self,
        num_classes: int,
        input_shape: Sequence[int],
        num_blocks: int = 1,
        loss: str = "jsd_sq",
        eps: float = 0.5,
        hierarchical: bool = False,
        temperature: float = 0.1,
        fusion_scale: str = "mean",
        include_diagonal: bool = False,
        **kwargs,
    ) -> None:
        if loss not in TRANSFUSION_LOSSES:
            raise ValueError(f"unknown TransFusion loss {loss!r}; available: "
                             f"{', '.join(TRANSFUSION_LOSSES)}")
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be at least 1, got {num_blocks}")
        if loss == "supcon":
            check_positive("temperature", temperature)
        if not isinstance(include_diagonal, bool):
            raise ValueError(f"include_diagonal must be true or false, got {include_diagonal!r}")
        if include_diagonal and loss == "supcon":
            raise ValueError("include_diagonal applies to the affinity losses "
                             f"({', '.join(TRANSFUSION_KINDS)}); SupCon leaves the self-pair out")
        super().__init__(num_classes, input_shape, **kwargs)
        dim = self.backbone.output_dim
        self.blocks = nn.ModuleList(FusionBlock(dim, fusion_scale) for _ in range(num_blocks))
        last = self.blocks[-1]
        for unused in (last.value, last.key) if loss == "supcon" else (last.value,):
            unused.weight.requires_grad_(False)  # no gradient ever reaches it (see above)
        self.loss, self.eps, self.hierarchical = loss, eps, hierarchical
        self.temperature, self.include_diagonal = temperature, include_diagonal
        self.register_buffer("superclass_of", torch.empty(0, dtype=torch.long), persistent=False)
        self._embedded: tuple[Tensor, Tensor] | None = None  # (features, their embedding)

    def on_fit_start(self) -> None:
        if self.hierarchical:  # the datamodule is set up by now
            mapping = getattr(self.trainer.datamodule, "fine_to_coarse", None)
            if mapping is None:
                raise ValueError("hierarchical TransFusion needs a datamodule with superclasses "
                                 "(a fine_to_coarse mapping, e.g. cifar100); this one has none")
            self.superclass_of = torch.as_tensor(mapping, device=self.device)

    def embedding(self, features: Tensor) -> Tensor:
        for block in self.blocks[:-1]:
            features, _ = block(features)
        return features  # (n, m): the input of the last block

    def layer_outputs(self, x: Tensor) -> list[Tensor]:
        """The paper's layers X^0, ..., X^(L-1), the input of every block, for the
        per-layer analysis: the input first, the embedding last. The last block's output is not
        one: the model's output is that block's affinity (its :math:`W_V` is never trained)."""
        outputs = [self.backbone(self._backbone_input(x))]
        for block in self.blocks[:-1]:
            outputs.append(block(outputs[-1])[0])
        return outputs  # L tensors (n, m)

    def probe_embedding(self, features: Tensor, batch_size: int) -> Tensor:
        """The embedding ``objective`` computed for these very features when it is the online
        probe's input exactly (one view on one device: the same rows through the same blocks),
        instead of a second pass through the blocks (a third of a standalone model's step);
        else the first view's rows through the blocks again, as every method does."""
        embedded, self._embedded = self._embedded, None
        if embedded is not None and embedded[0] is features and len(embedded[1]) == batch_size:
            return embedded[1].detach()
        return super().probe_embedding(features, batch_size)

    def objective(self, features: Tensor, n_views: int, labels: Tensor) -> Tensor:
        x = self.embedding(gather(features))  # x: (n, m), the global batch of every view
        # kept for probe_embedding only when it is the probe's input exactly
        self._embedded = (features, x) if n_views == 1 and len(x) == len(features) else None
        labels = gather_no_grad(labels.repeat(n_views))  # views are stacked view-major
        last = self.blocks[-1]
        if self.loss == "supcon":  # eq. 8 with W_Q = W_K: InfoNCE on the queries
            return supcon_loss(last.query(x)[:, None, :], labels, self.temperature)
        superclasses = self.superclass_of[labels] if self.hierarchical else None
        return transfusion_loss(last.affinity(x), labels, kind=self.loss,
                                superclasses=superclasses, eps=self.eps,
                                include_diagonal=self.include_diagonal)
