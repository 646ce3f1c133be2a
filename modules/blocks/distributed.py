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


def rank() -> int:
    return dist.get_rank() if world_size() > 1 else 0


@torch.no_grad()
def shuffle_across_devices(x: Tensor) -> tuple[Tensor, Tensor]:
    """MoCo's batch shuffle (He et al., arXiv:1911.05722, §3.3 "Shuffling BN"): the global batch
    ``(world_size * n, ...)`` in one random order shared by every rank, and this rank's ``n``
    rows of it, block ``rank``; returns ``(rows, order)``, ``order`` for :func:`unshuffle`.
    On one process, a random permutation of ``x``."""
    everything = gather_no_grad(x)
    order = torch.randperm(len(everything), device=x.device)
    if world_size() > 1:
        dist.broadcast(order, src=0)  # one order: rank 0's
    return everything[order.view(world_size(), -1)[rank()]], order


@torch.no_grad()
def unshuffle(rows: Tensor, order: Tensor) -> Tensor:
    """The inverse of :func:`shuffle_across_devices`: ``rows`` computed from this rank's share of
    the shuffled batch -> the rows of this rank's own samples, in their order."""
    everything = gather_no_grad(rows)  # row j belongs to sample order[j]
    restored = torch.empty_like(everything)
    restored[order] = everything
    return restored.view(world_size(), -1, *rows.shape[1:])[rank()]
