"""Range checks of argument values, one message format for models, losses, evaluation protocols,
datamodules, Trainer settings and search budgets.

A constructor or protocol calls these on its arguments so that a value outside the range its
maths or its optimiser is defined on fails at once, naming the argument, the accepted range and
the value, instead of training on it (a momentum of 1.5 diverges without an error) or failing
after the training (a linear probe with a batch of 0). The suite runner builds every model on
the ``meta`` device before the first run, so these checks are how a suite's bad value is refused
before anything trains. A string or a boolean is never a number here (``lr: fast``, ``k: true``).

Every numeric setting also has a maximum (:data:`SETTING_BOUNDS`): a count of ``10**30``
workers forks processes without end and a batch of ``10**30`` fails deep inside the DataLoader,
so a value above its maximum is refused as early as one below its minimum.

>>> check_positive("temperature", 0.5)
>>> check_count("epochs", 0)
Traceback (most recent call last):
...
ValueError: epochs must be an integer of at least 1, got 0
>>> check_count("n_views", 10**9, high=MAX_VIEWS)
Traceback (most recent call last):
...
ValueError: n_views must be an integer in [1, 64], got 1000000000
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

#: Epochs of a training or of a probe, and the Trainer's epoch counts.
MAX_EPOCHS = 100_000
#: Samples in a batch (of a training, a probe or an evaluation loop).
MAX_BATCH = 2**20
#: Augmented views of each sample.
MAX_VIEWS = 64
#: DataLoader worker processes: a few per CPU core of this machine, or 64.
MAX_WORKERS = max(64, 4 * (os.cpu_count() or 1))
#: Width of a layer (backbone, projector, hidden or embedding size, features of generated data).
MAX_WIDTH = 65_536
#: Layers or blocks of a model.
MAX_DEPTH = 256
#: Side of an image in pixels (a resize, a dataset's images).
MAX_SIDE = 4096
#: Learning rates (a model's, its online probe's, the linear probe's).
MAX_LR = 1e3
#: Temperatures and the kernels' scales.
MAX_TEMPERATURE = 1e3
#: Weight decays.
MAX_WEIGHT_DECAY = 10.0
#: Weights of a loss's terms (VICReg's 25, Barlow Twins' 0.005).
MAX_LOSS_WEIGHT = 1e4
#: Scales of noise, of generated clusters and of deformations, in the data's own units.
MAX_SCALE = 1e3
#: Samples or neighbours counted over a dataset (kNN's k, clusters, generated samples).
MAX_SAMPLES = 10_000_000
#: Seeds, as NumPy takes them.
MAX_SEED = 2**32 - 1


def _holds(value: Any, condition: Callable[[Any], Any]) -> bool:
    """``condition(value)`` for a number (a 0-d tensor included); False for anything else."""
    if isinstance(value, (str, bytes, bool)) or value is None:
        return False
    try:
        return bool(condition(value))  # NaN fails every comparison, so it is refused too
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return False


def _number(value: float) -> str:
    """A bound as the message prints it: ``1000``, ``1e+06``, ``0.5``."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def _check_at_most(name: str, value: Any, lower: str, high: float | None,
                   infinite: bool = False) -> None:
    """``value`` (already above its lower bound) at most ``high``; ``infinite`` also takes
    ``inf`` (a model's learning rate, which then diverges at its first step and is reported so)."""
    if high is None or (infinite and _holds(value, lambda v: v == math.inf)):
        return
    if not _holds(value, lambda v: v <= high):
        also = " (or inf, to force a divergence)" if infinite else ""
        raise ValueError(f"{name} must be {lower} and at most {_number(high)}{also}, "
                         f"got {value!r}")


def check_positive(name: str, value: float, high: float | None = None, *,
                   infinite: bool = False) -> None:
    """``value > 0``, and at most ``high`` when given (so finite, unless ``infinite``).

    >>> check_positive("lr", 1e30, high=MAX_LR)
    Traceback (most recent call last):
    ...
    ValueError: lr must be > 0 and at most 1000, got 1e+30
    """
    if not _holds(value, lambda v: v > 0):
        raise ValueError(f"{name} must be > 0, got {value!r}")
    _check_at_most(name, value, "> 0", high, infinite)


def check_finite_positive(name: str, value: float, high: float | None = None) -> None:
    """``value > 0`` and finite, for a setting an infinity makes meaningless without an error
    (a linear probe's learning rate or an SVM's ``C`` of infinity scores chance silently; a
    model's infinite learning rate at least diverges, and is reported so).

    >>> check_finite_positive("C", float("inf"))
    Traceback (most recent call last):
    ...
    ValueError: C must be > 0 and finite, got inf
    """
    if not _holds(value, lambda v: 0 < v < float("inf")):
        raise ValueError(f"{name} must be > 0 and finite, got {value!r}")
    _check_at_most(name, value, "> 0", high)


