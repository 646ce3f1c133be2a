"""SimCLR training throughput: clusterbench's step against a bare loop and the anchors' pipeline.

Ways to train the same SimCLR configuration (ResNet, NT-Xent, two views per image) on the same
generated images (uniform random ``uint8``: pixel content does not change the cost), timed side
by side in one run (the GPU cases, and ``--tiny`` on a CPU):

- ``clusterbench``: the training step as the suite runner builds it: the Lightning Trainer with
  the runner's callbacks, the DataModule's ``uint8`` batches and its on-device augmentation, the
  method's optimiser (LARS, its parameter groups) and per-step schedule, the online probe, the
  run's precision and the runner's GPU settings, ``torch.compile`` of the backbone and projector
  included (:func:`benchmarks.run.trainer.apply_gpu_speed_settings`).
- ``bare loop``: the same model, augmentation, loss, online probe, optimiser groups and
  schedule in a plain PyTorch loop (no Lightning, no callbacks, no logging), compiled the same
  way: what the framework alone costs.
- ``clusterbench, eager`` and ``bare loop, eager``: the two without ``torch.compile``.
- ``anchors' pipeline``: how lightly's and solo-learn's SimCLR benchmarks feed a GPU:
  per-sample torchvision transforms on PIL images in DataLoader workers, torchvision's ResNet of
  the case's depth with the CIFAR stem and a Linear-BatchNorm-ReLU-Linear projector, the loss
  under autocast (AMP), SGD, eager.

How it is timed, so that a figure measures what it names:

- Each pipeline is built, warmed up (compilation, cuDNN's autotuning for its own shapes) and
  measured alone before any timing: its peak memory over a few steady steps (the peak reset
  after its warm-up and measured from what was allocated before it was built), then its host
  reads of device values over a window of their own (``aten._local_scalar_dense``, counted
  with a ``TorchDispatchMode``, which intercepts every operation in Python).
- Then the pipelines take turns, window by window (each round in another order), for at least
  :data:`MIN_WINDOWS` timed windows each: other work on the machine, or a drifting clock,
  hits them alike. No counter and no hook is active in a timed window.
- The anchors' DataLoader workers fill their queue while the other pipelines run: before each
  of its windows the pipeline throws that queue away and takes as many untimed training steps
  as it holds (:meth:`AnchorsPipeline.before_window`), so that the window starts from its own
  steady state rather than with every worker idle; a window's steps are whole rounds of the
  workers.
- FLOPs of a step come from ``torch.utils.flop_counter`` in a pass after every window and
  peak, on an eager model (float32; the count does not depend on the precision); model FLOP
  utilisation divides them by the GPU's dense bf16 peak, from a table by device name ("n/a" on
  a CPU).
- Reported per pipeline: samples per second as mean ± sample std and min-max over the windows,
  host (stepping thread) milliseconds per step, host reads per step and peak memory; the ratio
  of clusterbench's samples/s to each other pipeline's with the same compilation (the anchors'
  against compiled clusterbench). On a GPU the windows are timed with CUDA events; on a CPU
  with the wall clock. Every run records its order of events (:class:`Timeline`) and checks
  these rules on it (:func:`check_rules`).

Clusterbench's Trainer cannot hand control back between two of its steps, so it trains in a
thread of its own that steps only when told (:class:`LightningPipeline`); one pipeline runs at a
time.

``--case fashion-cpu`` times a suite's own run instead: ``benchmarks/fashion_cpu.yaml``'s
``simclr/nt_xent`` (the five-layer CNN, AdamW, the warm-up-stable-decay schedule, batch 512, the
``simclr`` grey-scale augmentation of ``uint8`` batches, bf16 autocast and channels-last on the
CPU), every setting read from the suite file (:func:`suite_case`). clusterbench is the run's
model, datamodule and Trainer as the suite runner builds them
(:func:`benchmarks.run.one.instantiate`, :func:`benchmarks.run.one.run_trainer`: its callbacks,
checkpoint saver and CSV logger); the bare loop is the same model, datamodule, augmentation,
precision, optimiser and schedule without Lightning. The runner compiles nothing on a CPU
(:func:`benchmarks.run.trainer.gpu_speed_settings`), so the two run eagerly; no anchors'
pipeline. The data: the real Fashion-MNIST training split where it is installed, else (or with
``--generated``) uniform random ``uint8`` images of its shape, named so. The timed steps stay
within the run's first epoch (the epoch's end validates, which is not the step).

Usage::

    python -m benchmarks.perf.train_throughput        # the GPU cases, when there is one
    python -m benchmarks.perf.train_throughput --tiny               # seconds on a CPU
    python -m benchmarks.perf.train_throughput --case fashion-cpu   # a minute on a CPU
    python -m benchmarks.perf.train_throughput --output results/throughput/train.json
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from benchmarks.infra.statistics import format_mean_std, mean_std
from benchmarks.perf.throughput import GeneratedImagesDataModule, PILViewsDataset, cpu_name

#: Dense bf16 tensor-core peaks (FLOP/s) by a substring of ``torch.cuda.get_device_name()``.
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A6000": 155e12,
             "L4": 121e12, "A10": 125e12, "V100": 125e12, "T4": 65e12}
#: Timed windows per pipeline at least: fewer give no useful spread (the first GPU page had 2).
MIN_WINDOWS = 5
#: Steady steps whose peak memory is a pipeline's (after its warm-up, before any timing); one
#: on a CPU, where no peak is read.
PEAK_STEPS = 3
#: The pipelines, in the order they are built and measured alone; the headline pair first.
PIPELINES = ("clusterbench", "bare loop", "clusterbench, eager", "bare loop, eager",
             "anchors' pipeline")
ANCHORS = "anchors' pipeline"
#: What each pipeline's samples/s is compared with: clusterbench with the same compilation.
REFERENCE = {"clusterbench": "clusterbench", "bare loop": "clusterbench",
             "clusterbench, eager": "clusterbench, eager",
             "bare loop, eager": "clusterbench, eager", ANCHORS: "clusterbench"}


@dataclass
class Case:
    """One configuration: the backbone, the global batch and the image side; with ``suite_run``
    (``(suite, run)``), a suite's run, whose settings every pipeline reads from the suite file
    (:func:`suite_case` fills the other fields from it)."""

    backbone: str
    batch_size: int
    size: int
    width: int = 32  # small_cnn only
    suite_run: tuple[str, str] | None = None

    @property
    def name(self) -> str:
        name = f"SimCLR {self.backbone}, batch {self.batch_size}, {self.size}x{self.size}"
        return name + (f", {' '.join(self.suite_run)}" if self.suite_run else "")


GPU_CASES = [Case("resnet18", 512, 32), Case("resnet50", 256, 32), Case("resnet18", 256, 64)]
#: A CPU can time only toy sizes in seconds: the same code paths, tiny tensors. ResNet50, so
#: that a pipeline built on another depth than the case's shows (ResNet18 is the default one).
TINY_CASES = [Case("resnet50", 4, 8)]
#: The suite run of ``--case fashion-cpu``: the Fashion-MNIST recipe on the CPU.
FASHION_CPU = ("fashion_cpu", "simclr/nt_xent")
#: Generated training images of a suite case without its data (``--generated``): as many as
#: Fashion-MNIST's training split, so that an epoch, and the schedule, has its steps.
GENERATED_IMAGES = 60_000
#: ``--case fashion-cpu``'s warm-up steps, steps a window and windows: 92 steps a pipeline,
#: within the run's first epoch (111 steps of Fashion-MNIST's 57,000 training images at 512).
SUITE_DEFAULTS = (3, 8, 10)


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16.items() if key in name), None)


class Instruments:
    """Every counting pass here (host reads, FLOPs) is entered through :func:`instrumented`:
    a timed window shows that none ran inside it by these counts staying put."""

    entered = 0
    active = 0


@contextmanager
def instrumented(mode) -> Iterator[Any]:
    """``mode`` (a ``TorchDispatchMode`` or ``FlopCounterMode``) entered, and counted so."""
    Instruments.entered += 1
    Instruments.active += 1
    try:
        with mode:
            yield mode
    finally:
        Instruments.active -= 1


def dispatch_modes() -> int:
    """Python dispatch modes active in this thread (each one intercepts every operation)."""
    return len(_get_current_dispatch_mode_stack())


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


def architecture(module: nn.Module) -> str:
    """The ResNet a built module holds, read from its blocks (``resnet18``: 8 basic blocks;
    ``resnet50``: 16 bottlenecks), the backbone name of clusterbench's small CNNs, or its class
    name: what a pipeline really trains."""
    from torchvision.models.resnet import BasicBlock, Bottleneck

    from modules.blocks.backbones import FiveLayerCNN, SmallCNN

    basic = sum(isinstance(m, BasicBlock) for m in module.modules())
    bottleneck = sum(isinstance(m, Bottleneck) for m in module.modules())
    if bottleneck:
        return f"resnet{3 * bottleneck + 2}"
    if basic:
        return f"resnet{2 * basic + 2}"
    names = {FiveLayerCNN: "five_layer_cnn", SmallCNN: "small_cnn"}
    return names.get(type(module), type(module).__name__)


# -- a suite's run: its settings read from the suite file ---------------------------------------
@functools.cache
def load_run(suite_run: tuple[str, str]):
    """The suite and the run ``suite_run`` (``(suite, run)``) names, loaded and checked as the
    suite runner loads them (:func:`benchmarks.suites.config.load_suite`)."""
    from benchmarks.suites.config import load_suite

    suite_name, run_name = suite_run
    suite = load_suite(suite_name)
    return suite, suite.run(run_name)


def suite_case(suite_name: str, run_name: str) -> Case:
    """The case of a suite's run, its backbone, width, batch and image side read from the suite
    file (where the run leaves one out, the method's or the dataset's default)."""
    from benchmarks.suites.config import argument_default
    from datamodules import DATAMODULES
    from modules.methods import METHODS

    _, run = load_run((suite_name, run_name))
    method, data = METHODS[run.method], DATAMODULES[run.dataset]

    def setting(section: dict[str, Any], cls: type, name: str) -> Any:
        return section[name] if name in section else argument_default(cls, name, None)

    return Case(setting(run.model, method, "backbone"),
                setting(run.data_kwargs(), data, "batch_size"), data.input_shape[-1],
                setting(run.model, method, "backbone_width"), suite_run=(suite_name, run_name))


def suite_device(case: Case) -> torch.device:
    """Where the suite runner trains ``case``'s run: its Trainer's accelerator, as the runner
    resolves it (:func:`benchmarks.run.trainer.runs_on_gpu`)."""
    from benchmarks.run.trainer import RunOptions, runs_on_gpu, trainer_settings

    _, run = load_run(case.suite_run)
    accelerator = trainer_settings(run, RunOptions())["accelerator"]
    return torch.device("cuda" if runs_on_gpu(accelerator) else "cpu")


def suite_speed(case: Case) -> dict[str, Any]:
    """The GPU speed settings the runner gives ``case``'s run (``{}`` off a GPU: nothing
    compiled, the suite's own precision and memory format)."""
    from benchmarks.run.trainer import RunOptions, gpu_speed_settings

    _, run = load_run(case.suite_run)
    return gpu_speed_settings(run, RunOptions(), suite_device(case).type == "cuda")


