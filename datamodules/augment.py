"""Batch-wise augmentations that draw fresh parameters for every sample, on the batch's device.

They take un-normalised float images in [0, 1] of shape (B, C, H, W) and return the same shape:
hand-written modules for the 8x8 digits, SimCLR's recipe fused into a few batched operations
(:class:`SimCLRAugment`) for CIFAR and TinyImageNet, and kornia recipes for the MNIST-like sets.
"""

from __future__ import annotations

import math
from typing import NamedTuple

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


# -- SimCLR's recipe, fused ----------------------------------------------------------------------
# A kornia pipeline issues about 900 small device operations per two-view step and draws its
# parameters on the CPU (host-to-device copies each call), so on a GPU the step is bound by the
# Python thread issuing kernels. The recipe below is about 50 batched operations whose random
# parameters are drawn on the batch's device from torch's default generator for that device
# (seeding torch reproduces the views), with no read-back to the host.

#: ITU-R 601-2 luma weights as torchvision's ``rgb_to_grayscale`` writes them (0.2989, not 0.299).
LUMA = (0.2989, 0.587, 0.114)
#: Candidate crops drawn per sample, as torchvision's ``RandomResizedCrop.get_params`` tries.
CROP_TRIES = 10
#: The strongest colour jitter: its hue shift, 0.2 strength turns, reaches half a turn (the most
#: torchvision's ``ColorJitter`` takes; beyond it a shift wraps round to a smaller one).
MAX_JITTER = 2.5


def blur_kernel_size(size: int) -> int:
    """The blur kernel of SimCLR's recipe at ``size`` px: odd, about a tenth of the side.

    >>> blur_kernel_size(64), blur_kernel_size(224)
    (7, 23)
    """
    return int(0.1 * size) // 2 * 2 + 1


class SimCLRParameters(NamedTuple):
    """Per-sample parameters of :class:`SimCLRAugment`, all ``(B, k)`` tensors on the batch's
    device, in the form the fused operations consume."""

    offset: Tensor  # (B, 2): left, top of the crop, whole input pixels
    extent: Tensor  # (B, 2): width, height of the crop, whole input pixels
    mirror: Tensor  # (B, 2): a negative first entry flips horizontally; the second is 1
    jitter: Tensor  # (B, 4): brightness, contrast, saturation factors, hue shift in turns
    colour: Tensor  # (B, 1): 1 keeps the colour, 0 turns the image grey
    blur: Tensor | None  # (B, 1): 1 blurs, 0 leaves the image sharp; None without blur
    sigma: Tensor | None  # (B, 1): the blur's standard deviation in pixels; None without blur


class _Constants(NamedTuple):
    low: Tensor  # (P,): lower ends of the parameter columns
    span: Tensor  # (P,): their widths (0 for the constant columns)
    crop_map: Tensor  # (2, 4): (offset, extent) -> (low edge, centre, high edge, half-extent)
    crop_bias: Tensor  # (4,)
    base: Tensor  # (size, size, 2): output pixel centres in [-1, 1], x then y
    identity: Tensor  # (4,): the jitter of an un-jittered sample
    luma: Tensor  # (1, 3)
    hue_diff: Tensor  # (3, 3): (g - b, b - r, r - g)
    hue_offset: Tensor  # (1, 3, 1, 1): (0, 2, 4) sixths of a turn
    hue_sector: Tensor  # (1, 3, 1, 1): (5, 3, 1), HSV -> RGB
    taps: Tensor  # (k,): -i^2 / 2 for the blur taps i = -r..r
    delta: Tensor  # (k,): the identity kernel


def mix_channels(weight: Tensor, x: Tensor) -> Tensor:
    """Per-pixel linear maps of the channels: ``weight`` ``(O, C)`` on ``x`` ``(B, C, H, W)``
    gives ``(B, O, H, W)``, as one batched matrix product (a 1x1 ``conv2d`` did the same about
    ten times slower on a CPU)."""
    b, c, h, w = x.shape
    return torch.matmul(weight, x.reshape(b, c, h * w)).view(b, -1, h, w)


