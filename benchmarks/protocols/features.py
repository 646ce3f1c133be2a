"""Frozen-encoder feature extraction, shared by every protocol."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import torch
from torch import Tensor, nn

from modules.methods.base import eval_mode


@torch.no_grad()
def extract_features(encoder: nn.Module | Callable[[Tensor], Tensor],
                     dataloader: Iterable[tuple[Tensor, Tensor]],
                     device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
    """Features and labels of every batch of ``dataloader`` (evaluation transform, unshuffled).

    ``encoder`` is a module, or a module's ``encode`` method; its module is put in eval mode
    (BatchNorm uses running statistics) for the extraction; every submodule's own mode is
    restored afterwards.

    Returns ``(features (n, d) float32 on the CPU, labels (n,) int64)``.
    """
    module = encoder if isinstance(encoder, nn.Module) else getattr(encoder, "__self__", None)
    if not isinstance(module, nn.Module):
        module = None
    if module is not None and device is None:
        device = next(iter(module.parameters()), torch.empty(0)).device
    features, labels = [], []
    with eval_mode(module):
        for x, y in dataloader:
            features.append(encoder(x.to(device)).float().cpu())
            labels.append(y.cpu())
    return torch.cat(features), torch.cat(labels).long()


@torch.no_grad()
def layer_outputs(model: nn.Module, dataloader) -> tuple[list[np.ndarray], np.ndarray]:
    """Every layer's outputs (``model.layer_outputs``) over the loader's batches, concatenated,
    in eval mode; the model's modes are restored. Returns ``(per-layer (n, d) arrays, labels)``."""
    device = next(model.parameters()).device
    per_layer: list[list[np.ndarray]] = []
    labels = []
    with eval_mode(model):
        for x, y in dataloader:
            outputs = model.layer_outputs(x.to(device))
            if not per_layer:
                per_layer = [[] for _ in outputs]
            for store, out in zip(per_layer, outputs, strict=True):
                store.append(out.float().cpu().numpy())
            labels.append(y.numpy())
    return [np.concatenate(parts) for parts in per_layer], np.concatenate(labels)
