r"""The neural kernel of Calder & Lee (arXiv:2503.10812): the empirical kernel of eq. 12 for any
map (by autograd), its closed form for the network of eq. 18 (Proposition 4.3) and its
infinite-width limit (Proposition 4.4).

Every kernel here is a ``(n, n, d, d)`` tensor ``K`` with ``K[i, j]`` the block
:math:`K_{ij} \in \mathbb{R}^{d \times d}`, ``K[i, j, k, l]`` = :math:`K^{kl}_{ij}`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.func import functional_call, jacrev

from modules.blocks.heads import activation_derivative


def trainable_parameters(model: nn.Module) -> dict[str, Tensor]:
    """The parameters gradient descent updates (``requires_grad``), detached, by name."""
    return {name: p.detach() for name, p in model.named_parameters() if p.requires_grad}


def parameter_jacobian(model: nn.Module, x: Tensor) -> Tensor:
    r"""The Jacobian :math:`\nabla_w f^k(w, x_i)` of the outputs with respect to all trainable
    parameters, flattened: ``(n, d, P)``.

    >>> from modules.theory.contrastive_dynamics.embeddings import OneHiddenLayerEmbedding
    >>> parameter_jacobian(OneHiddenLayerEmbedding(3, 2, 4), torch.randn(5, 3)).shape
    torch.Size([5, 2, 24])
    """
    params = trainable_parameters(model)
    jac = jacrev(lambda p: functional_call(model, p, (x,)))(params)  # name -> (n, d, *shape)
    n, d = x.shape[0], next(iter(jac.values())).shape[1]
    return torch.cat([j.reshape(n, d, -1) for j in jac.values()], dim=-1)  # (n, d, P)


def empirical_neural_kernel(model: nn.Module, x: Tensor) -> Tensor:
    r"""The kernel matrix of arXiv:2503.10812, eq. 12, by autograd, over all trainable
    parameters w of ``model``:

    .. math::
        K^{kl}_{ij} = \big(\nabla_w f^k(w, x_i)\big)^\top \nabla_w f^l(w, x_j)

    Args:
        model: any map (n, D) -> (n, d) whose trainable parameters are w.
        x: (n, D) samples.

    Returns:
        (n, n, d, d).

    >>> from modules.theory.contrastive_dynamics.embeddings import OneHiddenLayerEmbedding
    >>> K = empirical_neural_kernel(OneHiddenLayerEmbedding(3, 2, 4), torch.randn(5, 3))
    >>> K.shape, bool(torch.allclose(K, K.permute(1, 0, 3, 2)))  # K_ij = K_ji^T
    (torch.Size([5, 5, 2, 2]), True)
    """
    jac = parameter_jacobian(model, x)  # (n, d, P)
    return torch.einsum("ikp,jlp->ijkl", jac, jac)  # (n, n, d, d)


def closed_form_kernel(x: Tensor, B: Tensor, out_dim: int, bias: Tensor | None = None,
                       activation: str = "relu") -> Tensor:
    r"""Proposition 4.3 of arXiv:2503.10812: the kernel of eq. 12 for the network of eq. 18
    (trainable B; A fixed as in eq. 19):

    .. math::
        K^{kl}_{ij} = \frac{\mathbb{1}_{k=l}}{M}\, x_i^\top x_j
            \sum_{p=(k-1)M+1}^{kM} \sigma'(b_p x_i)\, \sigma'(b_p x_j)

    With a trained hidden bias c (``bias``), the network is eq. 18 on :math:`(x, 1)`, so
    :math:`x_i^\top x_j` becomes :math:`x_i^\top x_j + 1` and :math:`b_p x` becomes
    :math:`b_p x + c_p`.

    Args:
        x: (n, D) samples. B: (Md, D) hidden weights. out_dim: d.
        bias: (Md,) hidden bias c, or None for eq. 18 as written.
        activation: the name of :math:`\sigma`.

    Returns:
        (n, n, d, d); each block :math:`K_{ij}` is diagonal.

    >>> x = torch.tensor([[1.0, 0.0]])
    >>> closed_form_kernel(x, torch.tensor([[1.0, 0.0], [-1.0, 0.0]]), out_dim=1)[0, 0]
    tensor([[0.5000]])
    """
    hidden, in_dim = B.shape
    if hidden % out_dim:
        raise ValueError(f"B has {hidden} rows, not a multiple of out_dim={out_dim}")
    width = hidden // out_dim
    pre = x @ B.T  # (n, Md)
    gram = x @ x.T  # (n, n)
    if bias is not None:
        pre, gram = pre + bias, gram + 1
    slopes = activation_derivative(activation, pre).reshape(x.shape[0], out_dim, width)
    per_output = torch.einsum("ikp,jkp->kij", slopes, slopes) / width  # (d, n, n)
    eye = torch.eye(out_dim, dtype=x.dtype, device=x.device)  # (d, d)
    return torch.einsum("ij,kij,kl->ijkl", gram, per_output, eye)  # (n, n, d, d)


def infinite_width_kernel(x: Tensor, out_dim: int, bias: bool = False) -> Tensor:
    r"""Proposition 4.4 of arXiv:2503.10812: the limit :math:`M \to \infty` of
    :func:`closed_form_kernel` for ReLU and i.i.d. standard Gaussian rows of B,

    .. math::
        K^\infty_{ij} = x_i^\top x_j \Big[\frac{1}{2} - \frac{1}{2\pi}
            \arccos\Big(\frac{x_i^\top x_j}{\lVert x_i\rVert \lVert x_j\rVert}\Big)\Big]
            I_{d \times d}

    (the probability that a Gaussian :math:`b` has :math:`b^\top x_i > 0` and
    :math:`b^\top x_j > 0`). With ``bias`` (c i.i.d. standard Gaussian too) the formula is
    applied to :math:`(x, 1)`.

    Args:
        x: (n, D) samples, no zero row. out_dim: d.

    Returns:
        (n, n, d, d).

    >>> x = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    >>> infinite_width_kernel(x, out_dim=1)[:, :, 0, 0].tolist()  # |x_i|^2 / 2; orthogonal: 0
    [[0.5, 0.0], [0.0, 2.0]]
    """
    if bias:
        x = torch.cat([x, torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device)], dim=1)
    gram = x @ x.T  # (n, n)
    norms = x.norm(dim=1)  # (n,)
    cosine = (gram / (norms[:, None] * norms[None, :])).clamp(-1.0, 1.0)  # (n, n)
    scalar = gram * (0.5 - torch.arccos(cosine) / (2 * math.pi))  # (n, n)
    eye = torch.eye(out_dim, dtype=x.dtype, device=x.device)
    return scalar[:, :, None, None] * eye  # (n, n, d, d)