def generated_like(cls: type, data_kwargs: dict[str, Any], seed: int, images: int):
    """A datamodule of class ``cls`` and settings ``data_kwargs`` whose official splits are
    generated: ``images`` uniform random ``uint8`` images of its input shape with random labels
    (and one test image). Its validation split, statistics, loaders, augmentation and views are
    the class's own; it is marked generated (``provenance``, ``source``)."""

    class Generated(cls):
        provenance = "generated"
        source = (f"GENERATED: {images:,} uniform random uint8 "
                  f"{'x'.join(map(str, cls.input_shape))} images in place of {cls.__name__}'s "
                  "(timing only)")

        def load(self) -> Any:
            from datamodules.base import TensorSplits

            rng = np.random.default_rng(seed)
            x = torch.from_numpy(rng.integers(0, 256, (images + 1, *self.input_shape),
                                              dtype=np.uint8))
            y = torch.from_numpy(rng.integers(0, self.num_classes, images + 1))
            return TensorSplits(x[:images], y[:images], x[images:], y[images:])

    Generated.__name__ = Generated.__qualname__ = f"Generated{cls.__name__}"
    return Generated(**data_kwargs, seed=seed)


def suite_model_and_data(case: Case, generated: int | None):
    """``case``'s run as the suite runner instantiates it (:func:`benchmarks.run.one.instantiate`,
    the suite's first seed): its model, and its datamodule set up on the real data where they
    are installed, else (or when ``generated`` gives a number of images) on generated images.
    Returns ``(suite, run, seed, model, datamodule)``."""
    from benchmarks.run.one import instantiate

    suite, run = load_run(case.suite_run)
    seed = suite.seeds[0]
    datamodule, model = instantiate(run, seed)
    if generated is None:
        try:
            datamodule.setup("fit")
            return suite, run, seed, model, datamodule
        except FileNotFoundError as err:
            print(f"{case.name}: {err}\n-> generated images instead", file=sys.stderr)
            generated = GENERATED_IMAGES
    datamodule = generated_like(type(datamodule), run.data_kwargs(), seed, generated)
    datamodule.setup("fit")
    return suite, run, seed, model, datamodule


#: The autocast dtype of a Trainer precision (None: no autocast), for the bare loop.
AUTOCAST = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16, "32-true": None,
            "32": None, 32: None}


def autocast_dtype(precision: Any) -> torch.dtype | None:
    """The autocast dtype a bare loop runs a Trainer ``precision`` with."""
    if precision not in AUTOCAST:
        raise ValueError(f"the bare loop has no equivalent of Trainer precision {precision!r}; "
                         f"it takes {', '.join(map(str, AUTOCAST))}")
    return AUTOCAST[precision]


def compile_model(model, compiled: bool, device: torch.device) -> str:
    """The runner's GPU settings on ``model`` (channels-last, and ``torch.compile`` of its
    backbone and projector when ``compiled``): its compile status. A CPU rehearsal compiles with
    dynamo's ``eager`` backend (the graph capture and guards, not inductor's minutes of C++)."""
    from benchmarks.run.trainer import (
        COMPILED_MODULES,
        apply_gpu_speed_settings,
        compile_or_eager,
    )

    if not compiled:
        return "eager"
    if device.type == "cuda":
        status = apply_gpu_speed_settings(model, {"cudnn_benchmark": True, "tf32": True,
                                                  "channels_last": True, "compile": True})
        backend = "inductor"
    else:
        status, backend = {}, "eager"
        for name in COMPILED_MODULES:
            setattr(model, name, compile_or_eager(getattr(model, name), name, status,
                                                  backend=backend))
    failed = {n: s for n, s in status.items() if s != "compiled"}
    return (f"compiled ({backend})" if not failed
            else "; ".join(f"{n}: {s}" for n, s in failed.items()))


