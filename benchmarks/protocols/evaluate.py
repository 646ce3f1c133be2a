"""Scores a trained model with the protocols a suite's ``evaluation`` section names, from
features extracted once per run; nothing here names a protocol.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from benchmarks.protocols import PROTOCOLS
from benchmarks.protocols.protocol import EvaluationInputs, close_match


def suite_protocols() -> list[str]:
    """The protocols a suite's ``evaluation`` section may name (the automatic ones run on their
    own), in the registry's order."""
    return [name for name, protocol in PROTOCOLS.items() if not protocol.automatic]


def check_evaluation(evaluation: dict[str, Any]) -> dict[str, Any]:
    """Every protocol the section names with its settings, each pinned and in range, so that a
    bad setting is refused before training rather than after.

    Returns:
        ``{name: settings}`` in the registry's order.

    Raises:
        ValueError: ``<protocol>: <setting> must be ..., got ...`` (or the unknown protocol, or
        a section that names none).
    """
    accepted = suite_protocols()
    if not isinstance(evaluation, dict):
        raise ValueError(f"must be a mapping of protocols, got {evaluation!r}")
    for name in evaluation:
        if name not in accepted:
            raise ValueError(f"unknown protocol {name!r}{close_match(name, accepted)}")
    if not evaluation:
        raise ValueError(f"names no protocol; a suite names its protocols and pins every "
                         f"setting, accepted: {', '.join(accepted)}")
    settings = {}
    for name in accepted:
        if name in evaluation:
            try:
                settings[name] = PROTOCOLS[name].parse(evaluation[name])
            except ValueError as err:
                raise ValueError(f"{name}: {err}") from err
    return settings


def protocol_metrics(evaluation: dict[str, Any], method: type | None = None) -> set[str]:
    """The metric names :func:`evaluate_encoder` can record under ``evaluation``: those of the
    protocols it names, and those of the automatic protocols whose capability ``method`` (a
    class) has."""
    names = {metric for name, settings in check_evaluation(evaluation).items()
             for metric in PROTOCOLS[name].recorded(settings)}
    for protocol in PROTOCOLS.values():
        if protocol.automatic and method is not None and issubclass(method, protocol.needs):
            names |= set(protocol.recorded(protocol.parse({})))
    return names


@dataclass
class Evaluation:
    """A run's evaluation: ``metrics`` (fractions in [0, 1] for accuracies, scores as they
    are), ``notes`` (why a metric was skipped, e.g. ``k`` above the number of training points),
    ``figures`` (file name -> PNG bytes), ``records`` (result keys of their own, such as
    ``per_layer``) and ``seconds`` (each protocol's wall-clock seconds, the features'
    extraction apart under ``features``)."""

    metrics: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    figures: dict[str, bytes] = field(default_factory=dict)
    records: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def check_evaluation_sizes(evaluation: dict[str, Any], sizes: dict[str, int]) -> None:
    """Each named protocol's settings against the sizes of the splits they will score (a
    protocol's ``check_sizes``): ``ValueError`` naming the protocol and the value."""
    for name, settings in check_evaluation(evaluation).items():
        check = PROTOCOLS[name].check_sizes
        if check is not None:
            try:
                check(settings, sizes)
            except ValueError as err:
                raise ValueError(f"{name}: {err}") from None


def evaluate_encoder(model: Any, datamodule: Any, evaluation: dict[str, Any], seed: int,
                     report: Callable[[str], None] | None = None) -> Evaluation:
    """Runs the protocols ``evaluation`` names, then the automatic ones, in the registry's order,
    on ``model``; features are extracted once, when first asked for, and a protocol whose
    capability the model lacks is skipped. ``report`` gets a line as each protocol starts and
    ends, with its seconds (the extraction counted apart).
    """
    report = report or (lambda line: None)
    settings = check_evaluation(evaluation)
    with full_float32():
        return _evaluate(model, settings, EvaluationInputs(model, datamodule, seed, report),
                         report)


@contextmanager
def full_float32() -> Iterator[None]:
    """TF32 off for matrix products and cuDNN convolutions while the protocols run, restored
    after: training turns it on for speed, but the torch SVM's stopping tolerance (1e-4) is below
    TF32's error (about 1e-3), and scores must not differ between GPU and CPU.

    >>> torch.backends.cuda.matmul.allow_tf32 = True
    >>> with full_float32():
    ...     torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    (False, False)
    >>> torch.backends.cuda.matmul.allow_tf32
    True
    >>> torch.backends.cuda.matmul.allow_tf32 = False
    """
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def _evaluate(model: Any, settings: dict[str, Any], inputs: EvaluationInputs,
              report: Callable[[str], None]) -> Evaluation:
    out = Evaluation()
    for name, protocol in PROTOCOLS.items():
        if name not in settings and not protocol.automatic:
            continue
        if not isinstance(model, protocol.needs):
            if not protocol.automatic:
                report(f"{name}: skipped, the model is not a {protocol.needs.__name__}")
            continue
        start, features_before = time.perf_counter(), inputs.feature_seconds
        report(f"{name} ...")
        result = protocol.run(settings[name] if name in settings else protocol.parse({}), inputs)
        out.notes.update(result.notes)
        for metric, value in result.metrics.items():  # a result holds finite numbers only:
            if math.isfinite(value):  # one that did not would be set aside and run again
                out.metrics[metric] = value
            else:
                out.notes[metric] = f"not a finite number ({value}): left out of the metrics"
        out.figures.update(result.figures)
        out.records.update(result.records)
        seconds = time.perf_counter() - start - (inputs.feature_seconds - features_before)
        report(f"{name}: {seconds:.1f} s")  # the features' extraction has its own line
        out.seconds[name] = seconds
    if inputs.feature_seconds:
        out.seconds = {"features": inputs.feature_seconds, **out.seconds}
    return out
