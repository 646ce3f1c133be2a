"""The ways to train that the training-throughput benchmark
(:mod:`benchmarks.perf.train_throughput`) times, behind one interface (:class:`Pipeline`): the
bare loop (:class:`BareLoop`, a suite run's :class:`SuiteBareLoop`) and the anchors' pipeline
(:class:`AnchorsPipeline`), which step in the caller's thread, and what every pipeline shares
(the runner's compilation, the optimiser's signature, a Trainer precision's autocast).
clusterbench's own step, a Trainer in a thread of its own, is
:mod:`benchmarks.perf.lightning_pipeline`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmarks.perf.instruments import dispatch_modes, instrumented
from benchmarks.perf.throughput import GeneratedImagesDataModule, PILViewsDataset
from benchmarks.perf.train_cases import (
    Case,
    architecture,
    datamodule,
    endless,
    images,
    simclr_model,
    suite_device,
    suite_model_and_data,
    suite_speed,
)

#: The pipelines, in the order they are built and measured alone; the headline pair first.
PIPELINES = ("clusterbench", "bare loop", "clusterbench, eager", "bare loop, eager",
             "anchors' pipeline")
ANCHORS = "anchors' pipeline"
#: What each pipeline's samples/s is compared with: clusterbench with the same compilation.
REFERENCE = {"clusterbench": "clusterbench", "bare loop": "clusterbench",
             "clusterbench, eager": "clusterbench, eager",
             "bare loop, eager": "clusterbench, eager", ANCHORS: "clusterbench"}



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