def optimizer_signature(optimizer: torch.optim.Optimizer, scheduler, interval: str) -> dict:
    """What an optimiser and its schedule do, without the tensors: the optimiser's class, each
    group's hyperparameters (its current learning rate included) and parameter shapes, the
    schedule's class, interval and steps taken. Two pipelines that train alike have equal
    signatures after the same number of steps."""
    groups = []
    for group in optimizer.param_groups:
        settings = {k: v for k, v in group.items() if k != "params"}
        shapes = [tuple(p.shape) for p in group["params"]]
        groups.append({**settings, "params": len(shapes),
                       "shapes": str(hash(tuple(shapes))), "numel": sum(p.numel()
                                                                     for p in group["params"])})
    return {"optimizer": type(optimizer).__name__, "groups": groups,
            "scheduler": type(scheduler).__name__, "interval": interval,
            "steps": scheduler.last_epoch}


@dataclass
class Span:
    """A run of steps: the stepping thread's host seconds and the most Python dispatch modes it
    had active at the run's start or end."""

    host_seconds: float
    dispatch_modes: int


class Pipeline:
    """One way to train: built and put on the device by :meth:`start`, then ``run(steps)`` any
    number of times (nothing runs in between)."""

    name: str
    case: Case
    compile_status: str = "eager"
    #: DataLoader workers preparing its batches ahead of its steps and the batches their queue
    #: holds (``workers * prefetch_factor``), known once started: the anchors' own; the other
    #: pipelines' datamodules load in the stepping process (``num_workers`` 0, the suite's too).
    workers: int = 0
    queue: int = 0

    def start(self) -> None:
        raise NotImplementedError

    def run(self, steps: int, mode=None) -> Span:
        """``steps`` training steps (issued; the device may still be busy), inside ``mode``
        when given (entered in the stepping thread)."""
        raise NotImplementedError

    def optimizers(self) -> list[torch.optim.Optimizer]:
        raise NotImplementedError

    def signature(self) -> dict | None:
        """:func:`optimizer_signature` of what it trains with; None for the anchors'."""
        return None

    def architecture(self) -> str:
        raise NotImplementedError

    def before_window(self) -> int:
        """Untimed, just before each of its timed windows: the training steps it ran."""
        return 0

    def data(self) -> str:
        """The images it trains on."""
        return GeneratedImagesDataModule.source

    def close(self) -> None:
        """Stop and free what it holds."""


class MainThreadPipeline(Pipeline):
    """A pipeline whose steps run in the caller's thread: ``step(x, y)`` over ``batches``."""

    batches: Iterator

    def step(self, x, y) -> None:
        raise NotImplementedError

    def run(self, steps: int, mode=None) -> Span:
        modes = dispatch_modes()
        host = time.thread_time()
        with instrumented(mode) if mode is not None else nullcontext():
            for _ in range(steps):
                self.step(*next(self.batches))
        host = time.thread_time() - host
        return Span(host, max(modes, dispatch_modes()))


