"""ASHA on signal (:mod:`tune.asha`): Ray's ASHA where the metric has no noise estimate, and a
trial kept while it is within the noise of its rung's cutoff."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest
from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from tune.asha import SignalASHA, decision_lines, margin


def trial(index: int) -> SimpleNamespace:
    return SimpleNamespace(config={"trial": index}, trial_id=f"t{index}")


def results(seed: int, trials: int, epochs: int) -> list[tuple[int, int, float]]:
    """Results as an asynchronous search delivers them: (trial, epoch, value), each trial's
    epochs in order, the trials interleaved at random."""
    rng = random.Random(seed)
    pending = {t: 1 for t in range(trials)}
    out = []
    while pending:
        t = rng.choice(sorted(pending))
        out.append((t, pending[t], rng.random()))
        pending[t] += 1
        if pending[t] > epochs:
            del pending[t]
    return out


@pytest.mark.parametrize("grace, max_t, rf", [(1, 4, 2), (1, 10, 3), (2, 16, 2), (1, 1, 2)])
@pytest.mark.parametrize("mode", ["max", "min"])
def test_without_a_noise_estimate_the_decisions_are_rays_asha(grace, max_t, rf, mode):
    """``rankme`` is not a proportion: no margin, so every action is what Ray's own
    ASHAScheduler decides on the same results in the same order (a trial once stopped
    reports nothing more)."""
    ours = SignalASHA("rankme", mode, max_t, grace, rf)
    ray = ASHAScheduler(time_attr="training_iteration", metric="rankme", mode=mode, max_t=max_t,
                        grace_period=grace, reduction_factor=rf)
    stopped: set[int] = set()
    for t in range(12):
        ray.on_trial_add(None, trial(t))
    for t, epoch, value in results(seed=grace * 100 + max_t, trials=12, epochs=max_t):
        if t in stopped:
            continue
        result = {"training_iteration": epoch, "rankme": value}
        action = ours.on_trial_result(None, trial(t), result)
        assert action == ray.on_trial_result(None, trial(t), result), (t, epoch)
        if action == TrialScheduler.STOP:
            stopped.add(t)
    assert [m for m, _ in ours.rungs] == [m for m, _ in ray._trial_info["t0"]._rungs]


def test_the_margin_is_two_standard_errors_of_a_difference_of_two_accuracies():
    for p, c, n in [(0.5, 0.5, 100), (0.11, 0.12, 135), (0.9, 0.7, 2048), (0.0, 1.0, 10)]:
        naive = 2.0 * math.sqrt(p * (1.0 - p) / n + c * (1.0 - c) / n)
        assert margin(p, c, n) == pytest.approx(naive, rel=1e-12)


def test_a_trial_within_the_noise_of_the_cutoff_goes_on_and_one_beyond_it_stops():
    """135 validation images at chance (about 0.11): one image apart is noise; 0.05 against
    a cutoff of 0.31 is not."""
    asha = SignalASHA("online_val_acc", "max", max_t=4, grace_period=1, reduction_factor=2)
    first = {"training_iteration": 1, "online_val_acc": 15 / 135, "metric_examples": 135}
    assert asha.on_trial_result(None, trial(0), first) == TrialScheduler.CONTINUE
    close = {**first, "online_val_acc": 14 / 135}
    assert asha.on_trial_result(None, trial(1), close) == TrialScheduler.CONTINUE
    assert asha.decisions[-1].worse and not asha.decisions[-1].stopped
    asha.on_trial_result(None, trial(2), {**first, "online_val_acc": 0.5})
    asha.on_trial_result(None, trial(3), {**first, "online_val_acc": 0.6})
    assert asha.on_trial_result(None, trial(4), {**first, "online_val_acc": 0.05}) == \
        TrialScheduler.STOP
    plain = ASHAScheduler(time_attr="training_iteration", metric="online_val_acc", mode="max",
                          max_t=4, grace_period=1, reduction_factor=2)
    plain.on_trial_add(None, trial(0))
    plain.on_trial_add(None, trial(1))
    plain.on_trial_result(None, trial(0), first)
    assert plain.on_trial_result(None, trial(1), close) == TrialScheduler.STOP  # on one image
    (line,) = decision_lines(asha.decisions, "online_val_acc")
    assert line.startswith("epoch 1: 5 trial(s), online_val_acc 0.050-0.600; noise margin ")
    assert "binomial on 135 examples); stopped 1, kept within the noise 1" in line


def test_the_last_epoch_of_the_budget_ends_a_trial():
    asha = SignalASHA("online_val_acc", "max", max_t=2, grace_period=1, reduction_factor=2)
    done = {"training_iteration": 2, "online_val_acc": 0.9, "metric_examples": 100}
    assert asha.on_trial_result(None, trial(0), done) == TrialScheduler.STOP
