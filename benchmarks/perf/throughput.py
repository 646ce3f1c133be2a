"""Augmented training images per second: clusterbench's on-device pipeline against per-sample PIL.

Two ways to feed SimCLR views, measured side by side in one run on the same images:

- ``on-device (fused)``: clusterbench's path. The DataModule's training loader yields raw
  ``uint8`` batches (one indexing operation per batch, no workers needed), the batch is moved to
  the device, and ``on_after_batch_transfer`` makes the views there with the fused batch-wise
  SimCLR recipe (:func:`datamodules.augment.simclr_augment`), a fresh draw per sample.
- ``PIL per sample (workers)``: how solo-learn's and lightly's defaults do it. A Dataset turns
  each image into a PIL image and applies torchvision.transforms (v1) per sample, in
  ``--num-workers`` DataLoader worker processes; the collated views are moved to the device.

Both make ``--n-views`` views of the same recipe (crop scale 0.08-1, flip, colour jitter
0.4/0.4/0.4/0.1 with p=0.8, grey-scale p=0.2; blur p=0.5 from 64 px), normalised, and count
views per second. Timing starts after a warm-up (worker start-up, first kernels); on a GPU
with CUDA events, synchronised. The two pipelines are timed in ``--repeats`` interleaved pairs
of windows, so that other work on the machine hits both alike; the PIL workers' prefetched
batches are drained before each of their windows and refilled before the other's. Reported:
mean ± std and median over the windows, and the ratio within each pair.

The images are generated (uniform random ``uint8``, labelled as such in the output) unless
``--data cifar10`` reads CIFAR-10's training split from ``--data-dir``. Pixel content barely
matters to these transforms' cost; image size does (``--size``).

Usage::

    python benchmarks/perf/throughput.py                    # CPU, and the GPU when there is one
    python benchmarks/perf/throughput.py --batch-size 256 --num-workers 2 --seconds 20
    python benchmarks/perf/throughput.py --data cifar10 --output results/throughput/cifar10.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from benchmarks.infra.statistics import format_mean_std, mean_std
from datamodules.augment import simclr_augment
from datamodules.base import ClusterDataModule, TensorSplits

PIL_PIPELINE = "PIL per sample (workers)"
DEVICE_PIPELINE = "on-device (fused)"


class GeneratedImagesDataModule(ClusterDataModule):
    """Uniform random ``uint8`` RGB images with random labels: generated, for timing only."""

    name = "generated_images"
    provenance = "generated"
    source = "uniform random uint8 RGB images (timing only)"
    num_classes = 10

    def __init__(self, images: np.ndarray, labels: np.ndarray, **kwargs) -> None:
        self.images, self.labels = images, labels  # (N, 3, H, W) uint8, (N,)
        self.input_shape = tuple(images.shape[1:])
        super().__init__(**kwargs)

    def load(self) -> TensorSplits:
        x, y = torch.from_numpy(self.images), torch.from_numpy(self.labels).long()
        return TensorSplits(x, y, x[:1], y[:1])

    def train_augment(self) -> nn.Module:
        return simclr_augment(self.input_shape[-1])


class PILViewsDataset(torch.utils.data.Dataset):
    """Per-sample PIL pipeline, as torchvision's CIFAR10 and solo-learn/lightly do it:
    ``Image.fromarray`` then torchvision.transforms (v1), ``n_views`` times per image."""

    def __init__(self, images_hwc: np.ndarray, labels: np.ndarray, n_views: int,
                 mean: list[float], std: list[float]) -> None:
        from torchvision import transforms as T

        size = images_hwc.shape[1]
        steps = [T.RandomResizedCrop(size, scale=(0.08, 1.0)), T.RandomHorizontalFlip(),
                 T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
                 T.RandomGrayscale(p=0.2)]
        if size >= 64:
            kernel = int(0.1 * size) // 2 * 2 + 1
            steps.append(T.RandomApply([T.GaussianBlur(kernel, (0.1, 2.0))], p=0.5))
        self.transform = T.Compose([*steps, T.ToTensor(), T.Normalize(mean, std)])
        self.images, self.labels, self.n_views = images_hwc, labels, n_views

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[list[Tensor], int]:
        from PIL import Image

        image = Image.fromarray(self.images[i])
        return [self.transform(image) for _ in range(self.n_views)], int(self.labels[i])


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def load_average() -> float | None:
    """The 1-minute load average (other work on the machine skews every number here)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_window(next_views: Callable[[], list[Tensor]], device: torch.device,
                 seconds: float) -> float:
    """Views per second over one window: batches until ``seconds`` have passed. On a GPU the
    elapsed time comes from CUDA events recorded around the window and synchronised, so the
    kernels still queued at its end are counted."""
    synchronize(device)
    count, start = 0, time.perf_counter()
    if device.type == "cuda":
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
    while time.perf_counter() - start < seconds:
        count += sum(len(v) for v in next_views())
    if device.type == "cuda":
        end.record()
        torch.cuda.synchronize(device)
        return count / (begin.elapsed_time(end) / 1000)
    return count / (time.perf_counter() - start)