class Pace(pl.Callback):
    """Holds a Trainer between steps: the fit waits at its start, and after ``left`` more
    training steps, until :meth:`LightningPipeline.run` allows more. Between two pauses the
    stepping thread's host time is measured and the run's ``mode`` (a counter) is active."""

    def __init__(self) -> None:
        self.go, self.paused = threading.Semaphore(0), threading.Semaphore(0)
        self.left, self.mode, self.stop = 0, None, False
        self.context, self.span, self.total_steps = None, None, 0
        self.host_start, self.modes_start = 0.0, 0

    def on_train_start(self, trainer, pl_module) -> None:
        self.total_steps = int(trainer.estimated_stepping_batches)
        self.pause(trainer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.left -= 1
        if self.left <= 0:
            self.pause(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        self.end_span()

    def end_span(self) -> None:
        if self.context is not None:
            self.context.__exit__(None, None, None)
            self.context = None
            self.span = Span(time.thread_time() - self.host_start,
                             max(self.modes_start, dispatch_modes()))

    def pause(self, trainer) -> None:
        self.end_span()
        self.paused.release()
        self.go.acquire()
        if self.stop:
            trainer.should_stop = True
            return
        self.modes_start = dispatch_modes()
        self.context = instrumented(self.mode) if self.mode is not None else nullcontext()
        self.context.__enter__()
        self.host_start = time.thread_time()


class LightningPipeline(Pipeline):
    """clusterbench's step: the runner's Trainer, callbacks, datamodule and precision, in a
    thread of its own that trains only while :meth:`run` lets it."""

    def __init__(self, name: str, case: Case, device: torch.device, compiled: bool,
                 batches: int) -> None:
        from benchmarks.run.spec import RunSpec
        from benchmarks.run.trainer import RunOptions, build_trainer

        on_gpu = device.type == "cuda"
        self.name, self.case, self.device = name, case, device
        # one epoch of exactly the batches the runs take, and one to spare
        self.dm = datamodule(case, case.batch_size * (batches + 2) * 100 // 99)
        torch.manual_seed(0)
        self.model = simclr_model(case, channels_last=on_gpu)
        self.compile_status = compile_model(self.model, compiled, device)
        self.pace = Pace()
        # the speed settings are this benchmark's own (compile_model): the factory adds none
        run = RunSpec(name=name, method="simclr",
                      trainer={"accelerator": "gpu" if on_gpu else "cpu", "devices": 1,
                               "max_epochs": 1,
                               "precision": "bf16-mixed" if on_gpu else "32-true",
                               "limit_val_batches": 0})
        self.attach(build_trainer(run, "perf", self.model, options=RunOptions(fast_gpu=False),
                                  callbacks=[self.pace], explicit_interval=True,
                                  logger=False).trainer)

    def attach(self, trainer: pl.Trainer) -> None:
        """``trainer`` (its callbacks holding :attr:`pace`) fits in a thread of its own."""
        self.trainer = trainer
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._fit, name=f"fit: {self.name}", daemon=True)

    def _fit(self) -> None:
        try:
            self.trainer.fit(self.model, datamodule=self.dm)
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            self.error = err
        finally:
            self.pace.end_span()
            self.pace.paused.release()

    def start(self) -> None:
        self.thread.start()
        self._wait()

    def _wait(self) -> None:
        self.pace.paused.acquire()
        if self.error is not None:
            raise RuntimeError(f"{self.name}: the training failed") from self.error

    def run(self, steps: int, mode=None) -> Span:
        if not self.thread.is_alive():
            raise RuntimeError(f"{self.name}: the training has ended")
        self.pace.left, self.pace.mode, self.pace.span = steps, mode, None
        self.pace.go.release()
        self._wait()
        if self.pace.left > 0:
            raise RuntimeError(f"{self.name}: the data ran out {self.pace.left} steps early")
        return self.pace.span

    @property
    def total_steps(self) -> int:
        """The steps of the Trainer's fit: the length of its schedule."""
        return self.pace.total_steps

    @property
    def steps_per_epoch(self) -> float:
        """The schedule's steps an epoch, as :meth:`RepresentationModule.configure_optimizers`
        computes them."""
        return self.pace.total_steps / max(1, self.trainer.max_epochs or 1)

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return self.trainer.optimizers

    def signature(self) -> dict:
        config = self.trainer.lr_scheduler_configs[0]
        return optimizer_signature(self.trainer.optimizers[0], config.scheduler, config.interval)

    def architecture(self) -> str:
        return architecture(self.model.backbone)

    def data(self) -> str:
        return self.dm.source

    def close(self) -> None:
        if self.thread.is_alive():
            self.pace.stop = True
            self.pace.go.release()
            self.thread.join(timeout=60)


class SuiteRunPipeline(LightningPipeline):
    """clusterbench's step for a suite's run: the run's model and datamodule as the runner
    instantiates them (:func:`suite_model_and_data`) and the Trainer the runner's
    :func:`benchmarks.run.one.train` fits them with (:func:`benchmarks.run.one.run_trainer`:
    the run's Trainer settings, the runner's callbacks, the checkpoint saver, the CSV logger, in
    a temporary attempt folder; no progress bar, as a bench run whose output is not a terminal),
    :attr:`pace` after them. Its training stays within one epoch: ``batches`` more than an
    epoch holds is refused."""

    def __init__(self, name: str, case: Case, batches: int, generated: int | None = None
                 ) -> None:
        from benchmarks.run.curves import make_logger
        from benchmarks.run.one import run_trainer
        from benchmarks.run.trainer import RunOptions, trainer_settings

        self.name, self.case, self.device = name, case, suite_device(case)
        suite, run, seed, self.model, self.dm = suite_model_and_data(case, generated)
        epoch = len(self.dm.train_dataloader())
        if batches > epoch:
            raise ValueError(f"{case.name}: the pipeline takes {batches} steps, more than the "
                             f"run's first epoch of {epoch}; fewer --windows or --steps (an "
                             "epoch's end validates, which is not the step)")
        self.folder = tempfile.TemporaryDirectory(prefix="train_throughput.")
        attempt = Path(self.folder.name)
        options = RunOptions(progress=False)
        self.pace = Pace()
        logger = make_logger("csv", attempt, suite.settings, run, seed, {}, options.wandb)
        built, _ = run_trainer(self.model, run, seed, attempt, trainer_settings(run, options),
                               options, logger, callbacks=[self.pace])
        self.compile_status = compile_status(built.compiled)
        self.attach(built.trainer)

    def close(self) -> None:
        super().close()
        self.folder.cleanup()


def compile_status(status: dict[str, str]) -> str:
    """A pipeline's compile status from the runner's (:func:`apply_gpu_speed_settings`):
    ``eager`` when nothing was compiled."""
    if not status:
        return "eager"
    failed = {n: s for n, s in status.items() if s != "compiled"}
    return ("compiled (inductor)" if not failed
            else "; ".join(f"{n}: {s}" for n, s in failed.items()))


class BareLoop(MainThreadPipeline):
    """The same model, augmentation, loss, online probe, optimiser groups and per-step schedule
    as clusterbench's step, in a plain loop: views outside autocast (as the datamodule makes
    them), the model's parts called as its ``training_step`` calls them, minus the logging.
    Its schedule spans ``total_steps`` of ``steps_per_epoch`` (default: one epoch), as
    clusterbench's Trainer sets it."""

    #: The autocast dtype of the step (None: float32), clusterbench's precision.
    autocast: torch.dtype | None

    def __init__(self, name: str, case: Case, device: torch.device, compiled: bool,
                 total_steps: int, steps_per_epoch: float | None = None) -> None:
        self.name, self.case, self.device = name, case, device
        self.dm = datamodule(case, case.batch_size * 4)
        torch.manual_seed(0)
        self.model = simclr_model(case, channels_last=device.type == "cuda")
        self.compile_status = compile_model(self.model, compiled, device)
        self.autocast = torch.bfloat16 if device.type == "cuda" else None
        self.total_steps, self.steps_per_epoch = total_steps, steps_per_epoch or total_steps

    def start(self) -> None:
        model = self.model.to(self.device)
        # as RepresentationModule.configure_optimizers builds them for one device; check_rules
        # compares the two after the same steps
        self.optimizer, self.scheduler = model.optimizer_and_schedule(
            self.dm.batch_size, self.total_steps, self.steps_per_epoch)
        device = self.device

        def batches():
            for x, y in endless(self.dm.train_dataloader()):
                yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)

        self.batches = batches()

    def step(self, x: Tensor, y: Tensor) -> None:
        model = self.model
        views = self.dm.make_views(x)  # outside autocast, as the datamodule's hook makes them
        with torch.autocast(self.device.type, dtype=self.autocast or torch.bfloat16,
                            enabled=self.autocast is not None):
            features = model.backbone(model._backbone_input(torch.cat(views)))  # (2B, F)
            loss = model.objective(features, len(views), y)
            with torch.no_grad():  # the probe must never shape the representation
                probe_input = model.probe_embedding(features, len(y))
                model.monitor_bank.add(probe_input, y)
            loss = loss + F.cross_entropy(model.online_probe(probe_input), y)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.optimizer]

    def signature(self) -> dict:
        return optimizer_signature(self.optimizer, self.scheduler, "step")

    def data(self) -> str:
        return self.dm.source

    def architecture(self) -> str:
        return architecture(self.model.backbone)

    def flops(self) -> float | None:
        """FLOPs of one forward and backward pass of the eager model on a batch (float32; the
        augmentation, a few element-wise passes, is not counted)."""
        from torch.utils.flop_counter import FlopCounterMode

        if self.compile_status != "eager":
            raise RuntimeError("FLOPs are counted on the eager model (a compiled one would "
                               "be traced again under the counter)")
        model = self.model
        x, y = next(self.batches)
        views = self.dm.make_views(x)
        with instrumented(FlopCounterMode(display=False)) as counter:
            features = model.backbone(model._backbone_input(torch.cat(views)))
            model.objective(features, len(views), y).backward()
        model.zero_grad(set_to_none=True)
        return float(counter.get_total_flops()) or None


class SuiteBareLoop(BareLoop):
    """The bare loop of a suite's run: its model and datamodule as the runner instantiates them
    (:func:`suite_model_and_data`), the runner's speed settings for it (none on a CPU), the
    autocast of its Trainer's precision, and the schedule of clusterbench's Trainer."""

    def __init__(self, name: str, case: Case, total_steps: int, steps_per_epoch: float,
                 generated: int | None = None) -> None:
        from benchmarks.run.trainer import (
            RunOptions,
            apply_gpu_speed_settings,
            trainer_settings,
        )

        self.name, self.case, self.device = name, case, suite_device(case)
        _, run, _, self.model, self.dm = suite_model_and_data(case, generated)
        speed = suite_speed(case)
        self.compile_status = compile_status(apply_gpu_speed_settings(self.model, speed))
        precision = trainer_settings(run, RunOptions()).get("precision") or speed.get("precision")
        self.autocast = autocast_dtype(precision or "32-true")  # Lightning's default precision
        self.total_steps, self.steps_per_epoch = total_steps, steps_per_epoch


