"""The kornia recipes, the uint8 -> float path and the chunked statistics (CPU; CUDA if any)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from datamodules.augment import elastic_augment, mnist_augment, simclr_augment
from datamodules.base import SplitDataset, channel_statistics, to_unit

RECIPES = {
    "simclr32": (lambda: simclr_augment(32), (3, 32, 32)),
    "simclr64": (lambda: simclr_augment(64), (3, 64, 64)),
    "mnist": (lambda: mnist_augment(28), (1, 28, 28)),
    "elastic": (lambda: elastic_augment(28), (1, 28, 28)),
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

    def kinds(module: nn.Module) -> set[type]:
        return {type(m) for m in module.children()}

    small, large = kinds(simclr_augment(32)), kinds(simclr_augment(64))
    common = {K.RandomResizedCrop, K.RandomHorizontalFlip, K.ColorJitter, K.RandomGrayscale}
    assert common <= small and K.RandomGaussianBlur not in small
    assert large == common | {K.RandomGaussianBlur}
    jitter = next(m for m in simclr_augment(32) if isinstance(m, K.ColorJitter))
    assert (jitter.brightness, jitter.contrast, jitter.saturation, jitter.hue) == (0.4, 0.4, 0.4,
                                                                                  0.1)
    assert jitter.p == pytest.approx(0.8)
    grey = next(m for m in simclr_augment(32) if isinstance(m, K.RandomGrayscale))
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
