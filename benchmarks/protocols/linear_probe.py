"""Linear evaluation on frozen features (Kernel-InfoNCE's protocol): the ``linear_probe``
protocol.

Reference (Kernel-InfoNCE): Tan, Zhang, Yang and Yuan, "Contrastive Learning is Spectral
Clustering on Similarity Graph" (ICLR 2024), arXiv:2303.15103, appendix B.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from benchmarks.protocols.protocol import (
    EvaluationInputs,
    EvaluationProtocol,
    Metric,
    ProtocolOutput,
)
from modules.methods.capabilities import Encoder
from modules.ranges import (
    MAX_BATCH,
    MAX_EPOCHS,
    MAX_LR,
    MAX_WEIGHT_DECAY,
    check_count,
    check_finite_positive,
    check_non_negative,
)


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
    check_count("epochs", epochs, high=MAX_EPOCHS)
    check_finite_positive("lr", lr, high=MAX_LR)
    check_count("batch_size", batch_size, high=MAX_BATCH)
    check_non_negative("weight_decay", weight_decay, high=MAX_WEIGHT_DECAY)


def probe_learning_rates(lr: float, total_steps: int) -> list[float]:
    r"""The learning rate of each of ``total_steps`` SGD steps: cosine from ``lr`` to 0, per step.

    .. math:: \eta_t = \tfrac12\,\eta\,\bigl(1 + \cos(\pi t / T)\bigr),\quad t = 0, \dots, T-1

    by ``CosineAnnealingLR``'s recursion, so the floats match it bit for bit.

    >>> rates = probe_learning_rates(0.3, 4)
    >>> [round(r, 6) for r in rates]
    [0.3, 0.256066, 0.15, 0.043934]
    """
    rates = [lr]
    for t in range(1, total_steps):
        rates.append((1 + math.cos(math.pi * t / total_steps))
                     / (1 + math.cos(math.pi * (t - 1) / total_steps)) * (rates[-1] - 0.0) + 0.0)
    return rates


def _sgd_step(x: Tensor, y: Tensor, params: list[Tensor], buffers: list[Tensor],
              lr: float | Tensor, weight_decay: float, momentum: float, one: Tensor,
              total_weight: Tensor) -> None:
    """One SGD step of the linear head ``params = [weight (C, d), bias (C,)]`` on the batch
    ``x`` (B, d), ``y`` (B,): the mean cross-entropy's gradient by the very ATen ops autograd
    runs for ``F.cross_entropy(F.linear(x, weight, bias), y)`` (addmm, log-softmax, NLL and
    their backward kernels), then ``torch.optim.SGD``'s update, without the autograd tape or
    the optimiser's per-step Python. ``lr`` is a float (the update ``torch.optim.SGD`` makes,
    bit for bit) or a 0-d tensor on the device (a CUDA graph replays it with each step's value).
    """
    weight, bias = params
    logits = torch.addmm(bias, x, weight.t())  # (B, C)
    log_probs = torch._log_softmax(logits, 1, False)
    grad = torch.ops.aten.nll_loss_backward(one, log_probs, y, None, 1, -100, total_weight)
    grad = torch.ops.aten._log_softmax_backward_data(grad, log_probs, 1, logits.dtype)  # (B, C)
    grads = [grad.t().mm(x), grad.sum(0)]  # addmm's backward for weight.t() and the bias
    if weight_decay != 0:
        grads = torch._foreach_add(grads, params, alpha=weight_decay)
    # The buffers start at 0, so the first step's 0.9 * 0 + g is SGD's first buffer, g.
    torch._foreach_mul_(buffers, momentum)
    torch._foreach_add_(buffers, grads)
    if isinstance(lr, Tensor):
        torch._foreach_add_(params, torch._foreach_mul(buffers, lr), alpha=-1)
    else:
        torch._foreach_add_(params, buffers, alpha=-lr)


def initial_head(dim: int, num_classes: int, seed: int) -> tuple[Tensor, Tensor]:
    """``(weight (C, d), bias (C,))`` of ``nn.Linear(dim, num_classes)`` built under
    ``torch.manual_seed(seed)``, drawn from a generator of their own so that the global random
    state is left alone (the initial head of ``linear_probe`` and ``augmented_probe``)."""
    generator = torch.Generator().manual_seed(seed)
    weight, bias = torch.empty(num_classes, dim), torch.empty(num_classes)
    nn.init.kaiming_uniform_(weight, a=math.sqrt(5), generator=generator)
    bound = 1 / math.sqrt(dim) if dim > 0 else 0.0
    nn.init.uniform_(bias, -bound, bound, generator=generator)
    return weight, bias


def train_linear_head(train_x, train_y, num_classes: int, epochs: int = 100, lr: float = 0.3,
                      batch_size: int = 64, weight_decay: float = 1e-6, seed: int = 0,
                      device: torch.device | str | None = None,
                      cuda_graph: bool = True) -> tuple[Tensor, Tensor]:
    """The trained ``(weight (C, d), bias (C,))`` of :func:`linear_probe_accuracy`'s head.

    The numbers of ``nn.Linear`` + ``SGD(momentum=0.9)`` + per-batch ``CosineAnnealingLR`` with
    ``randperm`` epochs seeded by ``seed``, bit for bit on the CPU, without autograd. On CUDA
    (``cuda_graph``) up to :data:`GRAPH_STEPS` steps are replayed as CUDA graphs, eagerly if the
    capture fails. On the CPU it runs on one thread: batches of 64 are too small to split, and the
    sums then do not depend on the thread count.
    """
    train_x, train_y = _as_tensors(train_x, train_y)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    generator = torch.Generator().manual_seed(seed)
    n = len(train_y)
    steps_per_epoch = math.ceil(n / batch_size)
    rates = probe_learning_rates(lr, epochs * steps_per_epoch)
    orders = torch.stack([torch.randperm(n, generator=generator) for _ in range(epochs)])
    with torch.no_grad(), _one_thread_on_cpu(device):
        params = [t.to(device) for t in initial_head(train_x.shape[1], num_classes, seed)]
        buffers = [torch.zeros_like(p) for p in params]
        x, y, orders = train_x.to(device), train_y.to(device), orders.to(device)
        one = torch.ones((), device=device)
        state = _ProbeState(x, y, params, buffers, weight_decay, one, batch_size)
        if device.type == "cuda" and cuda_graph:
            _train_with_graphs(state, orders, rates)
        else:
            for epoch in range(epochs):
                first = epoch * steps_per_epoch
                state.run(orders[epoch], rates[first:first + steps_per_epoch])
    return params[0], params[1]


@contextmanager
def _one_thread_on_cpu(device: torch.device) -> Iterator[None]:
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


#: Full batches per captured CUDA graph: few replays an epoch, a graph of modest size.
GRAPH_STEPS = 128


class _ProbeState:
    """The data and the head's tensors one probe's steps read and update in place."""

    def __init__(self, x: Tensor, y: Tensor, params: list[Tensor], buffers: list[Tensor],
                 weight_decay: float, one: Tensor, batch_size: int) -> None:
        self.x, self.y, self.params, self.buffers = x, y, params, buffers
        self.weight_decay, self.one, self.batch_size = weight_decay, one, batch_size
        self._total_weights: dict[int, Tensor] = {}

    def total_weight(self, size: int) -> Tensor:
        """The mean's denominator the NLL's backward reads (the batch size, as a tensor)."""
        if size not in self._total_weights:
            self._total_weights[size] = torch.tensor(float(size), device=self.x.device)
        return self._total_weights[size]

    def run(self, order: Tensor, rates) -> None:
        """The steps over ``order`` in batches, step ``i`` with learning rate ``rates[i]``."""
        for i, start in enumerate(range(0, len(order), self.batch_size)):
            idx = order[start:start + self.batch_size]
            _sgd_step(self.x[idx], self.y[idx], self.params, self.buffers, rates[i],
                      self.weight_decay, 0.9, self.one, self.total_weight(len(idx)))


def _train_with_graphs(state: _ProbeState, orders: Tensor, rates: list[float],
                       capture: Callable[[_ProbeState, int], tuple] | None = None) -> None:
    """The probe's steps on CUDA: chunks of full batches replayed from captured graphs, the
    rest (a chunk's remainder and the last, partial batch of an epoch) eagerly, all with the
    learning rates as device tensors (no host synchronisation anywhere). ``capture`` (default
    :func:`_capture`) returns ``(graph, chunk_order, chunk_rates)``."""
    epochs, n = orders.shape
    batch = state.batch_size
    steps_per_epoch = math.ceil(n / batch)
    full = n // batch
    chunk = min(GRAPH_STEPS, full)
    rates_dev = torch.tensor(rates, dtype=state.x.dtype, device=state.x.device)
    graph = None
    if chunk > 0:
        try:
            graph, chunk_order, chunk_rates = (capture or _capture)(state, chunk)
        except RuntimeError:  # capture unsupported here: the same steps, eagerly
            graph = None
    for epoch in range(epochs):
        first = epoch * steps_per_epoch
        done = 0
        if graph is not None:
            while done + chunk <= full:
                chunk_order.copy_(orders[epoch, done * batch:(done + chunk) * batch])
                chunk_rates.copy_(rates_dev[first + done:first + done + chunk])
                graph.replay()
                done += chunk
        state.run(orders[epoch, done * batch:], rates_dev[first + done:first + steps_per_epoch])


def _capture(state: _ProbeState, chunk: int):
    """A CUDA graph of ``chunk`` steps over static index and learning-rate buffers. The warm-up
    and the capture run on the real tensors, which are saved first and restored after."""
    saved = [t.clone() for t in state.params + state.buffers]
    chunk_order = torch.zeros(chunk * state.batch_size, dtype=torch.long, device=state.x.device)
    chunk_rates = torch.zeros(chunk, dtype=state.x.dtype, device=state.x.device)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        state.run(chunk_order[:state.batch_size], chunk_rates)  # warm-up (lazy init, kernels)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        state.run(chunk_order, chunk_rates)
    for tensor, value in zip(state.params + state.buffers, saved, strict=True):
        tensor.copy_(value)
    return graph, chunk_order, chunk_rates


def linear_probe_accuracy(train_x, train_y, test_x, test_y, epochs: int = 100, lr: float = 0.3,
                          batch_size: int = 64, weight_decay: float = 1e-6, seed: int = 0,
                          device: torch.device | str | None = None) -> dict[str, float]:
    """Train a linear layer on frozen features, score it on the test features after the last epoch.

    Kernel-InfoNCE (arXiv:2303.15103), appendix B: SGD (momentum 0.9), batch size 64, weight decay
    1e-6, 100 epochs, learning rate 0.3 decayed to 0 by a cosine schedule (per step). The test
    split is never used to pick an epoch. The training: :func:`train_linear_head`.

    Returns ``{"top1": ...}`` (fractions in [0, 1]), plus ``"top5"`` with at least 100 classes.
    The settings' ranges: :func:`check_linear_probe_settings`.
    """
    check_linear_probe_settings(epochs, lr, batch_size, weight_decay)
    train_x, train_y = _as_tensors(train_x, train_y)
    test_x, test_y = _as_tensors(test_x, test_y)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    num_classes = int(max(train_y.max(), test_y.max())) + 1
    weight, bias = train_linear_head(train_x, train_y, num_classes, epochs, lr, batch_size,
                                     weight_decay, seed, device)
    with torch.no_grad():
        logits = torch.nn.functional.linear(test_x.to(device), weight, bias).cpu()
    scores = {"top1": (logits.argmax(1) == test_y).float().mean().item()}
    if num_classes >= 100:
        top5 = logits.topk(5, dim=1).indices
        scores["top5"] = (top5 == test_y[:, None]).any(1).float().mean().item()
    return scores


@dataclass(frozen=True)
class LinearProbeSettings:
    """The probe's SGD: ``epochs`` over the training features, a cosine schedule from ``lr``
    to 0 (per step), batches of ``batch_size``, ``weight_decay``; momentum 0.9. Kernel-InfoNCE
    appendix B: 100, 0.3, 64, 1e-6."""

    epochs: int
    lr: float
    batch_size: int
    weight_decay: float

    def __post_init__(self) -> None:
        check_linear_probe_settings(self.epochs, self.lr, self.batch_size, self.weight_decay)


def run_linear_probe(settings: LinearProbeSettings, inputs: EvaluationInputs) -> ProtocolOutput:
    train_x, train_y, test_x, test_y = inputs.features()
    scores = linear_probe_accuracy(train_x, train_y, test_x, test_y, seed=inputs.seed,
                                   **dataclasses.asdict(settings))
    return ProtocolOutput(metrics={f"linear_probe_{name}": value
                                   for name, value in scores.items()})


LINEAR_PROBE = EvaluationProtocol(
    name="linear_probe",
    summary="a linear classifier trained by SGD on the frozen training features, scored on the "
            "test features",
    settings=LinearProbeSettings, needs=Encoder, run=run_linear_probe,
    example={"epochs": 100, "lr": 0.3, "batch_size": 64, "weight_decay": 1.0e-6},
    # top-5 only with at least 100 classes
    metrics=(Metric("linear_probe_top1", "Linear probe top-1 (%)", percent=True),
             Metric("linear_probe_top5", "Linear probe top-5 (%)", percent=True)),
)