class AnchorsPipeline(MainThreadPipeline):
    """Per-sample PIL transforms in ``workers`` DataLoader workers, torchvision's ResNet of the
    case's depth (CIFAR stem, a Linear-BatchNorm-ReLU-Linear projector to 128, as lightly's and
    solo-learn's SimCLR heads), the NT-Xent loss under autocast, SGD."""

    def __init__(self, case: Case, device: torch.device, workers: int) -> None:
        import torchvision

        self.name, self.case, self.device, self.workers = ANCHORS, case, device, workers
        torch.manual_seed(0)
        net = getattr(torchvision.models, case.backbone)()
        if case.size <= 64:  # the CIFAR stem, as the anchors use (and clusterbench's case)
            net.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
            net.maxpool = nn.Identity()
        net.fc = nn.Sequential(nn.Linear(net.fc.in_features, 2048), nn.BatchNorm1d(2048),
                               nn.ReLU(inplace=True), nn.Linear(2048, 128))
        self.net = net

    def start(self) -> None:
        x, y = images(self.case, self.case.batch_size * 4)
        dataset = PILViewsDataset(x.transpose(0, 2, 3, 1).copy(), y, 2, [0.5] * 3, [0.25] * 3)
        sampler = torch.utils.data.RandomSampler(dataset, replacement=True, num_samples=10**9)
        self.loader = torch.utils.data.DataLoader(
            dataset, batch_size=self.case.batch_size, sampler=sampler,
            num_workers=self.workers, drop_last=True, pin_memory=self.device.type == "cuda",
            persistent_workers=self.workers > 0)
        self.batches = iter(self.loader)
        self.queue = self.workers * (self.loader.prefetch_factor or 0)  # None without workers
        self.net = self.net.to(self.device)
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=0.9)

    def step(self, views: list[Tensor], labels: Tensor) -> None:
        from modules.losses import nt_xent_loss

        device = self.device
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            z = F.normalize(self.net(torch.cat([v.to(device, non_blocking=True)
                                                for v in views])), dim=1)
            loss = nt_xent_loss(*z.float().chunk(2), 0.5)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def before_window(self) -> int:
        """The workers filled their queue while the other pipelines ran: those batches would
        cost the window nothing, so they are thrown away. The workers then start their next
        batches together, and a window timed from there would wait for all of them at once, a
        cold start no steady loader has (near balance it would overcharge the window). So as
        many untimed training steps as the queue holds follow: the window starts from the
        pipeline's own steady state (its queue as full as its steps leave it, the workers'
        batches staggered), and a window of whole rounds of the workers takes as many rounds as
        a steady loader would. Returns those steps."""
        for _ in range(self.queue):
            next(self.batches)
        self.run(self.queue)
        return self.queue

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.optimizer]

    def architecture(self) -> str:
        return architecture(self.net)

    def flops(self) -> float | None:
        from torch.utils.flop_counter import FlopCounterMode

        from modules.losses import nt_xent_loss

        views, _ = next(self.batches)
        with instrumented(FlopCounterMode(display=False)) as counter:
            z = F.normalize(self.net(torch.cat([v.to(self.device) for v in views])), dim=1)
            nt_xent_loss(*z.chunk(2), 0.5).backward()
        self.net.zero_grad(set_to_none=True)
        return float(counter.get_total_flops()) or None

    def close(self) -> None:
        self.__dict__.pop("batches", None)  # the loader's iterator: its workers stop with it


@dataclass
class Timing:
    samples_per_second: list[float]
    host_ms_per_step: list[float]
    reads_per_step: float
    flops_per_step: float | None
    peak_memory_mb: float | None
    compile: str = "eager"
    architecture: str | None = None
    data: str = GeneratedImagesDataModule.source


@dataclass
class Timeline:
    """What a case's run did, in order: each pipeline's build, warm-up, peak span, host-read
    count and timed windows, and the FLOP passes; :func:`check_rules` reads it."""

    events: list[dict] = field(default_factory=list)
    start: float = field(default_factory=time.perf_counter)

    def add(self, event: str, pipeline: str, **info) -> None:
        """``event`` of ``pipeline``, stamped with the seconds since the case began."""
        self.events.append({"event": event, "pipeline": pipeline,
                            "at": round(time.perf_counter() - self.start, 3), **info})


def timed_window(pipeline: Pipeline, steps: int, device: torch.device
                 ) -> tuple[float, Span, int, int]:
    """Seconds of ``steps`` steps of ``pipeline`` (CUDA events on a GPU, after a
    synchronisation; the wall clock on a CPU), its span, the counting passes entered meanwhile,
    and the untimed steps its :meth:`Pipeline.before_window` ran first."""
    warm_steps = pipeline.before_window()
    entered = Instruments.entered
    synchronize(device)
    if device.type == "cuda":
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
    start = time.perf_counter()
    span = pipeline.run(steps)
    if device.type == "cuda":
        end.record()
        torch.cuda.synchronize(device)
        seconds = begin.elapsed_time(end) / 1000
    else:
        seconds = time.perf_counter() - start
    return seconds, span, Instruments.entered - entered, warm_steps


def case_pipelines(case: Case) -> tuple[str, ...]:
    """The pipelines of ``case``: all of :data:`PIPELINES`; for a suite's run, clusterbench and
    the bare loop, compiled as the runner compiles it (eager on a CPU)."""
    if case.suite_run is None:
        return PIPELINES
    if suite_speed(case).get("compile"):
        return ("clusterbench", "bare loop")
    return ("clusterbench, eager", "bare loop, eager")


def build(name: str, case: Case, device: torch.device, workers: int, batches: int,
          reference: Pipeline | None, generated: int | None = None) -> Pipeline:
    """Pipeline ``name`` of ``case``; a bare loop takes its schedule's length from
    ``reference``, its clusterbench."""
    if name == ANCHORS:
        return AnchorsPipeline(case, device, workers)
    compiled = not name.endswith(", eager")
    if name.startswith("clusterbench"):
        if case.suite_run is not None:
            return SuiteRunPipeline(name, case, batches, generated)
        return LightningPipeline(name, case, device, compiled, batches)
    total, per_epoch = ((reference.total_steps, reference.steps_per_epoch)
                        if isinstance(reference, LightningPipeline) else (0, None))
    if case.suite_run is not None:
        return SuiteBareLoop(name, case, total, per_epoch, generated)
    return BareLoop(name, case, device, compiled, total, per_epoch)


def measure_case(case: Case, device: torch.device, warmup: int, steps: int, windows: int,
                 workers: int, timeline: Timeline, peak_steps: int = PEAK_STEPS,
                 generated: int | None = None) -> dict[str, Timing]:
    """Every pipeline of ``case``, measured alone and then timed in turns (module docstring);
    ``generated`` images in place of a suite run's data when given."""
    on_gpu = device.type == "cuda"
    names = case_pipelines(case)
    # the Trainer's epoch holds every step any call takes: the schedule's length is the same
    # for the bare loops, which read it from the Trainer
    batches = warmup + peak_steps + steps + windows * steps
    pipelines: dict[str, Pipeline] = {}
    peaks: dict[str, float | None] = {}
    reads: dict[str, float] = {}
    try:
        for name in names:  # one at a time: its own memory, its own autotuning
            reference = pipelines.get(REFERENCE[name])
            base = torch.cuda.memory_allocated(device) if on_gpu else 0
            timeline.add("build", name)
            pipeline = pipelines[name] = build(name, case, device, workers, batches, reference,
                                               generated)
            pipeline.start()
            timeline.add("warm-up", name, steps=warmup,
                         cudnn_benchmark=torch.backends.cudnn.benchmark)
            pipeline.run(warmup)
            synchronize(device)
            if on_gpu:
                torch.cuda.reset_peak_memory_stats(device)
            timeline.add("reset peak", name)
            pipeline.run(peak_steps)
            synchronize(device)
            peaks[name] = (torch.cuda.max_memory_allocated(device) - base) / 2**20 if on_gpu \
                else None
            timeline.add("read peak", name)
            counter = CountHostReads(pipeline.optimizers)
            timeline.add("count host reads", name, steps=steps)
            pipeline.run(steps, mode=counter)
            synchronize(device)
            reads[name] = counter.reads / steps
        rates: dict[str, list[float]] = {name: [] for name in names}
        host: dict[str, list[float]] = {name: [] for name in names}
        for round_ in range(windows):
            turn = round_ % len(names)  # each round in another order
            for name in names[turn:] + names[:turn]:
                pipeline = pipelines[name]
                seconds, span, entered, warm = timed_window(pipeline, steps, device)
                rates[name].append(steps * case.batch_size / seconds)
                host[name].append(1000 * span.host_seconds / steps)
                timeline.add("window", name, round=round_, seconds=seconds, steps=steps,
                             workers=pipeline.workers, queue=pipeline.queue, warm_steps=warm,
                             dispatch_modes=span.dispatch_modes, counting_passes=entered)
        signatures = {name: p.signature() for name, p in pipelines.items()}
        model_flops = anchors_flops = None
        if "bare loop, eager" in pipelines:
            timeline.add("flops", "bare loop, eager")
            model_flops = pipelines["bare loop, eager"].flops()
        if ANCHORS in pipelines:
            timeline.add("flops", ANCHORS)
            anchors_flops = pipelines[ANCHORS].flops()
    finally:
        for pipeline in pipelines.values():
            pipeline.close()
    timings = {name: Timing(rates[name], host[name], reads[name],
                            anchors_flops if name == ANCHORS else model_flops, peaks[name],
                            p.compile_status, p.architecture(), p.data())
               for name, p in pipelines.items()}
    timeline.add("signatures", "", signatures=signatures)
    del pipelines
    gc.collect()
    if on_gpu:
        torch.cuda.empty_cache()
    return timings


