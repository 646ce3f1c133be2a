"""Optimisers and the per-step learning-rate schedule shared by every method."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from modules.ranges import check_momentum, check_non_negative, check_positive

OPTIMIZERS = ("sgd", "adam", "adamw", "lars")


def check_optimizer_arguments(name: str = "adam", lr: float = 1e-3, weight_decay: float = 0.0,
                              momentum: float = 0.0) -> None:
    """Refuse, when the model is built, an optimiser setting the optimiser would only refuse at
    the start of training (an unknown name, a negative learning rate or weight decay) or would
    take and diverge with (a momentum of 1 or more; torch accepts any non-negative one).

    >>> check_optimizer_arguments("sgd", lr=0.1, momentum=1.5)
    Traceback (most recent call last):
    ...
    ValueError: momentum must be in [0, 1), got 1.5
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; available: {', '.join(OPTIMIZERS)}")
    check_positive("lr", lr)
    check_non_negative("weight_decay", weight_decay)
    check_momentum("momentum", momentum)


def parameter_groups(module: nn.Module, weight_decay: float,
                     exclude_bias_and_norm: bool = True) -> list[dict]:
    """Two groups: weights with ``weight_decay``; biases and normalisation parameters (every
    parameter with fewer than two dimensions) without it. timm's LARS adapts only groups with a
    non-zero weight decay, so the second group is also the one LARS leaves unadapted.

    ``exclude_bias_and_norm=False``: one group, every parameter under ``weight_decay`` (and so
    adapted by LARS), as Lightning Bolts' SimCLR trains with ``exclude_bn_bias`` false, the
    Kernel-InfoNCE authors' code."""
    decay, no_decay = [], []
    for param in module.parameters():
        if param.requires_grad:
            (decay if param.ndim > 1 or not exclude_bias_and_norm else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def build_optimizer(groups: Iterable[dict], name: str, lr: float, momentum: float = 0.9
                    ) -> torch.optim.Optimizer:
    """``sgd`` (momentum), ``adam``, ``adamw`` (decoupled weight decay, Loshchilov and Hutter,
    arXiv:1711.05101) or ``lars`` (``timm.optim.Lars``, You et al. 2017) over parameter groups
    that each carry their own weight decay."""
    groups = list(groups)
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=momentum)
    if name == "adam":
        return torch.optim.Adam(groups, lr=lr)
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr)
    if name == "lars":
        from timm.optim import Lars

        return Lars(groups, lr=lr, momentum=momentum)
    raise ValueError(f"unknown optimizer {name!r}; available: {', '.join(OPTIMIZERS)}")


def warmup_cosine(step: int, warmup_steps: int, total_steps: int) -> float:
    """Learning-rate factor: linear warm-up from 0 over ``warmup_steps``, then cosine decay to 0
    at ``total_steps`` (Kernel-InfoNCE's LambdaLR schedule, applied per step).

    >>> [round(warmup_cosine(s, 2, 6), 3) for s in range(7)]
    [0.5, 1.0, 1.0, 0.854, 0.5, 0.146, 0.0]
    """
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    decay_steps = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_stable_decay(step: int, warmup_steps: int, total_steps: int, decay_steps: int) -> float:
    """Learning-rate factor: linear warm-up from 0 over ``warmup_steps``, then the full rate,
    then a linear decay towards 0 over the last ``decay_steps`` (the mirror of the warm-up;
    a warm-up-stable-decay schedule, Hu
    et al., MiniCPM, arXiv:2404.06395). A training curve read on the stable stretch shows what
    the method learns at a constant rate; under a cosine schedule every curve flattens at its
    end because the rate goes to 0 there.

    >>> [round(warmup_stable_decay(s, 2, 8, 2), 3) for s in range(8)]
    [0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 0.667, 0.333]
    """
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    decay_start = total_steps - decay_steps
    if step < decay_start:
        return 1.0
    return max(0.0, (total_steps - step) / (decay_steps + 1))
