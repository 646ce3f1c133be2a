"""What an evaluation protocol is: its settings (a dataclass the suite pins in full), the
capability it needs of a model, its function, and the metrics it writes; the registry
:data:`benchmarks.protocols.PROTOCOLS` names them.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from benchmarks.infra.metric import Metric
from benchmarks.protocols.features import extract_features


@dataclass
class ProtocolOutput:
    """What one protocol adds to a run's result: ``metrics`` (the keys its :class:`Metric` list
    describes), ``notes`` (why a metric was left out), ``figures`` (file name -> PNG bytes) and
    ``records`` (result keys of their own, e.g. ``per_layer``)."""

    metrics: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    figures: dict[str, bytes] = field(default_factory=dict)
    records: dict[str, Any] = field(default_factory=dict)


class EvaluationInputs:
    """What the protocols of one run read: the model, its datamodule, the run's seed, and the
    frozen features of the training split (the evaluation transform) and the test split,
    extracted once, when a protocol first asks for them (``report`` says so, with the time)."""

    def __init__(self, model: Any, datamodule: Any, seed: int,
                 report: Callable[[str], None] | None = None) -> None:
        self.model, self.datamodule, self.seed = model, datamodule, seed
        self.report = report or (lambda line: None)
        self._features: tuple[Tensor, Tensor, Tensor, Tensor] | None = None
        #: Seconds spent extracting the features (counted apart from the protocol that asked).
        self.feature_seconds = 0.0

    def features(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(train_x, train_y, test_x, test_y)`` of :func:`extract_features` with
        ``model.encode``."""
        if self._features is None:
            start = time.perf_counter()
            self.report("features ...")
            train_x, train_y = extract_features(self.model.encode,
                                                self.datamodule.train_eval_dataloader())
            test_x, test_y = extract_features(self.model.encode, self.datamodule.test_dataloader())
            self._features = (train_x, train_y, test_x, test_y)
            self.feature_seconds = time.perf_counter() - start
            self.report(f"features: {len(train_y)} train, {len(test_y)} test, "
                        f"{self.feature_seconds:.1f} s")
        return self._features


def close_match(name: Any, accepted: list[str]) -> str:
    """`` (did you mean 'k'?); accepted: k, temperature`` for a misspelt ``name``."""
    close = difflib.get_close_matches(str(name), accepted, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{hint}; accepted: {', '.join(accepted)}"


@dataclass(frozen=True)
class EvaluationProtocol:
    """One evaluation protocol.

    Args:
        name: the key of the suite's ``evaluation`` section that runs it.
        summary: one line: what it measures.
        settings: a dataclass of every setting, none with a default: the suite pins them all.
            Its ``__post_init__`` checks their ranges (``ValueError`` naming the value).
        needs: the capability (a ``typing.Protocol`` of :mod:`modules.methods.capabilities`) a
            model must have; a model without it is skipped, as a protocol that does not apply.
        run: ``run(settings, inputs) -> ProtocolOutput``.
        metrics: every metric it can write, in the leaderboard's column order.
        metric_names: the metric keys it writes under ``settings`` (default: every ``metrics``
            name; a family such as ``knn{k}_top1`` needs this to say which members).
        automatic: run on every model that has ``needs`` without a suite naming it (a
            cluster-specific model always reports its own assignment); ``needs`` must then be a
            capability of methods only, so that it can be checked on a method's class.
        example: one good value of every setting, as a suite would pin them (the tests check
            every protocol's settings from it; ``{}`` for a protocol without settings).
        check_sizes: ``check_sizes(settings, split_sizes)`` raises ``ValueError`` when the
            settings cannot apply to splits of these sizes (``{"train": n, "val": n, "test":
            n}``), e.g. more k-means clusters than test points; a run calls it once its data is
            loaded, before it trains.
    """

    name: str
    summary: str
    settings: type
    needs: type
    run: Callable[[Any, EvaluationInputs], ProtocolOutput]
    metrics: tuple[Metric, ...] = ()
    metric_names: Callable[[Any], list[str]] | None = None
    automatic: bool = False
    example: dict[str, Any] = dataclasses.field(default_factory=dict)
    check_sizes: Callable[[Any, dict[str, int]], None] | None = None

    def setting_names(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self.settings)]

    def parse(self, raw: Any) -> Any:
        """The settings dataclass of a suite's ``evaluation.<name>`` section (``None`` for a
        protocol without settings), or ``ValueError`` naming the unknown key, the missing
        settings or the bad value, and what is accepted."""
        names = self.setting_names()
        raw = {} if raw is None else raw
        if not isinstance(raw, dict):
            raise ValueError(f"must be a mapping of its settings ({', '.join(names)}), "
                             f"got {raw!r}")
        if raw and not names:
            raise ValueError(f"takes no settings ({self.name}: {{}}), got {raw!r}")
        for key in raw:
            if key not in names:
                raise ValueError(f"unknown key {key!r}{close_match(key, names)}")
        missing = [n for n in names if n not in raw]
        if missing:
            raise ValueError(f"{', '.join(missing)} not set; a suite pins every setting of "
                             f"{self.name}: {', '.join(names)}")
        return self.settings(**raw)

    def recorded(self, settings: Any) -> list[str]:
        """The metric keys :attr:`run` writes under ``settings`` (some may be skipped, with a
        note, on data too small for them)."""
        if self.metric_names is not None:
            return self.metric_names(settings)
        return [m.name for m in self.metrics]


class EvaluationLine:
    """The evaluation's progress on stderr: on a terminal, each protocol as it starts and as it
    ends (a large split takes minutes); in a log or a pipe, one line a run when it is done,
    ``clusterbench: <prefix>: evaluated in T s (features ..., svm 0.4 s, ...)``, instead of
    two lines a protocol (144 lines of ``make bench``'s output)."""

    def __init__(self, prefix: str, live: bool | None = None) -> None:
        self.prefix = prefix
        self.live = sys.stderr.isatty() if live is None else live
        self.parts: list[str] = []

    def __call__(self, line: str) -> None:
        if self.live:
            print(f"clusterbench: {self.prefix}: evaluating: {line}", file=sys.stderr,
                  flush=True)
        elif not line.endswith(" ..."):  # a start, said by its end
            self.parts.append(line)

    def finish(self, seconds: float) -> None:
        """The one line of a log: what was evaluated, each part's seconds."""
        if not self.live:
            print(f"clusterbench: {self.prefix}: evaluated in {seconds:.1f} s "
                  f"({'; '.join(self.parts)})", file=sys.stderr, flush=True)


def stderr_report(prefix: str) -> Callable[[str], None]:
    """A progress line printer: ``clusterbench: <prefix>: <line>`` on stderr, at once."""
    def report(line: str) -> None:
        print(f"clusterbench: {prefix}: {line}", file=sys.stderr, flush=True)

    return report
