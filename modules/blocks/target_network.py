r"""The target network of a method that learns from a moving average of itself: MoCo's key
encoder, BYOL's target. One hook for both: the frozen copy, the exponential moving average that
updates it from the online network, the schedule of its momentum, and its forward pass without
gradients.

He et al., "Momentum Contrast for Unsupervised Visual Representation Learning", CVPR 2020,
arXiv:1911.05722, eq. 2; Grill et al., "Bootstrap Your Own Latent: A New Approach to
Self-Supervised Learning", NeurIPS 2020, arXiv:2006.07733, eq. 1 and §3.2:

.. math::
    \xi \leftarrow \tau\,\xi + (1 - \tau)\,\theta, \qquad
    \tau_k = 1 - (1 - \tau_{\text{base}})\,\frac{\cos(\pi k / K) + 1}{2}

with :math:`\xi` the target's parameters, :math:`\theta` the online network's, :math:`k` the
optimiser step and :math:`K` the steps of the whole training (``cosine``; MoCo keeps
:math:`\tau = m` ``constant``).

>>> online = torch.nn.Linear(2, 2)
>>> target = MomentumTarget([online], [frozen_copy(online)], momentum=0.99, schedule="cosine")
>>> target.momentum_at(0, 100), target.momentum_at(100, 100)
(0.99, 1.0)
>>> target(torch.zeros(3, 2)).requires_grad
False
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from modules.ranges import check_momentum

#: How the momentum moves over the training: ``constant`` (MoCo's :math:`m`) or ``cosine`` from
#: its base value to 1 at the last step (BYOL's :math:`\tau`).
MOMENTUM_SCHEDULES = ("constant", "cosine")


def frozen_copy(module: nn.Module) -> nn.Module:
    """A deep copy of ``module`` whose parameters take no gradient: a target network's start,
    equal to the online network (BYOL initialises :math:`\\xi = \\theta`; MoCo the key
    encoder from the query encoder)."""
    return copy.deepcopy(module).requires_grad_(False)


def scheduled_momentum(base: float, schedule: str, step: int, total_steps: float) -> float:
    r"""The momentum at optimiser step ``step`` of ``total_steps``: ``base`` (``constant``), or
    :math:`1 - (1 - \tau_{\text{base}})(\cos(\pi k / K) + 1) / 2` (``cosine``, BYOL §3.2), which
    rises from ``base`` at step 0 to 1 at the last step. A ``total_steps`` that is not finite
    (a training without an end) keeps ``base``.

    >>> [round(scheduled_momentum(0.996, "cosine", k, 4), 5) for k in range(5)]
    [0.996, 0.99659, 0.998, 0.99941, 1.0]
    """
    if schedule not in MOMENTUM_SCHEDULES:
        raise ValueError(f"momentum_schedule must be one of {', '.join(MOMENTUM_SCHEDULES)}, "
                         f"got {schedule!r}")
    if schedule == "constant" or not math.isfinite(total_steps) or total_steps <= 0:
        return base
    progress = min(1.0, step / total_steps)
    return 1.0 - (1.0 - base) * (math.cos(math.pi * progress) + 1.0) / 2.0


@torch.no_grad()
def moving_average_update(targets: Sequence[nn.Module], onlines: Sequence[nn.Module],
                          momentum: float) -> None:
    r""":math:`\xi \leftarrow \tau\,\xi + (1 - \tau)\,\theta` for every parameter of ``targets``
    from the matching one of ``onlines`` (each pair of modules of the same architecture), in
    place: one multi-tensor ``lerp`` (a few kernels) instead of two per parameter (about 258
    for ResNet18 and its projector). Buffers (BatchNorm's running statistics) are copied from
    the online modules: a target in training mode normalises with its batch's statistics, so
    its running ones are only ever read after training, where they follow the online network.

    >>> online, target = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    >>> with torch.no_grad():
    ...     _ = online.weight.fill_(1.0), target.weight.fill_(0.0)
    >>> moving_average_update([target], [online], momentum=0.75)
    >>> target.weight.item()
    0.25
    """
    target_params = [t for target in targets for t in target.parameters()]
    online_params = [o.detach() for online in onlines for o in online.parameters()]
    if len(target_params) != len(online_params):
        raise ValueError(f"the target has {len(target_params)} parameters and the online network "
                         f"{len(online_params)}: they must be copies of one architecture")
    if target_params:
        torch._foreach_lerp_(target_params, online_params, 1.0 - momentum)
    target_buffers = [b for target in targets for b in target.buffers()]
    online_buffers = [b for online in onlines for b in online.buffers()]
    if target_buffers:
        torch._foreach_copy_(target_buffers, online_buffers)


class MomentumTarget:
    """The target network of a method: its modules, each the moving average of an online one,
    applied in order (a backbone, then a projector), and their momentum schedule.

    It owns no parameters: the method registers the target modules as its own attributes
    (``key_backbone``, ``target_projector``...), so they are in its state dict and move with
    it to a device, and hands them here with the online modules they follow. It holds the
    modules themselves, not their parameters, so a device move or a compiled online module
    (which shares its parameters) keeps it current.

    Args:
        onlines: the online modules, in the order the forward pass applies them.
        targets: their frozen copies (:func:`frozen_copy`), in the same order.
        momentum: the base momentum, in [0, 1).
        schedule: a name of :data:`MOMENTUM_SCHEDULES`.
    """

    def __init__(self, onlines: Sequence[nn.Module], targets: Sequence[nn.Module],
                 momentum: float, schedule: str = "constant") -> None:
        check_momentum("momentum", momentum)
        scheduled_momentum(momentum, schedule, 0, 1)  # refuses an unknown schedule now
        if len(onlines) != len(targets) or not targets:
            raise ValueError(f"a target network needs one target module per online module, got "
                             f"{len(targets)} for {len(onlines)}")
        self.onlines, self.targets = list(onlines), list(targets)
        self.momentum, self.schedule = momentum, schedule

    def momentum_at(self, step: int, total_steps: float) -> float:
        """The momentum at optimiser step ``step`` of ``total_steps``
        (:func:`scheduled_momentum`)."""
        return scheduled_momentum(self.momentum, self.schedule, step, total_steps)

    def update(self, momentum: float) -> None:
        """Every target module one moving-average step towards its online module
        (:func:`moving_average_update`)."""
        moving_average_update(self.targets, self.onlines, momentum)

    @torch.no_grad()
    def __call__(self, x: Tensor) -> Tensor:
        """The target modules applied in order to ``x``, without gradients (BYOL's
        stop-gradient, MoCo's keys): ``(B, *input_shape) -> (B, d)``."""
        for module in self.targets:
            x = module(x)
        return x
