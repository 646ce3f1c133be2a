"""Seconds per evaluation protocol, the previous implementation and the current one side by side.

On GENERATED features of CIFAR-10's sizes (``--scale 1``: 50,000 x 512 training features,
10,000 test, 10 classes; 10 overlapping Gaussian clusters, labelled as generated in the output),
in one run on one machine:

- ``linear_probe``: the autograd loop it replaced (``nn.Linear``, ``torch.optim.SGD``,
  ``CosineAnnealingLR`` per step, a ``randperm`` per epoch, the process's thread count)
  against :func:`~benchmarks.protocols.linear_probe_accuracy` (the same numbers on the CPU);
- ``svm``: scikit-learn's ``LinearSVC`` (float64, one thread) against the torch solver;
- ``cluster``: scikit-learn's ``KMeans(n_init=10)`` + ``silhouette_score`` against torch;
- ``knn``: one implementation (unchanged), timed for the total.

Each cell is one timed call (``time.perf_counter``, the device synchronised on a GPU), after
a warm-up call of every torch protocol on a small slice; the scores are printed beside the
times, so a speed-up that changed the answer shows. A speed claim is the ratio in the row.

Usage::

    python -m benchmarks.perf.eval_speed                       # full size (minutes on a CPU)
    python -m benchmarks.perf.eval_speed --scale 0.1 --output results/eval_speed.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.perf.throughput import cpu_name
from benchmarks.protocols import cluster_scores, knn_accuracy, linear_probe_accuracy, svm_accuracy


def generated_features(scale: float, dim: int = 512, classes: int = 10, seed: int = 0):
    """GENERATED: ``round(50,000 * scale)`` training and ``round(10,000 * scale)`` test
    features, 10 Gaussian clusters (centres N(0, 0.12^2) per coordinate, unit noise)."""
    rng = np.random.default_rng(seed)
    n_train, n_test = round(50_000 * scale), round(10_000 * scale)
    centres = 0.12 * rng.normal(size=(classes, dim))
    y = rng.integers(0, classes, n_train + n_test)
    x = (centres[y] + rng.normal(size=(len(y), dim))).astype(np.float32)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def autograd_loop_probe(train_x, train_y, test_x, test_y, epochs: int = 100, lr: float = 0.3,
                        batch_size: int = 64, weight_decay: float = 1e-6, seed: int = 0,
                        device: torch.device | str = "cpu") -> float:
    """The linear probe as it was before: autograd, torch.optim.SGD and CosineAnnealingLR, one
    Python round trip per step, at the process's thread count."""
    import torch.nn.functional as F

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
    return (logits.argmax(1) == test_y).float().mean().item()


def timed(call: Callable[[], Any], device: torch.device) -> tuple[float, Any]:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = call()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, result


def run(scale: float = 1.0, probe_epochs: int = 100, device: str | None = None,
        skip_old: tuple[str, ...] = (), dim: int = 512,
        current_only: bool = False) -> dict[str, Any]:
    """Every protocol's seconds, previous and current (``current_only``: the current alone), on
    generated ``dim``-dimensional features of ``scale``."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    train_x, train_y, test_x, test_y = generated_features(scale, dim=dim)
    data = (train_x, train_y, test_x, test_y)
    small = (train_x[:256], train_y[:256], test_x[:64], test_y[:64])
    linear_probe_accuracy(*small, epochs=1, device=dev)  # warm-up: kernels, lazy CUDA init
    svm_accuracy(*small, device=dev)
    cluster_scores(test_x[:256], test_y[:256], device=dev)
    rows: list[dict[str, Any]] = []

    def row(protocol: str, old: Callable[[], Any] | None, new: Callable[[], Any],
            old_name: str, new_name: str) -> None:
        skip = current_only or protocol in skip_old
        old_s, old_score = timed(old, dev) if old and not skip else (None, None)
        new_s, new_score = timed(new, dev)
        rows.append({"protocol": protocol, "previous": old_name, "current": new_name,
                     "previous_s": old_s, "current_s": new_s,
                     "speedup": old_s / new_s if old_s else None,
                     "previous_score": old_score, "current_score": new_score})

    row("linear_probe", lambda: autograd_loop_probe(*data, epochs=probe_epochs, device=dev),
        lambda: linear_probe_accuracy(*data, epochs=probe_epochs, device=dev)["top1"],
        "autograd loop", "lean loop" + (" + CUDA graphs" if dev.type == "cuda" else ""))
    row("knn (k=200)", None, lambda: knn_accuracy(*data, k=200, device=dev), "-", "torch")
    row("svm", lambda: svm_accuracy(*data, backend="sklearn"),
        lambda: svm_accuracy(*data, backend="torch", device=dev), "LinearSVC",
        "torch Newton (exact in float64, CG in float32)")
    row("cluster (test split)",
        lambda: cluster_scores(test_x, test_y, backend="sklearn"),
        lambda: cluster_scores(test_x, test_y, backend="torch", device=dev),
        "KMeans + silhouette_score", "torch k-means + silhouette")
    return {
        "features": f"GENERATED: 10 overlapping Gaussian clusters, {dim}-d",
        "sizes": {"train": len(train_y), "test": len(test_y), "dim": train_x.shape[1],
                  "classes": 10, "scale": scale, "probe_epochs": probe_epochs},
        "machine": {"cpu": cpu_name(), "gpu": torch.cuda.get_device_name(dev)
                    if dev.type == "cuda" else None, "device": str(dev)},
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "repeats": 1, "rows": rows,
    }


def table(result: dict[str, Any]) -> str:
    sizes = result["sizes"]
    lines = [f"machine: {result['machine']['cpu']}"
             + (f", {result['machine']['gpu']}" if result["machine"]["gpu"] else "")
             + f" ({result['machine']['device']}); torch {result['torch']}; "
             f"{result['threads']} threads",
             f"features: {result['features']}; {sizes['train']:,} x {sizes['dim']} train, "
             f"{sizes['test']:,} test, {sizes['classes']} classes; probe {sizes['probe_epochs']} "
             f"epochs; one timed call each",
             "",
             "| protocol | previous | s | current | s | speed-up | scores (prev / cur) |",
             "|---|---|---:|---|---:|---:|---|"]

    def fmt(value, spec):
        return "-" if value is None else format(value, spec)

    for r in result["rows"]:
        lines.append(f"| {r['protocol']} | {r['previous']} | {fmt(r['previous_s'], '.2f')} | "
                     f"{r['current']} | {fmt(r['current_s'], '.2f')} | "
                     f"{fmt(r['speedup'], '.1f')}{'x' if r['speedup'] else ''} | "
                     f"{_score(r['previous_score'])} / {_score(r['current_score'])} |")
    return "\n".join(lines)


def _score(score: Any) -> str:
    if score is None:
        return "-"
    if isinstance(score, dict):
        return ", ".join(f"{k} {v:.4f}" for k, v in score.items())
    return f"{score:.4f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0,
                        help="fraction of CIFAR-10's 50,000 / 10,000 rows (default 1)")
    parser.add_argument("--probe-epochs", type=int, default=100)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if any)")
    parser.add_argument("--output", type=Path, default=None, help="write the result as JSON")
    args = parser.parse_args(argv)
    result = run(args.scale, args.probe_epochs, args.device)
    print(table(result))
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
