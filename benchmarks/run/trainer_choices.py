"""The Trainer settings that name one of Lightning's choices, checked against what Lightning 2.6
builds and this project's runs can train and evaluate with: ``precision``, ``max_time``,
``strategy``, ``profiler``, ``gradient_clip_algorithm``, ``fast_dev_run`` and ``barebones``.

Their type hints let through values the Trainer refuses only once a run starts (a strategy
``foo``, ``fast_dev_run: -1``), or that train and then fail (``precision: 64`` trained a run whose
linear probe then met float64 weights with float32 features; ``max_time: {days: 99999999999}``
overflowed Python's ``timedelta``): each is refused here, in one line naming the value and what
is accepted, before anything trains. The counts, batch limits and gradient clip are
:func:`benchmarks.run.trainer.check_trainer_values`'s, which calls :func:`check_trainer_choices`.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from benchmarks.infra.errors import suggest
from modules.ranges import check_count

#: Lightning's precisions (``lightning.fabric.connector._PRECISION_INPUT``) under which the
#: weights stay float32: full precision, and the mixed ones (autocast, float32 weights). The
#: others (``64``, ``'16-true'``, ``'bf16-true'``, transformer-engine) cast the weights, which
#: the evaluation's float32 features then meet: "Input type (torch.FloatTensor) and weight type
#: (torch.DoubleTensor) should be the same", after the training.
PRECISIONS = (32, "32", "32-true", 16, "16", "16-mixed", "bf16", "bf16-mixed")

#: The keywords of a ``max_time`` mapping: those of :class:`datetime.timedelta`, which Lightning's
#: Timer builds the duration with.
MAX_TIME_KEYS = ("weeks", "days", "hours", "minutes", "seconds", "milliseconds", "microseconds")
#: A ``max_time`` text as Lightning's Timer reads it: ``DD:HH:MM:SS``, days of any length.
MAX_TIME_TEXT = re.compile(r"(\d+):(\d\d):(\d\d):(\d\d)")

#: Lightning's profilers by name (``lightning/pytorch/trainer/setup.py``, ``_init_profiler``).
PROFILERS = ("simple", "advanced", "pytorch", "xla")
#: The most batches ``fast_dev_run`` may name (as :data:`benchmarks.run.trainer.MAX_STEPS`).
MAX_FAST_DEV_RUN = 10**9


def check_trainer_choices(settings: dict[str, Any]) -> None:
    """Each of ``settings``' Trainer choices one that Lightning builds and a run trains and is
    evaluated with: :data:`PRECISIONS`, :func:`max_time_duration`, Lightning's strategy,
    profiler and gradient clip names (in any case, as Lightning reads them), a ``fast_dev_run``
    count or true/false, ``barebones`` off; ``None`` is Lightning's default for each.

    >>> check_trainer_choices({"precision": "bf16-mixed", "max_time": "00:12:00:00"})
    >>> check_trainer_choices({"precision": 64})
    Traceback (most recent call last):
    ...
    ValueError: precision must be one of 32, '32', '32-true', 16, '16', '16-mixed', 'bf16', ...

    Raises:
        ValueError: ``<setting> must be <what is accepted>, got <value>``.
    """
    if settings.get("precision") is not None:
        check_precision(settings["precision"])
    if settings.get("max_time") is not None:
        max_time_duration(settings["max_time"])
    for name, accepted in (("strategy", strategy_names), ("profiler", lambda: PROFILERS),
                           ("gradient_clip_algorithm", clip_algorithms)):
        value = settings.get(name)
        if isinstance(value, str) and value.lower() not in accepted():
            raise ValueError(f"{name} {value!r} is none of Lightning's"
                             f"{suggest(value.lower(), accepted())}")
    fast = settings.get("fast_dev_run")
    if fast is not None and not isinstance(fast, bool):
        check_count("fast_dev_run", fast, low=0, high=MAX_FAST_DEV_RUN)
    if settings.get("barebones"):
        raise ValueError(f"barebones must be false (a run's logger, checkpoints and callbacks "
                         f"need the full Trainer), got {settings['barebones']!r}")


def check_precision(value: Any) -> None:
    """``value`` one of :data:`PRECISIONS`, as it is written (``32.0`` is none: Lightning would
    read it as the text ``'32.0'``)."""
    if type(value) not in (int, str) or value not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(map(repr, PRECISIONS))} "
                         "(Lightning's precisions that keep the weights float32, which the "
                         f"evaluation reads), got {value!r}")


def max_time_duration(value: Any) -> timedelta:
    """The duration a ``max_time`` setting names, as Lightning's Timer builds it: a
    :class:`~datetime.timedelta`, a ``DD:HH:MM:SS`` text or a mapping of :data:`MAX_TIME_KEYS` to
    integers; positive (a Timer of no time stops the run at its first step) and within what a
    ``timedelta`` holds.

    >>> max_time_duration({"hours": 1, "minutes": 30})
    datetime.timedelta(seconds=5400)
    >>> max_time_duration("1:30")
    Traceback (most recent call last):
    ...
    ValueError: max_time must be a positive duration: 'DD:HH:MM:SS' or a mapping of weeks, ...
    """
    accepted = (f"max_time must be a positive duration: 'DD:HH:MM:SS' or a mapping of "
                f"{', '.join(MAX_TIME_KEYS)} to integers, of at most {timedelta.max.days} days, "
                f"got {value!r}")
    if isinstance(value, str) and (match := MAX_TIME_TEXT.fullmatch(value.strip())):
        parts = dict(zip(("days", "hours", "minutes", "seconds"), map(int, match.groups()),
                         strict=True))
    elif isinstance(value, dict) and all(
            key in MAX_TIME_KEYS and isinstance(v, int) and not isinstance(v, bool)
            for key, v in value.items()):
        parts = value
    elif isinstance(value, timedelta):  # ``clusterbench fit``'s parser may give one
        parts = {"microseconds": value // timedelta(microseconds=1)}
    else:
        raise ValueError(accepted)
    try:
        duration = timedelta(**parts)
    except OverflowError:  # more than timedelta.max: Lightning's Timer fails the same way
        raise ValueError(accepted) from None
    if duration <= timedelta(0):
        raise ValueError(accepted)
    return duration


def strategy_names() -> list[str]:
    """``auto`` and the strategies Lightning has by name (``ddp``, ``ddp_spawn``, ``fsdp``...)."""
    from lightning.pytorch.strategies import StrategyRegistry

    return ["auto", *sorted(StrategyRegistry.available_strategies())]


def clip_algorithms() -> list[str]:
    """Lightning's gradient clip algorithms: ``value`` and ``norm``."""
    from lightning.pytorch.utilities.enums import GradClipAlgorithmType

    return [algorithm.value for algorithm in GradClipAlgorithmType]
