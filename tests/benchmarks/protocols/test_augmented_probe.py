"""The augmented probe (Kernel-InfoNCE's released ``simclr_finetune.py``): its settings, its head's
training against a float64 loop of ``torch.optim.SGD`` with a per-epoch cosine schedule, the test
images' resize and centre crop, the frozen encoder, and a run through the registry."""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch import Tensor, nn

from benchmarks.protocols import PROTOCOLS
from benchmarks.protocols import augmented_probe as module
from benchmarks.protocols.augmented_probe import (
    AugmentedProbeData,
    AugmentedProbeSettings,
    augmented_probe_accuracy,
    resize_centre_crop,
    train_augmented_head,
)
from benchmarks.protocols.evaluate import evaluate_encoder
from datamodules.base import ClusterDataModule, TensorSplits

PROBE = PROTOCOLS["augmented_probe"]
#: A short probe for the tiny data below.
SHORT = {"epochs": 4, "lr": 0.3, "batch_size": 16, "weight_decay": 1.0e-6,
         "jitter_strength": 1.0, "eval_resize": 1.1}


# many tiny operations: one intra-op thread (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("one_thread")


# -- tiny data ---------------------------------------------------------------------------------
def stripes(n: int, side: int = 16, channels: int = 3, seed: int = 0) -> tuple[Tensor, Tensor]:
    """``uint8`` images of horizontal (label 0) or vertical (label 1) stripes of period 4 px at
    a random phase: crops, flips and colour jitter keep their orientation."""
    generator = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 2
    phase = torch.randint(0, 4, (n, 1), generator=generator)
    wave = 0.2 + 0.6 * ((torch.arange(side) + phase) % 4 < 2).float()  # (n, side)
    rows, cols = wave[:, :, None].expand(n, side, side), wave[:, None, :].expand(n, side, side)
    image = torch.where(y[:, None, None] == 0, rows, cols)
    return (image[:, None].expand(n, channels, side, side) * 255).round().to(torch.uint8), y


class Stripes(ClusterDataModule):
    """120 training (108 after the validation split) and 40 test images of :func:`stripes`."""

    name, provenance, source, num_classes = "stripes", "generated", "stripes", 2

    def __init__(self, channels: int = 3, **kwargs) -> None:
        self.channels, self.input_shape = channels, (channels, 16, 16)
        super().__init__(augmentation="none", **kwargs)

    def load(self) -> TensorSplits:
        train_x, train_y = stripes(120, channels=self.channels)
        test_x, test_y = stripes(40, channels=self.channels, seed=1)
        return TensorSplits(train_x, train_y, test_x, test_y)


