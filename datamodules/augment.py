"""Batch-wise augmentations that draw fresh parameters for every sample, on the batch's device.

They take un-normalised images in [0, 1] of shape (B, C, H, W) and return the same shape.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _uniform(low: float, high: float, n: int, device: torch.device) -> Tensor:
    return torch.empty(n, device=device).uniform_(low, high)


class RandomAffine(nn.Module):
    """Per-sample random rotation, isotropic scaling and translation, resampled bilinearly with
    zero padding (one ``affine_grid`` and one ``grid_sample`` call for the whole batch).

    >>> x = torch.rand(8, 1, 8, 8).expand(8, 1, 8, 8).contiguous()  # eight copies of one image
    >>> y = RandomAffine(degrees=15, scale=(0.9, 1.1), translate=1.0)(x)
    >>> bool((y[0] != y[1]).any())  # each copy gets its own draw
    True
    """

    def __init__(self, degrees: float = 15.0, scale: tuple[float, float] = (0.9, 1.1),
                 translate: float = 1.0) -> None:
        super().__init__()
        self.degrees, self.scale, self.translate = degrees, scale, translate

    def forward(self, x: Tensor) -> Tensor:
        b, _, h, w = x.shape
        angle = _uniform(-self.degrees, self.degrees, b, x.device) * math.pi / 180
        scale = _uniform(*self.scale, b, x.device)
        # affine_grid works in [-1, 1] coordinates: a shift of t pixels is 2t / size.
        tx = _uniform(-self.translate, self.translate, b, x.device) * 2 / w
        ty = _uniform(-self.translate, self.translate, b, x.device) * 2 / h
        cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
        theta = torch.stack([torch.stack([cos, -sin, tx], 1), torch.stack([sin, cos, ty], 1)], 1)
        grid = F.affine_grid(theta.to(x.dtype), list(x.shape), align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


class RandomErase(nn.Module):
    """With probability ``p`` per sample, zero one random ``size`` x ``size`` square."""

    def __init__(self, p: float = 0.5, size: int = 3) -> None:
        super().__init__()
        self.p, self.size = p, size

    def forward(self, x: Tensor) -> Tensor:
        b, _, h, w = x.shape
        top = torch.randint(0, h - self.size + 1, (b, 1, 1), device=x.device)
        left = torch.randint(0, w - self.size + 1, (b, 1, 1), device=x.device)
        rows = torch.arange(h, device=x.device).view(1, h, 1)
        cols = torch.arange(w, device=x.device).view(1, 1, w)
        square = ((rows >= top) & (rows < top + self.size)
                  & (cols >= left) & (cols < left + self.size))
        apply = (torch.rand(b, 1, 1, device=x.device) < self.p) & square  # apply: (B, H, W)
        return x.masked_fill(apply.unsqueeze(1), 0.0)


class IntensityJitter(nn.Module):
    """Per-sample contrast scaling and additive Gaussian noise, clamped back to [0, 1]."""

    def __init__(self, contrast: tuple[float, float] = (0.7, 1.3), noise_std: float = 0.05) -> None:
        super().__init__()
        self.contrast, self.noise_std = contrast, noise_std

    def forward(self, x: Tensor) -> Tensor:
        gain = _uniform(*self.contrast, x.shape[0], x.device).view(-1, 1, 1, 1)
        return (x * gain + self.noise_std * torch.randn_like(x)).clamp(0.0, 1.0)


def digits_augment() -> nn.Module:
    """The weaker recipe for 8x8 digits: SimCLR's crops and colour jitter would destroy an 8x8
    glyph, so small affine jitter, a 3x3 erasure and intensity noise take their place."""
    return nn.Sequential(RandomAffine(degrees=15, scale=(0.85, 1.15), translate=1.0),
                         RandomErase(p=0.5, size=3), IntensityJitter())
