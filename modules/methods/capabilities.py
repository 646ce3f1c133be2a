"""What a model can do, said with ``typing.Protocol``: the evaluation protocols and the run ask
``isinstance(model, ClusterAssigner)`` instead of probing attribute names.

A method class never declares these; having the methods (and attributes) is enough, as with any
``typing.Protocol``. ``runtime_checkable`` makes ``isinstance`` check that they are there (not
their signatures). A capability with only methods (:class:`Encoder`, :class:`ClusterAssigner`)
can also be checked on a class with ``issubclass``, before any model is built; one with
attributes set in ``__init__`` (:class:`LayerwiseModel`, :class:`ChannelsLastModel`) only on a
model.

>>> from modules.methods import RawPixels, TransFusion
>>> pixels = RawPixels(num_classes=10, input_shape=(1, 8, 8))
>>> isinstance(pixels, Encoder), isinstance(pixels, LayerwiseModel)
(True, False)
>>> isinstance(TransFusion(num_classes=2, input_shape=(4,), backbone="flatten"), LayerwiseModel)
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from torch import Tensor, nn


@runtime_checkable
class Encoder(Protocol):
    """A model whose frozen features every evaluation protocol scores: ``encode(x)``,
    ``(B, *input_shape) -> (B, d)``. Every registered method is one."""

    def encode(self, x: Tensor) -> Tensor: ...


@runtime_checkable
class ClusterAssigner(Protocol):
    """A cluster-specific model (the tensorized models): ``assign(x)``, ``(B, *input_shape) ->
    (B,)``, the cluster of every point (eq. 2 of those models: the cluster of smallest loss)."""

    def assign(self, x: Tensor) -> Tensor: ...


@runtime_checkable
class LayerwiseModel(Protocol):
    """A model of fusion blocks (the standalone TransFusion): ``layer_outputs(x)``, the input of
    every block, the model's input first and its embedding last (L tensors ``(B, m)``), and
    ``blocks``, the L blocks, each with ``affinity(x)`` ``(B, m) -> (B, B)``."""

    blocks: Sequence[nn.Module]

    def layer_outputs(self, x: Tensor) -> list[Tensor]: ...


@runtime_checkable
class ChannelsLastModel(Protocol):
    """A model with a convolutional ``backbone`` that can run in channels-last memory format
    (faster on GPUs with mixed precision), switched by its ``channels_last`` flag."""

    channels_last: bool
    backbone: nn.Module