class Orientation(nn.Module):
    """Features that tell the stripes apart: the mean absolute horizontal and vertical
    differences, through a batch norm (its running statistics change only in training mode).
    ``modes`` records the mode of every call, ``grads`` whether gradients were recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(2)
        self.modes: list[bool] = []
        self.grads: list[bool] = []

    def encode(self, x: Tensor) -> Tensor:
        self.modes.append(self.training)
        self.grads.append(torch.is_grad_enabled())
        dx = (x[..., :, 1:] - x[..., :, :-1]).abs().mean((1, 2, 3))
        dy = (x[..., 1:, :] - x[..., :-1, :]).abs().mean((1, 2, 3))
        return self.norm(torch.stack([dx, dy], 1))  # (B, 2)


# -- settings ----------------------------------------------------------------------------------
@pytest.mark.parametrize("setting, value, message", [
    ("epochs", 0, "epochs must be an integer of at least 1, got 0"),
    ("lr", 0, "lr must be > 0 and finite, got 0"),
    ("batch_size", 2.5, "batch_size must be an integer of at least 1, got 2.5"),
    ("weight_decay", -1e-6, "weight_decay must be >= 0, got -1e-06"),
    ("jitter_strength", -0.5, "jitter_strength must be >= 0, got -0.5"),
    ("jitter_strength", 3.0, "jitter_strength must be >= 0 and at most 2.5, got 3.0"),
    ("jitter_strength", "strong", "jitter_strength must be >= 0, got 'strong'"),
    ("eval_resize", 0.9, "eval_resize must be a ratio in [1, 4] (the test images resized to "
                         "int(eval_resize * side), then centre-cropped to side), got 0.9"),
    ("eval_resize", float("nan"), "eval_resize must be a ratio in [1, 4] (the test images "
                                  "resized to int(eval_resize * side), then centre-cropped to "
                                  "side), got nan"),
    ("eval_resize", True, "eval_resize must be a ratio in [1, 4] (the test images resized to "
                          "int(eval_resize * side), then centre-cropped to side), got True"),
])
def test_a_bad_setting_is_refused_in_one_line_naming_it(setting, value, message) -> None:
    with pytest.raises(ValueError) as refused:
        PROBE.parse({**PROBE.example, setting: value})
    assert str(refused.value) == message


def test_every_setting_is_pinned_and_the_example_is_the_authors() -> None:
    assert PROBE.setting_names() == ["epochs", "lr", "batch_size", "weight_decay",
                                     "jitter_strength", "eval_resize"]
    # simclr_finetune.py: 100 epochs, lr 0.3, batch 64, weight decay 1e-6, strength 1, 1.1
    assert PROBE.parse(PROBE.example) == AugmentedProbeSettings(100, 0.3, 64, 1e-6, 1.0, 1.1)
    with pytest.raises(ValueError, match=r"^eval_resize not set; a suite pins every setting of "
                                         r"augmented_probe: epochs, lr, batch_size, "
                                         r"weight_decay, jitter_strength, eval_resize$"):
        PROBE.parse({k: v for k, v in PROBE.example.items() if k != "eval_resize"})


def test_the_three_linear_probes_run_together_in_the_registry() -> None:
    names = list(PROTOCOLS)
    start = names.index("linear_probe")
    assert names[start:start + 3] == ["linear_probe", "augmented_probe", "logistic_probe"]
    assert [m.name for m in PROBE.metrics] == ["augmented_probe_top1", "augmented_probe_top5"]
    assert PROBE.metrics[0].label == "Augmented linear probe top-1 (%)"
    assert PROBE.metrics[0].percent


# -- the test images: resized, then centre-cropped -----------------------------------------------
@pytest.mark.parametrize("side, resized, top", [(32, 35, 2), (64, 70, 3), (16, 17, 0)])
def test_the_test_resize_and_crop_by_hand_on_a_ramp(side: int, resized: int, top: int) -> None:
    """A horizontal ramp (pixel value = column) enlarged bilinearly to int(1.1 side) px reads, at
    output column i, the source coordinate (i + 0.5) side / resized - 0.5, clamped to the edge
    pixels; the crop keeps columns top..top + side - 1, top = round((resized - side) / 2) as
    torchvision rounds it (round half to even: 1.5 -> 2, 0.5 -> 0)."""
    ramp = torch.arange(side, dtype=torch.float64).expand(1, 1, side, side)
    out = resize_centre_crop(ramp, 1.1)
    assert out.shape == (1, 1, side, side)
    expected = [min(max((top + i + 0.5) * side / resized - 0.5, 0.0), side - 1.0)
                for i in range(side)]
    torch.testing.assert_close(out[0, 0, 0], torch.tensor(expected, dtype=torch.float64),
                               rtol=0, atol=1e-9)
    torch.testing.assert_close(out[0, 0, :, 0], out[0, 0, :, 0].new_full((side,), expected[0]))


@pytest.mark.parametrize("ratio", [1.0, 1.1, 1.5, 2.0])
def test_the_test_resize_and_crop_are_torchvisions(ratio: float) -> None:
    import torchvision.transforms.v2.functional as TF

    x = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    expected = TF.center_crop(TF.resize(x, [int(ratio * 32)], antialias=True), [32])
    torch.testing.assert_close(resize_centre_crop(x, ratio), expected, rtol=0, atol=1e-6)


def test_the_test_split_is_scored_on_resized_centre_crops(monkeypatch) -> None:
    """The encoder sees, after the training, each test image resized to int(1.5 * 16) = 24 px,
    its centre 16 px kept (torchvision's resize and crop), then normalised."""
    import torchvision.transforms.v2.functional as TF

    dm = Stripes()
    dm.setup()
    model = Orientation()
    seen: list[Tensor] = []
    encode = model.encode
    monkeypatch.setattr(model, "encode", lambda x: seen.append(x) or encode(x))
    evaluate_encoder(model, dm, {"augmented_probe": {**SHORT, "epochs": 1,
                                                     "eval_resize": 1.5}}, seed=0)
    test_x = dm._splits["test"].x.float() / 255
    crops = TF.center_crop(TF.resize(test_x, [24], antialias=True), [16])
    expected = (crops - dm.mean) / dm.std
    train_batches = math.ceil(len(dm._splits["train"]) / SHORT["batch_size"])
    torch.testing.assert_close(torch.cat(seen[train_batches:]), expected, rtol=0, atol=1e-5)
    assert not torch.allclose(expected, (test_x - dm.mean) / dm.std, atol=0.1)  # it matters


# -- the head's training -----------------------------------------------------------------------
def reference_head(features: Tensor, labels: Tensor, classes: int, epochs: int, lr: float,
                   batch_size: int, weight_decay: float, seed: int,
                   per_step: bool = False) -> tuple[Tensor, Tensor]:
    """Bolts' SSLFineTuner's head in float64: ``nn.Linear`` (initialised under
    ``torch.manual_seed(seed)``), the mean cross-entropy by autograd, ``torch.optim.SGD``
    (momentum 0.9, no Nesterov) and ``CosineAnnealingLR(T_max=epochs)`` stepped after every
    epoch; a ``randperm`` per epoch from a generator seeded by ``seed``. ``per_step``: the
    schedule over every batch instead (``linear_probe``'s)."""
    steps = math.ceil(len(labels) / batch_size)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    head = nn.Linear(features.shape[1], classes).double()
    torch.random.set_rng_state(state)
    optimiser = torch.optim.SGD(head.parameters(), lr=lr, momentum=0.9, nesterov=False,
                                weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimiser, T_max=epochs * steps if per_step else epochs, eta_min=0)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(len(labels), generator=generator)
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            loss = nn.functional.cross_entropy(head(features[rows]), labels[rows])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            if per_step:
                scheduler.step()
        if not per_step:
            scheduler.step()
    return head.weight.detach(), head.bias.detach()


class Project(nn.Module):
    """A fixed random linear map of the flattened image to ``dim`` features of about unit
    scale."""

    def __init__(self, pixels: int, dim: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(1)
        self.weight = torch.randn(pixels, dim, generator=generator) / math.sqrt(pixels)

    def encode(self, x: Tensor) -> Tensor:
        return x.flatten(1) @ self.weight.to(x.dtype)


@pytest.mark.parametrize("n, batch_size, weight_decay", [
    (50, 16, 1e-6),  # 4 batches an epoch, the last one of 2
    (48, 48, 0.05),  # one whole batch; strong weight decay
])
def test_the_head_is_sgd_with_a_per_epoch_cosine_as_a_float64_loop(
        monkeypatch, n: int, batch_size: int, weight_decay: float) -> None:
    """With the augmentation made the identity, the head's weights after 3 epochs are those of
    :func:`reference_head` on the normalised images' features (float64), and not those of the
    same loop with the schedule stepped per batch."""
    monkeypatch.setattr(module, "probe_augment", lambda side, channels, strength:
                        lambda x, generator: x)
    generator = torch.Generator().manual_seed(2)
    images = torch.randint(0, 256, (n, 3, 8, 8), dtype=torch.uint8, generator=generator)
    labels = torch.randint(0, 3, (n,), generator=generator)
    mean = torch.tensor([0.4, 0.5, 0.6]).view(3, 1, 1)
    std = torch.tensor([0.2, 0.25, 0.3]).view(3, 1, 1)
    encoder = Project(3 * 8 * 8, 5)
    data = AugmentedProbeData(encoder.encode, lambda x: (x - mean) / std, images, labels,
                              images[:4], labels[:4])
    weight, bias = train_augmented_head(data, 3, 3, 0.3, batch_size, weight_decay, 1.0, seed=4,
                                        device=torch.device("cpu"))
    features = encoder.encode((images.double() / 255 - mean.double()) / std.double())
    expected = reference_head(features, labels, 3, 3, 0.3, batch_size, weight_decay, seed=4)
    torch.testing.assert_close(weight.double(), expected[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(bias.double(), expected[1], rtol=1e-4, atol=1e-5)
    # The comparison tells linear_probe's per-step schedule apart (when an epoch has batches).
    if n > batch_size:
        per_step = reference_head(features, labels, 3, 3, 0.3, batch_size, weight_decay, seed=4,
                                  per_step=True)
        assert (per_step[0] - expected[0]).abs().max() > 1e-3


def test_the_augmentation_is_drawn_per_step_from_the_runs_seed() -> None:
    """Every training batch is a fresh augmentation (no two epochs see the same views), drawn
    from generators of the run's seed: the same seed gives the same probe, whatever the global
    random state, which the probe leaves alone."""
    dm = Stripes()
    dm.setup()
    train_x, train_y = (dm._splits["train"].x[dm._splits["train"].index],
                        dm._splits["train"].y[dm._splits["train"].index])
    test_x, test_y = dm._splits["test"].x, dm._splits["test"].y
    model = Orientation().eval()
    seen: list[Tensor] = []

    def encode(x: Tensor) -> Tensor:
        seen.append(x)
        return model.encode(x)

    data = AugmentedProbeData(encode, dm.normalise, train_x, train_y, test_x, test_y)
    settings = {**SHORT, "epochs": 2, "batch_size": 200}  # one batch an epoch: all images
    torch.manual_seed(99)
    expected = torch.rand(3)
    torch.manual_seed(99)
    first = augmented_probe_accuracy(data, **settings, seed=3, device="cpu")
    assert torch.equal(torch.rand(3), expected)
    epoch_1, epoch_2 = seen[0], seen[1]
    plain = dm.normalise(train_x.float() / 255)
    assert not torch.allclose(epoch_1, plain, atol=0.1) and not torch.equal(epoch_1, epoch_2)
    seen.clear()
    torch.manual_seed(5)
    assert augmented_probe_accuracy(data, **settings, seed=3, device="cpu") == first
    assert torch.equal(seen[0], epoch_1)
    seen.clear()
    augmented_probe_accuracy(data, **settings, seed=4, device="cpu")
    assert not torch.equal(seen[0], epoch_1)  # another seed: other views


# -- the protocol ------------------------------------------------------------------------------
def test_on_separable_stripes_it_learns_far_above_chance_with_the_encoder_frozen() -> None:
    model = Orientation().train()
    running = model.norm.running_mean.clone(), model.norm.running_var.clone()
    lines: list[str] = []
    out = evaluate_encoder(model, Stripes(), {"augmented_probe": SHORT}, seed=0,
                           report=lines.append)
    assert set(out.metrics) == {"augmented_probe_top1"}  # top-5 only with 100 classes
    assert out.metrics["augmented_probe_top1"] >= 0.9  # chance: 0.5
    # frozen: every call in eval mode without gradients, the batch norm's statistics untouched,
    # the mode restored
    assert model.modes and not any(model.modes) and not any(model.grads)
    assert model.training and model.norm.training
    assert torch.equal(model.norm.running_mean, running[0])
    assert torch.equal(model.norm.running_var, running[1])
    # its progress: a line about every tenth of the epochs, each in progress (" ...")
    epochs = [line for line in lines if line.startswith("augmented_probe: epoch")]
    assert len(epochs) == SHORT["epochs"] and all(line.endswith(" ...") for line in epochs)
    assert re.fullmatch(r"augmented_probe: epoch 4/4, augmented training top-1 [0-9.]+%, "
                        r"[0-9.]+ s \.\.\.", epochs[-1])


def test_a_logs_one_line_a_run_leaves_the_epochs_out(capsys) -> None:
    from benchmarks.protocols.protocol import EvaluationLine

    said = EvaluationLine("r seed 0", live=False)
    evaluate_encoder(Orientation(), Stripes(), {"augmented_probe": {**SHORT, "epochs": 2}},
                     seed=0, report=said)
    said.finish(1.0)
    (line,) = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"clusterbench: r seed 0: evaluated in 1\.0 s \(augmented_probe: "
                        r"[0-9.]+ s\)", line), line


def test_grey_images_are_cropped_flipped_and_jittered_in_brightness_and_contrast() -> None:
    out = evaluate_encoder(Orientation(), Stripes(channels=1), {"augmented_probe": SHORT},
                           seed=0)
    assert out.metrics["augmented_probe_top1"] >= 0.9
    augment = module.probe_augment(16, 1, 1.0)
    assert not augment.colour and not augment.blur and augment.jitter == 1.0
    assert augment.scale == (0.08, 1.0)


class Vectors(ClusterDataModule):
    """Points of 4 features: nothing to crop or jitter."""

    name, provenance, source, num_classes, input_shape = "vectors", "generated", "random", 2, (4,)

    def load(self) -> TensorSplits:
        x = torch.rand(40, 4, generator=torch.Generator().manual_seed(0))
        y = torch.arange(40) % 2
        return TensorSplits(x[:30], y[:30], x[30:], y[30:])


def test_data_that_are_not_square_images_are_skipped_with_a_note() -> None:
    model = Orientation()
    out = evaluate_encoder(model, Vectors(augmentation="none"), {"augmented_probe": SHORT},
                           seed=0)
    assert out.metrics == {}
    assert out.notes["augmented_probe_top1"] == (
        "skipped: needs square images of 1 or 3 channels (N, C, S, S) to crop and jitter, "
        "got (27, 4)")
    assert model.modes == []  # nothing encoded
