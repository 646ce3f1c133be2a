"""The target-network hook (modules/blocks/target_network.py): the moving average against a
per-number float64 loop, the momentum schedule against BYOL's formula as solo-learn writes it,
and the base class driving it over a Trainer's optimiser steps."""

from __future__ import annotations

import math

import lightning.pytorch as pl
import pytest
import torch
from torch import nn

from datamodules import DATAMODULES
from modules.blocks.target_network import (
    MomentumTarget,
    frozen_copy,
    moving_average_update,
    scheduled_momentum,
)
from modules.methods import RepresentationModule


def two_nets(seed: int) -> tuple[nn.Module, nn.Module]:
    """An online network with BatchNorm and its target, made to differ everywhere."""
    torch.manual_seed(seed)
    online = nn.Sequential(nn.Linear(3, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 2))
    target = frozen_copy(online)
    with torch.no_grad():
        for p in online.parameters():
            p.add_(torch.randn_like(p))
        online[1].running_mean.add_(1.0)
        online[1].running_var.mul_(3.0)
    return online, target


@pytest.mark.parametrize("momentum", [0.0, 0.5, 0.99, 0.999])
def test_the_moving_average_is_the_per_number_rule_for_every_parameter(momentum):
    """xi <- tau xi + (1 - tau) theta (BYOL eq. 1, MoCo eq. 2), one number at a time in Python
    floats, over two modules at once; the buffers are the online ones, copied."""
    (online_a, target_a), (online_b, target_b) = two_nets(0), two_nets(1)
    expected = []
    for online, target in ((online_a, target_a), (online_b, target_b)):
        for o, t in zip(online.parameters(), target.parameters(), strict=True):
            flat = [momentum * x + (1 - momentum) * y
                    for x, y in zip(t.double().flatten().tolist(), o.double().flatten().tolist(),
                                    strict=True)]
            expected.append(torch.tensor(flat, dtype=torch.float64).view(t.shape))
    moving_average_update([target_a, target_b], [online_a, online_b], momentum)
    got = [*target_a.parameters(), *target_b.parameters()]
    assert len(got) == len(expected) == 12  # two Linear and one BatchNorm each
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.double(), e, rtol=1e-6, atol=1e-7)
        assert not g.requires_grad
    for online, target in ((online_a, target_a), (online_b, target_b)):
        for b_online, b_target in zip(online.buffers(), target.buffers(), strict=True):
            assert torch.equal(b_online, b_target)


def solo_learn_tau(base_tau: float, cur_step: int, max_steps: int, final_tau: float = 1.0):
    """solo-learn's ``MomentumUpdater.update_tau`` (solo/utils/momentum.py, commit 2f8a8b5),
    transcribed: BYOL's cosine increase of tau from its base value to ``final_tau``."""
    return final_tau - (final_tau - base_tau) * (math.cos(math.pi * cur_step / max_steps) + 1) / 2


@pytest.mark.parametrize("base, total", [(0.996, 10), (0.99, 7), (0.5, 1000)])
def test_the_cosine_schedule_rises_from_its_base_to_one_as_byol_and_solo_learn(base, total):
    values = [scheduled_momentum(base, "cosine", k, total) for k in range(total + 1)]
    for k, value in enumerate(values):
        assert value == pytest.approx(solo_learn_tau(base, k, total), abs=1e-15)
    assert values[0] == pytest.approx(base, abs=1e-15) and values[-1] == 1.0
    assert all(a < b for a, b in zip(values, values[1:], strict=False))
    # constant: MoCo's m at every step; cosine without an end (an infinite run): its base
    assert {scheduled_momentum(base, "constant", k, total) for k in range(total)} == {base}
    assert scheduled_momentum(base, "cosine", 5, math.inf) == base


def test_a_bad_schedule_momentum_or_pairing_is_refused_in_one_line():
    online = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="momentum_schedule must be one of constant, cosine, "
                                         "got 'linear'"):
        MomentumTarget([online], [frozen_copy(online)], momentum=0.9, schedule="linear")
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\), got 1.0"):
        MomentumTarget([online], [frozen_copy(online)], momentum=1.0)
    with pytest.raises(ValueError, match="one target module per online module, got 1 for 2"):
        MomentumTarget([online, online], [frozen_copy(online)], momentum=0.9)
    with pytest.raises(ValueError, match="the target has 6 parameters and the online network 2"):
        moving_average_update([nn.Linear(2, 2)] * 3, [nn.Linear(2, 2)], 0.9)