def check_rules(case: str, timings: dict[str, dict], events: list[dict], device: str,
                min_windows: int = MIN_WINDOWS) -> dict[str, dict]:
    """The rules a case's measurement keeps, each ``{"passed": bool, "detail": str}``:

    - ``backbone``: every pipeline trains the case's own architecture (read from its module);
    - ``windows``: at least ``min_windows`` timed windows each, in rounds where every pipeline
      has one window;
    - ``clean_windows``: no counting pass entered and no dispatch mode active in a window;
    - ``peak``: each pipeline's peak is reset after its warm-up and read before anything else
      runs, and no FLOP pass falls between;
    - ``warm_up``: each pipeline warms up before its peak span and its first window, with
      cuDNN's autotuner on (on a GPU);
    - ``optimiser``: each bare loop's optimiser groups, learning rates and schedule equal its
      clusterbench's after the same steps;
    - ``compile``: the compiled pipelines compiled, the eager ones not;
    - ``flops_last``: every FLOP pass after the last timed window (a counter's pass between two
      windows would run, and warm or cool the machine, inside the timed part of the run);
    - ``window_steps``: each window's steps a multiple of its pipeline's loader workers (whole
      rounds of them, as a steady loader takes);
    - ``warm_windows``: each window of a pipeline with loader workers after at least as many
      untimed steps as their queue holds (no window starts with idle workers).
    """
    backbone = case.split("SimCLR ")[1].split(",")[0]
    rules: dict[str, dict] = {}
    wrong = {p: t.get("architecture") for p, t in timings.items()
             if t.get("architecture") != backbone}
    rules["backbone"] = {"passed": not wrong, "detail": (
        f"every pipeline trains {backbone}" if not wrong else
        "; ".join(f"{p} trains {a}" for p, a in wrong.items()))}
    windows = [e for e in events if e["event"] == "window"]
    names = list(timings)
    rounds = [windows[i:i + len(names)] for i in range(0, len(windows), len(names))]
    interleaved = all(sorted(e["pipeline"] for e in r) == sorted(names) for r in rounds)
    counts = {p: sum(e["pipeline"] == p for e in windows) for p in names}
    rules["windows"] = {"passed": interleaved and min(counts.values()) >= min_windows,
                        "detail": f"{min(counts.values())} windows each (at least "
                        f"{min_windows}), " + ("in rounds of every pipeline" if interleaved
                                               else "NOT in rounds of every pipeline")}
    dirty = [e for e in windows if e["counting_passes"] or e["dispatch_modes"]]
    rules["clean_windows"] = {"passed": not dirty, "detail": (
        "no counting pass and no dispatch mode in any window" if not dirty else
        f"{len(dirty)} windows ran with a counter or dispatch mode")}
    peak_ok, warm_ok, problems = True, True, []
    for p in names:
        mine = [i for i, e in enumerate(events) if e["pipeline"] == p]
        kinds = [events[i]["event"] for i in mine]
        if "reset peak" not in kinds or "read peak" not in kinds or "warm-up" not in kinds:
            peak_ok = warm_ok = False
            problems.append(f"{p}: no warm-up, peak reset or peak read")
            continue
        reset, read = (mine[kinds.index("reset peak")], mine[kinds.index("read peak")])
        warm = mine[kinds.index("warm-up")]
        first_window = min((i for i in mine if events[i]["event"] == "window"), default=None)
        if not reset + 1 == read:
            peak_ok = False
            problems.append(f"{p}: other work between its peak's reset and read")
        if not (warm < reset and (first_window is None or warm < first_window)):
            warm_ok = False
            problems.append(f"{p}: timed or measured before its warm-up")
        if device == "cuda" and not events[warm].get("cudnn_benchmark"):
            warm_ok = False
            problems.append(f"{p}: warmed up with cuDNN's autotuner off")
    rules["peak"] = {"passed": peak_ok, "detail": "each pipeline's peak reset after its "
                     "warm-up and read after its own steps only" if peak_ok
                     else "; ".join(problems)}
    rules["warm_up"] = {"passed": warm_ok, "detail": "each pipeline warmed up before it was "
                        "measured" if warm_ok else "; ".join(problems)}
    signatures = next((e["signatures"] for e in events if e["event"] == "signatures"), {})
    differ = [p for p in names if p.startswith("bare loop")
              and signatures.get(p) != signatures.get(REFERENCE[p])]
    rules["optimiser"] = {"passed": bool(signatures) and not differ, "detail": (
        "each bare loop's optimiser groups, learning rates and schedule equal clusterbench's"
        if signatures and not differ else
        f"differ from clusterbench's: {', '.join(differ) or 'not recorded'}")}
    miscompiled = [p for p in names if p != ANCHORS and (
        timings[p].get("compile", "eager").startswith("compiled") == p.endswith(", eager"))]
    rules["compile"] = {"passed": not miscompiled, "detail": (
        "compiled and eager as named" if not miscompiled else
        "; ".join(f"{p}: {timings[p].get('compile')}" for p in miscompiled))}
    last_window = max((i for i, e in enumerate(events) if e["event"] == "window"), default=-1)
    early = [f"{e['pipeline']}'s (event {i})" for i, e in enumerate(events)
             if e["event"] == "flops" and i < last_window]
    rules["flops_last"] = {"passed": not early, "detail": (
        "FLOPs counted after every timed window" if not early else
        f"FLOP passes before the last timed window (event {last_window}): {', '.join(early)}")}
    unrecorded = [e["pipeline"] for e in windows
                  if not all(k in e for k in ("steps", "workers", "queue", "warm_steps"))]
    uneven = {f"{e['pipeline']}: {e['steps']} steps with {e['workers']} workers"
              for e in windows if e["pipeline"] not in unrecorded
              and e["steps"] % max(e["workers"], 1)}
    missing = (f"steps, workers or warm steps not recorded: {', '.join(sorted(set(unrecorded)))}"
               if unrecorded else "")
    rules["window_steps"] = {"passed": not uneven and not unrecorded, "detail": (
        "each window whole rounds of its loader's workers" if not uneven and not unrecorded
        else "; ".join([*sorted(uneven), *([missing] if missing else [])]))}
    cold: dict[str, int] = {}
    for e in windows:
        if e["pipeline"] not in unrecorded and e["warm_steps"] < max(e["queue"], e["workers"]):
            cold[e["pipeline"]] = cold.get(e["pipeline"], 0) + 1
    rules["warm_windows"] = {"passed": not cold and not unrecorded, "detail": (
        "each window of a loader with workers after untimed steps that refill its queue"
        if not cold and not unrecorded else "; ".join(
            [*(f"{p}: {n} windows started cold (fewer untimed steps before them than its "
               f"loader's queue holds)" for p, n in cold.items()),
             *([missing] if missing else [])]))}
    return rules


