"""ASHA that stops a trial only on signal: below its rung's cutoff by more than the metric's noise.

Asynchronous successive halving (Li et al., "A System for Massively Parallel Hyperparameter
Tuning", MLSys 2020, arXiv:1810.05934, Algorithm 2): rungs at ``grace_period * rf**k`` epochs;
a trial reaching a rung is stopped when its metric is below the ``1 - 1/rf`` quantile of the
values recorded at that rung so far, and goes on otherwise.

Departure, and why: validation metrics are noisy (on the smoke suite's 135 validation images
plain ASHA stopped trials on differences of one or two images). A trial is stopped only when it
is below the cutoff by more than :data:`Z` standard errors of the difference of two accuracies
on ``n`` examples each, ``sqrt(p (1 - p) / n + c (1 - c) / n)`` (``p`` the trial's value, ``c``
the cutoff); within that margin it goes on to the next rung. For a metric that is not a
proportion (``rankme``) the margin is 0: plain ASHA.

Decisions depend on the order trials reach a rung; they are reproducible only with
``max_concurrent: 1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

#: The metrics that are proportions of ``n`` examples (their noise is binomial).
PROPORTIONS = ("online_val_acc", "online_knn_acc")
#: Standard errors of the difference a trial must be below its rung's cutoff to be stopped.
Z = 2.0


def margin(value: float, cutoff: float, examples: int | None) -> float:
    """``Z`` standard errors of the difference of two accuracies, ``value`` and ``cutoff``,
    each measured on ``examples`` examples (0 without a count).

    >>> round(margin(0.5, 0.5, 100), 4)  # 2 * sqrt(0.25/100 + 0.25/100)
    0.1414
    >>> margin(0.9, 0.8, None)
    0.0
    """
    if not examples:
        return 0.0
    p, c = (min(max(v, 0.0), 1.0) for v in (value, cutoff))
    return Z * math.sqrt((p * (1 - p) + c * (1 - c)) / examples)


@dataclass
class Decision:
    """One trial's arrival at a rung: its value, the rung's cutoff and margin, and the action."""

    trial: int
    epoch: int
    value: float
    cutoff: float | None
    margin: float
    examples: int | None
    worse: bool  # below the cutoff (plain ASHA would have stopped it)
    stopped: bool  # ... by more than the margin


class SignalASHA(FIFOScheduler):
    """ASHA on signal over ``metric`` reported every epoch; trials are told apart by
    ``config["trial"]``."""

    def __init__(self, metric: str, mode: str, max_t: int, grace_period: int,
                 reduction_factor: float) -> None:
        super().__init__()
        self._metric, self._mode = metric, mode
        self.watched, self.sign = metric, 1.0 if mode == "max" else -1.0
        self.max_t, self.rf = max_t, reduction_factor
        count = int(math.log(max_t / grace_period) / math.log(reduction_factor) + 1e-9) + 1
        self.rungs: list[tuple[int, dict[int, float]]] = [
            (int(round(grace_period * reduction_factor ** k)), {}) for k in reversed(range(count))]
        self.decisions: list[Decision] = []
        self.proportion = metric in PROPORTIONS

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        return True  # set here, the same as the Tuner's

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        if self.watched not in result:
            return TrialScheduler.CONTINUE
        if result["training_iteration"] >= self.max_t:
            return TrialScheduler.STOP  # its budget's last epoch
        return self.at_rung(trial.config["trial"], result)

    def at_rung(self, index: int, result: dict) -> str:
        """The decision for trial ``index`` whose latest ``result`` may reach a rung."""
        epoch, value = result["training_iteration"], float(result[self.watched])
        for milestone, recorded in self.rungs:
            if epoch < milestone or index in recorded:
                continue
            signed = self.sign * value
            cutoff = (float(np.nanpercentile(list(recorded.values()), (1 - 1 / self.rf) * 100))
                      if recorded else None)
            examples = result.get("metric_examples") if self.proportion else None
            allowed = margin(value, self.sign * cutoff, examples) if cutoff is not None else 0.0
            stop = cutoff is not None and signed < cutoff - allowed
            recorded[index] = signed
            self.decisions.append(Decision(
                index, epoch, value, None if cutoff is None else self.sign * cutoff, allowed,
                examples, cutoff is not None and signed < cutoff, stop))
            return TrialScheduler.STOP if stop else TrialScheduler.CONTINUE
        return TrialScheduler.CONTINUE

    def on_trial_complete(self, tune_controller, trial, result: dict) -> None:
        pass  # a completed trial's last result was judged when it came

    def debug_string(self) -> str:
        stopped = sum(d.stopped for d in self.decisions)
        return f"ASHA on signal: {stopped} stopped of {len(self.decisions)} rung decisions"


def decision_lines(decisions: list[Decision], metric: str) -> list[str]:
    """One line per rung epoch: how many trials reached it, the spread of their values, the
    noise margin the decisions allowed, and how many were stopped."""
    lines = []
    for epoch in sorted({d.epoch for d in decisions}):
        at = [d for d in decisions if d.epoch == epoch]
        judged = [d for d in at if d.cutoff is not None]
        values = [d.value for d in at]
        noise = (f"noise margin {min(d.margin for d in judged):.3f}-"
                 f"{max(d.margin for d in judged):.3f} ({Z:g} SE of a difference, binomial on "
                 f"{at[-1].examples} examples)" if judged and at[-1].examples
                 else "no noise estimate (not a proportion)" if judged else "first to arrive")
        kept = sum(d.worse and not d.stopped for d in judged)
        lines.append(f"epoch {epoch}: {len(at)} trial(s), {metric} {min(values):.3f}-"
                     f"{max(values):.3f}; {noise}; stopped {sum(d.stopped for d in at)}, "
                     f"kept within the noise {kept}")
    return lines
