r"""BatchNorm over groups of a batch: MoCo's shuffled BatchNorm emulated on one device.

MoCo (He et al., "Momentum Contrast for Unsupervised Visual Representation Learning", CVPR 2020,
arXiv:1911.05722, §3.3 "Shuffling BN") trains on 8 GPUs, each normalising its own 32 images, and
shuffles the key encoder's images across the GPUs, so that a query and its positive key are
normalised with statistics of different images and cannot meet through them. Its CIFAR-10 demo
emulates the 8 GPUs on one (``SplitBatchNorm``, 8 splits of a batch of 512); without it, its
README reports about 4 points lost. :class:`SplitBatchNorm` is that emulation: in training, each
of ``num_splits`` equal groups of consecutive samples is normalised with its own statistics

.. math::
    y_{n,c} = \gamma_c\,\frac{x_{n,c} - \mu_{g(n),c}}{\sqrt{\sigma^2_{g(n),c} + \epsilon}}
    + \beta_c,\qquad
    \mu_{g,c},\ \sigma^2_{g,c}:\ \text{mean and biased variance of channel } c
    \text{ over group } g \text{ (samples and positions)}

and the running statistics move towards the groups' average (unbiased variances), as the
average of ``num_splits`` devices' own BatchNorms would. In evaluation it is plain BatchNorm.
Groups of consecutive samples (the demo interleaves them) let one pass over ``V`` views stacked
view after view, with ``V`` times the splits, normalise each view on its own, as the demo's one
pass per view does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class SplitBatchNorm(nn.modules.batchnorm._NormBase):
    """BatchNorm (any input ``(N, C, *)``) whose training statistics come from ``num_splits``
    equal groups of consecutive samples; ``num_splits = 1`` is torch's BatchNorm.

    Not a ``_BatchNorm`` on purpose: ``SyncBatchNorm.convert_sync_batchnorm`` (Lightning's
    ``sync_batchnorm``, on for multi-GPU runs) leaves it alone, so each device keeps its own
    statistics, as shuffled BatchNorm needs.

    >>> bn = SplitBatchNorm(3, num_splits=2)
    >>> x = torch.cat([torch.zeros(4, 3, 2, 2), 10 + torch.randn(4, 3, 2, 2)])
    >>> round(bn(x)[:4].abs().max().item(), 6)  # the first group is normalised on its own
    0.0
    """

    def __init__(self, num_features: int, num_splits: int = 1, eps: float = 1e-5,
                 momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        self.num_splits = num_splits

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"SplitBatchNorm expects (N, C, *) input, got {input.dim()}D")

    def forward(self, x: Tensor) -> Tensor:
        self._check_input_dim(x)
        batch_statistics = self.training or not self.track_running_stats
        if self.num_splits > 1 and batch_statistics:
            return self._grouped(x)
        factor = 0.0  # torch's BatchNorm, step for step
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            factor = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                      else self.momentum)
        tracked = not self.training or self.track_running_stats
        return F.batch_norm(x, self.running_mean if tracked else None,
                            self.running_var if tracked else None, self.weight, self.bias,
                            batch_statistics, factor, self.eps)

    def _grouped(self, x: Tensor) -> Tensor:
        n, splits = x.shape[0], self.num_splits
        if n % splits:
            raise ValueError(f"SplitBatchNorm: a batch of {n} does not split into {splits} "
                             "equal groups; use a batch size that is a multiple of it")
        grouped = x.unflatten(0, (splits, n // splits))  # (G, N/G, C, *): a view in any layout
        reduced = (1, *range(3, grouped.dim()))
        var, mean = torch.var_mean(grouped, dim=reduced, correction=0, keepdim=True)
        dtype = torch.promote_types(x.dtype, torch.float32)  # the statistics' arithmetic
        scale = torch.rsqrt(var.to(dtype) + self.eps)  # (G, 1, C, 1...)
        if self.affine:
            shape = (1, 1, -1) + (1,) * (grouped.dim() - 3)
            scale = scale * self.weight.view(shape)
        shift = -mean.to(dtype) * scale
        if self.affine:
            shift = shift + self.bias.view(shape)
        if self.training and self.track_running_stats:
            self._track(mean, var, grouped[0, :, 0].numel())
        # one fused multiply-add; autograd keeps only x and the (G, C) statistics
        return torch.addcmul(shift.to(x.dtype), grouped, scale.to(x.dtype)).flatten(0, 1)

    @torch.no_grad()
    def _track(self, mean: Tensor, var: Tensor, count: int) -> None:
        """Running statistics moved by the average of the groups' (unbiased) statistics."""
        self.num_batches_tracked.add_(1)
        factor = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                  else self.momentum)
        group_mean = mean.flatten(1).mean(0).to(self.running_mean.dtype)  # (C,)
        unbiased = var.flatten(1) * (count / max(count - 1, 1))
        self.running_mean.lerp_(group_mean, factor)
        self.running_var.lerp_(unbiased.mean(0).to(self.running_var.dtype), factor)


def split_batch_norms(module: nn.Module) -> nn.Module:
    """``module`` with every BatchNorm (1d, 2d, 3d) replaced by a :class:`SplitBatchNorm` that
    holds the same parameters and statistics (state-dict keys unchanged), one split each until
    :func:`set_batch_norm_splits` says otherwise.

    >>> net = split_batch_norms(nn.Sequential(nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2)))
    >>> type(net[1]).__name__
    'SplitBatchNorm'
    """
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        split = SplitBatchNorm(module.num_features, 1, module.eps, module.momentum,
                               module.affine, module.track_running_stats)
        if module.affine:
            split.weight, split.bias = module.weight, module.bias
        if module.track_running_stats:
            split.running_mean, split.running_var = module.running_mean, module.running_var
            split.num_batches_tracked = module.num_batches_tracked
        split.train(module.training)
        return split
    for name, child in module.named_children():
        module.add_module(name, split_batch_norms(child))
    return module


def set_batch_norm_splits(module: nn.Module, num_splits: int) -> None:
    """Every :class:`SplitBatchNorm` in ``module`` normalises ``num_splits`` groups from now on."""
    for submodule in module.modules():
        if isinstance(submodule, SplitBatchNorm):
            submodule.num_splits = num_splits
