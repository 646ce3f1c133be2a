"""How much GPU memory one search trial needs, estimated before the search starts, against the
share of a GPU it gets (``gpus_per_trial``)."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from benchmarks.infra.errors import ConfigError
from benchmarks.run.spec import RunSpec

#: Bytes per floating-point element of the saved activations under each precision, against
#: float32's 4: under bf16 and fp16 autocast the convolutions' and linear layers' outputs, which
#: are most of what a backward pass keeps, are half precision.
ACTIVATION_SHARE = {"bf16-mixed": 0.5, "16-mixed": 0.5, "bf16": 0.5, "16": 0.5}
#: Copies of the parameters a step holds: the weights, their gradients, the optimiser's momentum
#: (or Adam's two moments, counted as one more), and half-precision working copies.
PARAMETER_COPIES = 4


def estimate_trial_memory(run: RunSpec, workers: int = 1) -> dict[str, Any]:
    """Peak GPU memory of one training step of ``run`` per worker, estimated without a GPU:
    the step is traced on the ``meta`` device, summing the bytes autograd saves (scaled by
    :data:`ACTIVATION_SHARE`) plus :data:`PARAMETER_COPIES` copies of the parameters.

    Checked on an H200 (SimCLR ResNet50, batch 256, bf16): measured 6.53 and 24.94 GiB at 32 and
    64 px, estimated 6.5 and 24.8.

    Returns:
        ``{"gib": estimate, "batch": per-worker batch, "input_shape": ..., "n_views": ...,
        "precision": ..., "how": a line saying how it was estimated}``.
    """
    from benchmarks.run.one import instantiate

    precision = str(run.trainer.get("precision", "32-true"))
    batch = int(run.data.get("batch_size", 256)) // max(1, workers)
    with torch.device("meta"):
        datamodule, model = instantiate(run, 0, {k: v for k, v in run.model.items()
                                                 if k != "backbone_weights"})
        shape = tuple(datamodule.input_shape)
        n_views = int(getattr(datamodule, "n_views", 1))
        views = [torch.empty(batch, *shape) for _ in range(n_views)]
        labels = torch.zeros(batch, dtype=torch.long)
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.is_floating_point():
            saved[id(tensor)] = tensor.numel() * tensor.element_size()
        return tensor

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), \
            warnings.catch_warnings():
        # the step logs its loss; without a Trainer Lightning says so, which is no news here
        warnings.filterwarnings("ignore", message=".*self.trainer. reference is not registered")
        loss = model.training_step((views, labels), 0)
    del loss
    parameters = sum(p.numel() * p.element_size() for p in model.parameters())
    share = ACTIVATION_SHARE.get(precision, 1.0)
    gib = (share * sum(saved.values()) + PARAMETER_COPIES * parameters) / 2**30
    return {"gib": round(gib, 2), "batch": batch, "input_shape": list(shape), "n_views": n_views,
            "precision": precision,
            "how": f"one training step traced on the meta device: saved activations x {share:g} "
                   f"({precision}) + {PARAMETER_COPIES} copies of the parameters"}


def local_gpu_memory_gib() -> float | None:
    """The memory of this machine's first CUDA device in GiB, or None without one."""
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / 2**30


def check_trial_memory(run: RunSpec, search: Any, workers: int = 1) -> dict[str, Any] | None:
    """The trial's estimated memory against its share of a GPU, returned to be recorded with
    the search; None when the trial takes no GPU or no GPU memory is known.

    Raises:
        ConfigError: the estimate exceeds the share, naming the run, both amounts and the
            share that would fit.
    """
    gpus = search.gpus_for(run)
    memory = search.gpu_memory_gib or local_gpu_memory_gib()
    if not gpus or memory is None:
        return None
    estimate = estimate_trial_memory(run, workers)
    per_worker = gpus / workers
    share = min(per_worker, 1.0) * memory
    if estimate["gib"] > share:
        needed = estimate["gib"] / memory
        raise ConfigError(
            f"run {run.name!r}: a search trial needs about {estimate['gib']:.1f} GiB of GPU memory "
            f"(batch {estimate['batch']}, {'x'.join(map(str, estimate['input_shape']))}, "
            f"{estimate['n_views']} views, {estimate['precision']}) but gets {share:.1f} GiB "
            f"({per_worker:g} of a {memory:g} GiB GPU); set search.gpus_per_trial_for: "
            f"{{{run.dataset}: {next_share(needed)}}} or more, or a smaller batch")
    return {**estimate, "gpus_per_trial": gpus, "gpu_memory_gib": round(memory, 1),
            "share_gib": round(share, 2)}


def next_share(needed: float) -> float:
    """The smallest of 1/8, 1/4, 1/2, 1, 2, 4 ... GPUs at or above ``needed``.

    >>> next_share(0.3), next_share(0.9), next_share(1.5)
    (0.5, 1, 2)
    """
    for share in (0.125, 0.25, 0.5):
        if needed <= share:
            return share
    whole = 1
    while whole < needed:
        whole *= 2
    return whole
