"""SimCLR training throughput: clusterbench's step against a bare loop and the anchors' pipeline.

Three ways to train the same SimCLR configuration (ResNet, NT-Xent, two views per image) on the
same generated images (uniform random ``uint8``: pixel content does not change the cost), timed
side by side in one run:

- ``clusterbench``: the training step as the suite runner builds it: the Lightning Trainer with
  the runner's callbacks, the DataModule's ``uint8`` batches and its on-device augmentation, the
  method's optimiser and schedule, the run's precision.
- ``bare loop``: the same model, augmentation and loss in a plain PyTorch loop (no Lightning,
  no callbacks, no logging): what the framework costs.
- ``anchors' pipeline``: how lightly's and solo-learn's SimCLR benchmarks feed a GPU:
  per-sample torchvision transforms on PIL images in DataLoader workers, torchvision's ResNet18
  (no CIFAR stem change beyond the first layer), the loss under autocast (AMP).

For each: samples per second (mean ± sample std over ``--repeats`` windows, each after a
warm-up), model FLOP utilisation (the step's FLOPs from ``torch.utils.flop_counter`` over the
GPU's dense bf16 peak, from a table by device name; "n/a" on a CPU), host (Python thread) time
per step, host reads of device values per step (``aten._local_scalar_dense``, counted with a
``TorchDispatchMode``) and peak memory; the ratio of clusterbench's samples/s to each other
pipeline's. On a GPU the windows are timed with CUDA events; on a CPU with the wall clock.

Usage::

    python -m benchmarks.perf.train_throughput        # the GPU cases, when there is one
    python -m benchmarks.perf.train_throughput --tiny               # a few seconds on a CPU
    python -m benchmarks.perf.train_throughput --output results/throughput/train.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.perf.throughput import GeneratedImagesDataModule, PILViewsDataset, cpu_name

#: Dense bf16 tensor-core peaks (FLOP/s) by a substring of ``torch.cuda.get_device_name()``.
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A6000": 155e12,
             "L4": 121e12, "A10": 125e12, "V100": 125e12, "T4": 65e12}


@dataclass
class Case:
    """One configuration: the backbone, the global batch and the image side."""

    backbone: str
    batch_size: int
    size: int
    width: int = 32  # small_cnn only

    @property
    def name(self) -> str:
        return f"SimCLR {self.backbone}, batch {self.batch_size}, {self.size}x{self.size}"


GPU_CASES = [Case("resnet18", 512, 32), Case("resnet50", 256, 32), Case("resnet18", 256, 64)]
#: A CPU can time only toy sizes in seconds: the same code paths, tiny tensors.
TINY_CASES = [Case("resnet18", 16, 16)]


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16.items() if key in name), None)


class CountHostReads(TorchDispatchMode):
    """Counts reads of a tensor's value on the host (each one a GPU synchronisation). The
    optimisers' step counters are host tensors by design (torch keeps them on the CPU unless
    ``capturable``): reading them costs no synchronisation on a GPU and is not counted."""

    def __init__(self, optimizers) -> None:
        super().__init__()
        self.optimizers, self.reads = optimizers, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and not any(
                state.get("step") is args[0] for optimizer in self.optimizers()
                for state in optimizer.state.values()):
            self.reads += 1
        return func(*args, **(kwargs or {}))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_mb(device: torch.device) -> float | None:
    """The GPU's peak allocated memory since the last reset; None on a CPU (the process's peak
    resident size would mix the pipelines)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return None


def images(case: Case, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n, 3, case.size, case.size), dtype=np.uint8),
            rng.integers(0, 10, n))


def simclr_model(case: Case, channels_last: bool):
    from modules.methods import METHODS

    return METHODS["simclr"](num_classes=10, input_shape=(3, case.size, case.size),
                             backbone=case.backbone, backbone_width=case.width,
                             cifar_stem=case.size <= 64, optimizer="lars", lr=0.3,
                             channels_last=channels_last)


def datamodule(case: Case, n: int) -> GeneratedImagesDataModule:
    x, y = images(case, n)
    dm = GeneratedImagesDataModule(x, y, batch_size=case.batch_size, val_fraction=0.01)
    dm.setup("fit")
    return dm


