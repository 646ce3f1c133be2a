"""Losses as pure functions of tensors: ``from modules.losses import nt_xent_loss``."""

from modules.losses.contrastive import nt_xent_loss

__all__ = ["nt_xent_loss"]
