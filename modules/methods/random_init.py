"""The untrained-network baseline: a method's backbone at its random initialisation, not trained."""

from __future__ import annotations

from collections.abc import Sequence

import lightning.pytorch as pl
import torch
from torch import Tensor

from modules.blocks.backbones import build_backbone
from modules.methods.base import eval_mode
from modules.ranges import check_count, check_settings


class RandomInitBackbone(pl.LightningModule):
    """A backbone at its random initialisation (PyTorch's default, drawn from the run's seed):
    nothing is trained; ``encode(x)`` is the backbone's output in eval mode (BatchNorm with its
    initial statistics, mean 0 and variance 1, so the identity).

    The floor a trained row of the same backbone must clear: a random convolutional network
    already gives features that separate classes better than chance, often better than the
    pixels (Saxe et al., "On Random Weights and Unsupervised Feature Learning", ICML 2011), so a
    method is shown beside its own network untrained, as the field's tables do. The arguments
    are the backbone's, as :class:`modules.methods.base.RepresentationModule` takes them.

    >>> model = RandomInitBackbone(num_classes=10, input_shape=(1, 28, 28),
    ...                            backbone="five_layer_cnn", backbone_width=16)
    >>> model.encode(torch.zeros(2, 1, 28, 28)).shape
    torch.Size([2, 256])
    """

    requires_training = False
    #: Nothing is trained, so nothing is validated.
    epoch_metrics: tuple[str, ...] = ()
    unused_arguments: frozenset[str] = frozenset()

    def __init__(self, num_classes: int, input_shape: Sequence[int],
                 backbone: str = "small_cnn", backbone_width: int = 32, backbone_pools: int = 1,
                 cifar_stem: bool = True, channels_last: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters()
        check_settings(self.hparams)
        check_count("backbone_width", backbone_width)
        self.backbone = build_backbone(backbone, input_shape, width=backbone_width,
                                       cifar_stem=cifar_stem, pools=backbone_pools)
        self.channels_last = channels_last
        if channels_last:
            self.backbone = self.backbone.to(memory_format=torch.channels_last)

    @torch.no_grad()
    def encode(self, x: Tensor) -> Tensor:
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with eval_mode(self.backbone):
            return self.backbone(x)  # (B, F)
