"""Losses as pure functions of tensors: ``from modules.losses import nt_xent_loss``.

:data:`CONTRASTIVE_LOSSES` is the one table from a contrastive loss's name to its function. SimCLR
and MoCo look their ``loss`` argument up in it, so adding a loss is one function (in
:mod:`modules.losses.contrastive`) and one line here (``docs/contributing.md``, "Adding a loss").
The non-contrastive losses (BYOL's, Barlow Twins', VICReg's: :mod:`modules.losses.non_contrastive`)
each belong to one method, which calls its function by name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from modules.losses.contrastive import (
    concat_sum_kernel_loss,
    gaussian_infonce_loss,
    generalised_nt_xent_loss,
    kernel_infonce_loss,
    nt_xent_loss,
    sum_kernel_loss,
)
from modules.losses.moco import moco_loss
from modules.losses.non_contrastive import barlow_twins_loss, byol_loss, vicreg_loss
from modules.losses.supervised import (
    TRANSFUSION_KINDS,
    supcon_loss,
    target_affinity,
    transfusion_loss,
)
from modules.ranges import check_positive, check_weight


@dataclass(frozen=True)
class ContrastiveLoss:
    """One row of :data:`CONTRASTIVE_LOSSES`.

    Attributes:
        function: ``function(z1, z2, queue=None, **hyperparameters) -> scalar tensor``: two
            views (N, d) scored against each other (SimCLR), or, with ``queue`` (K, d), each
            row of ``z1`` against its row of ``z2`` and the queue (MoCo).
        hyperparameters: the names of the method arguments it takes, among
            :data:`HYPERPARAMETER_CHECKS` (e.g. ``("temperature",)``).
        width_factor: the projector's output is this many times ``projector_out`` (2 for the
            concatenation kernel, which splits each embedding into two halves).
    """

    function: Callable[..., Tensor]
    hyperparameters: tuple[str, ...]
    width_factor: int = 1


#: The range check of each loss hyperparameter a method passes on, run when the method is built
#: (the losses check again when called).
HYPERPARAMETER_CHECKS: dict[str, Callable[[float], None]] = {
    "temperature": functools.partial(check_positive, "temperature"),
    "gamma": functools.partial(check_positive, "gamma"),
    "tau1": functools.partial(check_positive, "tau1"),
    "tau2": functools.partial(check_positive, "tau2"),
    "lam": check_weight,
}

#: name -> contrastive loss, for SimCLR and MoCo (Tan et al., "Contrastive Learning is Spectral
#: Clustering on Similarity Graph", arXiv:2303.15103, Table 2 kernels).
CONTRASTIVE_LOSSES: dict[str, ContrastiveLoss] = {
    "nt_xent": ContrastiveLoss(nt_xent_loss, ("temperature",)),
    # MoCo's name for the same loss (its eq. 1 against the queue)
    "infonce": ContrastiveLoss(nt_xent_loss, ("temperature",)),
    "laplacian": ContrastiveLoss(functools.partial(kernel_infonce_loss, gamma=1.0),
                                 ("temperature",)),
    "exponential": ContrastiveLoss(kernel_infonce_loss, ("gamma", "temperature")),
    "sum": ContrastiveLoss(sum_kernel_loss, ("tau1", "tau2", "lam")),
    "concat_sum": ContrastiveLoss(concat_sum_kernel_loss, ("tau1", "tau2", "lam"), width_factor=2),
}


def contrastive_criterion(name: str, method: str = "contrastive",
                          **values: float) -> tuple[Callable[..., Tensor], int]:
    """The loss named ``name`` with its hyperparameters bound from ``values`` (the method's
    arguments; those the loss does not take are ignored), and its width factor. Each bound
    value is range-checked here, so that a bad value fails when the method is built; an
    unknown name is refused naming ``method`` and the names the table holds.

    >>> criterion, width = contrastive_criterion("sum", temperature=0.5, tau1=0.2, tau2=0.4,
    ...                                          lam=0.3)
    >>> criterion.keywords, width
    ({'tau1': 0.2, 'tau2': 0.4, 'lam': 0.3}, 1)
    """
    if name not in CONTRASTIVE_LOSSES:
        raise ValueError(f"unknown {method} loss {name!r}; available: "
                         f"{', '.join(CONTRASTIVE_LOSSES)}")
    loss = CONTRASTIVE_LOSSES[name]
    missing = [h for h in loss.hyperparameters if h not in values]
    if missing:
        raise ValueError(f"loss {name!r} needs {', '.join(missing)}, which the method does not "
                         f"pass")
    bound = {h: values[h] for h in loss.hyperparameters}
    for h, value in bound.items():
        if h in HYPERPARAMETER_CHECKS:
            HYPERPARAMETER_CHECKS[h](value)
    return functools.partial(loss.function, **bound), loss.width_factor


__all__ = [
    "CONTRASTIVE_LOSSES",
    "HYPERPARAMETER_CHECKS",
    "TRANSFUSION_KINDS",
    "ContrastiveLoss",
    "barlow_twins_loss",
    "byol_loss",
    "concat_sum_kernel_loss",
    "contrastive_criterion",
    "gaussian_infonce_loss",
    "generalised_nt_xent_loss",
    "kernel_infonce_loss",
    "moco_loss",
    "nt_xent_loss",
    "sum_kernel_loss",
    "supcon_loss",
    "target_affinity",
    "transfusion_loss",
    "vicreg_loss",
]
