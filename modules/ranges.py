"""Range checks of argument values, one message format for models, losses, evaluation protocols
and search budgets.

A constructor or protocol calls these on its arguments so that a value outside the range its
maths or its optimiser is defined on fails at once, naming the argument, the accepted range and
the value, instead of training on it (a momentum of 1.5 diverges without an error) or failing
after the training (a linear probe with a batch of 0). The suite runner builds every model on
the ``meta`` device before the first run, so these checks are how a suite's bad value is refused
before anything trains. A string or a boolean is never a number here (``lr: fast``, ``k: true``).

>>> check_positive("temperature", 0.5)
>>> check_count("epochs", 0)
Traceback (most recent call last):
...
ValueError: epochs must be an integer of at least 1, got 0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _holds(value: Any, condition: Callable[[Any], Any]) -> bool:
    """``condition(value)`` for a number (a 0-d tensor included); False for anything else."""
    if isinstance(value, (str, bytes, bool)) or value is None:
        return False
    try:
        return bool(condition(value))  # NaN fails every comparison, so it is refused too
    except (TypeError, ValueError, RuntimeError):
        return False


def check_positive(name: str, value: float) -> None:
    if not _holds(value, lambda v: v > 0):
        raise ValueError(f"{name} must be > 0, got {value!r}")


def check_finite_positive(name: str, value: float) -> None:
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


def check_non_negative(name: str, value: float) -> None:
    if not _holds(value, lambda v: v >= 0):
        raise ValueError(f"{name} must be >= 0, got {value!r}")


def check_weight(lam: float) -> None:
    if not _holds(lam, lambda v: 0 <= v <= 1):
        raise ValueError(f"lam must be in [0, 1], got {lam!r}")


def check_momentum(name: str, value: float) -> None:
    """A momentum or moving-average factor: in [0, 1), since at 1 nothing new is ever taken in
    and above 1 the average grows without bound."""
    if not _holds(value, lambda v: 0 <= v < 1):
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")


def check_count_or_fraction(name: str, value: int | float, low: int = 1) -> None:
    """A whole number of at least ``low``, or a fraction in (0, 1] (in [0, 1] when ``low`` is 0):
    a Trainer's batch limits, which take either.

    >>> check_count_or_fraction("limit_train_batches", 0.5)
    >>> check_count_or_fraction("limit_train_batches", 0)
    Traceback (most recent call last):
    ...
    ValueError: limit_train_batches must be an integer of at least 1 or a fraction in (0, 1], got 0
    """
    if isinstance(value, float):
        fits = _holds(value, lambda v: (0 <= v if low == 0 else 0 < v) and v <= 1)
    else:
        fits = isinstance(value, int) and not isinstance(value, bool) and value >= low
    if not fits:
        interval = "[0, 1]" if low == 0 else "(0, 1]"
        raise ValueError(f"{name} must be an integer of at least {low} or a fraction in "
                         f"{interval}, got {value!r}")


def check_count(name: str, value: int, low: int = 1) -> None:
    """A whole number of at least ``low`` (epochs, samples, neighbours, clusters)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an integer of at least {low}, got {value!r}")