def mean_std_cell(values: list[float]) -> str:
    """``mean ± sample std`` for a table cell (a std of 0 for one window: the column stays
    numeric)."""
    return format_mean_std(*mean_std(values, std_of_one=0.0), ".4g", ".2g")


def table(results: dict[str, dict[str, Timing]], device: torch.device) -> str:
    peak = peak_flops(device)
    lines = ["| case | pipeline | compile | samples/s | min-max | vs clusterbench | MFU | "
             "host ms/step | host reads/step | peak MB |", "|---" * 10 + "|"]
    for case, timings in results.items():
        batch = int(case.split("batch ")[1].split(",")[0])
        for pipeline, t in timings.items():
            rate = statistics.fmean(t.samples_per_second)
            reference = timings.get(REFERENCE.get(pipeline, "clusterbench"),
                                    timings.get("clusterbench"))
            ours = statistics.fmean(reference.samples_per_second)
            mfu = (f"{100 * t.flops_per_step * rate / batch / peak:.1f}%"
                   if peak and t.flops_per_step else "n/a")
            ratio = "1" if reference is t else f"{ours / rate:.2f}x"
            lines.append(f"| {case} | {pipeline} | {t.compile} | "
                         f"{mean_std_cell(t.samples_per_second)}"
                         f" | {min(t.samples_per_second):.4g}-{max(t.samples_per_second):.4g} | "
                         f"{ratio} | {mfu} | {mean_std_cell(t.host_ms_per_step)} | "
                         f"{t.reads_per_step:.2f} | "
                         + (f"{t.peak_memory_mb:.0f} |" if t.peak_memory_mb else "n/a |"))
    return "\n".join(lines)


#: What clusterbench's step should cost against the bare loop with the same model, optimiser,
#: schedule and compilation: at least this share of its samples/s, at most this multiple of its
#: peak memory.
TARGET_RATE, TARGET_MEMORY = 0.9, 1.3


#: Each clusterbench pipeline and the bare loop with its optimiser, schedule and compilation.
BARE_PAIRS = (("clusterbench", "bare loop"), ("clusterbench, eager", "bare loop, eager"))


def rate_ratios(results: dict[str, dict[str, Timing]]) -> dict[str, dict[str, Any]]:
    """Clusterbench's samples/s over its bare loop's, per case and pair (``"clusterbench, eager
    / bare loop, eager"``): ``ratio`` of the mean rates, and ``per_round`` (each round's window
    of the one over the same round's window of the other: the two ran back to back, under the
    same load) with their ``mean`` and sample ``std`` (None for one round).

    >>> t = lambda *rates: Timing(list(rates), [1.0] * len(rates), 0.0, None, None)
    >>> r = rate_ratios({"c": {"clusterbench": t(90, 45), "bare loop": t(100, 50)}})
    >>> r["c"]["clusterbench / bare loop"]
    {'ratio': 0.9, 'per_round': [0.9, 0.9], 'mean': 0.9, 'std': 0.0}
    """
    out: dict[str, dict[str, Any]] = {}
    for case, timings in results.items():
        for ours, bare in BARE_PAIRS:
            if ours in timings and bare in timings:
                a, b = timings[ours].samples_per_second, timings[bare].samples_per_second
                per_round = [x / y for x, y in zip(a, b, strict=True)]
                mean, std = mean_std(per_round)
                out.setdefault(case, {})[f"{ours} / {bare}"] = {
                    "ratio": statistics.fmean(a) / statistics.fmean(b),
                    "per_round": per_round, "mean": mean, "std": std}
    return out


def against_bare_loop(results: dict[str, dict[str, Timing]]) -> list[str]:
    """One line per case and compilation: clusterbench's samples/s (the ratio of the mean
    rates, then the mean ± sample std of the rounds' ratios, :func:`rate_ratios`), host time per
    step and peak memory as multiples of the same-optimiser bare loop's, beside the targets.

    >>> t = lambda rate, host, peak: Timing([rate, rate], [host] * 2, 0.0, None, peak)
    >>> line, = against_bare_loop({"c": {"clusterbench": t(90, 2.0, 130),
    ...                                  "bare loop": t(100, 1.0, 100)}})
    >>> for part in line.split(": ", 1)[1].split(", "):
    ...     print(part)
    samples/s 0.90x (per round 0.900 ± 0.000 over 2 rounds; target at least 0.9x)
    host ms/step 2.00x
    peak memory 1.30x (target at most 1.3x)
    """
    lines = []
    ratios = rate_ratios(results)
    for case, timings in results.items():
        for ours, bare in BARE_PAIRS:
            if ours not in timings or bare not in timings:
                continue
            a, b = timings[ours], timings[bare]
            r = ratios[case][f"{ours} / {bare}"]
            spread = format_mean_std(r["mean"], r["std"], ".3f")
            host = statistics.fmean(a.host_ms_per_step) / statistics.fmean(b.host_ms_per_step)
            memory = (f"{a.peak_memory_mb / b.peak_memory_mb:.2f}x"
                      if a.peak_memory_mb and b.peak_memory_mb else "n/a")
            lines.append(f"{case}, {ours} against the {bare} with its optimiser and schedule: "
                         f"samples/s {r['ratio']:.2f}x (per round {spread} over "
                         f"{len(r['per_round'])} rounds; target at least {TARGET_RATE}x), host "
                         f"ms/step {host:.2f}x, peak memory {memory} (target at most "
                         f"{TARGET_MEMORY}x)")
    return lines


def busy_cpu_seconds() -> float | None:
    """Seconds the machine's cores have spent busy since boot, over all processes (Linux's
    ``/proc/stat``: user, nice, system, irq, softirq and steal time); None elsewhere."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields)
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """This process's user and system CPU seconds, all its threads."""
    times = os.times()
    return times.user + times.system


def other_load(start: tuple[float, float | None, float], end: tuple[float, float | None, float]
               ) -> float | None:
    """The cores other processes kept busy on average between two ``(wall seconds, busy CPU
    seconds, own CPU seconds)`` readings: what the run shared the machine with (None where the
    busy time cannot be read).

    >>> other_load((0.0, 100.0, 5.0), (10.0, 125.0, 20.0))  # 25 core-seconds, 15 of them ours
    1.0
    """
    if start[1] is None or end[1] is None or end[0] <= start[0]:
        return None
    return max(0.0, (end[1] - start[1]) - (end[2] - start[2])) / (end[0] - start[0])


#: ``--case``: the GPU ResNets, their toy sizes on a CPU, or a suite's run.
CASES = {"gpu": GPU_CASES, "tiny": TINY_CASES, "fashion-cpu": [FASHION_CPU]}


