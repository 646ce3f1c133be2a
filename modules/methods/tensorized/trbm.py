r"""The tensorized restricted Boltzmann machine (TRBM), [CSRL] section VI.

Reference: [CSRL] M. Sabanayagam, O. Al-Dabooni, P. Esser, "Cluster Specific Representation
Learning", arXiv:2412.03471; contrastive divergence: G. E. Hinton, "Training products of experts
by minimizing contrastive divergence", Neural Computation 2002.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from modules.losses.tensorized import assigned_loss, rbm_free_energy
from modules.methods.tensorized.base import ClusterSpecificModule, InputScale, load_input_scale


class TensorizedRBM(ClusterSpecificModule):
    r"""Tensorized RBM, [CSRL] section VI: one RBM per cluster, with weights
    :math:`W_j \in \mathbb{R}^{d \times h}`, visible biases :math:`a_j` and hidden biases
    :math:`b_j`, energy :math:`\mathcal E_j(x, z) = -x^\top a_j - z^\top b_j - x^\top W_j z`,

    .. math::

        \mathrm{TRBM}: \min_{\{W, a, b\}_1^k, S} -\frac{1}{n}\sum_{i=1}^n \sum_{j=1}^k S_{j,i}
        \log P_j(x_i), \qquad \log P_j(x) = -F_j(x) - \log A_j,

    (the paper prints the objective without the minus sign of a negative log-likelihood). The
    gradient of :math:`-\log P_j` is estimated by contrastive divergence (CD-``cd_steps``): the
    loss :math:`F_j(x_i) - F_j(\tilde x_i)` with :math:`\tilde x_i` the end of a Gibbs chain
    started at :math:`x_i` (binary hidden samples, visible probabilities), held fixed
    (:func:`~modules.losses.tensorized.rbm_free_energy`). Visible units are the images in
    [0, 1] (the normalised input mapped back with the datamodule's statistics, read at fit
    start); no centring, as the paper's TRBM.

    **Assignment loss** (eq. 2 and the Lloyd steps). :math:`\log A_j` is intractable and differs
    between clusters, so free energies of different RBMs are not comparable; a point is assigned
    to the RBM that reconstructs it best (mean-field, one up-down pass):

    .. math::

        \mathcal{L}_{i,j} = \tfrac{1}{d}\big\|x_i - \phi(W_j\, \phi(W_j^\top x_i + b_j) + a_j)
        \big\|^2,

    :math:`\phi` the sigmoid. (The authors' code compares the stochastic CD losses.) ``encode``
    gives the assigned RBM's hidden probabilities; ``reconstruct_all`` every RBM's mean-field
    reconstruction (the paper's Figure 5). ``n_clusters=1`` is the standard RBM.

    >>> rbm = TensorizedRBM(num_classes=2, input_shape=(1, 8, 8), hidden_dim=16)
    >>> x = torch.zeros(3, 1, 8, 8)
    >>> rbm.reconstruct_all(x).shape, rbm.encode(x).shape
    (torch.Size([3, 2, 1, 8, 8]), torch.Size([3, 16]))
    """

    def __init__(self, num_classes: int, input_shape: Sequence[int],
                 n_clusters: int | None = None, hidden_dim: int = 64, cd_steps: int = 1,
                 lr: float = 1e-2, weight_decay: float = 0.0) -> None:
        super().__init__(num_classes, input_shape, n_clusters=n_clusters, lr=lr,
                         weight_decay=weight_decay)
        if cd_steps < 1:
            raise ValueError(f"cd_steps must be at least 1, got {cd_steps}")
        self.cd_steps = cd_steps
        k, d = self.n_clusters, self.input_dim
        self.weight = nn.Parameter(0.01 * torch.randn(k, d, hidden_dim))  # W_j
        self.visible_bias = nn.Parameter(torch.zeros(k, d))  # a_j
        self.hidden_bias = nn.Parameter(torch.zeros(k, hidden_dim))  # b_j
        self.scale = InputScale(self.input_shape)

    def on_fit_start(self) -> None:
        load_input_scale(self, self.scale)
        super().on_fit_start()

    def visible(self, x: Tensor) -> Tensor:
        return self.scale.to_unit(x).flatten(1)  # (B, d) in [0, 1]

    def hidden_probs(self, v: Tensor) -> Tensor:
        """:math:`P(z = 1 | v)` under every RBM: v (B, d) or (B, k, d) -> (B, k, h)."""
        pattern = "bd,kdh->bkh" if v.dim() == 2 else "bkd,kdh->bkh"
        return torch.sigmoid(torch.einsum(pattern, v, self.weight) + self.hidden_bias)

    def visible_probs(self, z: Tensor) -> Tensor:
        """:math:`P(v = 1 | z)` under every RBM: z (B, k, h) -> (B, k, d)."""
        return torch.sigmoid(torch.einsum("bkh,kdh->bkd", z, self.weight) + self.visible_bias)

    def reconstruct_units(self, x: Tensor) -> Tensor:
        """Mean-field reconstructions ``(B, k, d)`` in [0, 1] by every RBM."""
        return self.visible_probs(self.hidden_probs(self.visible(x)))

    @torch.no_grad()
    def reconstruct_all(self, x: Tensor) -> Tensor:
        """Every RBM's reconstruction of ``x`` as images in [0, 1]: ``(B, k, *input_shape)``."""
        return self.reconstruct_units(x).view(len(x), self.n_clusters, *self.input_shape)

    @torch.no_grad()
    def reconstruct(self, x: Tensor) -> Tensor:
        """The assigned RBM's reconstruction, in normalised units (as the input)."""
        assignment = self.assign(x)
        rows = torch.arange(len(x), device=x.device)
        units = self.reconstruct_units(x)[rows, assignment].view(-1, *self.input_shape)
        return self.scale.from_unit(units)

    def assignment_losses(self, x: Tensor) -> Tensor:
        v = self.visible(x)
        return (self.reconstruct_units(x) - v.unsqueeze(1)).pow(2).mean(-1)  # (B, k)

    def objective(self, views: list[Tensor], labels: Tensor, assignment: Tensor) -> Tensor:
        v0 = self.visible(views[0])  # (B, d)
        with torch.no_grad():  # the chain's end is a fixed sample (CD)
            z = torch.bernoulli(self.hidden_probs(v0))  # (B, k, h)
            for step in range(self.cd_steps):
                v = self.visible_probs(z)  # (B, k, d)
                if step < self.cd_steps - 1:
                    z = torch.bernoulli(self.hidden_probs(v))
        params = (self.weight, self.visible_bias, self.hidden_bias)
        cd = rbm_free_energy(v0, *params) - rbm_free_energy(v, *params)  # (B, k)
        return assigned_loss(cd, assignment)

    def embed_all(self, x: Tensor) -> Tensor:
        return self.hidden_probs(self.visible(x))
