"""The augmentation recipes (SimCLR's fused one against torchvision's definitions and samplers),
the uint8 -> float path and the chunked statistics (CPU; CUDA if any)."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from datamodules.augment import (
    CROP_TRIES,
    SimCLRAugment,
    SimCLRParameters,
    elastic_augment,
    greyscale_simclr_augment,
    kornia_simclr_augment,
    mnist_augment,
    simclr_augment,
)
from datamodules.base import (
    ClusterDataModule,
    SplitDataset,
    TensorSplits,
    channel_statistics,
    to_unit,
)

RECIPES = {
    "simclr32": (lambda: simclr_augment(32), (3, 32, 32)),
    "simclr64": (lambda: simclr_augment(64), (3, 64, 64)),
    "kornia_simclr32": (lambda: kornia_simclr_augment(32), (3, 32, 32)),
    "mnist": (lambda: mnist_augment(28), (1, 28, 28)),
    "elastic": (lambda: elastic_augment(28), (1, 28, 28)),
    "greyscale_simclr": (lambda: greyscale_simclr_augment(28), (1, 28, 28)),
}
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def textured(shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """One smooth, non-symmetric test image in [0.1, 0.9], shape (1, C, H, W)."""
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.rand(1, shape[0], 4, 4, generator=generator)
    image = nn.functional.interpolate(coarse, size=shape[1:], mode="bilinear")
    return 0.1 + 0.8 * image


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_eight_identical_inputs_give_eight_different_outputs(recipe, device) -> None:
    make, shape = RECIPES[recipe]
    torch.manual_seed(0)
    copies = textured(shape).expand(8, *shape).contiguous().to(device)
    out = make()(copies)
    assert out.shape == copies.shape and out.dtype == torch.float32
    assert out.device.type == device
    assert len({row.cpu().numpy().tobytes() for row in out}) == 8
    # And not by a hair: every pair of outputs differs visibly somewhere.
    flat = out.flatten(1)
    gaps = (flat[:, None] - flat[None]).abs().amax(-1) + torch.eye(8, device=device)
    assert gaps.min() > 0.01


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_outputs_stay_images_in_unit_range(recipe) -> None:
    make, shape = RECIPES[recipe]
    torch.manual_seed(1)
    out = make()(torch.rand(16, *shape))
    assert out.min() >= -1e-4 and out.max() <= 1 + 1e-4


def test_simclr_recipe_blurs_only_from_64_pixels() -> None:
    import kornia.augmentation as K

    assert isinstance(simclr_augment(32), SimCLRAugment)
    assert not simclr_augment(32).blur and simclr_augment(64).blur
    torch.manual_seed(0)
    assert SimCLRAugment(32).draw(torch.rand(4, 3, 32, 32)).sigma is None

    def kinds(module: nn.Module) -> set[type]:
        return {type(m) for m in module.children()}

    small, large = kinds(kornia_simclr_augment(32)), kinds(kornia_simclr_augment(64))
    common = {K.RandomResizedCrop, K.RandomHorizontalFlip, K.ColorJitter, K.RandomGrayscale}
    assert common <= small and K.RandomGaussianBlur not in small
    assert large == common | {K.RandomGaussianBlur}
    jitter = next(m for m in kornia_simclr_augment(32) if isinstance(m, K.ColorJitter))
    assert (jitter.brightness, jitter.contrast, jitter.saturation, jitter.hue) == (0.4, 0.4, 0.4,
                                                                                  0.1)
    assert jitter.p == pytest.approx(0.8)
    grey = next(m for m in kornia_simclr_augment(32) if isinstance(m, K.RandomGrayscale))
    assert grey.p == pytest.approx(0.2)


def test_simclr_jitter_changes_colour_per_sample() -> None:
    torch.manual_seed(2)
    flat = torch.full((64, 3, 32, 32), 0.5)
    flat[:, 0] = 0.7  # a reddish flat image: crops and flips leave it alone, colour does not
    out = simclr_augment(32)(flat)
    colours = out.mean(dim=(2, 3))
    assert len({tuple(c) for c in torch.round(colours * 100).tolist()}) > 32
    grey = (out[:, 0] == out[:, 1]).all(dim=(1, 2)) & (out[:, 1] == out[:, 2]).all(dim=(1, 2))
    assert 0 < grey.sum() < 40  # about a fifth of the samples are turned grey


def test_mnist_recipes_have_no_colour_or_flip() -> None:
    import kornia.augmentation as K

    for module in (mnist_augment(), elastic_augment()):
        kinds = {type(m) for m in module.modules()}
        assert not kinds & {K.ColorJitter, K.RandomGrayscale, K.RandomHorizontalFlip}


def test_greyscale_recipe_crops_at_least_its_scale_and_only_scales_intensities() -> None:
    """Crops of 40-100% of a 28x28 image (whole pixels: a rounded side moves the area by at most
    a side's worth), flips half the time, and on a flat grey image nothing but a brightness and
    contrast change: every output pixel of a sample is one value."""
    augment = greyscale_simclr_augment(28)
    x = torch.full((4000, 1, 28, 28), 0.5)
    params = augment.draw(x)
    area = params.extent.prod(1) / 28**2
    assert area.min() >= 0.4 - 2 * 28 / 28**2 and area.max() <= 1.0
    assert 0.65 < area.mean() < 0.75  # U(0.4, 1) has mean 0.7
    assert 0.45 < (params.mirror[:, 0] < 0).float().mean() < 0.55
    out = augment.apply(x, params)
    assert out.shape == x.shape
    assert (out.amax((1, 2, 3)) - out.amin((1, 2, 3))).abs().max() < 1e-6
    assert 0 < (out[:, 0, 0, 0] == 0.5).float().mean() < 0.4  # about a fifth not jittered
    with pytest.raises(ValueError, match=r"\(B, 1, S, S\), got \(2, 3, 28, 28\)"):
        augment(torch.zeros(2, 3, 28, 28))


def test_elastic_displacements_are_small_and_smooth() -> None:
    # A horizontal ramp (value = column / (W - 1)) read back gives the x displacement in pixels.
    torch.manual_seed(3)
    width = 28
    ramp = (torch.arange(width, dtype=torch.float32) / (width - 1)).expand(64, 1, width, width)
    out = elastic_augment(width)(ramp.contiguous())
    inner = (slice(None), 0, slice(6, -6), slice(6, -6))  # away from the zero padding
    shift = (out * (width - 1) - torch.arange(width, dtype=torch.float32))[inner]
    rms = shift.pow(2).mean().sqrt()
    assert 0.5 < rms < 3.0  # Simard's alpha 34, sigma 4: about 1.3 px
    neighbour_step = (shift[:, :, 1:] - shift[:, :, :-1]).abs().mean()
    assert neighbour_step < 0.3 * shift.abs().mean()  # a smooth field, not per-pixel noise
    per_sample = shift.pow(2).mean(dim=(1, 2)).sqrt()
    assert per_sample.std() > 0  # each sample its own field


def test_to_unit_converts_only_uint8() -> None:
    raw = torch.tensor([0, 128, 255], dtype=torch.uint8)
    assert torch.allclose(to_unit(raw), torch.tensor([0.0, 128 / 255, 1.0]))
    floats = torch.rand(3)
    assert to_unit(floats) is floats


@pytest.mark.parametrize("chunk", [1, 3, 4096])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_channel_statistics_match_a_naive_float64_computation(chunk, dtype) -> None:
    generator = torch.Generator().manual_seed(4)
    x = torch.randint(0, 256, (10, 3, 5, 4), generator=generator).to(dtype)
    index = torch.tensor([9, 0, 3, 4, 7])
    mean, std = channel_statistics(x, index, chunk=chunk)
    scale = 255.0 if dtype == torch.uint8 else 1.0
    rows = x[index].double() / scale
    expected_mean = torch.stack([rows[:, c].mean() for c in range(3)])
    expected_std = torch.stack([rows[:, c].flatten().std() for c in range(3)])
    assert mean.shape == std.shape == (3, 1, 1)
    torch.testing.assert_close(mean.flatten().double(), expected_mean, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(std.flatten().double(), expected_std, rtol=1e-6, atol=1e-7)


def test_channel_statistics_of_vectors_are_per_feature() -> None:
    x = torch.tensor([[1.0, 10.0], [3.0, 10.0], [5.0, 10.0]])
    mean, std = channel_statistics(x, torch.arange(3))
    assert torch.equal(mean, torch.tensor([3.0, 10.0]))
    assert std[0] == 2.0 and std[1] == 1e-6  # a constant feature is not divided by zero


def test_split_dataset_batches_match_single_items() -> None:
    x = torch.arange(40, dtype=torch.uint8).view(10, 1, 2, 2)
    y = torch.arange(10) % 3
    dataset = SplitDataset(x, y, torch.tensor([8, 2, 5]))
    assert len(dataset) == 3
    bx, by = dataset.__getitems__([2, 0])
    assert torch.equal(bx, torch.stack([dataset[2][0], dataset[0][0]]))
    assert torch.equal(bx, x[[5, 8]]) and torch.equal(by, y[[5, 8]])


# -- the fused SimCLR recipe against torchvision ---------------------------------------------------
# torchvision is the independent reference: its parameter samplers for the distributions, its
# functional operations for what a fixed parameter does.


def simclr_parameters(b: int, *, offset=None, extent=None, flip=None, jitter=None, colour=None,
                      blur=None, sigma=None, side: int = 32) -> SimCLRParameters:
    """Parameters that leave the image alone, but for the ones given."""
    def column(value, default, width):
        t = torch.as_tensor(default if value is None else value, dtype=torch.float32)
        return t.expand(b, width).clone() if t.dim() < 2 else t

    mirror = None if flip is None else torch.stack([1.0 - 2.0 * torch.as_tensor(flip).float(),
                                                    torch.ones(b)], 1)
    return SimCLRParameters(
        offset=column(offset, [0.0, 0.0], 2), extent=column(extent, [float(side)] * 2, 2),
        mirror=column(mirror, [1.0, 1.0], 2), jitter=column(jitter, [1.0, 1.0, 1.0, 0.0], 4),
        colour=column(colour, [1.0], 1),
        blur=None if blur is None else column(blur, [0.0], 1),
        sigma=None if sigma is None else column(sigma, [1.0], 1))


def many_draws(size: int, n: int, seed: int = 0) -> SimCLRParameters:
    torch.manual_seed(seed)
    return SimCLRAugment(size).draw(torch.zeros(n, 3, size, size))


def binomial_ok(hits: Tensor, p: float) -> bool:
    """The count of ``hits`` within 4.5 binomial standard deviations of ``n p``."""
    n = hits.numel()
    return abs(float(hits.sum()) - n * p) <= 4.5 * math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("side", [32, 64])
def test_crop_distribution_matches_torchvision_get_params(side) -> None:
    from torchvision.transforms import RandomResizedCrop

    n = 4000
    params = many_draws(side, n)
    w, h = params.extent.unbind(1)
    left, top = params.offset.unbind(1)
    torch.manual_seed(1)
    image = torch.zeros(3, side, side)
    tv = torch.tensor([RandomResizedCrop.get_params(image, scale=(0.08, 1.0),
                                                    ratio=(3 / 4, 4 / 3)) for _ in range(n)],
                      dtype=torch.float32)  # rows: top, left, h, w
    tv_top, tv_left, tv_h, tv_w = tv.unbind(1)
    assert (w == w.round()).all() and (left == left.round()).all()  # whole pixels
    assert (left >= 0).all() and (left + w <= side).all() and (top + h <= side).all()
    for ours, theirs in [(w * h / side**2, tv_w * tv_h / side**2),  # area fraction
                         (w / h, tv_w / tv_h),  # aspect ratio
                         ((left + 0.5) / (side - w + 1), (tv_left + 0.5) / (side - tv_w + 1)),
                         ((top + 0.5) / (side - h + 1), (tv_top + 0.5) / (side - tv_h + 1))]:
        assert stats.ks_2samp(ours.numpy(), theirs.numpy()).pvalue > 1e-3
    # The whole-image fallback after ten misses is as frequent as torchvision's.
    whole, tv_whole = (w == side) & (h == side), (tv_w == side) & (tv_h == side)
    assert abs(float(whole.float().mean() - tv_whole.float().mean())) < 0.02


def test_flip_jitter_grey_and_blur_distributions_match_torchvision() -> None:
    from torchvision.transforms import ColorJitter, GaussianBlur

    n = 4000
    params = many_draws(64, n)
    assert binomial_ok(params.mirror[:, 0] < 0, 0.5) and (params.mirror[:, 1] == 1).all()
    jittered = (params.jitter != torch.tensor([1.0, 1.0, 1.0, 0.0])).any(1)
    assert binomial_ok(jittered, 0.8)
    assert binomial_ok(params.colour[:, 0] == 0, 0.2)
    assert set(params.colour.flatten().tolist()) <= {0.0, 1.0}
    assert binomial_ok(params.blur[:, 0] == 1, 0.5)
    assert set(params.blur.flatten().tolist()) <= {0.0, 1.0}

    torch.manual_seed(2)
    reference = ColorJitter(0.4, 0.4, 0.4, 0.1)
    tv = torch.tensor([ColorJitter.get_params(reference.brightness, reference.contrast,
                                              reference.saturation, reference.hue)[1:]
                       for _ in range(n)])  # rows: brightness, contrast, saturation, hue
    factors = params.jitter[jittered]
    for k in range(4):
        assert stats.ks_2samp(factors[:, k].numpy(), tv[:, k].numpy()).pvalue > 1e-3
        low, high = (-0.1, 0.1) if k == 3 else (0.6, 1.4)
        assert low <= factors[:, k].min() and factors[:, k].max() <= high
        std = (high - low) / math.sqrt(12 * len(factors))
        assert abs(float(factors[:, k].mean()) - (low + high) / 2) < 4.5 * std
    tv_sigma = torch.tensor([GaussianBlur.get_params(0.1, 2.0) for _ in range(n)])
    assert stats.ks_2samp(params.sigma[:, 0].numpy(), tv_sigma.numpy()).pvalue > 1e-3


def random_images(b: int, side: int, seed: int = 3, levels: int | None = None) -> Tensor:
    """Random RGB images; with ``levels``, quantised so that channels tie and pixels are grey."""
    x = torch.rand(b, 3, side, side, generator=torch.Generator().manual_seed(seed))
    return x if levels is None else (x * (levels - 1)).round() / (levels - 1)


@pytest.mark.parametrize("side", [32, 64])
def test_crop_and_flip_match_torchvision_resized_crop(side) -> None:
    import torchvision.transforms.v2.functional as TF

    boxes = [(0, 0, side, side), (3, 5, 9, 12), (side - 7, 1, 7, side - 2), (10, 2, 17, 13)]
    x = random_images(len(boxes) * 2, side)
    offset = torch.tensor([[left, top] for left, top, _, _ in boxes] * 2, dtype=torch.float32)
    extent = torch.tensor([[w, h] for _, _, w, h in boxes] * 2, dtype=torch.float32)
    flip = torch.tensor([False] * len(boxes) + [True] * len(boxes))
    params = simclr_parameters(len(x), offset=offset, extent=extent, flip=flip, side=side)
    out = SimCLRAugment(side, blur=False).apply(x, params)
    for i, ((left, top, w, h), mirrored) in enumerate(zip(boxes * 2, flip.tolist(), strict=True)):
        expected = TF.resized_crop(x[i], top, left, h, w, [side, side],
                                   interpolation=TF.InterpolationMode.BILINEAR, antialias=True)
        if mirrored:
            expected = TF.horizontal_flip(expected)
        # The grid is clamped inside the crop as interpolate's source index is: the same
        # bilinear weights, up to float rounding of the coordinates.
        torch.testing.assert_close(out[i], expected, atol=1e-5, rtol=0)


def test_colour_operations_match_torchvision_functional() -> None:
    import torchvision.transforms.v2.functional as TF

    from datamodules.augment import (
        LUMA,
        adjust_brightness,
        adjust_contrast,
        adjust_hue,
        adjust_saturation,
    )

    factors = torch.tensor([0.0, 0.6, 0.95, 1.0, 1.2, 1.4])
    shifts = torch.tensor([-0.1, -0.03, 0.0, 0.04, 0.1, 0.5])
    x = torch.cat([random_images(3, 16), random_images(3, 16, levels=3)])  # (6, 3, 16, 16)
    luma = torch.tensor(LUMA).view(1, 3)
    constants = SimCLRAugment(16).constants(x.device, x.dtype, 16)
    per_sample = factors.view(-1, 1, 1, 1)
    ours = {"brightness": adjust_brightness(x, per_sample),
            "contrast": adjust_contrast(x, per_sample, luma),
            "saturation": adjust_saturation(x, per_sample, luma),
            "hue": adjust_hue(x, shifts.view(-1, 1, 1, 1), constants)}
    for i in range(len(x)):
        f, s = float(factors[i]), float(shifts[i])
        expected = {"brightness": TF.adjust_brightness(x[i], f),
                    "contrast": TF.adjust_contrast(x[i], f),
                    "saturation": TF.adjust_saturation(x[i], f),
                    "hue": TF.adjust_hue(x[i], s)}
        for name, value in expected.items():
            torch.testing.assert_close(ours[name][i], value, atol=1e-5, rtol=0, msg=name)
    grey = adjust_saturation(x, torch.zeros(len(x), 1, 1, 1), luma)
    torch.testing.assert_close(grey, TF.rgb_to_grayscale(x, num_output_channels=3), atol=1e-6,
                               rtol=0)
    assert torch.equal(adjust_saturation(x, torch.ones(len(x), 1, 1, 1), luma), x)


def test_blur_matches_torchvision_gaussian_blur_per_sample() -> None:
    import torchvision.transforms.v2.functional as TF

    from datamodules.augment import blur_kernel_size, gaussian_blur

    sigma = torch.tensor([[0.1], [0.7], [1.3], [2.0], [1.0]])
    apply = torch.tensor([[1.0], [1.0], [1.0], [1.0], [0.0]])
    x = random_images(len(sigma), 64)
    k = blur_kernel_size(64)
    out = gaussian_blur(x, sigma, apply, SimCLRAugment(64).constants(x.device, x.dtype, 64))
    for i in range(4):
        expected = TF.gaussian_blur(x[i], [k, k], [float(sigma[i]), float(sigma[i])])
        torch.testing.assert_close(out[i], expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(out[4], x[4], atol=1e-6, rtol=0)  # not drawn: left sharp


@pytest.mark.parametrize("side", [32, 64])
def test_whole_recipe_is_torchvisions_chain_with_the_drawn_parameters(side) -> None:
    import torchvision.transforms.v2.functional as TF

    from datamodules.augment import blur_kernel_size

    augment = SimCLRAugment(side)
    x = random_images(16, side)
    torch.manual_seed(4)
    params = augment.draw(x)
    out = augment.apply(x, params)
    for i in range(len(x)):
        (left, top), (w, h) = params.offset[i].int().tolist(), params.extent[i].int().tolist()
        y = TF.resized_crop(x[i], top, left, h, w, [side, side], antialias=True)
        if params.mirror[i, 0] < 0:
            y = TF.horizontal_flip(y)
        b, c, s, hue = params.jitter[i].tolist()  # identity where no jitter was drawn
        y = TF.adjust_hue(TF.adjust_saturation(TF.adjust_contrast(TF.adjust_brightness(
            y, b), c), s), hue)
        if params.colour[i] == 0:
            y = TF.rgb_to_grayscale(y, num_output_channels=3)
        if augment.blur and params.blur[i] == 1:
            k, sigma = blur_kernel_size(side), float(params.sigma[i])
            y = TF.gaussian_blur(y, [k, k], [sigma, sigma])
        torch.testing.assert_close(out[i], y, atol=1e-4, rtol=0)


class OpCounter(TorchDispatchMode):
    """Every aten operation dispatched while active, with the devices and dtypes it produced."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []
        self.kernels = 0  # operations other than views (a view launches nothing)
        self.outputs: list[tuple[str, torch.device, torch.dtype]] = []
        self.devices: set[torch.device] = set()  # of every input and output

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.append(str(func))
        self.kernels += not func.is_view
        results = out if isinstance(out, (tuple, list)) else [out]
        self.outputs += [(str(func), t.device, t.dtype) for t in results if isinstance(t, Tensor)]
        inputs = [*args, *(kwargs or {}).values()]
        self.devices |= {t.device for t in [*inputs, *results] if isinstance(t, Tensor)}
        return out


class GeneratedImages(ClusterDataModule):
    """Random ``uint8`` images with the default SimCLR recipe, for counting a training step."""

    name, provenance, source, num_classes = "generated", "generated", "random", 10

    def __init__(self, side: int, **kwargs) -> None:
        self.side, self.input_shape = side, (3, side, side)
        super().__init__(**kwargs)

    def load(self) -> TensorSplits:
        x = torch.randint(0, 256, (64, 3, self.side, self.side), dtype=torch.uint8,
                          generator=torch.Generator().manual_seed(5))
        y = torch.arange(64) % 10
        return TensorSplits(x, y, x[:10], y[:10])

    def train_augment(self) -> nn.Module:
        return simclr_augment(self.side)


def test_two_views_take_at_most_60_device_operations_and_no_host_sync() -> None:
    dm = GeneratedImages(32, batch_size=256, n_views=2)
    dm.setup()
    x = torch.randint(0, 256, (256, 3, 32, 32), dtype=torch.uint8)
    dm.make_views(x)  # the first call on a device copies the constants and statistics there
    with OpCounter() as counter:
        views = dm.make_views(x)
    assert len(views) == 2 and views[0].shape == (256, 3, 32, 32)
    assert counter.kernels <= 60, counter.ops
    assert "aten._local_scalar_dense.default" not in counter.ops  # no read-back to the host
    draws = [(device, dtype) for op, device, dtype in counter.outputs if "rand" in op]
    assert draws and all(d == (x.device, torch.float32) for d in draws)
    # The same recipe in kornia, for scale: an order of magnitude more.
    dm.augment = kornia_simclr_augment(32)
    with OpCounter() as kornia_counter:
        dm.make_views(x)
    assert kornia_counter.kernels > 5 * counter.kernels


@pytest.mark.parametrize("side", [32, 64])
def test_views_are_made_on_the_meta_device(side) -> None:
    # A meta tensor has no data: anything read back to the host, or any decision on a value,
    # fails. The first call on a device copies the constants and statistics there; from the
    # second on, nothing touches another device.
    dm = GeneratedImages(side, batch_size=16, n_views=2)
    dm.setup()
    x = torch.empty(16, 3, side, side, dtype=torch.uint8, device="meta")
    for _ in range(2):  # the first call on the device, then the next
        with OpCounter() as counter:
            views = dm.make_views(x)
        assert [v.shape for v in views] == [(16, 3, side, side)] * 2
        assert all(v.device.type == "meta" for v in views)
        assert {device.type for _, device, _ in counter.outputs} == {"meta"}
        assert "aten._local_scalar_dense.default" not in counter.ops
    assert {device.type for device in counter.devices} == {"meta"}


def test_seeding_torch_reproduces_the_views() -> None:
    augment, x = SimCLRAugment(64), random_images(8, 64)
    torch.manual_seed(6)
    first = augment(x)
    torch.manual_seed(6)
    assert torch.equal(augment(x), first)
    assert not torch.equal(augment(x), first)


def test_normalisation_statistics_are_copied_once_and_follow_replacement() -> None:
    dm = GeneratedImages(8, batch_size=8, n_views=1, augmentation="none")
    dm.setup()
    x = torch.rand(4, 3, 8, 8)
    first = dm.statistics_on(x.device, torch.float64)
    assert dm.statistics_on(x.device, torch.float64)[0] is first[0]  # cached
    torch.testing.assert_close(dm.normalise(x), (x - dm.mean) / dm.std)
    dm.mean = dm.mean + 1.0  # a dataset's setup may replace the statistics
    torch.testing.assert_close(dm.normalise(x), (x - dm.mean) / dm.std)


# -- the colour-jitter strength ------------------------------------------------------------------
def params_width(augment: SimCLRAugment) -> int:
    """The number of uniform columns one :meth:`SimCLRAugment.draw` takes per sample."""
    return len(augment._columns(augment.size)[0])


def test_the_default_jitter_strength_draws_todays_factors() -> None:
    """At the default strength (0.5) the factors are, draw for draw, the recipe's before the
    strength was a setting: 0.6 + 0.8 u for brightness, contrast and saturation and -0.1 + 0.2 u
    for hue, from the same uniforms u, and the views are the same."""
    x = random_images(256, 32)
    torch.manual_seed(7)
    params = SimCLRAugment(32).draw(x)
    torch.manual_seed(7)
    u = torch.rand(256, params_width(SimCLRAugment(32)))
    rest = u[:, 2 * (CROP_TRIES + 1):]  # after the crop columns: areas, aspect ratios
    jittered = torch.ceil(rest[:, 4] - 0.2) == 1  # with probability 0.8
    expected = torch.cat([torch.addcmul(torch.tensor(0.6), torch.tensor(0.8), rest[:, 6:9]),
                          torch.addcmul(torch.tensor(-0.1), torch.tensor(0.2), rest[:, 9:10])], 1)
    expected[~jittered] = torch.tensor([1.0, 1.0, 1.0, 0.0])
    assert torch.equal(params.jitter, expected)
    torch.manual_seed(7)
    views = SimCLRAugment(32)(x)
    torch.manual_seed(7)
    assert torch.equal(SimCLRAugment(32, jitter=0.5)(x), views)
    assert torch.equal(SimCLRAugment(32).apply(x, params), views)


@pytest.mark.parametrize("strength", [1.0, 2.0])
def test_a_jitter_strength_draws_torchvisions_colour_jitter_of_that_strength(strength) -> None:
    """Strength s: factors U(max(0, 1 - 0.8 s), 1 + 0.8 s), hue U(-0.2 s, 0.2 s) turns, as
    torchvision's ``ColorJitter(0.8 s, 0.8 s, 0.8 s, 0.2 s)`` draws them; the draws reach near
    both ends."""
    from torchvision.transforms import ColorJitter

    n = 20_000
    torch.manual_seed(8)
    params = SimCLRAugment(32, jitter=strength).draw(torch.zeros(n, 3, 32, 32))
    jittered = (params.jitter != torch.tensor([1.0, 1.0, 1.0, 0.0])).any(1)
    assert binomial_ok(jittered, 0.8)
    factors = params.jitter[jittered]
    torch.manual_seed(9)
    reference = ColorJitter(0.8 * strength, 0.8 * strength, 0.8 * strength, 0.2 * strength)
    tv = torch.tensor([ColorJitter.get_params(reference.brightness, reference.contrast,
                                              reference.saturation, reference.hue)[1:]
                       for _ in range(4000)])  # rows: brightness, contrast, saturation, hue
    for k in range(4):
        low, high = ((-0.2 * strength, 0.2 * strength) if k == 3
                     else (max(0.0, 1 - 0.8 * strength), 1 + 0.8 * strength))
        drawn = factors[:, k]
        assert low - 1e-6 <= drawn.min() <= low + 0.01 and high - 0.01 <= drawn.max() <= high
        assert stats.ks_2samp(drawn.numpy(), tv[:, k].numpy()).pvalue > 1e-3
    if strength == 1.0:  # the ranges SimCLR's ImageNet setting and Kernel-InfoNCE's probe use
        assert 0.2 - 1e-6 <= factors[:, :3].min() and factors[:, :3].max() <= 1.8
        assert -0.2 <= factors[:, 3].min() and factors[:, 3].max() <= 0.2


def test_strength_0_leaves_the_colours_alone() -> None:
    torch.manual_seed(10)
    params = SimCLRAugment(32, jitter=0.0).draw(torch.zeros(500, 3, 32, 32))
    assert torch.equal(params.jitter, torch.tensor([[1.0, 1.0, 1.0, 0.0]]).expand(500, 4))


@pytest.mark.parametrize("jitter", [-0.1, 2.6, float("nan"), float("inf"), True, "strong", None])
def test_a_bad_jitter_strength_is_refused_naming_it(jitter) -> None:
    message = (f"jitter must be a colour-jitter strength in [0, 2.5] (hue shifts up to 0.2 "
               f"jitter turns, at most half a turn), got {jitter!r}")
    with pytest.raises(ValueError) as refused:
        SimCLRAugment(32, jitter=jitter)
    assert str(refused.value) == message


def test_a_seeded_generator_reproduces_the_views_and_leaves_the_global_stream_alone() -> None:
    augment, x = SimCLRAugment(32, jitter=1.0), random_images(8, 32)
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    first = augment(x, torch.Generator().manual_seed(4))
    assert torch.equal(augment(x, torch.Generator().manual_seed(4)), first)
    assert not torch.equal(augment(x, torch.Generator().manual_seed(5)), first)
    assert torch.equal(torch.rand(3), expected)  # the default generator was not drawn from