@dataclass
class Timing:
    samples_per_second: list[float]
    host_ms_per_step: list[float]
    reads_per_step: float
    flops_per_step: float | None
    peak_memory_mb: float | None


class WindowTimer(pl.Callback):
    """Times ``repeats`` windows of ``steps`` training steps after ``warmup`` steps, then counts
    the host reads of one more window of ``steps`` (untimed: the counter intercepts every
    operation in Python, which would slow the window it timed) and stops the training."""

    def __init__(self, warmup: int, steps: int, repeats: int, batch: int,
                 device: torch.device) -> None:
        self.warmup, self.steps, self.repeats, self.batch = warmup, steps, repeats, batch
        self.device, self.rates, self.host = device, [], []
        self.counter = CountHostReads(lambda: self.trainer.optimizers)
        self.counting, self.counted = False, False

    @staticmethod
    def batches_needed(warmup: int, steps: int, repeats: int) -> int:
        """The training batches the windows take: the warm-up, the timed windows, the counted
        one."""
        return warmup + steps * (repeats + 1)

    @staticmethod
    def images_needed(batch: int, warmup: int, steps: int, repeats: int) -> int:
        """The images a datamodule holding out 1% for validation needs for every batch the
        windows take, and one batch to spare."""
        return batch * (WindowTimer.batches_needed(warmup, steps, repeats) + 2) * 100 // 99

    def setup(self, trainer, pl_module, stage) -> None:
        self.trainer = trainer

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step - self.warmup
        if step < 0 or step % self.steps:
            return
        if step // self.steps < self.repeats:
            synchronize(self.device)
            self.start, self.host_start = time.perf_counter(), time.thread_time()
        elif step // self.steps == self.repeats and not self.counted:
            self.counter.__enter__()
            self.counting = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step - self.warmup  # already counts this batch's step
        if step <= 0 or step % self.steps:
            return
        window = step // self.steps - 1  # the window that has just ended
        if window < self.repeats:
            host = time.thread_time() - self.host_start
            synchronize(self.device)
            elapsed = time.perf_counter() - self.start
            self.rates.append(self.steps * self.batch / elapsed)
            self.host.append(1000 * host / self.steps)
        elif window == self.repeats and self.counting:
            self.counter.__exit__(None, None, None)
            self.counting, self.counted = False, True
            trainer.should_stop = True

    def on_train_end(self, trainer, pl_module) -> None:
        """Fewer batches than the windows need would leave the host-read counter on (slowing
        every operation after this run, the next pipeline's included): it is switched off, and
        the run fails saying so."""
        if self.counting:
            self.counter.__exit__(None, None, None)
            self.counting = False
        if not self.counted:
            raise RuntimeError(f"the data ran out after {len(self.rates)} of {self.repeats} "
                               "timed windows and the counted one; give the datamodule "
                               f"{self.batches_needed(self.warmup, self.steps, self.repeats)} "
                               "training batches")


def time_clusterbench(case: Case, device: torch.device, warmup: int, steps: int,
                      repeats: int) -> Timing:
    """The runner's Trainer, callbacks, datamodule and precision."""
    from benchmarks.run.checkpoint import EpochSeed
    from benchmarks.run.divergence import StopOnDivergence

    on_gpu = device.type == "cuda"
    dm = datamodule(case, WindowTimer.images_needed(case.batch_size, warmup, steps, repeats))
    model = simclr_model(case, channels_last=on_gpu)
    timer = WindowTimer(warmup, steps, repeats, case.batch_size, device)
    trainer = pl.Trainer(accelerator="gpu" if on_gpu else "cpu", devices=1, max_epochs=1,
                         precision="bf16-mixed" if on_gpu else "32-true", logger=False,
                         callbacks=[StopOnDivergence(), EpochSeed(0), timer],
                         enable_progress_bar=False, enable_checkpointing=False,
                         enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0)
    if on_gpu:
        torch.cuda.reset_peak_memory_stats(device)
    trainer.fit(model, datamodule=dm)
    flops = step_flops(model.to(device), dm, device)
    return Timing(timer.rates, timer.host, timer.counter.reads / steps, flops,
                  peak_memory_mb(device))


