"""The one shared base of every trained method: a backbone, an online linear probe, the
optimiser and its schedule, and the hook of a target network. A method adds its projector and
criterion and defines ``objective`` (the loss of the backbone's features) or, when its loss needs
the views themselves or its target network's outputs, ``views_objective``."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Timer
from torch import Tensor, nn

from modules.blocks.backbones import build_backbone
from modules.blocks.optim import (
    build_optimizer,
    check_optimizer_arguments,
    parameter_groups,
    warmup_cosine,
    warmup_stable_decay,
)
from modules.blocks.target_network import MomentumTarget
from modules.monitors import FeatureBank, knn_vote_accuracy, rankme
from modules.ranges import check_count, check_non_negative, check_positive, check_settings


@contextmanager
def eval_mode(module: nn.Module | None) -> Iterator[None]:
    """``module`` in eval mode inside the block; every submodule's own ``training`` flag is
    restored afterwards, so a frozen (eval-mode) part of a training model stays frozen.
    ``None`` is allowed and does nothing.

    >>> net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)).train()
    >>> _ = net[0].eval()
    >>> with eval_mode(net):
    ...     [m.training for m in net.modules()]
    [False, False, False]
    >>> [m.training for m in net.modules()]
    [True, False, True]
    """
    modes = [(m, m.training) for m in module.modules()] if module is not None else []
    if module is not None:
        module.eval()
    try:
        yield
    finally:
        for submodule, training in modes:
            submodule.training = training


def step_values_read(module: pl.LightningModule, batch_idx: int) -> bool:
    """Whether anything reads the values ``module``'s training step ``batch_idx`` logs.
    Lightning writes a step's values to the loggers every ``log_every_n_steps`` optimiser steps
    and when the training stops, and the epoch's last step's values are what the callbacks and
    the caller find in ``trainer.callback_metrics`` afterwards. A step that logs only then skips
    ``self.log`` in the others, whose bookkeeping costs the host about 0.7 ms a value in every
    step (a third of a small model's step), written or not; the progress bar shows the last
    logged loss. Without a Trainer (a step called by hand) the values are logged, and so they
    are in every step under Lightning's ``Timer`` (``max_time``): it stops the training from
    its own batch-end hook, after the step, and Lightning then writes that step's values."""
    trainer = module._trainer
    if trainer is None:
        return True
    interval = trainer.log_every_n_steps
    return ((interval > 0 and (trainer.global_step + 1) % interval == 0)
            or trainer.should_stop or batch_idx + 1 >= trainer.num_training_batches
            or any(isinstance(callback, Timer) for callback in trainer.callbacks))


@dataclass(frozen=True)
class TrainingViews:
    """What a training step's objective sees (:meth:`RepresentationModule.views_objective`).

    Attributes:
        views: the ``V`` augmented views of the batch, each ``(B, *input_shape)``, as the online
            network saw them.
        features: the online backbone's features of the views, stacked in order:
            ``(V * B, F)``, rows ``v * B`` to ``(v + 1) * B - 1`` from view ``v``.
        labels: ``(B,)``, the images' classes (only a supervised loss may read them).
        targets: the target network's outputs of the views, stacked as ``features`` and without
            gradients (:meth:`RepresentationModule.target_outputs`): BYOL's target
            projections, MoCo's keys; ``None`` for a method without a target network.
    """

    views: Sequence[Tensor]
    features: Tensor
    labels: Tensor
    targets: Tensor | None = None

    @property
    def n_views(self) -> int:
        return len(self.views)


class RepresentationModule(pl.LightningModule):
    """Backbone + online linear probe, trained by ``objective`` on a batch of augmented views.

    The batch is ``(views, y)`` with ``views`` a list of ``(B, *input_shape)`` tensors. The online
    probe is a linear layer trained alongside on *detached* backbone features of the first view
    (so it never shapes the representation) and reports ``online_val_acc`` once per validation
    epoch: the metric Ray Tune's ASHA schedules on.

    A method with a target network (MoCo's key encoder, BYOL's target) sets
    :attr:`momentum_target` (:class:`modules.blocks.target_network.MomentumTarget`): each
    training step then first moves the target one moving-average step towards the online
    network (:meth:`update_target`), and its objective sees the target's outputs of the views
    (:attr:`TrainingViews.targets`).

    Args:
        num_classes, input_shape: set from the datamodule by the runner and ``clusterbench fit``.
        backbone: a name of :data:`modules.blocks.backbones.BACKBONES`; ``backbone_width`` sizes the
            small CNN and MLP, ``backbone_pools`` (1 or 2) is the small CNN's max-pools;
            ``cifar_stem`` and ``backbone_weights`` (torchvision weights, e.g.
            ``IMAGENET1K_V1``) apply to ResNets.
        optimizer: ``lars`` (timm; by default biases and normalisation parameters in a group
            without weight decay that LARS does not adapt), ``sgd``, ``adam`` or ``adamw``.
        lr: learning rate per 256 samples (> 0), scaled linearly with the global batch (batch
            size x devices x gradient accumulation), as SimCLR and Kernel-InfoNCE state it.
        weight_decay: (>= 0) of the weights; of biases and normalisation parameters too only
            with ``exclude_bias_and_norm`` false.
        momentum: of ``sgd`` and ``lars``, in [0, 1).
        warmup_epochs: (>= 0) linear warm-up, then cosine decay to 0, stepped every optimiser
            step.
        decay_epochs: ``None`` for the cosine decay over the whole run after the warm-up;
            a number of epochs (>= 0) for a warm-up-stable-decay schedule instead: the full rate
            after the warm-up until the last ``decay_epochs`` epochs, which decay it linearly
            (:func:`modules.blocks.optim.warmup_stable_decay`), so the curve before them is
            read at a constant rate.
        probe_lr: the online probe's learning rate (> 0; not scaled, no weight decay).
        channels_last: convolutional backbones in channels-last memory format (faster on GPUs
            with mixed precision).
        resize_to: resize images to ``resize_to`` x ``resize_to`` (bilinear, on the device) before
            the backbone; TransFusion's Table 3 feeds CIFAR at 224 x 224 to a pretrained ResNet18.
        exclude_bias_and_norm: biases and normalisation parameters without weight decay and
            unadapted by LARS (default); ``False`` puts every parameter under both, as the
            Kernel-InfoNCE authors' code does (Lightning Bolts' SimCLR with ``exclude_bn_bias``
            false).
    """

    #: The suite runner and ``clusterbench fit`` train a method only when this is True.
    requires_training = True
    #: What it logs once an epoch: the metrics a search trial reports and ASHA schedules on
    #: (``rankme`` needs no labels).
    epoch_metrics = ("online_val_acc", "online_knn_acc", "rankme")
    #: The training embeddings the online kNN votes among, and the validation embeddings the
    #: monitors score at most, each epoch (bounded: the monitors stay cheap on any dataset).
    monitor_bank_size, monitor_queries = 4096, 2048
    #: The online kNN monitor's k (capped at the bank's rows).
    monitor_k = 20
    #: Arguments this configuration never reads (see :meth:`forget_unused_arguments`).
    unused_arguments: frozenset[str] = frozenset()
    #: The method's target network, a moving average of online modules, or ``None``: set by a
    #: method that has one, after it registers the target modules as its own attributes.
    momentum_target: MomentumTarget | None = None

    def __init__(
        self,
        num_classes: int,
        input_shape: Sequence[int],
        backbone: str = "small_cnn",
        backbone_width: int = 32,
        backbone_pools: int = 1,
        cifar_stem: bool = True,
        backbone_weights: str | None = None,
        optimizer: str = "adam",
        lr: float = 1e-3,
        weight_decay: float = 1e-6,
        momentum: float = 0.9,
        warmup_epochs: int = 0,
        decay_epochs: float | None = None,
        probe_lr: float = 1e-2,
        channels_last: bool = False,
        resize_to: int | None = None,
        exclude_bias_and_norm: bool = True,
    ) -> None:
        super().__init__()
        # Collects the arguments of this __init__ and of the method's that called it.
        self.save_hyperparameters()
        check_settings(self.hparams)  # every numeric argument's type and maximum, before sizes
        check_optimizer_arguments(optimizer, lr, weight_decay, momentum)
        if optimizer == "adam":  # Adam has no momentum argument
            self.forget_unused_arguments({"momentum"})
        check_positive("probe_lr", probe_lr)
        check_non_negative("warmup_epochs", warmup_epochs)
        if decay_epochs is not None:
            check_non_negative("decay_epochs", decay_epochs)
        check_count("backbone_width", backbone_width)
        if resize_to is not None:  # the backbone sees the resized images
            check_count("resize_to", resize_to)
            input_shape = (input_shape[0], resize_to, resize_to)
        self.backbone = build_backbone(backbone, input_shape, width=backbone_width,
                                       cifar_stem=cifar_stem, weights=backbone_weights,
                                       pools=backbone_pools)
        if channels_last:
            self.backbone = self.backbone.to(memory_format=torch.channels_last)
        self.online_probe = nn.Linear(self.embedding_dim(), num_classes)
        self.optimizer_name = optimizer
        self.lr, self.weight_decay, self.momentum = lr, weight_decay, momentum
        self.exclude_bias_and_norm = exclude_bias_and_norm
        self.warmup_epochs, self.probe_lr = warmup_epochs, probe_lr
        self.decay_epochs = decay_epochs
        self.channels_last, self.resize_to = channels_last, resize_to
        self.num_classes = num_classes
        self.monitor_bank = FeatureBank(self.monitor_bank_size)
        self._val_embeddings: list[tuple[Tensor, Tensor]] = []

    def objective(self, features: Tensor, n_views: int, labels: Tensor) -> Tensor:
        """The method's loss on backbone features ``(n_views * B, F)``, views stacked in order."""
        raise NotImplementedError

    def views_objective(self, step: TrainingViews) -> Tensor:
        """The method's loss on what a training step has (:class:`TrainingViews`: the views, the
        backbone's features, the labels and the target network's outputs). Default:
        :meth:`objective` of the features; a method whose loss needs the views or its target's
        outputs (BYOL) overrides this instead."""
        return self.objective(step.features, step.n_views, step.labels)

    def forget_unused_arguments(self, unused: set[str]) -> None:
        """Mark arguments this configuration never reads (a SimCLR run with NT-Xent: ``tau1``,
        ``tau2``, ``lam``, ``gamma``; Adam: ``momentum``): a run's W&B config leaves them out,
        so that a dashboard does not list their defaults as settings of the run. The
        recorded hyperparameters keep every argument, so a checkpoint rebuilds the model."""
        self.unused_arguments = self.unused_arguments | set(unused)

    def embedding_dim(self) -> int:
        return self.backbone.output_dim

    def embedding(self, features: Tensor) -> Tensor:
        """The representation that is evaluated, from backbone features: the features themselves
        unless the method says otherwise (TransFusion: the input of its last block)."""
        return features

    def _backbone_input(self, x: Tensor) -> Tensor:
        """The backbone's input: resized when asked, in channels-last format when asked."""
        if self.resize_to is not None:
            x = F.interpolate(x, size=(self.resize_to, self.resize_to), mode="bilinear",
                              align_corners=False)
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    @torch.no_grad()
    def encode(self, x: Tensor) -> Tensor:
        """Frozen features for evaluation: ``(B, *input_shape) -> (B, F)``."""
        return self.embedding(self.backbone(self._backbone_input(x)))

    def training_step(self, batch: tuple[list[Tensor], Tensor], batch_idx: int) -> Tensor:
        views, labels = batch
        self.update_target()
        return self.online_step(views, labels, self.target_outputs(views), batch_idx)

    def update_target(self) -> None:
        """One moving-average step of the target network towards the online one, at this
        step's momentum (:meth:`target_momentum`), when the method has a target and is
        training. It runs at the start of each training step, from the weights the previous
        optimiser step left, as MoCo's Algorithm 1 does; BYOL's update after each optimiser
        step (its eq. 3) is the same sequence of updates but the last, which no step reads."""
        target = self.momentum_target
        if target is not None and self.training:
            target.update(self.target_momentum())

    def target_momentum(self) -> float:
        """The target's momentum at this optimiser step (:attr:`momentum_target`'s schedule over
        the Trainer's estimated optimiser steps); its base value without a Trainer (a step
        called by hand)."""
        target = self.momentum_target
        trainer = self._trainer
        if trainer is None:
            return target.momentum_at(0, math.inf)
        return target.momentum_at(trainer.global_step, trainer.estimated_stepping_batches)

    def target_outputs(self, views: Sequence[Tensor]) -> Tensor | None:
        """The target network's outputs of ``views``, stacked in order ``(V * B, d)``, without
        gradients; ``None`` for a method without a target network."""
        if self.momentum_target is None:
            return None
        return self.momentum_target(self._backbone_input(torch.cat(views)))

    def online_step(self, views: Sequence[Tensor], labels: Tensor, targets: Tensor | None,
                    batch_idx: int) -> Tensor:
        """The online network's part of a training step: the backbone's features of ``views``,
        the method's loss (:meth:`views_objective`), the online probe and the logged values.
        Returns the loss plus the probe's loss."""
        batch_size = labels.shape[0]
        features = self.backbone(self._backbone_input(torch.cat(views)))  # features: (V * B, F)
        loss = self.views_objective(TrainingViews(views, features, labels, targets))
        with torch.no_grad():  # the probe must never shape the representation
            probe_input = self.probe_embedding(features, batch_size)
            self.monitor_bank.add(probe_input, labels)  # the online kNN's votes
        probe_logits = self.online_probe(probe_input)
        probe_loss = F.cross_entropy(probe_logits, labels)
        if self.step_values_read(batch_idx):
            # not prog_bar: Lightning would read it on the host every step (a GPU sync); the
            # progress bar shows the last logged value every few steps itself
            self.log("train_loss", loss, batch_size=batch_size)
            self.log("online_train_acc", (probe_logits.argmax(1) == labels).float().mean(),
                     batch_size=batch_size)
        return loss + probe_loss

    def probe_embedding(self, features: Tensor, batch_size: int) -> Tensor:
        """The online probe's input (no gradient): the embedding of the first view's features,
        ``features[:batch_size]``. A method whose ``objective`` already computed exactly this
        may return it instead of computing it again."""
        return self.embedding(features[:batch_size].detach())

    def step_values_read(self, batch_idx: int) -> bool:
        """See :func:`step_values_read`."""
        return step_values_read(self, batch_idx)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, labels = batch
        embeddings = self.encode(x)
        self.log("online_val_acc", self._probe_accuracy(embeddings, labels), prog_bar=True,
                 on_epoch=True, sync_dist=True, batch_size=labels.shape[0])
        if sum(len(e) for e, _ in self._val_embeddings) < self.monitor_queries:
            self._val_embeddings.append((embeddings.detach(), labels))

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["monitor_bank"] = self.monitor_bank.state()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.monitor_bank.restore(checkpoint.get("monitor_bank") or {})

    def on_validation_epoch_end(self) -> None:
        """The monitors on this epoch's validation embeddings (at most ``monitor_queries``):
        the online kNN accuracy against the last training embeddings (from the first trained
        epoch on), and RankMe (:mod:`modules.monitors`)."""
        if not self._val_embeddings:
            return
        queries = torch.cat([e for e, _ in self._val_embeddings])[:self.monitor_queries]
        labels = torch.cat([y for _, y in self._val_embeddings])[:self.monitor_queries]
        self._val_embeddings = []
        self.log("rankme", rankme(queries), sync_dist=True)
        if self.monitor_bank.count and not self.trainer.sanity_checking:
            bank, bank_labels = self.monitor_bank.filled()
            self.log("online_knn_acc", knn_vote_accuracy(
                bank, bank_labels, queries, labels, self.monitor_k, self.num_classes),
                sync_dist=True)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        """The online probe's accuracy on the test split (``clusterbench test``). A suite's
        test-split scores are its evaluation protocols' (a probe trained on frozen features)."""
        x, labels = batch
        self.log("online_test_acc", self._probe_accuracy(self.encode(x), labels), on_epoch=True,
                 sync_dist=True, batch_size=labels.shape[0])

    def _probe_accuracy(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        """The online probe's accuracy on ``embeddings`` (a device tensor: nothing read)."""
        return (self.online_probe(embeddings).argmax(1) == labels).float().mean()

    def global_batch_size(self) -> int:
        """Samples per optimiser step over all devices (the training loader must be loaded)."""
        trainer = self.trainer
        return (trainer.train_dataloader.batch_size * trainer.world_size
                * trainer.accumulate_grad_batches)

    def optimizer_groups(self) -> list[dict]:
        """The parameter groups the optimiser trains, the online probe's apart: a method's hook
        for its own groups. Each group is a ``torch.optim`` group (``params``, ``weight_decay``)
        and may carry ``lr_scale``, a factor on the run's learning rate (after its scaling with
        the batch and under the same schedule): BYOL's or Barlow Twins' own rates for biases and
        norms, a predictor's faster rate.

        Default: every parameter outside the probe in two groups, weights with the run's weight
        decay, biases and normalisation parameters without (which LARS also leaves
        unadapted); one group under the weight decay with ``exclude_bias_and_norm=False``."""
        return parameter_groups(nn.ModuleList([m for n, m in self.named_children()
                                               if n != "online_probe"]), self.weight_decay,
                                self.exclude_bias_and_norm)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer, optimizer_closure=None
                       ) -> None:
        """The step, then the gradients freed at once, as a plain loop's
        ``zero_grad(set_to_none=True)`` after its step frees them: Lightning zeroes them only
        after the next forward pass, so they would stay alive through it (a model's worth of
        memory at the step's peak)."""
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        optimizer.zero_grad(set_to_none=True)

    def configure_optimizers(self):
        total_steps = max(1, int(self.trainer.estimated_stepping_batches))  # loads the loader
        optimizer, scheduler = self.optimizer_and_schedule(
            self.global_batch_size(), total_steps,
            total_steps / max(1, self.trainer.max_epochs or 1))
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def optimizer_and_schedule(self, global_batch: int, total_steps: int,
                               steps_per_epoch: float):
        """The optimiser over :meth:`optimizer_groups` and the online probe, its rate scaled to
        ``global_batch``, and its per-step warm-up/cosine (or warm-up-stable-decay) ``LambdaLR``
        over ``total_steps``: what the Trainer gets, and what a loop without Lightning can build
        alike."""
        lr = self.lr * global_batch / 256
        groups = []
        for group in self.optimizer_groups():
            group = dict(group)
            if "lr_scale" in group:
                group["lr"] = lr * group.pop("lr_scale")
            groups.append(group)
        # The probe learns at its own rate, without weight decay (and so without LARS adaptation).
        groups.append({"params": list(self.online_probe.parameters()), "weight_decay": 0.0,
                       "lr": self.probe_lr})
        optimizer = build_optimizer(groups, self.optimizer_name, lr, self.momentum)
        warmup_steps = int(round(self.warmup_epochs * steps_per_epoch))
        factor = functools.partial(warmup_cosine, warmup_steps=warmup_steps,
                                   total_steps=total_steps)
        if self.decay_epochs is not None:
            factor = functools.partial(
                warmup_stable_decay, warmup_steps=warmup_steps, total_steps=total_steps,
                decay_steps=int(round(self.decay_epochs * steps_per_epoch)))
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return optimizer, scheduler