def adjust_brightness(x: Tensor, factor: Tensor) -> Tensor:
    """torchvision's ``adjust_brightness`` per sample: ``clamp(factor * x, 0, 1)``, ``factor``
    ``(B, 1, 1, 1)`` and non-negative (so only the upper end can be crossed)."""
    return (x * factor).clamp_max_(1.0)


def adjust_contrast(x: Tensor, factor: Tensor, luma: Tensor) -> Tensor:
    """torchvision's ``adjust_contrast`` per sample: a blend with the mean of the grey image,
    ``clamp(factor * x + (1 - factor) * mean(grey(x)), 0, 1)``."""
    mean = torch.mv(x.mean((2, 3)), luma[0])  # mean: (B,), the grey image's mean
    return torch.lerp(mean.view(-1, 1, 1, 1), x, factor).clamp_(0.0, 1.0)


def adjust_saturation(x: Tensor, factor: Tensor, luma: Tensor) -> Tensor:
    """torchvision's ``adjust_saturation`` per sample: a blend with the grey image,
    ``clamp(factor * x + (1 - factor) * grey(x), 0, 1)``. With ``factor`` 0 it is
    ``rgb_to_grayscale`` with three output channels, which :class:`SimCLRAugment` uses for its
    random grey-scale."""
    grey = mix_channels(luma, x)  # grey: (B, 1, H, W)
    return torch.lerp(grey, x, factor).clamp_(0.0, 1.0)


def adjust_hue(x: Tensor, shift: Tensor, constants: _Constants) -> Tensor:
    """torchvision's ``adjust_hue`` per sample: the hue in HSV turned by ``shift`` turns
    ``(B, 1, 1, 1)``, saturation and value kept, without the HSV round trip: the hue ``h`` (in
    sixths of a turn) comes from the channel holding the maximum (the first one on ties, as
    torchvision), and channel ``n`` of the result is ``V - C clamp(min(k, 4 - k), 0, 1)`` with
    ``k = (n + h) mod 6``, ``V`` the maximum, ``C`` the chroma (max - min) and ``n`` 5, 3, 1 for
    red, green, blue (the closed form of HSV -> RGB)."""
    # max(dim) gives the first maximum's index, in one pass (argmax over 3 channels is slow on
    # a CPU).
    high, top = x.max(1, keepdim=True)  # high, top: (B, 1, H, W)
    chroma = high - x.amin(1, keepdim=True)
    # Grey pixels (chroma 0) have differences 0: any finite hue does, since C multiplies it.
    hue = torch.addcdiv(constants.hue_offset, mix_channels(constants.hue_diff, x),
                        chroma.clamp_min(1e-12))  # hue: (B, 3, H, W), read where channel is max
    hue = hue.gather(1, top)  # (B, 1, H, W), in [-1, 5)
    k = torch.remainder(hue + torch.add(constants.hue_sector, shift, alpha=6.0), 6.0)
    return torch.addcmul(high, chroma, torch.minimum(k, 4.0 - k).clamp_(0.0, 1.0), value=-1.0)


