"""Frozen-encoder feature extraction, shared by every protocol."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch
from torch import Tensor, nn

from modules.methods.base import eval_mode


def full_batches(dataloader: Iterable[tuple[Tensor, Tensor]]
                 ) -> Iterator[tuple[Tensor, Tensor, int]]:
    """``(x, y, n)`` for every batch, the last filled up to the first batch's size with the
    split's first samples; only its first ``n`` rows are its own. A model that mixes a batch's
    samples (TransFusion's fusion blocks, eq. 2) then gives every sample a context of one size.

    >>> loader = [(torch.arange(3), torch.arange(3)), (torch.arange(3, 4), torch.arange(3, 4))]
    >>> [(x.tolist(), n) for x, _, n in full_batches(loader)]
    [([0, 1, 2], 3), ([3, 0, 1], 1)]
    """
    batches = iter(dataloader)
    first = held = next(batches, None)
    if first is None:
        return
    for batch in batches:  # each batch is held until the next shows it was not the last
        yield held[0], held[1], len(held[0])
        held = batch
    x, y = held
    need = len(first[0]) - len(x)
    if need > 0:
        x, y = torch.cat([x, first[0][:need]]), torch.cat([y, first[1][:need]])
    yield x, y, len(held[0])


def mixes_batch(model: object) -> bool:
    """Whether ``model``'s outputs for one sample depend on the others of its batch: a model
    of fusion blocks (:class:`~modules.methods.capabilities.LayerwiseModel`)."""
    from modules.methods.capabilities import LayerwiseModel

    return isinstance(model, LayerwiseModel)


@torch.no_grad()
def extract_features(encoder: nn.Module | Callable[[Tensor], Tensor],
                     dataloader: Iterable[tuple[Tensor, Tensor]],
                     device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
    """Features and labels of every batch of ``dataloader``, ``encoder``'s module in eval mode
    (each submodule's mode restored after); a model that :func:`mixes_batch` gets
    :func:`full_batches`.

    Returns ``(features (n, d) float32 on the CPU, labels (n,) int64)``.
    """
    module = encoder if isinstance(encoder, nn.Module) else getattr(encoder, "__self__", None)
    if not isinstance(module, nn.Module):
        module = None
    if module is not None and device is None:
        device = next(iter(module.parameters()), torch.empty(0)).device
    features, labels = [], []
    batches = (full_batches(dataloader) if mixes_batch(module)
               else ((x, y, len(x)) for x, y in dataloader))
    with eval_mode(module):
        for x, y, n in batches:
            features.append(encoder(x.to(device))[:n].float().cpu())
            labels.append(y[:n].cpu())
    return torch.cat(features), torch.cat(labels).long()


@torch.no_grad()
def layer_outputs(model: nn.Module, dataloader) -> tuple[list[np.ndarray], np.ndarray]:
    """Every layer's outputs (``model.layer_outputs``) over the loader's batches, concatenated,
    in eval mode; the model's modes are restored. Returns ``(per-layer (n, d) arrays, labels)``."""
    device = next(model.parameters()).device
    per_layer: list[list[np.ndarray]] = []
    labels = []
    with eval_mode(model):
        for x, y, n in full_batches(dataloader):  # fusion blocks: a full batch each time
            outputs = model.layer_outputs(x.to(device))
            if not per_layer:
                per_layer = [[] for _ in outputs]
            for store, out in zip(per_layer, outputs, strict=True):
                store.append(out[:n].float().cpu().numpy())
            labels.append(y[:n].numpy())
    return [np.concatenate(parts) for parts in per_layer], np.concatenate(labels)
