"""The raw-input baseline: no training; its features are the flattened, normalised inputs."""

from __future__ import annotations

from collections.abc import Sequence

import lightning.pytorch as pl
import torch
from torch import Tensor


class RawPixels(pl.LightningModule):
    """Raw-pixel baseline: no training; the features are the flattened, normalised inputs.

    ``encode(x)`` is ``x`` flattened to ``(B, C*H*W)``; the inputs are already normalised with the
    dataset's statistics. Nothing is learnt, so a useful method should beat it.

    >>> RawPixels(num_classes=10, input_shape=(1, 8, 8)).encode(torch.zeros(2, 1, 8, 8)).shape
    torch.Size([2, 64])
    """

    requires_training = False
    #: Nothing is trained, so nothing is validated.
    epoch_metrics: tuple[str, ...] = ()
    #: Arguments its configuration never reads: none (every method says, for its W&B config).
    unused_arguments: frozenset[str] = frozenset()

    def __init__(self, num_classes: int, input_shape: Sequence[int]) -> None:
        super().__init__()
        self.save_hyperparameters()

    @torch.no_grad()
    def encode(self, x: Tensor) -> Tensor:
        return x.flatten(1)
