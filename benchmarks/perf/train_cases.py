"""What each case of the training-throughput benchmark (:mod:`benchmarks.perf.train_throughput`)
trains: the configurations (:class:`Case`: the GPU ResNets, their toy sizes, a suite's run), their
generated images, SimCLR model and datamodule, the architecture a built module really holds, and
a suite run's settings, device, speed settings, model and data read from its suite file as the
suite runner reads them.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from benchmarks.perf.throughput import GeneratedImagesDataModule


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



def endless(loader):
    while True:
        yield from loader
