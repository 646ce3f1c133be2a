"""Gathering across devices, outside the losses: negatives span the global batch.

:func:`gather` is autograd-aware: its backward sums, on every rank, the gradients every rank
computed for this rank's slice. Every rank computes the same global loss, so each slice gets
``world_size`` times its gradient; DDP's averaging over ranks divides it back, and the parameter
gradients equal those of one process on the global batch (tests/modules/blocks/test_distributed.py).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class _AllGather(torch.autograd.Function):
    """``all_gather`` forward; backward: all-reduce (sum) the gradient, keep this rank's rows.

    torch's own ``torch.distributed.nn.all_gather`` emulates the reduce-scatter with
    ``all_to_all`` on gloo, which scrambles non-contiguous gradients (a transposed (B, V, d)
    SupCon batch gave wrong gradients, measured); torch 2.14 also deprecates it."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        ctx.rows, ctx.rank = x.shape[0], dist.get_rank()
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        grad = grad.contiguous()
        dist.all_reduce(grad)  # every rank's gradient for the global batch, summed
        return grad[ctx.rank * ctx.rows:(ctx.rank + 1) * ctx.rows]


def gather(x: Tensor) -> Tensor:
    """``(n, ...)`` on each rank -> ``(world_size * n, ...)``, rank-major, differentiable.

    Every rank must hold the same ``n`` (drop the last incomplete batch). Views stay aligned:
    row ``i`` of ``gather(z1)`` and of ``gather(z2)`` come from one image. On a single process
    this is the identity."""
    return x if world_size() == 1 else _AllGather.apply(x)


def gather_no_grad(x: Tensor) -> Tensor:
    """Like :func:`gather` for tensors that need no gradient (labels)."""
    if world_size() == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=0)
