r"""Linear evaluation as Kernel-InfoNCE's released code ran it: a linear head trained on the
frozen encoder's features of training images augmented afresh at every step, scored on resized
and centre-cropped test images: the ``augmented_probe`` protocol.

Reference (Kernel-InfoNCE): Tan, Zhang, Yang and Yuan, "Contrastive Learning is Spectral
Clustering on Similarity Graph" (ICLR 2024), arXiv:2303.15103. Its Table 1 was measured by the
authors' released ``simclr_finetune.py``, which is Lightning Bolts' ``SSLFineTuner``:

- the head: ``nn.Linear`` with a bias (dropout 0) on the backbone's pooled features, the
  backbone frozen (eval mode, features under ``no_grad``);
- SGD, momentum 0.9, no Nesterov, learning rate 0.3, weight decay 1e-6, batches of 64 (the
  last one of an epoch smaller), 100 epochs, ``CosineAnnealingLR(T_max=epochs, eta_min=0)``
  stepped once per *epoch*;
- every training image augmented afresh at every step by ``SimCLRFinetuneTransform``
  (``eval_transform=False``): ``RandomResizedCrop(side)`` (areas 8-100%), a horizontal flip
  with probability 1/2, ``ColorJitter(0.8 s, 0.8 s, 0.8 s, 0.2 s)`` with probability 0.8 at
  jitter strength s = 1, ``RandomGrayscale(p=0.2)``, no blur; then normalised;
- the test images ``Resize(int(1.1 side))`` then ``CenterCrop(side)`` (35 then 32 px for
  CIFAR), normalised; the accuracy on the test split after the last epoch.

Where ``linear_probe`` runs the same SGD on features extracted once from the un-augmented
training images (and a per-step schedule), this protocol pays an encoder pass per training
image per epoch: 100 epochs cost about what 100 feature extractions do.

Departures from the authors' pipeline:

- the augmentation is :class:`~datamodules.augment.SimCLRAugment` with ``blur=False`` and
  ``jitter=jitter_strength``, fused on the model's device on float images in [0, 1] (no
  rounding to 8 bits between the steps): its four jitter steps run in one fixed order where
  torchvision draws an order per image, and its parameters come from a generator on the device
  seeded by the run's seed (Bolts: the data-loader workers' random streams);
- the test resize is ``torch.nn.functional.interpolate`` (bilinear, antialiased) on float
  images, where torchvision's ``Resize`` runs PIL's bilinear filter on 8-bit images (the same
  weights when enlarging, as CIFAR's 32 to 35 px, up to the 8-bit rounding; Bolts' docstring
  says ``interpolation=3``, bicubic, but its code passes none, so torchvision's default,
  bilinear, applies);
- the training split is the datamodule's (its validation split held out, stratified and
  seeded; Bolts' ``CIFAR10DataModule`` holds out 5,000 images by a seeded random split by
  default), normalised by its statistics;
- the epochs' orders and the head's initial weights come from the run's seed (``randperm``
  per epoch; the weights those of ``nn.Linear`` under ``torch.manual_seed(seed)``, as
  ``linear_probe``'s), without touching the global random state.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmarks.protocols.features import mixes_batch
from benchmarks.protocols.linear_probe import (
    _sgd_step,
    check_linear_probe_settings,
    initial_head,
    probe_learning_rates,
)
from benchmarks.protocols.protocol import (
    EvaluationInputs,
    EvaluationProtocol,
    Metric,
    ProtocolOutput,
)
from datamodules.augment import MAX_JITTER, SimCLRAugment
from datamodules.base import to_unit
from modules.methods.base import eval_mode
from modules.methods.capabilities import Encoder
from modules.ranges import check_non_negative

#: The largest test resize ratio: the test image enlarged to four times its side before the
#: centre crop keeps a sixteenth of it.
MAX_EVAL_RESIZE = 4.0


def check_augmented_probe_settings(epochs: int, lr: float, batch_size: int,
                                   weight_decay: float, jitter_strength: float,
                                   eval_resize: float) -> None:
    """``linear_probe``'s ranges for the SGD (:func:`check_linear_probe_settings`), a jitter
    strength in [0, 2.5] (its hue shift, 0.2 strength turns, at most half a turn), and a test
    resize ratio in [1, 4] (below 1 the centre crop would be larger than the resized image)."""
    check_linear_probe_settings(epochs, lr, batch_size, weight_decay)
    check_non_negative("jitter_strength", jitter_strength, high=MAX_JITTER)
    if (isinstance(eval_resize, bool) or not isinstance(eval_resize, (int, float))
            or not 1 <= eval_resize <= MAX_EVAL_RESIZE):  # NaN fails the comparison too
        raise ValueError(f"eval_resize must be a ratio in [1, {MAX_EVAL_RESIZE:g}] (the test "
                         f"images resized to int(eval_resize * side), then centre-cropped to "
                         f"side), got {eval_resize!r}")


def resize_centre_crop(x: Tensor, ratio: float) -> Tensor:
    """torchvision's ``Resize(int(ratio * side))`` then ``CenterCrop(side)`` on a batch of square
    float images ``(B, C, side, side)``: resized to ``int(ratio * side)`` px a side (bilinear,
    antialiased when shrinking), then the centre ``side`` x ``side`` kept, its top-left corner at
    ``int(round((resized - side) / 2))`` as torchvision's ``center_crop`` rounds it.

    >>> x = torch.arange(16.0).view(1, 1, 4, 4)
    >>> torch.equal(resize_centre_crop(x, 1.0), x)
    True
    >>> resize_centre_crop(torch.rand(2, 3, 32, 32), 1.1).shape  # 35 px, then the centre 32
    torch.Size([2, 3, 32, 32])
    """
    side = x.shape[-1]
    resized = int(ratio * side)
    if resized != side:
        x = F.interpolate(x, size=(resized, resized), mode="bilinear", align_corners=False,
                          antialias=True)
    top = int(round((resized - side) / 2.0))
    return x[..., top:top + side, top:top + side]


def probe_augment(side: int, channels: int, jitter_strength: float) -> nn.Module:
    """The training images' augmentation: SimCLR's recipe without blur at ``jitter_strength``
    (:class:`~datamodules.augment.SimCLRAugment`, crops of 8-100% of the area); on grey images
    (``channels`` 1) crop, flip, brightness and contrast only. Called with ``(x, generator)``."""
    return SimCLRAugment(side, blur=False, scale=(0.08, 1.0), colour=channels == 3,
                         jitter=jitter_strength)


@dataclass(frozen=True)
class AugmentedProbeData:
    """What the probe reads of a run: ``encode`` (frozen features ``(B, ...) -> (B, d)``, in eval
    mode and without gradients), ``normalise`` (the datamodule's normalisation of float images
    in [0, 1]), and the raw images (``uint8``, or float in [0, 1]) and labels of the training
    and test splits, square and of 1 or 3 channels."""

    encode: Callable[[Tensor], Tensor]
    normalise: Callable[[Tensor], Tensor]
    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor


@torch.no_grad()
def train_augmented_head(data: AugmentedProbeData, num_classes: int, epochs: int, lr: float,
                         batch_size: int, weight_decay: float, jitter_strength: float,
                         seed: int, device: torch.device,
                         report: Callable[[str], None] | None = None) -> tuple[Tensor, Tensor]:
    """The trained ``(weight (C, d), bias (C,))`` of the probe's head.

    Each epoch visits the training images in a ``randperm`` order drawn from a CPU generator
    seeded by ``seed``, in batches of ``batch_size`` (the last one smaller); each batch is
    augmented on ``device`` by :func:`probe_augment` from a generator there seeded by ``seed``,
    normalised and encoded, and the head takes one step of SGD (momentum 0.9, ``weight_decay``,
    the mean cross-entropy's gradient) at the epoch's learning rate: ``CosineAnnealingLR`` with
    ``T_max=epochs`` stepped once an epoch (:func:`probe_learning_rates` over epochs). The head
    starts from :func:`initial_head`. ``report`` gets a line about ten times in all, with the
    epoch's accuracy on its augmented batches.
    """
    report = report or (lambda line: None)
    images, labels = data.train_x.to(device), data.train_y.to(device).long()
    n, channels, side = len(labels), images.shape[1], images.shape[-1]
    augment = probe_augment(side, channels, jitter_strength)
    orders = torch.Generator().manual_seed(seed)
    draws = torch.Generator(device=device).manual_seed(seed)
    rates = probe_learning_rates(lr, epochs)  # one per epoch
    params: list[Tensor] = []
    buffers: list[Tensor] = []
    one = torch.ones((), device=device)
    # The mean's denominator the NLL's backward reads, a tensor per batch size (one copy each).
    sizes: dict[int, Tensor] = {}
    every = max(1, epochs // 10)
    start = time.perf_counter()
    for epoch in range(epochs):
        order = torch.randperm(n, generator=orders).to(device)
        correct = torch.zeros((), dtype=torch.long, device=device)
        for first in range(0, n, batch_size):
            rows = order[first:first + batch_size]
            views = data.normalise(augment(to_unit(images[rows]), draws))
            features = data.encode(views).float()  # (B, d)
            if not params:  # the feature width is known from the first batch
                params = [t.to(device) for t in initial_head(features.shape[1], num_classes,
                                                              seed)]
                buffers = [torch.zeros_like(p) for p in params]
            y = labels[rows]
            # Counted before the step, on the device: the epoch's accuracy is read once.
            correct += (torch.addmm(params[1], features, params[0].t()).argmax(1) == y).sum()
            if len(rows) not in sizes:
                sizes[len(rows)] = torch.tensor(float(len(rows)), device=device)
            _sgd_step(features, y, params, buffers, rates[epoch], weight_decay, 0.9, one,
                      sizes[len(rows)])
        if (epoch + 1) % every == 0 or epoch + 1 == epochs:
            # A line ending in " ..." is one in progress: a log's one line a run leaves it out.
            report(f"augmented_probe: epoch {epoch + 1}/{epochs}, augmented training top-1 "
                   f"{100 * int(correct) / n:.1f}%, {time.perf_counter() - start:.1f} s ...")
    return params[0], params[1]


@torch.no_grad()
def augmented_probe_accuracy(data: AugmentedProbeData, epochs: int, lr: float, batch_size: int,
                             weight_decay: float, jitter_strength: float, eval_resize: float,
                             seed: int = 0, device: torch.device | str | None = None,
                             report: Callable[[str], None] | None = None) -> dict[str, float]:
    """Trains the head (:func:`train_augmented_head`), then scores it on the test images
    resized and centre-cropped (:func:`resize_centre_crop` by ``eval_resize``), normalised and
    encoded in batches of ``batch_size``; the test split picks nothing.

    Returns ``{"top1": ...}`` (fractions in [0, 1]), plus ``"top5"`` with at least 100 classes.
    The settings' ranges: :func:`check_augmented_probe_settings`.
    """
    check_augmented_probe_settings(epochs, lr, batch_size, weight_decay, jitter_strength,
                                   eval_resize)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    test_y = data.test_y.long().cpu()
    num_classes = int(max(data.train_y.max(), test_y.max())) + 1
    weight, bias = train_augmented_head(data, num_classes, epochs, lr, batch_size, weight_decay,
                                        jitter_strength, seed, device, report)
    logits = []
    for first in range(0, len(test_y), batch_size):
        x = to_unit(data.test_x[first:first + batch_size].to(device))
        features = data.encode(data.normalise(resize_centre_crop(x, eval_resize))).float()
        logits.append(torch.addmm(bias, features, weight.t()).cpu())  # (B, C)
    logits = torch.cat(logits)
    scores = {"top1": float((logits.argmax(1) == test_y).double().mean())}
    if num_classes >= 100:
        top5 = logits.topk(5, dim=1).indices
        scores["top5"] = float((top5 == test_y[:, None]).any(1).double().mean())
    return scores


@dataclass(frozen=True)
class AugmentedProbeSettings:
    """The probe's SGD as ``linear_probe``'s (``epochs``, ``lr``, ``batch_size``,
    ``weight_decay``; momentum 0.9) but with the cosine schedule stepped per epoch; the training
    images' colour-jitter strength ``jitter_strength``; the test images resized to
    ``int(eval_resize * side)`` before the centre crop. The authors' ``simclr_finetune.py``:
    100, 0.3, 64, 1e-6, 1.0, 1.1."""

    epochs: int
    lr: float
    batch_size: int
    weight_decay: float
    jitter_strength: float
    eval_resize: float

    def __post_init__(self) -> None:
        check_augmented_probe_settings(self.epochs, self.lr, self.batch_size, self.weight_decay,
                                       self.jitter_strength, self.eval_resize)


def raw_split(datamodule: Any, split: str) -> tuple[Tensor, Tensor]:
    """The raw images (``uint8`` or float in [0, 1], as the dataset keeps them) and labels of a
    :class:`~datamodules.base.ClusterDataModule`'s ``split`` (``"train"`` or ``"test"``), in the
    order of its evaluation loaders. The base class keeps its splits in ``_splits`` and has no
    public reader of the raw images of an evaluation split."""
    datamodule.setup()
    part = datamodule._splits[split]
    return part.x[part.index], part.y[part.index]


def why_not_applicable(model: Any, images: Tensor) -> str | None:
    """Why the probe cannot score ``model`` on ``images`` (the training split's), or ``None``."""
    if images.dim() != 4 or images.shape[1] not in (1, 3) or images.shape[2] != images.shape[3]:
        return (f"skipped: needs square images of 1 or 3 channels (N, C, S, S) to crop and "
                f"jitter, got {tuple(images.shape)}")
    if mixes_batch(model):
        return ("skipped: the model mixes a batch's samples (fusion blocks), so its features "
                "would depend on the probe's batches")
    return None


def run_augmented_probe(settings: AugmentedProbeSettings,
                        inputs: EvaluationInputs) -> ProtocolOutput:
    model, datamodule = inputs.model, inputs.datamodule
    train_x, train_y = raw_split(datamodule, "train")
    test_x, test_y = raw_split(datamodule, "test")
    why = why_not_applicable(model, train_x)
    if why is not None:
        return ProtocolOutput(notes={name: why for name in AUGMENTED_PROBE.recorded(settings)})
    module = model if isinstance(model, nn.Module) else None
    device = (next(iter(module.parameters()), torch.empty(0)).device if module is not None
              else torch.device("cpu"))
    data = AugmentedProbeData(model.encode, datamodule.normalise, train_x, train_y, test_x,
                              test_y)
    # The encoder frozen: eval mode (each submodule's own mode restored after); the probe's
    # functions run without gradients.
    with eval_mode(module):
        scores = augmented_probe_accuracy(data, settings.epochs, settings.lr,
                                          settings.batch_size, settings.weight_decay,
                                          settings.jitter_strength, settings.eval_resize,
                                          seed=inputs.seed, device=device, report=inputs.report)
    return ProtocolOutput(metrics={f"augmented_probe_{name}": value
                                   for name, value in scores.items()})


AUGMENTED_PROBE = EvaluationProtocol(
    name="augmented_probe",
    summary="a linear classifier trained by SGD on the frozen encoder's features of training "
            "images augmented afresh every step (Kernel-InfoNCE's released simclr_finetune.py), "
            "scored on resized, centre-cropped test images",
    settings=AugmentedProbeSettings, needs=Encoder, run=run_augmented_probe,
    example={"epochs": 100, "lr": 0.3, "batch_size": 64, "weight_decay": 1.0e-6,
             "jitter_strength": 1.0, "eval_resize": 1.1},
    # top-5 only with at least 100 classes
    metrics=(Metric("augmented_probe_top1", "Augmented linear probe top-1 (%)", percent=True),
             Metric("augmented_probe_top5", "Augmented linear probe top-5 (%)", percent=True)),
)
