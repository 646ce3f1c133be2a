r"""The embedding maps of Calder & Lee (arXiv:2503.10812): the one-hidden-layer network of
eq. 18-19 (fixed averaging matrix A, trainable B), a deeper MLP (their appendix B uses four
layers), and the "worst-case" invariant initialisation of eq. 17.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from modules.blocks.heads import make_activation, mlp


def averaging_matrix(width_per_output: int, out_dim: int,
                     dtype: torch.dtype = torch.float32) -> Tensor:
    r"""The constant matrix A of arXiv:2503.10812, eq. 19: block-diagonal, column k holding
    :math:`1/\sqrt{M}` on rows :math:`(k-1)M+1, \dots, kM`.

    .. math::
        A = \frac{1}{\sqrt{M}} \operatorname{diag}(\mathbb{1}_{M}, \dots, \mathbb{1}_{M})
            \in \mathbb{R}^{Md \times d}

    >>> averaging_matrix(4, 2).T.tolist()  # M = 4: entries 1/2
    [[0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5]]
    """
    eye = torch.eye(out_dim, dtype=dtype)  # (d, d)
    return eye.repeat_interleave(width_per_output, dim=0) / math.sqrt(width_per_output)


class OneHiddenLayerEmbedding(nn.Module):
    r"""The embedding map of arXiv:2503.10812, eq. 18:

    .. math::
        f(B, x) = A^\top \sigma(B x), \qquad A \in \mathbb{R}^{Md \times d} \text{ (eq. 19,
        fixed)}, \quad B \in \mathbb{R}^{Md \times D} \text{ (trained)}

    B has i.i.d. :math:`\mathcal{N}(0, 1)` entries, as Proposition 4.4 assumes. With
    ``bias=True`` the hidden layer is :math:`\sigma(Bx + c)` with a trained
    :math:`c \sim \mathcal{N}(0, I)`: the same as eq. 18 on the input :math:`(x, 1)` with the
    column c appended to B, so Propositions 4.3-4.4 hold with :math:`x_i^\top x_j + 1` in place
    of :math:`x_i^\top x_j`. (Without a bias the ReLU map is positively homogeneous,
    :math:`f(B, \lambda x) = \lambda f(B, x)` for :math:`\lambda > 0`, so inputs on one ray from
    the origin reach one point of the sphere.)

    Args:
        in_dim: D. out_dim: d. width_per_output: M (hidden width Md).
        activation: a name of :data:`modules.blocks.heads.ACTIVATIONS`: "relu" (default,
            Proposition 4.4), "tanh", ...
        bias: add the trained hidden bias c.
        generator: random source of the initialisation.

    >>> f = OneHiddenLayerEmbedding(in_dim=4, out_dim=2, width_per_output=8)
    >>> f(torch.randn(5, 4)).shape
    torch.Size([5, 2])
    """

    def __init__(self, in_dim: int, out_dim: int, width_per_output: int,
                 activation: str = "relu", bias: bool = False,
                 generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.sigma = make_activation(activation)  # checks the name before anything is drawn
        self.in_dim, self.out_dim, self.width_per_output = in_dim, out_dim, width_per_output
        self.activation = activation
        hidden = width_per_output * out_dim
        self.register_buffer("A", averaging_matrix(width_per_output, out_dim, dtype))
        self.B = nn.Parameter(torch.randn(hidden, in_dim, generator=generator, dtype=dtype))
        self.c = (nn.Parameter(torch.randn(hidden, generator=generator, dtype=dtype))
                  if bias else None)

    def forward(self, x: Tensor) -> Tensor:
        pre = x @ self.B.T  # (n, Md)
        if self.c is not None:
            pre = pre + self.c
        return self.sigma(pre) @ self.A  # (n, d)


def mlp_embedding(in_dim: int, out_dim: int, hidden: int = 64, layers: int = 4,
                  generator: torch.Generator | None = None,
                  dtype: torch.dtype = torch.float32) -> nn.Sequential:
    r"""A deeper embedding map: ``layers`` fully connected layers with ReLU between them (the
    4-layer network of arXiv:2503.10812, appendix B / Figure 6), built with the one MLP builder
    (:func:`modules.blocks.heads.mlp`, no BatchNorm: full-batch gradient descent on a fixed sample).
    Weights are PyTorch's default (Kaiming-uniform) initialisation, drawn from ``generator``.

    .. math::
        f(x) = W_L\,\sigma(\cdots \sigma(W_2\,\sigma(W_1 x + c_1) + c_2) \cdots) + c_L

    >>> f = mlp_embedding(4, 2, hidden=16)
    >>> sum(isinstance(m, torch.nn.Linear) for m in f), f(torch.randn(3, 4)).shape
    (4, torch.Size([3, 2]))
    """
    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    model = mlp([in_dim] + [hidden] * (layers - 1) + [out_dim], batch_norm=False).to(dtype)
    with torch.no_grad():
        for linear in (m for m in model if isinstance(m, nn.Linear)):
            bound = 1 / math.sqrt(linear.in_features)  # nn.Linear's default, from `generator`
            linear.weight.copy_((torch.rand(linear.weight.shape, generator=generator,
                                            dtype=dtype) * 2 - 1) * bound)
            linear.bias.copy_((torch.rand(linear.bias.shape, generator=generator,
                                          dtype=dtype) * 2 - 1) * bound)
    return model


def first_layer_weight(model: nn.Module) -> Tensor:
    """The weight that multiplies the input: B of eq. 18, or the first ``nn.Linear``'s."""
    if isinstance(model, OneHiddenLayerEmbedding):
        return model.B
    for module in model.modules():
        if isinstance(module, nn.Linear):
            return module.weight
    raise ValueError("model has no first linear layer")


def invariant_initialisation_(model: nn.Module, clean_dim: int) -> nn.Module:
    r"""Make ``model`` the "worst-case" invariant map of arXiv:2503.10812, eq. 17, in place: the
    input weights of the coordinates after the first ``clean_dim`` are zeroed, so

    .. math::
        f(w^{(0)}, x) = R(x^1, \dots, x^d, 0, \dots, 0)

    and any perturbation in those coordinates (:func:`orthogonal_noise_augmentation`) leaves the
    embedding unchanged: :math:`f(w^{(0)}, x + \epsilon) = f(w^{(0)}, x)` for
    :math:`\epsilon \in \mathcal{M}^\perp`. Returns ``model``.

    >>> f = invariant_initialisation_(OneHiddenLayerEmbedding(4, 2, 8), clean_dim=2)
    >>> x = torch.randn(5, 4)
    >>> noisy = x + torch.cat([torch.zeros(5, 2), torch.randn(5, 2)], dim=1)
    >>> bool(torch.equal(f(x), f(noisy)))
    True
    """
    with torch.no_grad():
        first_layer_weight(model)[:, clean_dim:] = 0
    return model