def check_non_negative(name: str, value: float, high: float | None = None) -> None:
    """``value >= 0``, and at most ``high`` when given (so finite)."""
    if not _holds(value, lambda v: v >= 0):
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    _check_at_most(name, value, ">= 0", high)


def check_weight(lam: float) -> None:
    if not _holds(lam, lambda v: 0 <= v <= 1):
        raise ValueError(f"lam must be in [0, 1], got {lam!r}")


def check_momentum(name: str, value: float) -> None:
    """A momentum or moving-average factor: in [0, 1), since at 1 nothing new is ever taken in
    and above 1 the average grows without bound."""
    if not _holds(value, lambda v: 0 <= v < 1):
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")


def check_fraction(name: str, value: float, closed: bool = False) -> None:
    """A fraction of a dataset: in (0, 1), or (0, 1] when ``closed``."""
    if not _holds(value, lambda v: 0 < v < 1 or (closed and v == 1)):
        raise ValueError(f"{name} must be in (0, {'1]' if closed else '1)'}, got {value!r}")


def check_count_or_fraction(name: str, value: int | float, low: int = 1,
                            high: int | None = None) -> None:
    """A whole number of at least ``low`` (and at most ``high`` when given), or a fraction in
    (0, 1] (in [0, 1] when ``low`` is 0): a Trainer's batch limits, which take either.

    >>> check_count_or_fraction("limit_train_batches", 0.5)
    >>> check_count_or_fraction("limit_train_batches", 0)
    Traceback (most recent call last):
    ...
    ValueError: limit_train_batches must be an integer of at least 1 or a fraction in (0, 1], got 0
    """
    interval = "[0, 1]" if low == 0 else "(0, 1]"
    if isinstance(value, float):
        fits = _holds(value, lambda v: (0 <= v if low == 0 else 0 < v) and v <= 1)
    else:
        fits = isinstance(value, int) and not isinstance(value, bool) and value >= low
        if fits and high is not None and value > high:
            raise ValueError(f"{name} must be an integer in [{low}, {high}] or a fraction in "
                             f"{interval}, got {value!r}")
    if not fits:
        raise ValueError(f"{name} must be an integer of at least {low} or a fraction in "
                         f"{interval}, got {value!r}")


