"""The one MLP builder for projectors and heads; a method only sets sizes and quotes its paper."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn


def mlp(dims: Sequence[int], batch_norm: bool = True,
        last_batch_norm: bool = False) -> nn.Sequential:
    """Linear layers of sizes ``dims[0] -> dims[1] -> ... -> dims[-1]``.

    Hidden layers are followed by BatchNorm1d (when ``batch_norm``) and ReLU; the last layer is
    linear, optionally followed by a BatchNorm1d without affine parameters.

    >>> [type(m).__name__ for m in mlp([512, 2048, 128])]  # SimCLR's projector
    ['Linear', 'BatchNorm1d', 'ReLU', 'Linear']
    """
    if len(dims) < 2:
        raise ValueError(f"an MLP needs at least an input and an output size, got {list(dims)}")
    layers: list[nn.Module] = []
    for i, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        is_last = i == len(dims) - 2
        # A bias before BatchNorm is redundant.
        layers.append(nn.Linear(d_in, d_out, bias=not (batch_norm and not is_last)))
        if not is_last:
            if batch_norm:
                layers.append(nn.BatchNorm1d(d_out))
            layers.append(nn.ReLU(inplace=True))
    if last_batch_norm:
        layers.append(nn.BatchNorm1d(dims[-1], affine=False))
    return nn.Sequential(*layers)
