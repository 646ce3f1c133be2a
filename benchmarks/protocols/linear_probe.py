"""Linear evaluation on frozen features (Kernel-InfoNCE's protocol)."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from modules.ranges import check_count, check_non_negative, check_positive


def _as_tensors(x, y) -> tuple[Tensor, Tensor]:
    x = torch.as_tensor(np.asarray(x) if not isinstance(x, Tensor) else x).float()
    y = torch.as_tensor(np.asarray(y) if not isinstance(y, Tensor) else y).long()
    if x.dim() != 2 or y.dim() != 1 or len(x) != len(y):
        raise ValueError(f"features must be (n, d) and labels (n,), got {tuple(x.shape)} and "
                         f"{tuple(y.shape)}")
    return x, y


def check_linear_probe_settings(epochs: int = 100, lr: float = 0.3, batch_size: int = 64,
                                weight_decay: float = 1e-6) -> None:
    """At least one epoch of batches of at least one feature, a positive learning rate and a
    non-negative weight decay: otherwise the probe is never trained (its score is chance) or the
    schedule divides by zero."""
    check_count("epochs", epochs)
    check_positive("lr", lr)
    check_count("batch_size", batch_size)
    check_non_negative("weight_decay", weight_decay)


def linear_probe_accuracy(train_x, train_y, test_x, test_y, epochs: int = 100, lr: float = 0.3,
                          batch_size: int = 64, weight_decay: float = 1e-6, seed: int = 0,
                          device: torch.device | str | None = None) -> dict[str, float]:
    """Train a linear layer on frozen features, score it on the test features after the last epoch.

    Kernel-InfoNCE (arXiv:2303.15103), appendix B: SGD (momentum 0.9), batch size 64, weight decay
    1e-6, 100 epochs, learning rate 0.3 decayed to 0 by a cosine schedule (per step). The test
    split is never used to pick an epoch.

    Returns ``{"top1": ...}`` (fractions in [0, 1]), plus ``"top5"`` with at least 100 classes.
    The settings' ranges: :func:`check_linear_probe_settings`.
    """
    check_linear_probe_settings(epochs, lr, batch_size, weight_decay)
    train_x, train_y = _as_tensors(train_x, train_y)
    test_x, test_y = _as_tensors(test_x, test_y)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    num_classes = int(max(train_y.max(), test_y.max())) + 1
    generator = torch.Generator().manual_seed(seed)
    torch_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    head = torch.nn.Linear(train_x.shape[1], num_classes).to(device)
    torch.random.set_rng_state(torch_state)
    optimizer = torch.optim.SGD(head.parameters(), lr=lr, momentum=0.9, weight_decay=weight_decay)
    steps_per_epoch = math.ceil(len(train_y) / batch_size)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs * steps_per_epoch)
    train_x, train_y = train_x.to(device), train_y.to(device)
    for _ in range(epochs):
        order = torch.randperm(len(train_y), generator=generator).to(device)
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            loss = F.cross_entropy(head(train_x[idx]), train_y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
    with torch.no_grad():
        logits = head(test_x.to(device)).cpu()
    scores = {"top1": (logits.argmax(1) == test_y).float().mean().item()}
    if num_classes >= 100:
        top5 = logits.topk(5, dim=1).indices
        scores["top5"] = (top5 == test_y[:, None]).any(1).float().mean().item()
    return scores
