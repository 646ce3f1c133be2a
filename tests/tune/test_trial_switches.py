"""``--no-fast-gpu`` and ``--no-compile`` reach a search's trials, from ``tune`` and from
``bench``'s searched runs alike: a trial on a GPU trains as the command line asked."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace

import pytest

import tune.search
from benchmarks.cli import main
from benchmarks.infra.errors import ConfigError
from benchmarks.run.trainer import RunOptions
from benchmarks.suites.config import load_suite
from benchmarks.suites.searched import search_winners
from benchmarks.suites.tally import Tally


class TrialSeen(ConfigError):
    """Stops the search once its trial is built: nothing here needs Ray to train."""


@pytest.fixture
def trials(monkeypatch) -> list:
    seen = []

    def make_tuner(trial, *args, **kwargs):
        seen.append(trial)
        raise TrialSeen("trial built")

    monkeypatch.setattr(tune.search, "make_tuner", make_tuner)
    monkeypatch.setattr(tune.search, "ray_for_search", lambda address: nullcontext())
    return seen


@pytest.mark.parametrize("flags, fast_gpu, compile", [
    ([], True, True), (["--no-compile"], True, False), (["--no-fast-gpu"], False, True)])
def test_tune_passes_the_gpu_switches_to_its_trials(tmp_path, trials, flags, fast_gpu, compile):
    assert main(["tune", "smoke", "--fast", "--storage", str(tmp_path), *flags]) == 2
    assert [(t.fast_gpu, t.compile) for t in trials] == [(fast_gpu, compile)]


def test_bench_passes_the_gpu_switches_to_its_searches_trials(tmp_path, trials):
    suite = load_suite("smoke", fast=True)
    options = replace(RunOptions(), fast_gpu=False, compile=False)
    with pytest.raises(TrialSeen):
        list(search_winners(suite, None, tmp_path, None, options, Tally(tmp_path)))
    assert [(t.fast_gpu, t.compile) for t in trials] == [(False, False)]
