"""The one MLP builder for projectors and heads, and the one table of activations; a method only
sets sizes and quotes its paper."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class Activation:
    r"""One row of :data:`ACTIVATIONS`: how to build the module, ``module(inplace)``, and its
    derivative :math:`\sigma'(t)` elementwise (for the closed-form neural kernels of
    :mod:`modules.theory.contrastive_dynamics`; at a kink, the value autograd gives)."""

    module: Callable[[bool], nn.Module]
    derivative: Callable[[Tensor], Tensor]


#: name -> activation; the one table every model reads (``"none"``: the identity, for the
#: linear models of the tensorized autoencoders).
ACTIVATIONS: dict[str, Activation] = {
    "none": Activation(lambda inplace: nn.Identity(), torch.ones_like),
    "relu": Activation(lambda inplace: nn.ReLU(inplace=inplace),
                       lambda t: (t > 0).to(t.dtype)),
    "leaky_relu": Activation(lambda inplace: nn.LeakyReLU(0.2, inplace=inplace),
                             lambda t: torch.where(t > 0, torch.ones_like(t),
                                                   torch.full_like(t, 0.2))),
    "tanh": Activation(lambda inplace: nn.Tanh(), lambda t: 1 - torch.tanh(t).pow(2)),
}


def _check_activation(name: str) -> None:
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; available: {', '.join(ACTIVATIONS)}")


def make_activation(name: str, inplace: bool = False) -> nn.Module:
    """The activation ``name`` of :data:`ACTIVATIONS`: ``"none"``, ``"relu"``, ``"leaky_relu"``
    (negative slope 0.2) or ``"tanh"``; ``inplace`` where the module has the option (the
    values are the same either way).

    >>> make_activation("leaky_relu")
    LeakyReLU(negative_slope=0.2)
    """
    _check_activation(name)
    return ACTIVATIONS[name].module(inplace)


def activation_derivative(name: str, t: Tensor) -> Tensor:
    r""":math:`\sigma'(t)` of the activation ``name`` of :data:`ACTIVATIONS`, elementwise.

    >>> activation_derivative("relu", torch.tensor([-1.0, 0.0, 2.0])).tolist()
    [0.0, 0.0, 1.0]
    """
    _check_activation(name)
    return ACTIVATIONS[name].derivative(t)


def mlp(dims: Sequence[int], batch_norm: bool = True, last_batch_norm: bool = False,
        activation: str = "relu", bias: bool = True,
        last_activation: bool = False) -> nn.Sequential:
    """Linear layers of sizes ``dims[0] -> dims[1] -> ... -> dims[-1]``.

    Hidden layers are followed by BatchNorm1d (when ``batch_norm``) and the activation (a name of
    :data:`ACTIVATIONS`, in place); the last layer is linear, optionally followed by a
    BatchNorm1d without affine parameters and, with ``last_activation``, the activation. Every
    linear layer has a bias when ``bias``, except those followed by BatchNorm (where it is
    redundant). Layers are created, and so initialised, in order.

    >>> [type(m).__name__ for m in mlp([512, 2048, 128])]  # SimCLR's projector
    ['Linear', 'BatchNorm1d', 'ReLU', 'Linear']
    >>> [type(m).__name__ for m in mlp([6, 2, 1], batch_norm=False, activation="none")]
    ['Linear', 'Identity', 'Linear']
    """
    if len(dims) < 2:
        raise ValueError(f"an MLP needs at least an input and an output size, got {list(dims)}")
    _check_activation(activation)  # before any layer is built
    layers: list[nn.Module] = []
    for i, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        is_last = i == len(dims) - 2
        # A bias before BatchNorm is redundant.
        layers.append(nn.Linear(d_in, d_out, bias=bias and not (batch_norm and not is_last)))
        if not is_last:
            if batch_norm:
                layers.append(nn.BatchNorm1d(d_out))
            layers.append(make_activation(activation, inplace=True))
    if last_batch_norm:
        layers.append(nn.BatchNorm1d(dims[-1], affine=False))
    if last_activation:
        layers.append(make_activation(activation, inplace=True))
    return nn.Sequential(*layers)
