"""Backbones: encoders from an input to a feature vector, each with an ``output_dim``."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torchvision
from torch import Tensor, nn


class SmallCNN(nn.Module):
    """A small convolutional encoder for tiny images (8x8 digits up to 32x32).

    Three 3x3 conv blocks (BatchNorm, ReLU), a 2x2 max-pool after the second, global average
    pooling: ``(B, C, H, W) -> (B, 4 * width)``. ``pools=2`` adds a 2x2 max-pool after the
    first block too: the second and third blocks see a quarter of the positions, so the network
    costs about a quarter of the arithmetic (28x28 Fashion-MNIST on two CPU cores: 103 against
    403 ms for a forward and backward pass of 512 images at width 16).

    >>> import torch
    >>> SmallCNN(in_channels=1, width=32)(torch.zeros(2, 1, 8, 8)).shape
    torch.Size([2, 128])
    >>> SmallCNN(in_channels=1, width=16, pools=2)(torch.zeros(2, 1, 28, 28)).shape
    torch.Size([2, 64])
    """

    def __init__(self, in_channels: int = 1, width: int = 32, pools: int = 1) -> None:
        super().__init__()
        if pools not in (1, 2):
            raise ValueError(f"the small CNN's pools must be 1 or 2, got {pools!r}")

        def block(c_in: int, c_out: int) -> list[nn.Module]:
            return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out),
                    nn.ReLU(inplace=True)]

        self.features = nn.Sequential(
            *block(in_channels, width),
            *([nn.MaxPool2d(2)] if pools == 2 else []),
            *block(width, 2 * width),
            nn.MaxPool2d(2),
            *block(2 * width, 4 * width),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.output_dim = 4 * width

    def forward(self, x: Tensor) -> Tensor:
        return self.features(x)  # (B, 4 * width)


class FiveLayerCNN(nn.Module):
    """A five-layer convolutional encoder for 28x28 to 32x32 images that keeps where things are.

    Five 3x3 conv blocks (BatchNorm, ReLU) of widths ``w, 2w, 2w, 4w, 4w``, the second and
    fourth of stride 2 (28 -> 14 -> 7), then an average pool to a 2x2 grid, flattened:
    ``(B, C, H, W) -> (B, 16 * width)``, 256 features at width 16. The global average pool of
    :class:`SmallCNN` keeps one number a channel (64 features at width 16) and loses the layout
    that tells a sandal from a sneaker; SimCLR's CIFAR ResNet keeps 512. About 5.5 M
    multiply-adds an image at 28x28 and width 16, so two CPU cores train it on Fashion-MNIST in
    bf16 and channels-last.

    >>> import torch
    >>> FiveLayerCNN(in_channels=1, width=16)(torch.zeros(2, 1, 28, 28)).shape
    torch.Size([2, 256])
    """

    def __init__(self, in_channels: int = 1, width: int = 16) -> None:
        super().__init__()

        def block(c_in: int, c_out: int, stride: int) -> list[nn.Module]:
            return [nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
                    nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]

        widths = (width, 2 * width, 2 * width, 4 * width, 4 * width)
        strides = (1, 2, 1, 2, 1)
        layers, c_in = [], in_channels
        for c_out, stride in zip(widths, strides, strict=True):
            layers += block(c_in, c_out, stride)
            c_in = c_out
        self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.output_dim = 4 * widths[-1]

    def forward(self, x: Tensor) -> Tensor:
        return self.features(x)  # (B, 16 * width)


class MLPEncoder(nn.Module):
    """An MLP encoder for vector data (iris, penguins, generated point clouds): flattens its input.

    >>> import torch
    >>> MLPEncoder(input_dim=4, hidden=(64,), output_dim=16)(torch.zeros(3, 4)).shape
    torch.Size([3, 16])
    """

    def __init__(self, input_dim: int, hidden: Sequence[int] = (256, 256), output_dim: int = 128):
        super().__init__()
        from modules.blocks.heads import mlp

        self.net = nn.Sequential(nn.Flatten(), mlp([input_dim, *hidden, output_dim]),
                                 nn.ReLU(inplace=True))
        self.output_dim = output_dim

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class ResNet(nn.Module):
    """torchvision's ResNet18/50 without its classifier; ``cifar_stem`` swaps the 7x7/2 conv and
    max-pool for a 3x3/1 conv (the usual stem for 32x32 inputs, as in SimCLR's CIFAR runs).

    ``weights`` names torchvision weights (e.g. ``IMAGENET1K_V1``; TransFusion's Table 3 starts
    from them); they are downloaded once into ``$TORCH_HOME`` and need a network the first time.
    With pretrained weights the ImageNet stem is kept (``cifar_stem`` must be False)."""

    def __init__(self, depth: int = 18, in_channels: int = 3, cifar_stem: bool = True,
                 weights: str | None = None) -> None:
        super().__init__()
        builders = {18: torchvision.models.resnet18, 50: torchvision.models.resnet50}
        if depth not in builders:
            raise ValueError(f"ResNet depth must be one of {sorted(builders)}, got {depth}")
        if weights is not None and (cifar_stem or in_channels != 3):
            raise ValueError("pretrained ResNet weights need the ImageNet stem and 3 channels: "
                             "set cifar_stem: false (and use RGB data)")
        net = load_torchvision_model(builders[depth], weights)
        if cifar_stem:
            net.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
            net.maxpool = nn.Identity()
        elif in_channels != 3:
            net.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
        self.output_dim = net.fc.in_features
        net.fc = nn.Identity()
        self.net = net

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)  # (B, 512) for ResNet18, (B, 2048) for ResNet50


def load_torchvision_model(builder, weights: str | None) -> nn.Module:
    """``builder(weights=weights)``, with a clear error when the weights cannot be downloaded."""
    if weights is None:
        return builder(weights=None)
    try:
        return builder(weights=weights)
    except (OSError, RuntimeError) as err:  # urllib's URLError is an OSError
        from torch.hub import get_dir

        raise RuntimeError(
            f"could not load torchvision weights {weights!r} for {builder.__name__}: {err}. "
            f"Pretrained weights are downloaded once and need a network; on an offline machine "
            f"copy the checkpoint file into {get_dir()}/checkpoints/ or train from scratch "
            f"(backbone_weights: null)") from err


class Flatten(nn.Module):
    """No backbone: the flattened input is the feature (TransFusion's standalone model)."""

    def __init__(self, input_shape: Sequence[int]) -> None:
        super().__init__()
        self.output_dim = math.prod(input_shape)

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(1)


BACKBONES = ("small_cnn", "five_layer_cnn", "mlp", "resnet18", "resnet50", "flatten")


def build_backbone(name: str, input_shape: Sequence[int], width: int = 32,
                   cifar_stem: bool = True, weights: str | None = None, pools: int = 1
                   ) -> nn.Module:
    """The backbone registered as ``name`` for inputs of shape ``input_shape`` (no batch dim).

    ``width`` sizes the small CNN, the five-layer CNN and the MLP, ``pools`` is the small CNN's;
    ``cifar_stem`` and ``weights`` apply to ResNets."""
    shape = tuple(input_shape)
    if weights is not None and not name.startswith("resnet"):
        raise ValueError(f"pretrained weights exist only for ResNet backbones, not {name!r}")
    if name == "flatten":
        return Flatten(shape)
    if pools != 1 and name != "small_cnn":
        raise ValueError(f"pools applies to the small CNN only, not {name!r}")
    if name == "small_cnn":
        return SmallCNN(in_channels=shape[0], width=width, pools=pools)
    if name == "five_layer_cnn":
        return FiveLayerCNN(in_channels=shape[0], width=width)
    if name == "mlp":
        return MLPEncoder(input_dim=math.prod(shape), hidden=(8 * width, 8 * width),
                          output_dim=4 * width)
    if name in ("resnet18", "resnet50"):
        return ResNet(depth=int(name[len("resnet"):]), in_channels=shape[0], cifar_stem=cifar_stem,
                      weights=weights)
    raise ValueError(f"unknown backbone {name!r}; available: {', '.join(BACKBONES)}")

