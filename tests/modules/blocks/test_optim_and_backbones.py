"""Learning-rate schedule, parameter groups, optimisers, the MLP builder and the backbones."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
import torch
from torch import nn

from modules.blocks.backbones import BACKBONES, build_backbone
from modules.blocks.heads import mlp
from modules.blocks.optim import (
    OPTIMIZERS,
    build_optimizer,
    parameter_groups,
    warmup_cosine,
    warmup_stable_decay,
)

# -- warmup_cosine ------------------------------------------------------------------------------


def cosine(progress: float) -> float:
    return 0.5 * (1 + math.cos(math.pi * progress))


@pytest.mark.parametrize("total", [1, 7, 100])
def test_no_warmup_is_half_cosine_from_one_to_zero(total: int) -> None:
    for step in range(total + 1):
        assert warmup_cosine(step, 0, total) == pytest.approx(cosine(step / total), abs=1e-12)
    assert warmup_cosine(0, 0, total) == pytest.approx(1.0)
    assert warmup_cosine(total, 0, total) == pytest.approx(0.0, abs=1e-12)


def test_closed_form_values_with_warmup() -> None:
    warmup, total = 4, 14  # 10 decay steps
    # Linear warm-up reaching the full rate on the last warm-up step.
    assert [warmup_cosine(s, warmup, total) for s in range(warmup)] == pytest.approx(
        [0.25, 0.5, 0.75, 1.0])
    assert warmup_cosine(warmup, warmup, total) == pytest.approx(1.0)
    assert warmup_cosine(warmup + 5, warmup, total) == pytest.approx(0.5)  # half-way: cos(pi/2)
    assert warmup_cosine(warmup + 2, warmup, total) == pytest.approx(cosine(0.2))
    assert warmup_cosine(total, warmup, total) == pytest.approx(0.0, abs=1e-12)


def test_warmup_rises_then_decay_is_monotone_and_ends_at_zero() -> None:
    warmup, total = 10, 250
    factors = [warmup_cosine(s, warmup, total) for s in range(total + 1)]
    assert all(0.0 <= f <= 1.0 for f in factors)
    rising = factors[:warmup]
    assert all(a < b for a, b in pairwise(rising))
    assert rising[0] > 0  # the very first step is not wasted at a zero rate
    decay = factors[warmup:]
    assert all(a >= b for a, b in pairwise(decay))
    assert decay[0] == pytest.approx(1.0)
    assert factors[-1] == pytest.approx(0.0, abs=1e-12)


def test_stays_at_zero_after_the_last_step() -> None:
    # Lightning may step the scheduler once more than estimated; the rate must not rise again.
    for step in (100, 101, 150, 1000):
        assert warmup_cosine(step, 10, 100) == pytest.approx(0.0, abs=1e-12)


def test_warmup_longer_than_total_does_not_crash() -> None:
    factors = [warmup_cosine(s, 5, 3) for s in range(8)]
    assert all(math.isfinite(f) and 0.0 <= f <= 1.0 for f in factors)


def test_warmup_stable_decay_against_its_three_pieces() -> None:
    """Warm-up (step + 1) / W, the full rate, then (T - step) / (D + 1) in the last D steps:
    never 0 before the end, 1 on the whole stable stretch, falling in the decay."""
    warmup, total, decay = 3, 20, 5
    factors = [warmup_stable_decay(s, warmup, total, decay) for s in range(total)]
    for step, factor in enumerate(factors):
        if step < warmup:
            expected = (step + 1) / warmup
        elif step < total - decay:
            expected = 1.0
        else:
            expected = (total - step) / (decay + 1)
        assert factor == pytest.approx(expected, abs=1e-12), step
    assert all(a > b for a, b in zip(factors[-decay - 1:-1], factors[-decay:], strict=True))
    assert min(factors) > 0
    assert [warmup_stable_decay(s, 0, 4, 0) for s in range(4)] == [1.0] * 4  # no decay


# -- parameter_groups ---------------------------------------------------------------------------


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, bias=True)
        self.bn2d = nn.BatchNorm2d(4)
        self.linear = nn.Linear(4, 3)
        self.bn1d = nn.BatchNorm1d(3)
        self.frozen = nn.Linear(3, 2)
        self.frozen.requires_grad_(False)


def ids(params) -> set[int]:
    return {id(p) for p in params}


def test_parameter_groups_split_weights_from_biases_and_norms() -> None:
    model = Tiny()
    groups = parameter_groups(model, weight_decay=0.05)
    by_decay = {g["weight_decay"]: ids(g["params"]) for g in groups}
    assert set(by_decay) == {0.05, 0.0}
    assert by_decay[0.05] == ids([model.conv.weight, model.linear.weight])
    assert by_decay[0.0] == ids([model.conv.bias, model.bn2d.weight, model.bn2d.bias,
                                 model.linear.bias, model.bn1d.weight, model.bn1d.bias])
    # Frozen parameters are left out altogether.
    assert not (ids(model.frozen.parameters()) & (by_decay[0.05] | by_decay[0.0]))


def test_parameter_groups_without_exclusion_decay_every_trainable_parameter() -> None:
    # Lightning Bolts' SimCLR with exclude_bn_bias false (the Kernel-InfoNCE authors' code)
    model = Tiny()
    (group,) = parameter_groups(model, weight_decay=0.05, exclude_bias_and_norm=False)
    assert group["weight_decay"] == 0.05
    trainable = [p for name, p in model.named_parameters() if not name.startswith("frozen.")]
    assert ids(group["params"]) == ids(trainable)
    assert len(group["params"]) == len(trainable)


def naive_lars_step(weight: list[float], grad: list[float], lr: float, weight_decay: float,
                    trust: float = 1e-3, eps: float = 1e-8) -> list[float]:
    """You et al. 2017's LARS, first step (the momentum buffer is the update itself), one
    parameter in float64 loops: w - lr * trust * |w| / (|g| + wd |w| + eps) * (g + wd w)."""
    w_norm = math.sqrt(sum(w * w for w in weight))
    g_norm = math.sqrt(sum(g * g for g in grad))
    ratio = trust * w_norm / (g_norm + weight_decay * w_norm + eps)
    return [w - lr * ratio * (g + weight_decay * w) for w, g in zip(weight, grad, strict=True)]


@pytest.mark.parametrize("weight_decay", [1e-6, 1e-2])
def test_lars_adapts_biases_and_norms_without_exclusion(weight_decay: float) -> None:
    # Every parameter, a BatchNorm's scale and shift and a bias included, takes LARS's
    # trust-ratio step, as Bolts' LARS gives them with exclude_bn_bias false.
    torch.manual_seed(0)
    model = Tiny()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.1 * torch.randn_like(param))  # BatchNorm starts at 1 and 0
    before = {n: p.detach().double().flatten().tolist() for n, p in model.named_parameters()}
    grads = {n: torch.randn_like(p) for n, p in model.named_parameters()}
    optimizer = build_optimizer(parameter_groups(model, weight_decay, exclude_bias_and_norm=False),
                                "lars", lr=0.5)
    for name, param in model.named_parameters():
        param.grad = grads[name].clone() if param.requires_grad else None
    optimizer.step()
    for name in ("conv.bias", "bn2d.weight", "bn2d.bias", "linear.weight", "bn1d.bias"):
        expected = naive_lars_step(before[name], grads[name].double().flatten().tolist(), 0.5,
                                   weight_decay)
        got = model.get_parameter(name).detach().double().flatten().tolist()
        assert got == pytest.approx(expected, rel=1e-5, abs=1e-7), name
        plain = [w - 0.5 * g for w, g in zip(before[name], grads[name].flatten().tolist(),
                                             strict=True)]
        assert got != pytest.approx(plain, rel=1e-3), name  # not the plain SGD step


def test_parameter_groups_drop_empty_groups() -> None:
    groups = parameter_groups(nn.BatchNorm1d(3), weight_decay=0.1)
    assert len(groups) == 1 and groups[0]["weight_decay"] == 0.0


def test_parameter_groups_cover_a_real_backbone_exactly_once() -> None:
    model = build_backbone("small_cnn", (1, 8, 8), width=4)
    groups = parameter_groups(model, weight_decay=1e-4)
    seen = [id(p) for g in groups for p in g["params"]]
    assert len(seen) == len(set(seen)) == len(list(model.parameters()))
    for name, param in model.named_parameters():
        group = next(g for g in groups if id(param) in ids(g["params"]))
        expected = 1e-4 if isinstance(model.get_submodule(name.rsplit(".", 1)[0]),
                                      nn.Conv2d) else 0.0
        assert group["weight_decay"] == expected, name


# -- build_optimizer ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw", "lars"])
def test_build_optimizer_types_and_per_group_weight_decay(name: str) -> None:
    from timm.optim import Lars

    model = Tiny()
    optimizer = build_optimizer(parameter_groups(model, 0.01), name, lr=0.2, momentum=0.8)
    expected_type = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam,
                     "adamw": torch.optim.AdamW, "lars": Lars}[name]
    assert type(optimizer) is expected_type
    assert sorted(g["weight_decay"] for g in optimizer.param_groups) == [0.0, 0.01]
    assert all(g["lr"] == 0.2 for g in optimizer.param_groups)
    if name in ("sgd", "lars"):
        assert all(g["momentum"] == 0.8 for g in optimizer.param_groups)


def test_build_optimizer_keeps_a_group_specific_lr() -> None:
    weight, probe = nn.Parameter(torch.ones(2, 2)), nn.Parameter(torch.ones(2))
    groups = [{"params": [weight], "weight_decay": 0.1},
              {"params": [probe], "weight_decay": 0.0, "lr": 0.5}]
    optimizer = build_optimizer(groups, "sgd", lr=0.1)
    assert [g["lr"] for g in optimizer.param_groups] == [0.1, 0.5]


def test_lars_leaves_the_no_decay_group_unadapted() -> None:
    # The claim parameter_groups relies on: a zero-decay group takes plain SGD steps under LARS.
    torch.manual_seed(0)
    grad = torch.randn(5)
    updated = []
    for name in ("lars", "sgd"):
        bias = nn.Parameter(torch.ones(5))
        optimizer = build_optimizer([{"params": [bias], "weight_decay": 0.0}], name, lr=0.1)
        bias.grad = grad.clone()
        optimizer.step()
        updated.append(bias.detach().clone())
    torch.testing.assert_close(updated[0], updated[1])
    torch.testing.assert_close(updated[1], torch.ones(5) - 0.1 * grad)


def test_unknown_optimizer_lists_the_available_ones() -> None:
    with pytest.raises(ValueError, match="rmsprop") as info:
        build_optimizer(parameter_groups(Tiny(), 0.0), "rmsprop", lr=0.1)
    for name in OPTIMIZERS:
        assert name in str(info.value)


# -- mlp ----------------------------------------------------------------------------------------


def test_mlp_layers_and_shapes() -> None:
    head = mlp([6, 11, 7, 3])
    kinds = [type(m) for m in head]
    assert kinds == [nn.Linear, nn.BatchNorm1d, nn.ReLU, nn.Linear, nn.BatchNorm1d, nn.ReLU,
                     nn.Linear]
    linears = [m for m in head if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(6, 11), (11, 7), (7, 3)]
    # A bias right before BatchNorm is redundant; the output layer keeps its bias.
    assert [m.bias is not None for m in linears] == [False, False, True]
    assert head(torch.randn(4, 6)).shape == (4, 3)


def test_mlp_without_batch_norm_and_with_last_batch_norm() -> None:
    plain = mlp([5, 9, 2], batch_norm=False)
    assert [type(m) for m in plain] == [nn.Linear, nn.ReLU, nn.Linear]
    assert all(m.bias is not None for m in plain if isinstance(m, nn.Linear))
    normed = mlp([5, 2], last_batch_norm=True)
    assert isinstance(normed[-1], nn.BatchNorm1d) and not normed[-1].affine
    out = normed(torch.randn(16, 5) * 10 + 3)  # training mode: per-feature batch statistics
    torch.testing.assert_close(out.mean(0), torch.zeros(2), atol=1e-5, rtol=0)


@pytest.mark.parametrize("dims", [[], [8]])
def test_mlp_needs_two_sizes(dims) -> None:
    with pytest.raises(ValueError):
        mlp(dims)


# -- build_backbone -----------------------------------------------------------------------------


@pytest.mark.parametrize("name, input_shape, width", [
    ("small_cnn", (1, 8, 8), 8),
    ("small_cnn", (3, 12, 12), 4),
    ("five_layer_cnn", (1, 28, 28), 16),
    ("five_layer_cnn", (3, 32, 32), 4),
    ("mlp", (4,), 4),
    ("mlp", (1, 8, 8), 2),
    ("resnet18", (3, 8, 8), 32),
    ("resnet18", (1, 8, 8), 32),
])
def test_backbone_output_shape_matches_output_dim(name: str, input_shape, width: int) -> None:
    torch.manual_seed(0)
    model = build_backbone(name, input_shape, width=width)
    x = torch.randn(3, *input_shape)
    out = model(x)
    assert out.shape == (3, model.output_dim)
    assert torch.isfinite(out).all()


def test_backbone_output_dims_follow_width_and_depth() -> None:
    assert build_backbone("small_cnn", (1, 8, 8), width=8).output_dim == 32
    assert build_backbone("five_layer_cnn", (1, 28, 28), width=16).output_dim == 256
    assert build_backbone("mlp", (4,), width=8).output_dim == 32
    assert build_backbone("resnet18", (3, 8, 8)).output_dim == 512


def test_resnet18_imagenet_stem_on_grey_images() -> None:
    model = build_backbone("resnet18", (1, 32, 32), cifar_stem=False)
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, model.output_dim)


def test_the_five_layer_cnn_keeps_where_things_are() -> None:
    """A square moved across a black image (by a multiple of the networks' total stride, its
    footprint inside the image): the small CNN's global average pool gives the same features
    (nothing but the square is non-zero, and it sums over all positions), while the five-layer
    CNN's 2x2 grid puts it in another cell."""
    torch.manual_seed(0)
    here = torch.zeros(1, 1, 28, 28)
    here[..., 8:12, 8:12] = 1.0
    there = here.roll((8, 8), dims=(2, 3))  # 16:20, 16:20

    def relative_change(name: str, **kwargs) -> float:
        model = build_backbone(name, (1, 28, 28), **kwargs).eval()
        with torch.no_grad():
            a, b = model(here), model(there)
        return float((a - b).norm() / a.norm())

    assert relative_change("small_cnn", width=4, pools=2) < 1e-5
    assert relative_change("five_layer_cnn", width=4) > 0.5


def test_unknown_backbone_lists_the_available_ones() -> None:
    with pytest.raises(ValueError, match="resnet7") as info:
        build_backbone("resnet7", (3, 8, 8))
    for name in BACKBONES:
        assert name in str(info.value)
