"""Label-aware losses as pure functions of tensors: SupCon and TransFusion's affinity losses."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from modules.losses._numerics import _autocast_disabled, _compute_dtype
from modules.ranges import check_positive

TRANSFUSION_KINDS = ("jsd_sq", "kl_sq", "kl_relu", "kl_sm")

# KL(Y || P) is infinite where P_ij = 0 < Y_ij, which for "kl_relu" happens whenever a positive
# pair has a non-positive affinity (and NaN gradients would follow). Inside the logarithm P is
# floored here, capping each such term at -log(1e-12) ~ 27.6 nats per unit of target mass. The
# value is fixed, not tied to the dtype, so float32 and float64 agree.
_KL_LOG_FLOOR = 1e-12


def supcon_loss(features: Tensor, labels: Tensor, temperature: float,
                base_temperature: float | None = None) -> Tensor:
    r"""Supervised contrastive loss :math:`\mathcal{L}^{sup}_{out}` (SupCon).

    Khosla et al., "Supervised Contrastive Learning" (arXiv:2004.11362), eq. 2. The V views of
    the N samples give :math:`N V` L2-normalised rows :math:`z_i`, each an anchor. Its
    positives :math:`P(i)` are the other rows with the same label (its other views included);
    the denominator :math:`A(i)` is every row but the anchor itself:

    .. math::
        \mathcal{L} = \frac{1}{|I^+|} \sum_{i \in I^+} \frac{-1}{|P(i)|} \sum_{p \in P(i)}
        \log \frac{\exp(z_i^\top z_p / \tau)}{\sum_{a \in A(i)} \exp(z_i^\top z_a / \tau)}

    where :math:`I^+` is the set of anchors with at least one positive (the paper sums over all
    anchors; we average, as its released code does). If no anchor has a positive (e.g. a batch
    of distinct labels with V = 1) the loss is a zero that is still connected to ``features``,
    with zero gradient, so that a training step does not crash.

    Args:
        features: (N, V, d) embeddings, V >= 1 views per sample (normalised here).
        labels: (N,) class labels; views of a sample share its label.
        temperature: :math:`\tau > 0`.
        base_temperature: ``None`` (default): no rescaling. A float multiplies the loss by
            ``temperature / base_temperature``, the convention of the released SupContrast
            code (which fixes it at 0.07).

    Returns:
        A scalar float32 (float64 for float64 inputs) tensor, differentiable; computed in that
        precision even under autocast.

    >>> # 2 classes x 1 sample x 2 identical one-hot views: one positive at similarity 1 and
    >>> # two negatives at 0 per anchor: -log(e / (e + 2))
    >>> f = torch.eye(2).unsqueeze(1).repeat(1, 2, 1)
    >>> round(supcon_loss(f, torch.tensor([0, 1]), temperature=1.0).item(), 4)
    0.5514
    """
    if features.dim() != 3:
        raise ValueError(f"features must have shape (N, V, d); got {tuple(features.shape)}")
    n, views, d = features.shape
    if labels.shape != (n,):
        raise ValueError(
            f"labels must have shape (N,) = ({n},) to match features of shape "
            f"{tuple(features.shape)}; got {tuple(labels.shape)}"
        )
    check_positive("temperature", temperature)
    if base_temperature is not None:
        check_positive("base_temperature", base_temperature)
    with _autocast_disabled(features):
        # View-major rows: row v * N + i is view v of sample i.
        z = features.transpose(0, 1).reshape(views * n, d).to(_compute_dtype(features))
        z = F.normalize(z, dim=-1)  # z: (NV, d)
        row_labels = labels.to(z.device).repeat(views)  # (NV,)
        self_mask = torch.eye(views * n, dtype=torch.bool, device=z.device)
        # A lone row has nothing to contrast with; a finite fill keeps its all-masked
        # log-softmax (and its gradient) free of NaN. It has no positive, so it never counts.
        fill = float("-inf") if views * n > 1 else 0.0
        log_prob = F.log_softmax((z @ z.T / temperature).masked_fill(self_mask, fill), dim=1)
        positive = (row_labels[:, None] == row_labels[None, :]) & ~self_mask  # (NV, NV)
        n_positive = positive.sum(dim=1)  # (NV,)
        per_anchor = -log_prob.masked_fill(~positive, 0.0).sum(dim=1) / n_positive.clamp_min(1)
        # Anchors without positives contribute exactly 0 to the sum and are left out of the
        # count, so the result needs no data-dependent branch.
        loss = per_anchor.sum() / (n_positive > 0).sum().clamp_min(1)
        if base_temperature is not None:
            loss = loss * (temperature / base_temperature)
        return loss


def target_affinity(labels: Tensor, superclasses: Tensor | None = None,
                    eps: float = 0.5) -> Tensor:
    r"""TransFusion's target affinity matrix Y, with one level of class hierarchy.

    Liu et al., "TransFusion: Contrastive Learning with Attention Layers", eq. 3 (with a single
    parent level, :math:`\varepsilon^\tau = \varepsilon`):

    .. math::
        Y_{ij} = \begin{cases} 1 & i \ne j \text{ in the same class} \\
        \varepsilon & i, j \text{ in the same superclass but different classes} \\
        0 & \text{otherwise (and on the diagonal)} \end{cases}

    Unnormalised. A class is expected to lie in one superclass; if not, samples of the same
    class still get 1.

    Args:
        labels: (N,) class labels.
        superclasses: ``None`` (no hierarchy), or (N,) the superclass id of each *sample*
            (e.g. CIFAR-100's coarse label of each image), not a class-to-superclass table.
        eps: :math:`\varepsilon \in [0, 1]`, the affinity of superclass mates (a decay
            constant: never above the affinity of classmates).

    Returns:
        (N, N) float32 tensor on ``labels``' device, symmetric, zero diagonal.

    >>> target_affinity(torch.tensor([0, 0, 1, 2]), torch.tensor([0, 0, 0, 1]), eps=0.5)
    tensor([[0.0000, 1.0000, 0.5000, 0.0000],
            [1.0000, 0.0000, 0.5000, 0.0000],
            [0.5000, 0.5000, 0.0000, 0.0000],
            [0.0000, 0.0000, 0.0000, 0.0000]])
    """
    if labels.dim() != 1:
        raise ValueError(f"labels must have shape (N,); got {tuple(labels.shape)}")
    if not 0 <= eps <= 1:  # also rejects NaN
        raise ValueError(f"eps must be in [0, 1], got {eps}")
    same_class = labels[:, None] == labels[None, :]  # (N, N)
    if superclasses is None:
        y = same_class.to(torch.float32)
    else:
        if superclasses.shape != labels.shape:
            raise ValueError(
                f"superclasses must give one id per sample, shape {tuple(labels.shape)} like "
                f"labels; got {tuple(superclasses.shape)}"
            )
        superclasses = superclasses.to(labels.device)
        same_superclass = superclasses[:, None] == superclasses[None, :]
        y = torch.where(same_class, 1.0, same_superclass.to(torch.float32) * eps)
    return y.fill_diagonal_(0.0)


def _kl_rows(p: Tensor, log_q: Tensor) -> Tensor:
    r"""Row-wise :math:`\sum_j p_{ij} (\log p_{ij} - \log q_{ij})`; terms with p = 0 are 0.

    ``log_q`` must be finite where p > 0; elsewhere it may be -inf. Both logarithms are
    masked before use (xlogy-style), so neither the value nor the gradients see a NaN.
    """
    support = p > 0
    log_p = torch.where(support, p, torch.ones_like(p)).log()
    return (p * (log_p - torch.where(support, log_q, torch.zeros_like(log_q)))).sum(dim=-1)


def transfusion_loss(A: Tensor, labels: Tensor, kind: str = "jsd_sq",
                     superclasses: Tensor | None = None, eps: float = 0.5,
                     include_diagonal: bool = False) -> Tensor:
    r"""TransFusion's loss between the last block's affinity A and the target affinity Y.

    Liu et al., "TransFusion: Contrastive Learning with Attention Layers", eq. 3-5 and
    Appendix B. :math:`Y` is ``target_affinity(labels, superclasses, eps)`` with each row
    normalised to sum 1; rows with no positive (all-zero rows of Y) are left out of the mean.
    :math:`P = g(A)` turns A into row distributions:

    - ``"jsd_sq"``, ``"kl_sq"``: :math:`P = \text{Row-Normalize}(A \odot A)` (elementwise
      square, eq. 5);
    - ``"kl_relu"``: :math:`P = \text{Row-Normalize}(\text{ReLU}(A))`;
    - ``"kl_sm"``: :math:`P` = row-wise softmax of A.

    The diagonal of g(A). Eq. 5 as printed normalises each whole row of :math:`A \odot A`, its
    diagonal :math:`A_{ii}^2` (a sample's affinity with itself) included, while the target's
    diagonal is 0 (eq. 3: 1 for :math:`i \ne j` in the same class). The paper does not say
    whether the self-pair is meant to be in g(A); its InfoNCE reading (Appendix A, the
    softmax over :math:`a \ne i`) leaves it out. ``include_diagonal=False`` (default) leaves
    it out: P is a distribution over the other samples, like Y, so :math:`P = Y` is reachable
    and the loss does not push a sample's self-affinity :math:`A_{ii}` to 0 while pulling up
    its affinity with a near-identical classmate. ``include_diagonal=True`` is eq. 4-5 as
    printed, the diagonal in g(A) (and in the softmax of ``"kl_sm"``). The two are different
    objectives, not a constant apart: for ``"jsd_sq"`` on five random 12 x 12 affinities
    :math:`(X W_Q)(X W_K)^\top` of 3 classes their values differ by 0.02-0.04 nats, and their
    gradients too.

    With :math:`\mathcal{D}` the KL divergence of a row and :math:`R` the kept rows,

    .. math::
        \mathcal{L}_{\text{JSD-SQ}} = \frac{1}{|R|} \sum_{i \in R}
        \mathcal{D}(Y_i \,\|\, M_i) + \mathcal{D}(P_i \,\|\, M_i), \quad M = (P + Y) / 2;
        \qquad \mathcal{L}_{\text{KL-*}} = \frac{1}{|R|} \sum_{i \in R}
        \mathcal{D}(Y_i \,\|\, P_i)

    ``"jsd_sq"`` is eq. 4 with the Jensen-Shannon mixture :math:`M = (P + Y)/2`, as the
    divergence defines it; the paper writes :math:`g(A) + Y`, which is not a distribution: its
    form is this one minus the constant :math:`2 \log 2`, so the gradients are the same. It lies in
    :math:`[0, 2 \log 2]`. Terms with zero probability in the first argument of
    :math:`\mathcal{D}` contribute 0. Two numerical guards, both documented choices:

    - Row normalisation divides by ``max(row sum, finfo(dtype).tiny)``: a row of A that is 0
      off the diagonal gives :math:`P_i = 0` rather than NaN; any other row is exact.
    - For ``"kl_sq"`` and ``"kl_relu"``, :math:`\log P` is taken of ``max(P, 1e-12)``:
      :math:`\mathcal{D}(Y \| P)` is infinite where :math:`P_{ij} = 0 < Y_{ij}` (for KL-ReLU,
      whenever a positive pair has :math:`A_{ij} \le 0`); the floor caps such a term at about
      27.6 nats per unit of target mass, with finite gradients. ``"kl_sm"`` uses
      ``log_softmax`` (exact, never 0) and ``"jsd_sq"`` is finite without a floor
      (:math:`M \ge Y/2` and :math:`M \ge P/2`).

    If no row has a positive the loss is a zero still connected to A (zero gradient).

    Args:
        A: (N, N) affinity of the last TransFusion block, :math:`(X W_Q)(X W_K)^\top`.
        labels: (N,) class labels.
        kind: one of ``"jsd_sq"`` (default, the paper's loss), ``"kl_sq"``, ``"kl_relu"``,
            ``"kl_sm"`` (Appendix B's JSD-SQ, KL-SQ, KL-ReLU, KL-SM).
        superclasses: ``None`` or (N,) the superclass id of each sample (see
            ``target_affinity``).
        eps: affinity of superclass mates in Y, in [0, 1].
        include_diagonal: keep the diagonal of A in g(A) (eq. 5 as printed) rather than leave
            the self-pair out (default); see above.

    Returns:
        A scalar float32 (float64 for a float64 A) tensor, differentiable; computed in that
        precision even under autocast.

    >>> labels = torch.tensor([0, 0, 1, 1])
    >>> y = target_affinity(labels)
    >>> # row-normalised (sqrt(Y))^2 is the normalised Y exactly: zero divergence
    >>> transfusion_loss(y.sqrt(), labels, kind="jsd_sq").item()
    0.0
    >>> # all of P on the other class, disjoint from Y: 2 log 2
    >>> round(transfusion_loss(1 - y - torch.eye(4), labels).item(), 4)
    1.3863
    """
    if kind not in TRANSFUSION_KINDS:
        raise ValueError(f"unknown kind {kind!r}; accepted kinds: {', '.join(TRANSFUSION_KINDS)}")
    if not isinstance(include_diagonal, bool):
        raise ValueError(f"include_diagonal must be true or false, got {include_diagonal!r}")
    if A.dim() != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(
            f"A must be a square affinity matrix of shape (N, N); got shape {tuple(A.shape)}"
        )
    n = A.shape[0]
    if labels.shape != (n,):
        raise ValueError(
            f"labels must have shape (N,) = ({n},) to match A of shape {tuple(A.shape)}; "
            f"got {tuple(labels.shape)}"
        )
    with _autocast_disabled(A):
        a = A.to(_compute_dtype(A))  # a: (N, N)
        y = target_affinity(labels.to(a.device), superclasses, eps).to(a.dtype)  # (N, N)
        y_sum = y.sum(dim=1, keepdim=True)  # (N, 1)
        kept = y_sum.squeeze(1) > 0  # (N,) rows with at least one positive
        y = y / torch.where(y_sum > 0, y_sum, torch.ones_like(y_sum))
        # The entries g(A) leaves out: the diagonal, or none (eq. 5 as printed).
        self_mask = torch.eye(n, dtype=torch.bool, device=a.device) & (not include_diagonal)
        if kind == "kl_sm":
            # A single sample has no off-diagonal entry; a finite fill keeps its all-masked
            # row free of NaN (it has no positive, so it is never kept).
            fill = float("-inf") if n > 1 else 0.0
            per_row = _kl_rows(y, F.log_softmax(a.masked_fill(self_mask, fill), dim=1))
        else:
            w = F.relu(a) if kind == "kl_relu" else a.square()
            w = w.masked_fill(self_mask, 0.0)
            p = w / w.sum(dim=1, keepdim=True).clamp_min(torch.finfo(a.dtype).tiny)  # (N, N)
            if kind == "jsd_sq":
                m = (p + y) / 2
                log_m = torch.where(m > 0, m, torch.ones_like(m)).log()
                per_row = _kl_rows(y, log_m) + _kl_rows(p, log_m)
            else:
                per_row = _kl_rows(y, p.clamp_min(_KL_LOG_FLOOR).log())
        per_row = torch.where(kept, per_row, torch.zeros_like(per_row))
        return per_row.sum() / kept.sum().clamp_min(1)