def test_the_target_forward_applies_its_modules_in_order_without_gradients():
    online_a, online_b = nn.Linear(3, 4), nn.Linear(4, 2)
    target = MomentumTarget([online_a, online_b], [frozen_copy(online_a), frozen_copy(online_b)],
                            momentum=0.9)
    x = torch.randn(5, 3, requires_grad=True)
    out = target(x)
    torch.testing.assert_close(out, online_b(online_a(x)))
    assert not out.requires_grad


class TargetProbe(RepresentationModule):
    """A method with a cosine-scheduled target network whose loss reads the target's outputs
    and the views: the base class's hook, as BYOL uses it."""

    def __init__(self, num_classes: int, input_shape, **kwargs) -> None:
        super().__init__(num_classes, input_shape, **kwargs)
        self.projector = nn.Linear(self.backbone.output_dim, 4)
        self.target_backbone = frozen_copy(self.backbone)
        self.target_projector = frozen_copy(self.projector)
        self.momentum_target = MomentumTarget([self.backbone, self.projector],
                                              [self.target_backbone, self.target_projector],
                                              momentum=0.9, schedule="cosine")
        self.seen: list = []

    def views_objective(self, step) -> torch.Tensor:
        self.seen.append(step)
        z = self.projector(step.features)
        return (z - step.targets).pow(2).mean()


def test_the_base_class_moves_the_target_each_step_on_the_schedule_over_the_training(tmp_path):
    """Over a Trainer's 4 optimiser steps the target moves at tau_k of BYOL's schedule with
    K = 4, before each step's forward; the objective sees the views, the online features and
    the target's outputs of those views (no gradient)."""
    torch.manual_seed(0)
    model = TargetProbe(num_classes=10, input_shape=(1, 8, 8), backbone_width=4)
    momenta = []
    update = model.momentum_target.update
    model.momentum_target.update = lambda momentum: (momenta.append(momentum), update(momentum))
    trainer = pl.Trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=0, logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, default_root_dir=tmp_path,
                         accelerator="cpu")
    trainer.fit(model, datamodule=DATAMODULES["digits"](batch_size=16))
    assert momenta == pytest.approx([solo_learn_tau(0.9, k, 4) for k in range(4)], abs=1e-15)
    step = model.seen[-1]
    assert step.n_views == 2 and step.features.shape == (32, model.backbone.output_dim)
    assert step.targets.shape == (32, 4) and not step.targets.requires_grad
    with torch.no_grad():  # in training mode, as in the step: BatchNorm of the batch
        expected = model.train().target_projector(model.target_backbone(torch.cat(step.views)))
    torch.testing.assert_close(step.targets, expected, rtol=0, atol=0)  # the last step's views


def test_the_target_does_not_move_outside_training():
    model = TargetProbe(num_classes=10, input_shape=(1, 8, 8), backbone_width=4).eval()
    with torch.no_grad():
        for p in model.backbone.parameters():
            p.add_(1.0)
    before = [p.clone() for p in model.target_backbone.parameters()]
    model.update_target()
    assert all(torch.equal(a, b) for a, b in zip(before, model.target_backbone.parameters(),
                                                 strict=True))
    model.train().update_target()  # no Trainer: the base momentum, 0.9
    for k, k0, q in zip(model.target_backbone.parameters(), before, model.backbone.parameters(),
                        strict=True):
        torch.testing.assert_close(k, 0.9 * k0 + 0.1 * q)


def test_a_compiled_online_module_keeps_the_target_following_its_parameters():
    """On a GPU a run compiles the backbone and projector (``torch.compile`` wraps each, sharing
    its parameters): the target still follows the very parameters the optimiser trains."""
    model = TargetProbe(num_classes=10, input_shape=(1, 8, 8), backbone_width=4)
    model.backbone, model.projector = torch.compile(model.backbone), torch.compile(model.projector)
    trained = [id(p) for m in (model.backbone, model.projector) for p in m.parameters()]
    followed = [id(p) for m in model.momentum_target.onlines for p in m.parameters()]
    assert followed == trained