class PILPipeline:
    """Per-sample PIL views from ``num_workers`` DataLoader workers, moved to ``device``."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, mean: Tensor, std: Tensor,
                 args: argparse.Namespace, device: torch.device) -> None:
        dataset = PILViewsDataset(images.transpose(0, 2, 3, 1).copy(), labels, args.n_views,
                                  mean.flatten().tolist(), std.flatten().tolist())
        # Sampling with replacement makes one endless epoch: no worker restarts while timing.
        sampler = torch.utils.data.RandomSampler(dataset, replacement=True, num_samples=10**9)
        self.prefetch = 2 * max(args.num_workers, 1)  # batches in flight (prefetch_factor 2)
        self.batch_views = args.batch_size * args.n_views
        self.batches = iter(torch.utils.data.DataLoader(
            dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.num_workers,
            drop_last=True, pin_memory=device.type == "cuda"))
        self.device, self.rate = device, None

    def next_views(self) -> list[Tensor]:
        views, _ = next(self.batches)
        return [v.to(self.device, non_blocking=True) for v in views]

    def window(self, seconds: float) -> float:
        # The workers filled their queue while the other pipeline ran: drain it untimed.
        for _ in range(self.prefetch):
            self.next_views()
        self.rate = timed_window(self.next_views, self.device, seconds)
        # Let the workers fill the queue again now, rather than during the other's window.
        time.sleep(self.prefetch * self.batch_views / self.rate + 0.2)
        return self.rate


class DevicePipeline:
    """clusterbench's path: raw uint8 batches from the DataModule's training loader, moved to
    ``device``, made into views there by ``on_after_batch_transfer``."""

    def __init__(self, dm: ClusterDataModule, device: torch.device) -> None:
        loader = dm.train_dataloader()
        self.batches: Iterator = itertools.chain.from_iterable(loader for _ in itertools.count())
        self.dm, self.device = dm, device

    def next_views(self) -> list[Tensor]:
        x, y = next(self.batches)
        views, _ = self.dm.on_after_batch_transfer((x.to(self.device, non_blocking=True),
                                                    y.to(self.device, non_blocking=True)), 0)
        return views

    def window(self, seconds: float) -> float:
        return timed_window(self.next_views, self.device, seconds)


def compare(dm: ClusterDataModule, images: np.ndarray, labels: np.ndarray,
            args: argparse.Namespace, device: torch.device) -> dict[str, list[float]]:
    """Views per second of both pipelines in ``repeats`` interleaved pairs of windows (PIL,
    then on-device), after ``warmup`` batches of each: a burst of other work on the machine
    then hits both sides of a pair alike."""
    pipelines = {PIL_PIPELINE: PILPipeline(images, labels, dm.mean, dm.std, args, device),
                 DEVICE_PIPELINE: DevicePipeline(dm, device)}
    for pipeline in pipelines.values():
        for _ in range(args.warmup):
            pipeline.next_views()
    rates: dict[str, list[float]] = {name: [] for name in pipelines}
    for _ in range(args.repeats):
        for name, pipeline in pipelines.items():
            rates[name].append(pipeline.window(args.seconds / args.repeats))
    return rates


def load_data(args: argparse.Namespace) -> tuple[ClusterDataModule, np.ndarray, np.ndarray, str]:
    """The DataModule of the on-device pipeline, set up, and the same training images (uint8
    ``(N, 3, H, W)``) and labels for the PIL pipeline."""
    common = {"batch_size": args.batch_size, "n_views": args.n_views, "num_workers": 0}
    if args.data == "cifar10":
        from datamodules import CIFAR10DataModule

        dm = CIFAR10DataModule(data_dir=args.data_dir, **common)
        dm.setup()
        train = dm._splits["train"]
        images, labels = train.x[train.index].numpy(), train.y[train.index].numpy()
        return dm, images, labels, f"CIFAR-10 training split ({len(labels)} real 32x32 images)"
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (args.images, 3, args.size, args.size), dtype=np.uint8)
    labels = rng.integers(0, 10, args.images)
    dm = GeneratedImagesDataModule(images, labels, val_fraction=0.01, **common)
    dm.setup()
    return dm, images, labels, (f"GENERATED: {args.images} uniform random uint8 "
                                f"{args.size}x{args.size} RGB images (not a real dataset)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="benchmarks/perf/throughput.py",
        description="SimCLR views per second: on-device fused recipe vs per-sample PIL in workers.")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--num-workers", type=int, default=usable_cpus(),
                        help="DataLoader workers of the PIL pipeline (default: the usable CPUs)")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="timed seconds per pipeline and device, after the warm-up")
    parser.add_argument("--repeats", type=int, default=5,
                        help="interleaved timing windows the seconds are split into")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up batches")
    parser.add_argument("--n-views", type=int, default=1, help="views per image")
    parser.add_argument("--data", choices=["generated", "cifar10"], default="generated")
    parser.add_argument("--data-dir", default=None, help="data root for --data cifar10")
    parser.add_argument("--images", type=int, default=10_000, help="generated images")
    parser.add_argument("--size", type=int, default=32, help="generated image side")
    parser.add_argument("--devices", default=None,
                        help="comma-separated, e.g. cpu,cuda (default: cpu, and cuda if there)")
    parser.add_argument("--output", default=None, help="also write config and results as JSON")
    args = parser.parse_args(argv)
    if args.devices is None:
        args.devices = "cpu,cuda" if torch.cuda.is_available() else "cpu"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dm, images, labels, description = load_data(args)  # dm.mean, dm.std serve both pipelines
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    import kornia
    import PIL
    import torchvision

    header = {
        "machine": f"{usable_cpus()} CPU cores ({cpu_name()}), GPU: {gpu}",
        "versions": f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
                    f"kornia {kornia.__version__}, Pillow {PIL.__version__}, "
                    f"python {platform.python_version()}",
        "data": description,
        "setup": f"batch size {args.batch_size}, {args.n_views} view(s) per image, "
                 f"PIL workers {args.num_workers}, torch threads {torch.get_num_threads()}, "
                 f"{args.seconds:g} s timed per pipeline in {args.repeats} interleaved windows "
                 f"after {args.warmup} warm-up batches",
    }
    for key, value in header.items():
        print(f"{key:>9}: {value}")
    load_before = load_average()
    if load_before is not None and load_before > 0.5 * usable_cpus():
        print(f"  WARNING: 1-minute load average {load_before:.1f} on {usable_cpus()} CPUs before "
              "starting: other processes compete for the CPU and the numbers will be low and noisy")
    results = []
    for name in args.devices.split(","):
        device = torch.device(name)
        rates = compare(dm, images, labels, args, device)
        print(f"\n{name} ({gpu if device.type == 'cuda' else f'{usable_cpus()} CPU cores'}), "
              f"views/s over {args.repeats} windows:")
        for pipeline, values in rates.items():
            mean, std = mean_std(values, std_of_one=0.0)
            print(f"  {pipeline:<26} mean {format_mean_std(mean, std, '>8,.0f', '>6,.0f')}"
                  f"   median {statistics.median(values):>8,.0f}")
        ratios = [d / p for d, p in zip(rates[DEVICE_PIPELINE], rates[PIL_PIPELINE], strict=True)]
        mean, std = mean_std(ratios, std_of_one=0.0)
        print(f"  ratio on-device / PIL (paired windows): mean {format_mean_std(mean, std)}, "
              f"median {statistics.median(ratios):.2f}")
        results.append({"device": name, "views_per_second": rates, "paired_ratios": ratios})
    header["load average (1 min) before, after"] = f"{load_before}, {load_average()}"
    print(f"\nload average (1 min) before, after: {load_before}, {load_average()}")
    if args.output:
        from benchmarks.infra.atomic import write_atomic
        from benchmarks.infra.environment import environment

        record = {"config": vars(args), "header": header, "environment": environment(),
                  "results": results}
        write_atomic(args.output, json.dumps(record, indent=2))
        print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
