"""Losses as pure functions of tensors: ``from modules.losses import nt_xent_loss``."""

from modules.losses.contrastive import (
    concat_sum_kernel_loss,
    kernel_infonce_loss,
    nt_xent_loss,
    sum_kernel_loss,
)
from modules.losses.moco import moco_loss
from modules.losses.supervised import (
    TRANSFUSION_KINDS,
    supcon_loss,
    target_affinity,
    transfusion_loss,
)

__all__ = [
    "TRANSFUSION_KINDS",
    "concat_sum_kernel_loss",
    "kernel_infonce_loss",
    "moco_loss",
    "nt_xent_loss",
    "sum_kernel_loss",
    "supcon_loss",
    "target_affinity",
    "transfusion_loss",
]
