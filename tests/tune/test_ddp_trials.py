"""A multi-worker (DDP) trial never reuses a finished trial's actor: its processes end with the
trial's own (a reused actor once waited on a nested run still shutting down, and the search
stalled); single-device trials reuse theirs."""

from __future__ import annotations

import pytest
from ray import tune

from benchmarks.suites.config import load_suite
from tune.search import run_search


class Stop(Exception):
    """Raised by the stand-in Tuner once it has seen its settings."""


@pytest.mark.slow
@pytest.mark.parametrize("workers, reused", [(1, True), (2, False)])
def test_only_single_worker_trials_reuse_actors(tmp_path, local_ray, monkeypatch, workers,
                                               reused):
    seen = {}

    def tuner(trainable, param_space, tune_config, run_config):
        seen["reuse"] = tune_config.reuse_actors
        raise Stop

    monkeypatch.setattr(tune, "Tuner", tuner)
    suite = load_suite("smoke", fast=True)
    with pytest.raises(Stop):
        run_search(suite.settings, suite.search, suite.run("simclr"), num_samples=1,
                   max_epochs=1, storage=str(tmp_path / "search"), workers_per_trial=workers)
    assert seen["reuse"] is reused