def resized_crop(x: Tensor, params: SimCLRParameters, constants: _Constants) -> Tensor:
    """The crops of ``params`` resized to the output side with bilinear interpolation and
    flipped where ``params.mirror`` says, as one sampling grid and one ``grid_sample`` call.

    The grid is clamped to the centres of each crop's edge pixels, so the result equals
    torchvision's ``resized_crop`` (crop, then bilinear ``interpolate``, whose source coordinate
    is clamped inside the crop) then ``hflip``, rather than blending in pixels from outside the
    crop at its border. Without antialiasing: with the output the size of the input, a crop is
    never shrunk.
    """
    b = x.shape[0]
    # Each axis: one affine map of (offset, extent) gives the normalised coordinates of the low
    # edge pixel's centre, the crop's centre, the high edge pixel's centre and the half-extent.
    box = torch.stack([params.offset, params.extent], -1)  # box: (B, 2 axes, 2)
    edges = torch.addmm(constants.crop_bias, box.view(2 * b, 2), constants.crop_map)
    edges = edges.view(b, 1, 1, 2, 4)  # (low edge, centre, high edge, half-extent) per axis
    lo, centre, hi, half = edges.unbind(-1)  # each (B, 1, 1, 2), x then y
    half = torch.copysign(half, params.mirror.view(b, 1, 1, 2))  # the flip: x mirrored
    grid = torch.addcmul(centre, constants.base, half)
    grid = torch.clamp(grid, lo, hi)  # grid: (B, size, size, 2)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def gaussian_blur(x: Tensor, sigma: Tensor, apply: Tensor, constants: _Constants) -> Tensor:
    """torchvision's ``gaussian_blur`` (reflect padding, kernel ``exp(-i^2 / (2 sigma^2))``
    normalised) with a per-sample ``sigma`` ``(B, 1)``, where ``apply`` ``(B, 1)`` is 1, as two
    grouped 1-D convolutions over the whole batch; the identity kernel where ``apply`` is 0."""
    b, c, h, w = x.shape
    kernel = torch.softmax(constants.taps / sigma.square(), dim=-1)  # kernel: (B, k)
    kernel = torch.lerp(constants.delta, kernel, apply)
    k = kernel.shape[-1]
    # One kernel per image and channel (repeat_interleave would read the count on the host).
    kernel = kernel.unsqueeze(1).expand(b, c, k).reshape(b * c, k)  # kernel: (B C, k)
    r = k // 2
    padded = F.pad(x, (r, r, r, r), mode="reflect").view(1, b * c, h + 2 * r, w + 2 * r)
    out = F.conv2d(padded, kernel.view(b * c, 1, k, 1), groups=b * c)
    out = F.conv2d(out, kernel.view(b * c, 1, 1, k), groups=b * c)
    return out.view(b, c, h, w)