def bare_step(model, dm, x: Tensor, y: Tensor, optimizer, device: torch.device) -> Tensor:
    """One SimCLR step without Lightning: views, features, loss, backward, update."""
    views = dm.make_views(x)  # outside autocast, as the runner augments the batch
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        features = model.backbone(model._backbone_input(torch.cat(views)))  # (2B, F)
        loss = model.objective(features, len(views), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def step_flops(model, dm, device: torch.device) -> float | None:
    """FLOPs of one forward and backward pass of the model on a batch (the augmentation is not
    counted: it is a few element-wise passes)."""
    from torch.utils.flop_counter import FlopCounterMode

    x, y = next(iter(dm.train_dataloader()))
    x, y = x.to(device), y.to(device)
    views = dm.make_views(x)
    counter = FlopCounterMode(display=False)
    with counter:
        features = model.backbone(model._backbone_input(torch.cat(views)))
        model.objective(features, len(views), y).backward()
    model.zero_grad(set_to_none=True)
    return float(counter.get_total_flops()) or None


def time_loop(step, batches, batch: int, device: torch.device, warmup: int, steps: int,
              repeats: int, optimizer) -> tuple[list[float], list[float], float]:
    """Samples/s and host ms per step over ``repeats`` windows of ``steps`` calls of ``step``
    after ``warmup`` calls; host reads per step over one more window of ``steps`` calls,
    untimed (the counter intercepts every operation in Python)."""
    for _ in range(warmup):
        step(*next(batches))
    rates, host, counter = [], [], CountHostReads(lambda: [optimizer])
    for _ in range(repeats):
        synchronize(device)
        if device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
        start, host_start = time.perf_counter(), time.thread_time()
        for _ in range(steps):
            step(*next(batches))
        host.append(1000 * (time.thread_time() - host_start) / steps)
        if device.type == "cuda":
            end.record()
            torch.cuda.synchronize(device)
            elapsed = begin.elapsed_time(end) / 1000
        else:
            elapsed = time.perf_counter() - start
        rates.append(steps * batch / elapsed)
    with counter:
        for _ in range(steps):
            step(*next(batches))
    synchronize(device)
    return rates, host, counter.reads / steps


def endless(loader):
    while True:
        yield from loader


def time_bare(case: Case, device: torch.device, warmup: int, steps: int,
              repeats: int) -> Timing:
    on_gpu = device.type == "cuda"
    dm = datamodule(case, case.batch_size * 4)
    model = simclr_model(case, channels_last=on_gpu).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if on_gpu:
        torch.cuda.reset_peak_memory_stats(device)

    def batches():
        for x, y in endless(dm.train_dataloader()):
            yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    rates, host, reads = time_loop(lambda x, y: bare_step(model, dm, x, y, optimizer, device),
                                   batches(), case.batch_size, device, warmup, steps, repeats,
                                   optimizer)
    return Timing(rates, host, reads, step_flops(model, dm, device), peak_memory_mb(device))


def time_anchors(case: Case, device: torch.device, warmup: int, steps: int, repeats: int,
                 workers: int) -> Timing:
    """Per-sample PIL transforms in ``workers`` DataLoader workers, torchvision's ResNet18, the
    NT-Xent loss under autocast."""
    import torchvision

    from modules.losses import nt_xent_loss

    x, y = images(case, case.batch_size * 4)
    dataset = PILViewsDataset(x.transpose(0, 2, 3, 1).copy(), y, 2, [0.5] * 3, [0.25] * 3)
    sampler = torch.utils.data.RandomSampler(dataset, replacement=True, num_samples=10**9)
    loader = torch.utils.data.DataLoader(dataset, batch_size=case.batch_size, sampler=sampler,
                                         num_workers=workers, drop_last=True,
                                         pin_memory=device.type == "cuda",
                                         persistent_workers=workers > 0)
    net = torchvision.models.resnet18(num_classes=128)
    net.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)  # CIFAR stem, as the anchors use
    net.maxpool = nn.Identity()
    net = net.to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    def step(views, labels):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            z = F.normalize(net(torch.cat([v.to(device, non_blocking=True) for v in views])), dim=1)
            loss = nt_xent_loss(*z.float().chunk(2), 0.5)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    rates, host, reads = time_loop(step, iter(loader), case.batch_size, device, warmup, steps,
                                   repeats, optimizer)
    return Timing(rates, host, reads, None, peak_memory_mb(device))


