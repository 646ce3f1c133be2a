"""SplitBatchNorm (MoCo's shuffled BatchNorm on one device) against a float64 loop over groups,
channels and elements that shares no code with it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from modules.blocks.split_batch_norm import (
    SplitBatchNorm,
    set_batch_norm_splits,
    split_batch_norms,
)


def naive_split_batch_norm(x, weight, bias, splits, eps):
    """Each of ``splits`` groups of consecutive samples normalised by its own mean and biased
    variance per channel, by loops; returns the output and each group's (mean, unbiased var)."""
    n, c = x.shape[0], x.shape[1]
    size = n // splits
    out = torch.empty_like(x)
    stats = []
    for g in range(splits):
        means, variances = [], []
        for ch in range(c):
            values = [v for i in range(g * size, (g + 1) * size) for v in x[i, ch].flatten()]
            mean = sum(values) / len(values)
            var = sum((v - mean) ** 2 for v in values) / len(values)
            for i in range(g * size, (g + 1) * size):
                out[i, ch] = (x[i, ch] - mean) / torch.sqrt(var + eps) * weight[ch] + bias[ch]
            means.append(float(mean.detach()))
            variances.append(float(var.detach()) * len(values) / (len(values) - 1))
        stats.append((means, variances))
    return out, stats


@pytest.mark.parametrize("splits", [1, 2, 3, 6])
@pytest.mark.parametrize("shape", [(12, 3, 2, 2), (12, 4), (6, 2, 3)])
def test_split_batch_norm_matches_a_loop_over_groups(splits, shape):
    if shape[0] % splits:
        pytest.skip("the groups must be equal")
    generator = torch.Generator().manual_seed(splits)
    x = (torch.randn(shape, generator=generator, dtype=torch.float64) * 3 + 1).requires_grad_()
    bn = SplitBatchNorm(shape[1], num_splits=splits).double()
    with torch.no_grad():
        bn.weight.copy_(torch.rand(shape[1], generator=generator, dtype=torch.float64) + 0.5)
        bn.bias.copy_(torch.randn(shape[1], generator=generator, dtype=torch.float64))
    out = bn(x)
    x_ref = x.detach().clone().requires_grad_()
    weight = bn.weight.detach().clone().requires_grad_()
    expected, stats = naive_split_batch_norm(x_ref, weight, bn.bias.detach(), splits, bn.eps)
    torch.testing.assert_close(out, expected)

    # gradients through the statistics, against autograd on the loop
    probe = torch.randn(shape, generator=generator, dtype=torch.float64)
    grad_x, grad_w = torch.autograd.grad((out * probe).sum(), (x, bn.weight))
    want_x, want_w = torch.autograd.grad((expected * probe).sum(), (x_ref, weight))
    torch.testing.assert_close(grad_x, want_x)
    torch.testing.assert_close(grad_w, want_w)

    # running statistics: momentum 0.1 towards the average of the groups' statistics
    group_means = torch.tensor([m for m, _ in stats], dtype=torch.float64).mean(0)
    group_vars = torch.tensor([v for _, v in stats], dtype=torch.float64).mean(0)
    torch.testing.assert_close(bn.running_mean, 0.1 * group_means)
    torch.testing.assert_close(bn.running_var, 0.9 + 0.1 * group_vars)
    assert int(bn.num_batches_tracked) == 1


def test_one_split_is_torch_batch_norm_and_evaluation_uses_the_running_statistics():
    torch.manual_seed(0)
    x = torch.randn(8, 3, 4, 4)
    plain, split = nn.BatchNorm2d(3), SplitBatchNorm(3, num_splits=1)
    torch.testing.assert_close(split(x), plain(x))
    split.num_splits = 4
    split(x * 2 + 1)
    split.eval()
    torch.testing.assert_close(split(x), F.batch_norm(x, split.running_mean, split.running_var,
                                                      split.weight, split.bias, False))


def test_momentum_none_is_a_cumulative_average_as_torch_batch_norm():
    torch.manual_seed(0)
    batches = [torch.randn(6, 2, 3, 3) for _ in range(3)]
    plain, split = nn.BatchNorm2d(2, momentum=None), SplitBatchNorm(2, num_splits=1,
                                                                    momentum=None)
    split.num_splits = 2  # groups of one batch each: the same data seen as two batches
    for x in batches:
        split(x)
        plain(x[:3])
        plain(x[3:])
    # two groups averaged per step vs one group per step: equal means after equal counts
    torch.testing.assert_close(split.running_mean, plain.running_mean, rtol=0, atol=1e-6)


def test_channels_last_gives_the_same_values_in_the_same_layout():
    torch.manual_seed(0)
    x = torch.randn(8, 4, 5, 5)
    bn = SplitBatchNorm(4, num_splits=4)
    out = bn(x.contiguous(memory_format=torch.channels_last))
    torch.testing.assert_close(out, SplitBatchNorm(4, num_splits=4)(x))
    assert out.is_contiguous(memory_format=torch.channels_last)


def test_a_batch_the_splits_do_not_divide_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"a batch of 6 does not split into 4 equal groups"):
        SplitBatchNorm(2, num_splits=4)(torch.randn(6, 2))


def test_conversion_keeps_parameters_statistics_and_state_dict_keys():
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Sequential(nn.BatchNorm1d(2)))
    net[1].running_mean.fill_(0.5)
    keys, weight = list(net.state_dict()), net[1].weight
    split_batch_norms(net)
    assert [type(m).__name__ for m in (net[1], net[2][0])] == ["SplitBatchNorm"] * 2
    assert list(net.state_dict()) == keys and net[1].weight is weight
    assert float(net[1].running_mean[0]) == 0.5
    set_batch_norm_splits(net, 3)
    assert net[1].num_splits == net[2][0].num_splits == 3