def check_count(name: str, value: int, low: int = 1, high: int | None = None) -> None:
    """A whole number of at least ``low`` (epochs, samples, neighbours, clusters), and at most
    ``high`` when given."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an integer of at least {low}, got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")


def check_at_most(name: str, value: Any, high: float, integer: bool = False) -> None:
    """``value`` a number (an integer when ``integer``) of at most ``high``: the maximum of a
    setting whose constructor states its own least value in its own words.

    >>> check_at_most("num_blocks", 10**9, high=MAX_DEPTH, integer=True)
    Traceback (most recent call last):
    ...
    ValueError: num_blocks must be an integer of at most 256, got 1000000000
    """
    kind = "an integer" if integer else "a number"
    if integer and (not isinstance(value, int) or isinstance(value, bool)):
        raise ValueError(f"{name} must be {kind} of at most {_number(high)}, got {value!r}")
    if not _holds(value, lambda v: v <= high):
        raise ValueError(f"{name} must be {kind} of at most {_number(high)}, got {value!r}")


def check_counts(name: str, value: Any, high: int) -> None:
    """One count, or a list of counts (a convolutional encoder's channels), each in [1, high]."""
    for one in value if isinstance(value, (list, tuple)) else [value]:
        check_count(name, one, high=high)


def _count(high: int, low: int = 1) -> Callable[[str, Any], None]:
    return functools.partial(check_count, low=low, high=high)


def _positive(high: float, infinite: bool = False) -> Callable[[str, Any], None]:
    return functools.partial(check_positive, high=high, infinite=infinite)


def _non_negative(high: float) -> Callable[[str, Any], None]:
    return functools.partial(check_non_negative, high=high)


def _at_most(high: float, integer: bool = True) -> Callable[[str, Any], None]:
    return functools.partial(check_at_most, high=high, integer=integer)


#: The type and range of every numeric setting of a registered method or datamodule, by its
#: name; :func:`check_settings` applies them. The least value is the one the constructors check
#: (with the same message); ``_at_most`` where a constructor says its least value in its own
#: words, so only the maximum is checked here. ``tests/modules/test_ranges.py`` fails on a
#: numeric argument of a registered class that is missing here.
SETTING_BOUNDS: dict[str, Callable[[str, Any], None]] = {
    # optimisation (a model's lr may be inf: the divergence stop then reports it at once)
    "lr": _positive(MAX_LR, infinite=True),
    "probe_lr": _positive(MAX_LR),
    "weight_decay": _non_negative(MAX_WEIGHT_DECAY),
    "momentum": check_momentum,
    "key_momentum": check_momentum,
    "target_momentum": check_momentum,
    "bias_lr_scale": _positive(MAX_LR),  # a factor on the run's learning rate
    "warmup_epochs": _non_negative(MAX_EPOCHS),
    "decay_epochs": _non_negative(MAX_EPOCHS),
    # losses
    "temperature": _positive(MAX_TEMPERATURE),
    "gamma": _positive(MAX_TEMPERATURE),
    "tau1": _positive(MAX_TEMPERATURE),
    "tau2": _positive(MAX_TEMPERATURE),
    "lam": _at_most(MAX_SCALE, integer=False),  # its [0, 1] is the loss's to check, when it uses it
    "eps": _non_negative(1.0),
    "penalty": _at_most(MAX_SCALE, integer=False),
    "off_diagonal_weight": _non_negative(MAX_LOSS_WEIGHT),
    "invariance_weight": _non_negative(MAX_LOSS_WEIGHT),
    "variance_weight": _non_negative(MAX_LOSS_WEIGHT),
    "covariance_weight": _non_negative(MAX_LOSS_WEIGHT),
    "target_std": _positive(MAX_SCALE),
    "variance_eps": _positive(1.0),
    # sizes of models
    "backbone_width": _count(MAX_WIDTH),
    "backbone_pools": _at_most(MAX_DEPTH),
    "projector_hidden": _count(MAX_WIDTH),
    "projector_out": _count(MAX_WIDTH),
    "predictor_hidden": _count(MAX_WIDTH),
    "hidden_dim": _count(MAX_WIDTH),
    "embedding_dim": _count(MAX_WIDTH),
    "num_layers": _at_most(MAX_DEPTH),
    "num_blocks": _at_most(MAX_DEPTH),
    "resize_to": _count(MAX_SIDE),
    "queue_size": _count(MAX_SAMPLES),
    "bn_splits": _count(MAX_BATCH),
    "n_clusters": _count(MAX_SAMPLES),
    "cd_steps": _count(10_000),
    "channels": functools.partial(check_counts, high=MAX_WIDTH),
    "elastic_alpha": _non_negative(MAX_SCALE),
    "elastic_sigma": _non_negative(MAX_SCALE),
    # data
    "batch_size": _count(MAX_BATCH),
    "num_workers": _count(MAX_WORKERS, low=0),
    "n_views": _count(MAX_VIEWS),
    "val_fraction": check_fraction,
    "train_fraction": functools.partial(check_fraction, closed=True),
    "test_fraction": check_fraction,
    "limit_per_class": _count(MAX_SAMPLES),
    "seed": _count(MAX_SEED, low=0),
    "data_seed": _count(MAX_SEED, low=0),
    "n_samples": _count(MAX_SAMPLES),
    "n_features": _count(MAX_WIDTH),
    "ambient_dim": _count(MAX_WIDTH),
    "rank": _count(MAX_WIDTH),
    "n_subspaces": _count(MAX_WIDTH),
    "image_size": _count(MAX_SIDE),
    "copies": _count(MAX_SAMPLES),
    "n_base": _count(MAX_WIDTH),
    "cluster_std": _non_negative(MAX_SCALE),
    "noise_std": _non_negative(MAX_SCALE),
    "jitter_std": _non_negative(MAX_SCALE),
    "off_line_scale": _non_negative(MAX_SCALE),
    "epsilon": _non_negative(1.0),
    "angle_range": _non_negative(180.0),
    "shift_range": _non_negative(MAX_SCALE),
}


def check_settings(values: Mapping[str, Any]) -> None:
    """Every value of ``values`` named in :data:`SETTING_BOUNDS` of its type and in its range
    (``None``, a setting's "the default", is left alone): ``ValueError`` naming the first
    setting out of range, its value and what is accepted.

    >>> check_settings({"num_workers": 2**40, "backbone": "resnet18"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: num_workers must be an integer in [0, ...], got 1099511627776
    """
    for name, value in values.items():
        if value is not None and name in SETTING_BOUNDS:
            SETTING_BOUNDS[name](name, value)