def mean_std(values: list[float]) -> str:
    """``mean ± sample std``."""
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.4g} ± {std:.2g}"


def table(results: dict[str, dict[str, Timing]], device: torch.device) -> str:
    peak = peak_flops(device)
    lines = ["| case | pipeline | samples/s | vs clusterbench | MFU | host ms/step | "
             "host reads/step | peak MB |", "|---|---|---|---|---|---|---|---|"]
    for case, timings in results.items():
        ours = statistics.fmean(timings["clusterbench"].samples_per_second)
        for pipeline, t in timings.items():
            rate = statistics.fmean(t.samples_per_second)
            flops = t.flops_per_step or timings["clusterbench"].flops_per_step
            batch = int(case.split("batch ")[1].split(",")[0])
            mfu = (f"{100 * flops * rate / batch / peak:.1f}%" if peak and flops else "n/a")
            ratio = "1" if pipeline == "clusterbench" else f"{ours / rate:.2f}x"
            lines.append(f"| {case} | {pipeline} | {mean_std(t.samples_per_second)} | {ratio} | "
                         f"{mfu} | {mean_std(t.host_ms_per_step)} | {t.reads_per_step:.2f} | "
                         + (f"{t.peak_memory_mb:.0f} |" if t.peak_memory_mb else "n/a |"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true",
                        help="toy sizes (ResNet18, batch 16, 16 px): the code paths in seconds")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first")
    parser.add_argument("--steps", type=int, default=None, help="steps per timed window")
    parser.add_argument("--repeats", type=int, default=3, help="timed windows per pipeline")
    parser.add_argument("--workers", type=int, default=None,
                        help="DataLoader workers of the anchors' pipeline (default: 8 on a GPU, "
                        "0 on a CPU)")
    parser.add_argument("--output", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    tiny = args.tiny or device.type == "cpu"
    cases = TINY_CASES if tiny else GPU_CASES
    warmup = args.warmup if args.warmup is not None else (2 if tiny else 20)
    steps = args.steps or (3 if tiny else 50)
    workers = args.workers if args.workers is not None else (0 if device.type == "cpu" else 8)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    start = time.perf_counter()
    results: dict[str, dict[str, Timing]] = {}
    for case in cases:
        torch.manual_seed(0)
        results[case.name] = {
            "clusterbench": time_clusterbench(case, device, warmup, steps, args.repeats),
            "bare loop": time_bare(case, device, warmup, steps, args.repeats),
            "anchors' pipeline": time_anchors(case, device, warmup, steps, args.repeats,
                                              workers),
        }
    machine = (torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name())
    header = (f"Machine: {machine} ({platform.machine()}, {torch.get_num_threads()} threads); "
              f"torch {torch.__version__}; data generated (uniform random uint8); "
              f"{args.repeats} windows of {steps} steps after {warmup} warm-up steps, mean ± "
              f"sample std; anchors' loader workers: {workers}; "
              f"{time.perf_counter() - start:.0f} s in all")
    print(header)
    print(table(results, device))
    record = {"machine": machine, "device": device.type, "torch": torch.__version__,
              "threads": torch.get_num_threads(), "repeats": args.repeats, "steps": steps,
              "warmup": warmup, "workers": workers, "data": "generated",
              "results": {case: {p: asdict(t) for p, t in timings.items()}
                          for case, timings in results.items()}}
    if args.output:
        from benchmarks.infra.atomic import write_atomic

        write_atomic(args.output, json.dumps(record, indent=2))
    return record


if __name__ == "__main__":
    main()
