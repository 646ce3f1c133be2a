"""The one MLP builder and the one activation table (modules.blocks.heads)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from modules.blocks.heads import ACTIVATIONS, activation_derivative, make_activation, mlp


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_each_activation_derivative_is_autograds(name):
    t = torch.linspace(-3, 3, 601, dtype=torch.float64)
    t = t[t != 0]  # the kink: a convention, not a derivative
    leaf = t.clone().requires_grad_(True)
    (slope,) = torch.autograd.grad(make_activation(name)(leaf).sum(), leaf)
    torch.testing.assert_close(activation_derivative(name, t), slope, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_inplace_activations_give_the_same_values(name, inplace):
    x = torch.randn(4, 5)
    torch.testing.assert_close(make_activation(name, inplace)(x.clone()),
                               make_activation(name)(x.clone()))


def test_unknown_activation_is_refused_with_the_accepted_names():
    with pytest.raises(ValueError, match="unknown activation 'gelu'; available: none, relu"):
        make_activation("gelu")
    with pytest.raises(ValueError, match="unknown activation 'gelu'"):
        mlp([3, 2], activation="gelu")


@pytest.mark.parametrize("activation, module", [("none", nn.Identity), ("tanh", nn.Tanh),
                                                ("leaky_relu", nn.LeakyReLU)])
@pytest.mark.parametrize("bias", [False, True])
def test_mlp_initialises_as_the_explicit_layers_do(activation, module, bias):
    """Same layers, same initialisation (the same draws in the same order) as writing the
    Linear layers out, so models built with it keep their numbers."""
    torch.manual_seed(0)
    built = mlp([5, 4, 3, 2], batch_norm=False, activation=activation, bias=bias,
                last_activation=True)
    torch.manual_seed(0)
    explicit = [nn.Linear(5, 4, bias=bias), nn.Linear(4, 3, bias=bias), nn.Linear(3, 2, bias=bias)]
    assert [type(m) for m in built] == [nn.Linear, module] * 3
    assert [n for n, _ in built.named_parameters()] == [
        f"{i}.{p}" for i in (0, 2, 4) for p in (("weight", "bias") if bias else ("weight",))]
    for got, want in zip([m for m in built if isinstance(m, nn.Linear)], explicit, strict=True):
        assert torch.equal(got.weight, want.weight)
        assert (got.bias is None) == (not bias)
        if bias:
            assert torch.equal(got.bias, want.bias)


def test_mlp_leaves_out_only_biases_before_batch_norm():
    head = mlp([6, 5, 4])
    assert head[0].bias is None and head[-1].bias is not None
    assert all(m.bias is None for m in mlp([6, 5, 4], bias=False) if isinstance(m, nn.Linear))
