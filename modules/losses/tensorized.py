r"""The objectives of the cluster-specific ("tensorized") models as pure functions of tensors.

Reference: [CSRL] M. Sabanayagam, O. Al-Dabooni, P. Esser, "Cluster Specific Representation
Learning", arXiv:2412.03471. Every model of the paper minimises

.. math::

    \min_{\{\Psi\}_1^k, \Omega, S} \frac{1}{n} \sum_{i=1}^n \sum_{j=1}^k S_{j,i}\,
    \mathcal{L}_{i,j}, \qquad 1_k^\top S = 1_n^\top,\ S_{j,i} \ge 0

(the **T** and **PT** objectives, eq. 1), where :math:`\mathcal{L}_{i,j}` is the loss of point
:math:`i` under cluster :math:`j`'s representation. The functions here compute the
:math:`(B, k)` matrix of :math:`\mathcal{L}_{i,j}` for each model, and :func:`assigned_loss`
contracts it with a strict (one-hot) assignment :math:`S`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def assigned_loss(pair_losses: Tensor, assignment: Tensor) -> Tensor:
    r"""The tensorized objective (eq. 1) for a strict assignment: the batch mean of each point's
    loss under its assigned cluster.

    .. math::

        \frac{1}{n}\sum_{i=1}^n \sum_{j=1}^k S_{j,i}\,\mathcal{L}_{i,j}
        = \frac{1}{n}\sum_{i=1}^n \mathcal{L}_{i,s_i}, \qquad S_{j,i} = [j = s_i].

    Args:
        pair_losses: (B, k) loss of every point under every cluster.
        assignment: (B,) integer cluster :math:`s_i` of every point.

    >>> assigned_loss(torch.tensor([[1.0, 5.0], [4.0, 2.0]]), torch.tensor([0, 0]))
    tensor(2.5000)
    """
    return pair_losses.gather(1, assignment.long().unsqueeze(1)).mean()


def centred_reconstruction_losses(reconstruction: Tensor, centred: Tensor, embedding: Tensor,
                                  penalty: float = 0.0) -> Tensor:
    r"""Per-point, per-cluster loss of the (partially) tensorized autoencoders, [CSRL] eq. 3.

    .. math::

        \mathcal{L}_{i,j} = \frac{1}{d}\,\|\tilde x_{i,j} - \hat x_{i,j}\|^2
        + \lambda\, \|z_{i,j}\|^2, \qquad \tilde x_{i,j} = x_i - c_j,

    with :math:`z_{i,j} = g_{\Psi_j}(g_\Omega(\tilde x_{i,j}))` the embedding. Eq. 3 prints the
    penalty as :math:`-\lambda p`; it is a *k-means penalty* pulling embeddings to the origin
    (the cluster's centre), so it is added, as in the authors' code (``src/loss.py``). The
    squared error is averaged over the :math:`d` features (``nn.MSELoss`` there).

    Args:
        reconstruction: (B, k, d) :math:`\hat x_{i,j}`.
        centred: (B, k, d) :math:`\tilde x_{i,j}`.
        embedding: (B, k, h) :math:`z_{i,j}`.
        penalty: :math:`\lambda \ge 0`.

    Returns:
        (B, k) :math:`\mathcal{L}_{i,j}`.

    >>> x = torch.zeros(1, 2, 3)
    >>> centred_reconstruction_losses(x + 1.0, x, torch.ones(1, 2, 1), penalty=0.5)
    tensor([[1.5000, 1.5000]])
    """
    return (reconstruction - centred).pow(2).mean(-1) + penalty * embedding.pow(2).sum(-1)


def gaussian_kl(mean: Tensor, log_var: Tensor) -> Tensor:
    r"""KL divergence of :math:`\mathcal N(\mu, \mathrm{diag}\,\sigma^2)` from :math:`\mathcal
    N(0, I)` over the last axis: the regularisation term of [CSRL] eq. 6.

    .. math::

        \mathrm{KL} = -\tfrac12 \sum_{l=1}^h \left(1 + \log\sigma_l^2 - \mu_l^2 - \sigma_l^2
        \right).

    >>> gaussian_kl(torch.zeros(2, 3), torch.zeros(2, 3)).abs()  # the prior itself
    tensor([0., 0.])
    >>> gaussian_kl(torch.ones(1, 2), torch.zeros(1, 2))  # two unit shifts
    tensor([1.])
    """
    return -0.5 * (1.0 + log_var - mean.pow(2) - log_var.exp()).sum(-1)


def tvae_reconstruction_losses(decoded: Tensor, target: Tensor,
                               reconstruction: str = "bce") -> Tensor:
    r"""Per-point, per-cluster reconstruction term of the tensorized VAE, [CSRL] eq. 5: the
    Bernoulli negative log-likelihood of a sigmoid output (``"bce"``, section IV and footnote
    6), summed over the :math:`d` features,

    .. math::

        \mathrm{Rec}_{i,j} = -\sum_{l=1}^d \big[t_{i,l} \log\phi(o_{i,j,l})
        + (1 - t_{i,l}) \log(1 - \phi(o_{i,j,l}))\big],

    or a Gaussian one with a linear output (``"mse"``, appendix C),
    :math:`\mathrm{Rec}_{i,j} = \tfrac12\|t_{i,j} - o_{i,j}\|^2`.

    Args:
        decoded: (B, k, d) decoder outputs :math:`o_{i,j}` (logits for ``"bce"``).
        target: (B, d) or (B, k, d) targets :math:`t` (in [0, 1] for ``"bce"``).
        reconstruction: ``"bce"`` or ``"mse"``.

    Returns:
        (B, k) :math:`\mathrm{Rec}_{i,j}`.

    >>> tvae_reconstruction_losses(torch.zeros(1, 2, 4), torch.full((1, 4), 0.5))  # 4 log 2
    tensor([[2.7726, 2.7726]])
    """
    if target.dim() == decoded.dim() - 1:
        target = target.unsqueeze(1).expand_as(decoded)
    if reconstruction == "bce":
        return F.binary_cross_entropy_with_logits(decoded, target, reduction="none").sum(-1)
    if reconstruction == "mse":
        return 0.5 * (decoded - target).pow(2).sum(-1)
    raise ValueError(f"unknown reconstruction {reconstruction!r}; available: bce, mse")


def tvae_losses(decoded: Tensor, target: Tensor, mean: Tensor, log_var: Tensor,
                reconstruction: str = "bce") -> Tensor:
    r"""Per-point, per-cluster negative ELBO of the tensorized VAE, [CSRL] eq. 4-6.

    .. math::

        \mathcal{L}_{i,j} = \mathrm{Rec}_{i,j} + \mathrm{KL}\big(\mathcal N(\mu_{i,j},
        \sigma^2_{i,j}) \,\|\, \mathcal N(0, I)\big),

    with :math:`\mathrm{Rec}_{i,j}` of :func:`tvae_reconstruction_losses` (``"bce"`` or
    ``"mse"``) and the KL term of :func:`gaussian_kl`.

    Args:
        decoded: (B, k, d) decoder outputs :math:`o_{i,j}` (logits for ``"bce"``).
        target: (B, d) or (B, k, d) targets :math:`t` (in [0, 1] for ``"bce"``).
        mean, log_var: (B, k, h) the encoder's :math:`\mu_{i,j}` and
            :math:`\log\sigma^2_{i,j}`.
        reconstruction: ``"bce"`` or ``"mse"``.

    Returns:
        (B, k) :math:`\mathcal{L}_{i,j}`.

    >>> o, t = torch.zeros(1, 2, 4), torch.full((1, 4), 0.5)
    >>> tvae_losses(o, t, torch.zeros(1, 2, 2), torch.zeros(1, 2, 2))  # 4 log 2
    tensor([[2.7726, 2.7726]])
    """
    return tvae_reconstruction_losses(decoded, target, reconstruction) + gaussian_kl(mean,
                                                                                     log_var)


def normalised_triplet_losses(anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
    r"""The tensorized contrastive loss of [CSRL] section V on unit-normalised embeddings.

    .. math::

        \mathcal{L}_{i,j} = \langle \bar z_{i,j}, \bar z^-_{i,j}\rangle
        - \langle \bar z_{i,j}, \bar z^+_{i,j}\rangle, \qquad \bar z = z / \|z\|.

    The paper writes the inner products of raw embeddings, which is unbounded below (scaling
    :math:`z` lowers it without end); with normalised embeddings the loss lies in
    :math:`[-2, 2]`, reaching :math:`-2` when the positive coincides with the anchor and the
    negative is its antipode.

    Args:
        anchor, positive, negative: (..., h) embeddings :math:`z, z^+, z^-`.

    Returns:
        (...) the loss.

    >>> z = torch.tensor([[1.0, 0.0]])
    >>> normalised_triplet_losses(z, 3 * z, -z)
    tensor([-2.])
    """
    return (F.cosine_similarity(anchor, negative, dim=-1)
            - F.cosine_similarity(anchor, positive, dim=-1))


def rbm_free_energy(visible: Tensor, weight: Tensor, visible_bias: Tensor,
                    hidden_bias: Tensor) -> Tensor:
    r"""Free energy of a visible vector under each cluster's RBM ([CSRL] section VI).

    With the energy :math:`\mathcal E_j(x, z) = -x^\top a_j - z^\top b_j - x^\top W_j z` over
    binary hidden units :math:`z \in \{0, 1\}^h`,

    .. math::

        F_j(x) = -\log \sum_z e^{-\mathcal E_j(x, z)}
               = -x^\top a_j - \sum_{l=1}^h \log\big(1 + e^{b_{j,l} + (x^\top W_j)_l}\big),

    so :math:`\log P_j(x) = -F_j(x) - \log A_j`.

    Args:
        visible: (B, d) or (B, k, d) visible units :math:`x` (one per cluster in the latter).
        weight: (k, d, h) :math:`W_j`.
        visible_bias: (k, d) :math:`a_j`.
        hidden_bias: (k, h) :math:`b_j`.

    Returns:
        (B, k) :math:`F_j(x_i)`.

    >>> w, a, b = torch.zeros(1, 2, 3), torch.zeros(1, 2), torch.zeros(1, 3)
    >>> rbm_free_energy(torch.ones(1, 2), w, a, b)  # -3 log 2
    tensor([[-2.0794]])
    """
    if visible.dim() == 2:
        pre = torch.einsum("bd,kdh->bkh", visible, weight)  # pre: (B, k, h)
        bias_term = visible @ visible_bias.T  # (B, k)
    else:
        pre = torch.einsum("bkd,kdh->bkh", visible, weight)
        bias_term = (visible * visible_bias).sum(-1)
    return -bias_term - F.softplus(pre + hidden_bias).sum(-1)


def lloyd_centres(x: Tensor, assignment: Tensor, previous: Tensor) -> Tensor:
    r"""The centre update of a Lloyd step: each cluster's centre is the mean of its points.

    .. math::

        c_j = \frac{\sum_i S_{j,i}\, x_i}{\sum_i S_{j,i}},

    and a cluster left without points keeps its previous centre.

    Args:
        x: (n, D) points.
        assignment: (n,) cluster of every point.
        previous: (k, D) the centres before the step.

    Returns:
        (k, D) the new centres.

    >>> x = torch.tensor([[0.0], [2.0], [10.0]])
    >>> lloyd_centres(x, torch.tensor([0, 0, 1]), torch.zeros(3, 1)).flatten()
    tensor([ 1., 10.,  0.])
    """
    k = previous.shape[0]
    one_hot = F.one_hot(assignment.long(), k).to(x.dtype)  # (n, k): S transposed
    counts = one_hot.sum(0)  # (k,)
    sums = one_hot.T @ x  # (k, D)
    means = sums / counts.clamp_min(1).unsqueeze(1)
    return torch.where(counts.unsqueeze(1) > 0, means, previous.to(x.dtype))
