"""The untrained-network baseline: the backbone a trained row uses, at its random initialisation."""

from __future__ import annotations

import torch

from modules.methods import METHODS
from modules.methods.random_init import RandomInitBackbone


def build(seed: int, **kwargs) -> RandomInitBackbone:
    torch.manual_seed(seed)
    return RandomInitBackbone(num_classes=10, input_shape=(1, 28, 28),
                              backbone="five_layer_cnn", backbone_width=4, **kwargs)


def test_the_seed_draws_the_network_and_nothing_trains_it() -> None:
    x = torch.rand(6, 1, 28, 28)
    a, again, other = build(0).encode(x), build(0).encode(x), build(1).encode(x)
    assert torch.equal(a, again) and not torch.allclose(a, other)
    assert METHODS["random_init"] is RandomInitBackbone and not RandomInitBackbone.requires_training


def test_features_are_the_eval_mode_backbone_whatever_the_batch() -> None:
    """BatchNorm keeps its initial statistics: an image's features do not depend on the batch it
    comes in, and encoding changes no running statistic, in either memory format."""
    model = build(0).train()  # as a Trainer might leave it
    x = torch.rand(8, 1, 28, 28)
    alone = torch.cat([model.encode(x[i:i + 1]) for i in range(8)])
    assert torch.allclose(model.encode(x), alone, atol=1e-6)
    assert all(m.training for m in model.modules())  # its mode is given back
    stats = [b.running_mean.clone() for b in model.modules()
             if isinstance(b, torch.nn.BatchNorm2d)]
    model.encode(x)
    assert all(torch.equal(s, b.running_mean) for s, b in zip(
        stats, [b for b in model.modules() if isinstance(b, torch.nn.BatchNorm2d)], strict=True))
    assert torch.allclose(build(0, channels_last=True).encode(x), model.encode(x), atol=1e-5)
