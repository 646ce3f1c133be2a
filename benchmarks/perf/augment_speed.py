"""SimCLR's augmentation, fused (:class:`datamodules.augment.SimCLRAugment`) against the same recipe
in kornia (:func:`datamodules.augment.kornia_simclr_augment`), in one run on the same batches.

One training step's views, as each path makes them: the kornia pipeline once per view (how
``make_views`` called it before), the fused one once on the ``n_views``-fold batch (how it does
now), each followed by the normalisation. Reported per image size: the device operations of one
step (aten operations other than views, counted with a ``TorchDispatchMode``) and the median
step time over ``--repeats`` windows of ``--steps`` steps, after a warm-up, interleaved so that
other work on the machine hits both alike; on a GPU timed with CUDA events. The speed-up is the
ratio of the medians, measured in the same run.

Usage::

    python -m benchmarks.perf.augment_speed           # CPU; the GPU too when there is one
    python -m benchmarks.perf.augment_speed --batch-size 256 --repeats 7 \
        --output results/augment.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.infra.environment import environment
from datamodules.augment import SimCLRAugment, kornia_simclr_augment


class _KernelCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.kernels = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.kernels += not func.is_view  # a view launches nothing
        return func(*args, **(kwargs or {}))


def kornia_step(augment: nn.Module, mean: Tensor, std: Tensor, n_views: int) -> Callable:
    return lambda x: [(augment(x) - mean) / std for _ in range(n_views)]


def fused_step(augment: nn.Module, mean: Tensor, std: Tensor, n_views: int) -> Callable:
    return lambda x: list(((augment(torch.cat([x] * n_views)) - mean) / std).chunk(n_views))


def seconds_per_step(step: Callable, x: Tensor, steps: int) -> float:
    if x.device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            step(x)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1000 / steps
    began = time.perf_counter()
    for _ in range(steps):
        step(x)
    return (time.perf_counter() - began) / steps


def measure(device: torch.device, size: int, batch_size: int, n_views: int, repeats: int,
            steps: int) -> dict[str, object]:
    torch.manual_seed(0)
    x = torch.rand(batch_size, 3, size, size, device=device)
    mean = torch.full((3, 1, 1), 0.45, device=device)
    std = torch.full((3, 1, 1), 0.25, device=device)
    paths = {"kornia": kornia_step(kornia_simclr_augment(size), mean, std, n_views),
             "fused": fused_step(SimCLRAugment(size), mean, std, n_views)}
    result: dict[str, object] = {"size": size}
    for name, step in paths.items():
        step(x)  # warm-up: first kernels, the constants' copies
        with _KernelCounter() as counter:
            step(x)
        result[f"{name}_operations"] = counter.kernels
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(repeats):
        for name, step in paths.items():
            times[name].append(seconds_per_step(step, x, steps))
    for name in paths:
        result[f"{name}_ms"] = 1000 * statistics.median(times[name])
        result[f"{name}_ms_all"] = [1000 * t for t in times[name]]
    result["speedup"] = result["kornia_ms"] / result["fused_ms"]
    return result


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--n-views", type=int, default=2)
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    record = {"environment": environment(), "cpu_model": cpu_model(),
              "torch_threads": torch.get_num_threads(), "config": vars(args) | {"output": None},
              "results": []}
    print(f"# {record['cpu_model']}, {record['torch_threads']} threads, torch {torch.__version__}, "
          f"batch {args.batch_size}, {args.n_views} views, median of {args.repeats} x "
          f"{args.steps} steps")
    print("| device | px | kornia ops | fused ops | kornia ms/step | fused ms/step | speed-up |")
    print("|---|---|---|---|---|---|---|")
    for device in devices:
        for size in args.sizes:
            r = measure(device, size, args.batch_size, args.n_views, args.repeats, args.steps)
            record["results"].append({"device": str(device), **r})
            print(f"| {device} | {size} | {r['kornia_operations']} | {r['fused_operations']} | "
                  f"{r['kornia_ms']:.1f} | {r['fused_ms']:.1f} | {r['speedup']:.1f}x |")
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(record, indent=2, default=str))


if __name__ == "__main__":
    main()