def default_workers(device: str) -> int:
    """The anchors' loader workers without ``--workers``: 8 on a GPU, none on a CPU."""
    return 0 if torch.device(device).type == "cpu" else 8


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=CASES, default=None,
                        help="gpu: SimCLR ResNets on generated 32 and 64 px images (the default "
                        "on a GPU); tiny: toy sizes (the default on a CPU); fashion-cpu: "
                        "benchmarks/fashion_cpu.yaml's simclr/nt_xent run, its settings read "
                        "from the suite file, on its own device (the CPU)")
    parser.add_argument("--tiny", action="store_true",
                        help="toy sizes (ResNet50, batch 4, 8 px): the code paths in seconds "
                        "(--case tiny)")
    parser.add_argument("--generated", action="store_true",
                        help=f"--case fashion-cpu on {GENERATED_IMAGES:,} generated images even "
                        "where Fashion-MNIST is installed")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="the device of the gpu and tiny cases (a suite's run trains on its "
                        "own)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed steps first (compilation, autotuning; default 8 on a GPU, "
                        f"1 for tiny, {SUITE_DEFAULTS[0]} for fashion-cpu)")
    parser.add_argument("--steps", type=int, default=None,
                        help=f"steps per timed window (default {SUITE_DEFAULTS[1]} for "
                        "fashion-cpu)")
    parser.add_argument("--windows", type=int, default=None,
                        help=f"timed windows per pipeline (at least {MIN_WINDOWS}, the default; "
                        f"{SUITE_DEFAULTS[2]} for fashion-cpu)")
    parser.add_argument("--workers", type=int, default=None,
                        help="DataLoader workers of the anchors' pipeline (default: 8 on a GPU, "
                        "0 on a CPU)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="start no further case once this many seconds have passed")
    parser.add_argument("--output", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.tiny and args.case not in (None, "tiny"):
        parser.error(f"--tiny is --case tiny, not --case {args.case}")
    if args.case is None:
        args.case = "tiny" if args.tiny or args.device == "cpu" else "gpu"
    if args.generated and args.case != "fashion-cpu":
        parser.error("--generated is for --case fashion-cpu (the other cases are generated)")
    suite = args.case == "fashion-cpu"
    if args.windows is None:
        args.windows = SUITE_DEFAULTS[2] if suite else MIN_WINDOWS
    if args.windows < MIN_WINDOWS:
        parser.error(f"--windows {args.windows}: at least {MIN_WINDOWS} timed windows per "
                     "pipeline (fewer give no useful spread)")
    for name in ("warmup", "steps", "workers"):
        value = getattr(args, name)
        if value is not None and value < (1 if name != "workers" else 0):
            parser.error(f"--{name} {value}: a whole number of at least "
                         f"{1 if name != 'workers' else 0}")
    workers = args.workers if args.workers is not None else default_workers(args.device)
    if not suite and args.steps is not None and args.steps % max(workers, 1):
        parser.error(f"--steps {args.steps}: a multiple of the anchors' {workers} loader "
                     "workers (whole rounds of them a window, as a steady loader takes)")
    return args


def main(argv: list[str] | None = None,
         on_case: Callable[[dict], None] | None = None) -> dict:
    """Run the cases and print their table; ``on_case`` gets the record after each case (the
    GPU check saves it, so a run cut short keeps the cases it finished)."""
    args = parse(argv)
    suite = args.case == "fashion-cpu"
    cases = [suite_case(*c) if isinstance(c, tuple) else c for c in CASES[args.case]]
    device = suite_device(cases[0]) if suite else torch.device(args.device)
    tiny = args.case == "tiny"
    workers = args.workers if args.workers is not None else default_workers(device.type)
    if suite:
        warmup, steps = args.warmup or SUITE_DEFAULTS[0], args.steps or SUITE_DEFAULTS[1]
    else:
        warmup = args.warmup if args.warmup is not None else (1 if tiny else 8)
        # a multiple of the anchors' workers (see AnchorsPipeline.before_window)
        steps = args.steps or (1 if tiny else 2) * max(workers, 1)
    peak_steps = PEAK_STEPS if device.type == "cuda" else 1
    torch.backends.cudnn.benchmark = True  # every pipeline autotunes in its own warm-up
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    start = time.perf_counter()
    busy_start = (start, busy_cpu_seconds(), own_cpu_seconds())
    machine = (torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name())
    record: dict[str, Any] = {
        "machine": machine, "device": device.type, "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(), "case": args.case, "windows": args.windows,
        "steps": steps, "warmup": warmup, "peak_steps": peak_steps, "workers": workers,
        "data": {}, "method": "interleaved windows", "load_average": {"start": os.getloadavg()},
        "results": {}, "ratios": {}, "rules": {}, "timelines": {}, "not_reached": []}
    for case in cases:
        if args.seconds is not None and time.perf_counter() - start > args.seconds:
            record["not_reached"].append(case.name)
            continue
        timeline = Timeline()
        timings = measure_case(case, device, warmup, steps, args.windows, workers, timeline,
                               peak_steps, GENERATED_IMAGES if args.generated else None)
        record["data"][case.name] = sorted({t.data for t in timings.values()})
        record["ratios"].update(rate_ratios({case.name: timings}))
        record["results"][case.name] = {p: asdict(t) for p, t in timings.items()}
        record["timelines"][case.name] = timeline.events
        record["rules"][case.name] = check_rules(case.name, record["results"][case.name],
                                                 timeline.events, device.type)
        record["seconds"] = time.perf_counter() - start
        if on_case is not None:
            on_case(record)
    record["failures"] = sorted({f"{rule} ({case})" for case, rules in record["rules"].items()
                                 for rule, r in rules.items() if not r["passed"]})
    if suite and device.type == "cpu":  # what the runner's Trainer set (build_trainer)
        from benchmarks.infra.allocator import keep_freed_memory

        record["allocator"] = keep_freed_memory()
    record["load_average"]["end"] = os.getloadavg()
    load = record["load_average"]
    others = record["other_processes_cores"] = other_load(
        busy_start, (time.perf_counter(), busy_cpu_seconds(), own_cpu_seconds()))
    header = (f"Machine: {machine} ({platform.machine()}, {torch.get_num_threads()} threads, "
              f"{os.cpu_count()} cores, CPU capability {record['cpu_capability']}); torch "
              f"{torch.__version__}; {args.windows} interleaved windows of {steps} steps per "
              f"pipeline after {warmup} warm-up steps, mean ± sample std and min-max"
              + (f"; anchors' loader workers: {workers}" if not suite else "")
              + f"; {time.perf_counter() - start:.0f} s in all; load average (1 min) "
              f"{load['start'][0]:.2f} at the start, {load['end'][0]:.2f} at the end; other "
              "processes kept "
              + (f"{others:.2f} of its {os.cpu_count()} cores busy on average" if others
                 is not None else "an unknown share of its cores busy"))
    print(header)
    for case, data in record["data"].items():
        print(f"{case}: data: {'; '.join(data)}")
    timings = {c: {p: Timing(**t) for p, t in rows.items()}
               for c, rows in record["results"].items()}
    print(table(timings, device))
    print("\n".join(against_bare_loop(timings)))
    for case, rules in record["rules"].items():
        for rule, r in rules.items():
            print(f"{case}: {rule}: {'passed' if r['passed'] else 'FAILED'} ({r['detail']})")
    if record["not_reached"]:
        print(f"not reached within {args.seconds:.0f} s: {', '.join(record['not_reached'])}")
    if args.output:
        from benchmarks.infra.atomic import write_atomic

        write_atomic(args.output, json.dumps(record, indent=2))
    return record


# -- the windows of step_host's small model (Lightning's own loop, counted after it) -----------
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


if __name__ == "__main__":
    main()