class SimCLRAugment(nn.Module):
    r"""SimCLR's augmentation (Chen et al., arXiv:2002.05709, appendix A) for RGB batches in
    [0, 1], fused: every sample gets its own parameters, drawn on the batch's device, and the
    batch goes through a few batched operations (a two-view step at 32 px, normalisation
    included, is 55 device operations against 880 with the kornia recipe; no host
    synchronisation, no host-to-device copy after the first call on a device; timings in
    ``docs/performance.md``).

    The recipe, with torchvision's definitions:

    - random resized crop to ``size`` x ``size``: area a fraction U(0.08, 1) of the image
      (U(``scale``)),
      aspect ratio log-uniform in [3/4, 4/3], width and height rounded to whole pixels, position
      uniform over whole pixels, bilinear. torchvision's ``get_params`` tries up to 10 draws for
      a crop that fits, then falls back to the whole (square) image; here each sample draws the
      10 candidates at once, and takes the first that fits, else the whole image — the same
      distribution;
    - horizontal flip with probability 1/2, folded into the crop's sampling grid;
    - colour jitter with probability 0.8 at strength ``jitter`` s (SimCLR's appendix A):
      brightness, contrast and saturation factors U(max(0, 1 - 0.8 s), 1 + 0.8 s), hue shift
      U(-0.2 s, 0.2 s) turns (torchvision's ``ColorJitter(0.8 s, 0.8 s, 0.8 s, 0.2 s)``), each
      step clamped to [0, 1]; the default s = 0.5 (SimCLR's CIFAR setting) gives U(0.6, 1.4)
      and U(-0.1, 0.1), s = 1 (its ImageNet setting) U(0.2, 1.8) and U(-0.2, 0.2);
    - grey-scale with probability 0.2 (luma 0.2989 R + 0.587 G + 0.114 B);
    - with ``blur`` (default: at 64 px and above; left out below, as in the paper's CIFAR
      setup), Gaussian blur with probability 0.5, kernel :func:`blur_kernel_size`, sigma
      U(0.1, 2) pixels, reflect padding.

    Departure from torchvision: the four jitter steps always run in one fixed order,
    brightness, contrast, saturation, hue, where torchvision's ``ColorJitter`` draws a random
    order per call (kornia's, one order per batch). A per-sample order would run every step four
    times under masks; and without the clamps, brightness, contrast and saturation commute
    exactly (the grey image of a saturation blend is unchanged, as the luma weights sum to 1),
    so the order only acts through the clamps at [0, 1] and through hue against the luma-based
    steps.

    ``colour=False`` takes grey-scale batches ``(B, 1, S, S)``: crop, flip, brightness and
    contrast only (:func:`greyscale_simclr_augment`).

    The parameters come from torch's default generator for the batch's device, or from
    ``generator`` (a generator on that device) when :meth:`draw` or the call is given one.

    Input: ``(B, 3, S, S)`` float (any S above 2); output ``(B, 3, size, size)``.

    >>> x = torch.rand(1, 3, 32, 32).expand(8, 3, 32, 32)  # eight copies of one image
    >>> y = SimCLRAugment(32)(x)
    >>> y.shape, len({row.numpy().tobytes() for row in y})
    (torch.Size([8, 3, 32, 32]), 8)
    """

    def __init__(self, size: int, blur: bool | None = None,
                 scale: tuple[float, float] = (0.08, 1.0), colour: bool = True,
                 jitter: float = 0.5) -> None:
        super().__init__()
        if not 0 < scale[0] <= scale[1] <= 1:
            raise ValueError(f"scale must be areas 0 < low <= high <= 1, got {scale!r}")
        if (isinstance(jitter, bool) or not isinstance(jitter, (int, float))
                or not 0 <= jitter <= MAX_JITTER):  # NaN fails the comparison too
            raise ValueError(f"jitter must be a colour-jitter strength in [0, {MAX_JITTER}] "
                             f"(hue shifts up to 0.2 jitter turns, at most half a turn), "
                             f"got {jitter!r}")
        self.size, self.scale, self.colour, self.jitter = size, tuple(scale), colour, jitter
        self.blur = size >= 64 if blur is None else blur
        self.kernel_size = blur_kernel_size(size)
        # The constants on the host, built here for inputs of side ``size`` (and on first use for
        # other sides), and their device copies, made on the first call on each device.
        self._host: dict[int, _Constants] = {size: self._host_constants(size)}
        self._constants: dict[tuple[torch.device, torch.dtype, int], _Constants] = {}

    def _columns(self, side: int) -> tuple[list[float], list[float]]:
        """Lower ends and widths of the uniform parameter columns, in the order :meth:`draw`
        reads them."""
        half_log_ratio = 0.5 * math.log(4 / 3)  # log-uniform ratio r: sqrt(r) = exp(U(+-this))
        area = float(side * side)
        # torchvision's ColorJitter(0.8 s, ..., 0.2 s): factors U(max(0, 1 - b), 1 + b), hue
        # U(-h, h). The width b + min(b, 1) rather than (1 + b) - (1 - b): at s = 0.5 the
        # latter rounds to 0.7999999999999999, the former is 0.8, today's draws bit for bit.
        b, h = 0.8 * self.jitter, 0.2 * self.jitter
        low = ([self.scale[0] * area] * CROP_TRIES + [area]  # crop areas in px^2; last: fallback
               + [-half_log_ratio] * CROP_TRIES + [0.0]  # half log aspect ratios
               + [0.0, 0.0]  # crop position, as fractions of the free room
               + [-1.0, 1.0]  # mirror: negative flips (probability 1/2); constant 1
               + [-0.2, -0.2]  # jitter, keep colour: ceil() is 1 with probability 0.8
               + [max(0.0, 1.0 - b)] * 3 + [-h])  # brightness, contrast, saturation, hue
        span = ([(self.scale[1] - self.scale[0]) * area] * CROP_TRIES + [0.0]
                + [2 * half_log_ratio] * CROP_TRIES + [0.0]
                + [1.0, 1.0] + [2.0, 0.0] + [1.0, 1.0] + [b + min(b, 1.0)] * 3 + [2 * h])
        if self.blur:
            low += [-0.5, 0.1]  # blur: ceil() is 1 with probability 1/2; sigma
            span += [1.0, 1.9]
        return low, span

    def constants(self, device: torch.device, dtype: torch.dtype, side: int) -> _Constants:
        """The recipe's constant tensors on ``device`` for inputs of side ``side``: built on the
        host and copied once, then reused."""
        key = (device, dtype, side)
        if key not in self._constants:
            if side not in self._host:
                self._host[side] = self._host_constants(side)
            self._constants[key] = _Constants(*(t.to(device, dtype) for t in self._host[side]))
        return self._constants[key]

    def _host_constants(self, side: int) -> _Constants:
        """The constants for inputs of side ``side``, in float64 on the host."""
        low, span = self._columns(side)
        size, r = self.size, self.kernel_size // 2
        # x_n = 2 p / S - 1 maps input pixel coordinates p (edges at 0 and S) to [-1, 1].
        crop_map = torch.tensor([[2 / side, 2 / side, 2 / side, 0.0],  # times the offset
                                 [0.0, 1 / side, 2 / side, 1 / side]],  # times the extent
                                dtype=torch.float64)
        crop_bias = torch.tensor([1 / side - 1, -1.0, -1 / side - 1, 0.0], dtype=torch.float64)
        centres = (2 * torch.arange(size, dtype=torch.float64) + 1) / size - 1
        base = torch.stack([centres.view(1, size).expand(size, size),
                            centres.view(size, 1).expand(size, size)], -1)
        taps = torch.arange(-r, r + 1, dtype=torch.float64)
        return _Constants(
            low=torch.tensor(low, dtype=torch.float64),
            span=torch.tensor(span, dtype=torch.float64),
            crop_map=crop_map, crop_bias=crop_bias, base=base,
            identity=torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=torch.float64),
            luma=torch.tensor(LUMA if self.colour else (1.0,), dtype=torch.float64).view(1, -1),
            hue_diff=torch.tensor([[0, 1, -1], [-1, 0, 1], [1, -1, 0]], dtype=torch.float64),
            hue_offset=torch.tensor([0.0, 2.0, 4.0], dtype=torch.float64).view(1, 3, 1, 1),
            hue_sector=torch.tensor([5.0, 3.0, 1.0], dtype=torch.float64).view(1, 3, 1, 1),
            taps=-0.5 * taps.square(), delta=(taps == 0).double())

    def draw(self, x: Tensor, generator: torch.Generator | None = None) -> SimCLRParameters:
        """Fresh parameters for every sample of ``x`` ``(B, 3, S, S)``: one uniform draw on
        ``x``'s device from ``generator`` (torch's default generator for that device when
        ``None``), mapped to the recipe's ranges."""
        b, side = x.shape[0], x.shape[-1]
        constants = self.constants(x.device, x.dtype, side)
        u = torch.addcmul(constants.low, constants.span,
                          torch.rand(b, constants.low.shape[0], device=x.device, dtype=x.dtype,
                                     generator=generator))
        t = CROP_TRIES + 1
        area, half_log_ratio, rest = u[:, :t], u[:, t:2 * t], u[:, 2 * t:]
        # Width sqrt(A r), height sqrt(A / r), rounded to whole pixels as torchvision does.
        root_ratio = torch.exp(torch.cat([half_log_ratio, -half_log_ratio], 1)).view(b, 2, t)
        extents = torch.round(root_ratio * area.sqrt().view(b, 1, t))  # (B, 2, tries + 1)
        # The first candidate that fits (the fallback, the whole image, always does).
        first = torch.clamp(extents.amax(1), min=side).argmin(1)  # first: (B,)
        extent = extents.gather(2, first.view(b, 1, 1).expand(b, 2, 1)).view(b, 2)
        offset = torch.floor(rest[:, 0:2] * (side + 1 - extent))  # uniform over 0..S - extent
        flags = torch.ceil(rest[:, 4:6])  # flags: (B, 2), jitter and keep-colour
        jitter = torch.lerp(constants.identity, rest[:, 6:10], flags[:, 0:1])
        blur, sigma = (torch.ceil(rest[:, 10:11]), rest[:, 11:12]) if self.blur else (None, None)
        return SimCLRParameters(offset=offset, extent=extent, mirror=rest[:, 2:4], jitter=jitter,
                                colour=flags[:, 1:2], blur=blur, sigma=sigma)

    def apply(self, x: Tensor, params: SimCLRParameters) -> Tensor:
        """The recipe with the given parameters: crop and flip, jitter, grey-scale, blur."""
        channels = 3 if self.colour else 1
        if x.dim() != 4 or x.shape[1] != channels or x.shape[2] != x.shape[3]:
            raise ValueError(f"SimCLRAugment{'' if self.colour else ' (colour=False)'} takes "
                             f"square batches (B, {channels}, S, S), got {tuple(x.shape)}")
        constants = self.constants(x.device, x.dtype, x.shape[-1])
        b = x.shape[0]
        x = resized_crop(x, params, constants)  # x: (B, C, size, size)
        factors = params.jitter.view(b, 4, 1, 1)
        x = adjust_brightness(x, factors[:, 0:1])
        x = adjust_contrast(x, factors[:, 1:2], constants.luma)
        if not self.colour:  # grey images: no saturation, hue or grey-scale to change
            return x
        x = adjust_saturation(x, factors[:, 2:3], constants.luma)
        x = adjust_hue(x, factors[:, 3:4], constants)
        x = adjust_saturation(x, params.colour.view(b, 1, 1, 1), constants.luma)  # grey or not
        if params.blur is not None:
            x = gaussian_blur(x, params.sigma, params.blur, constants)
        return x

    def forward(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        return self.apply(x, self.draw(x, generator))


def simclr_augment(size: int) -> nn.Module:
    """SimCLR's recipe for ``size`` x ``size`` RGB images: :class:`SimCLRAugment` (blur from 64
    px). :func:`kornia_simclr_augment` is the same recipe in kornia, with about sixteen times
    the device operations and, on a 2-core CPU, 1.7-2.1 times the time (``docs/performance.md``).

    >>> x = torch.rand(1, 3, 32, 32).expand(8, 3, 32, 32)  # eight copies of one image
    >>> y = simclr_augment(32)(x)
    >>> y.shape, len({row.numpy().tobytes() for row in y})
    (torch.Size([8, 3, 32, 32]), 8)
    """
    return SimCLRAugment(size)


def greyscale_simclr_augment(size: int = 28) -> nn.Module:
    """SimCLR's recipe cut to grey-scale images of ``size`` px (Fashion-MNIST's clothes): crops
    of 40-100% of the area (SimCLR's 8% leaves a few pixels of a 28x28 image: a collar or a
    heel is not the garment; fashion_cpu's header gives the scales tried), horizontal flips (a
    mirrored shoe is a shoe), brightness and contrast factors U(0.6, 1.4) with probability 0.8;
    no saturation, hue or grey-scale, which do nothing to one channel; no blur (SimCLR blurs
    from 64 px). :class:`SimCLRAugment` with
    ``scale=(0.4, 1)`` and ``colour=False``: fused, on the batch's device.

    >>> y = greyscale_simclr_augment()(torch.rand(1, 1, 28, 28).expand(8, 1, 28, 28))
    >>> y.shape, len({row.numpy().tobytes() for row in y})
    (torch.Size([8, 1, 28, 28]), 8)
    """
    return SimCLRAugment(size, scale=(0.4, 1.0), colour=False)


# -- kornia recipes for real image datasets ------------------------------------------------------
# kornia's augmentations draw their parameters per sample (``same_on_batch=False``), unlike
# torchvision.transforms.v2 on a batched tensor, which draws one set for the whole batch. kornia is
# imported inside the factories so that importing the registry stays fast.


def kornia_simclr_augment(size: int) -> nn.Module:
    """SimCLR's recipe (see :class:`SimCLRAugment`) as a kornia pipeline: what the fused
    :class:`SimCLRAugment` replaced, kept for comparisons (``benchmarks/perf/augment_speed.py``).
    Unlike the fused one, it draws its parameters on the CPU and applies the colour-jitter steps
    in a random order per call, the same for the whole batch.

    >>> x = torch.rand(1, 3, 32, 32).expand(8, 3, 32, 32)  # eight copies of one image
    >>> y = kornia_simclr_augment(32)(x)
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
        steps.append(K.RandomGaussianBlur((blur_kernel_size(size),) * 2, (0.1, 2.0), p=0.5))
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
