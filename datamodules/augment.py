"""Batch-wise augmentations that draw fresh parameters for every sample, on the batch's device.

They take un-normalised float images in [0, 1] of shape (B, C, H, W) and return the same shape:
hand-written modules for the 8x8 digits, and kornia recipes for the real image datasets.
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


# -- kornia recipes for real image datasets ------------------------------------------------------
# kornia's augmentations draw their parameters per sample (``same_on_batch=False``), unlike
# torchvision.transforms.v2 on a batched tensor, which draws one set for the whole batch. kornia is
# imported inside the factories so that importing the registry stays fast.


def simclr_augment(size: int) -> nn.Module:
    """SimCLR's recipe (arXiv:2002.05709, appendix A) for ``size`` x ``size`` RGB images:
    random resized crop (scale 0.08-1, aspect 3/4-4/3), horizontal flip, colour jitter
    (brightness, contrast, saturation 0.4, hue 0.1) with probability 0.8, grey-scale with
    probability 0.2, and, at 64 px and above, Gaussian blur (kernel a tenth of the side, sigma
    0.1-2) with probability 0.5. Blur is left out below 64 px, as in the paper's CIFAR setup.

    >>> x = torch.rand(1, 3, 32, 32).expand(8, 3, 32, 32)  # eight copies of one image
    >>> y = simclr_augment(32)(x)
    >>> y.shape, len({row.numpy().tobytes() for row in y})
    (torch.Size([8, 3, 32, 32]), 8)
    """
    import kornia.augmentation as K

    steps = [
        # "resample" crops and resizes the whole batch in one warp; kornia's default "slice"
        # mode loops over the samples (twice as slow on a CPU, worse on a GPU).
        K.RandomResizedCrop((size, size), scale=(0.08, 1.0), cropping_mode="resample"),
        K.RandomHorizontalFlip(),
        K.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8),
        K.RandomGrayscale(p=0.2),
    ]
    if size >= 64:
        kernel = int(0.1 * size) // 2 * 2 + 1  # odd, about a tenth of the side (23 at 224 px)
        steps.append(K.RandomGaussianBlur((kernel, kernel), (0.1, 2.0), p=0.5))
    return nn.Sequential(*steps)


def mnist_augment(size: int = 28) -> nn.Module:
    """A recipe for grey-scale MNIST-like digits and clothes: a random resized crop of at
    least 60% of the image (aspect 3/4-4/3), then a small affine jitter (rotation up to 10
    degrees, shift up to 10%, scale 0.9-1.1, shear up to 10 degrees). No flips (a mirrored 2 or
    shoe is another glyph) and no colour.

    >>> y = mnist_augment()(torch.rand(1, 1, 28, 28).expand(8, 1, 28, 28))
    >>> y.shape, len({row.numpy().tobytes() for row in y})
    (torch.Size([8, 1, 28, 28]), 8)
    """
    import kornia.augmentation as K

    return nn.Sequential(
        K.RandomResizedCrop((size, size), scale=(0.6, 1.0), cropping_mode="resample"),
        K.RandomAffine(degrees=10.0, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=10.0, p=1.0),
    )


def elastic_augment(size: int = 28, alpha_pixels: float = 34.0, sigma: float = 4.0) -> nn.Module:
    """An elastic deformation of MNIST-like images (Simard et al., ICDAR 2003): a uniform
    random displacement field in [-1, 1] per pixel, smoothed by a Gaussian of ``sigma`` pixels
    and scaled by ``alpha_pixels`` (their 34 and 4 at 28 px: displacements of about 1.3 px RMS,
    smooth over the glyph). One independent field per sample, via kornia's
    ``RandomElasticTransform``, which takes ``alpha`` in normalised [-1, 1] coordinates.

    >>> y = elastic_augment()(torch.rand(1, 1, 28, 28).expand(8, 1, 28, 28))
    >>> y.shape, len({row.numpy().tobytes() for row in y})
    (torch.Size([8, 1, 28, 28]), 8)
    """
    import kornia.augmentation as K

    alpha = alpha_pixels * 2.0 / size  # pixels -> normalised coordinates
    kernel = int(4 * sigma) | 1  # odd, two sigmas either side
    return K.RandomElasticTransform(kernel_size=(kernel, kernel), sigma=(sigma, sigma),
                                    alpha=(alpha, alpha), p=1.0)
