"""A run's configuration and its identity: everything a result depends on
(:func:`resolved_config`), the hash that groups its seeds on the leaderboards
(:func:`configuration_hash`), and what its training depends on (:func:`training_identity`).

Pure functions of the configuration, without torch: the leaderboards, ``report`` and ``compare``
read results through them, and :mod:`benchmarks.run.cache` decides with them what a run reuses.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from benchmarks.run.spec import RunSpec, SuiteSettings


def resolved_config(settings: SuiteSettings, run: RunSpec, seed: int) -> dict[str, Any]:
    """Everything a result depends on, as ``config.yaml`` and ``result.json`` record it; a
    finished result with the same configuration is not trained again."""
    config = {"suite": settings.name, "suite_file": settings.path, "fast": settings.fast,
              "seed": seed, "headline": settings.headline, "plots": settings.plots,
              "run": asdict(run), "evaluation": settings.evaluation}
    if settings.overrides:  # a result of the suite as its file says has no such key
        config["overrides"] = settings.overrides
    if settings.ranking is not None:  # nor a result of a suite without a ranking section
        config["ranking"] = settings.ranking
    return json.loads(json.dumps(config, default=str))  # as it reads back from the files


#: What a configuration's hash leaves out: the seed (seeds of one configuration are averaged),
#: where the suite file lives, and how the leaderboard shows it.
UNHASHED = ("seed", "suite_file", "headline", "plots", "ranking")


def configuration_hash(config: dict[str, Any]) -> str:
    """A short hash of what a result depends on apart from its seed: seeds with equal hashes
    may be averaged; a leaderboard never mixes two hashes in one row.

    >>> a = {"seed": 0, "run": {"name": "simclr", "trainer": {"max_epochs": 40}}}
    >>> configuration_hash(a) == configuration_hash({**a, "seed": 1})
    True
    >>> configuration_hash(a) == configuration_hash({**a, "run": {"name": "simclr",
    ...                                                           "trainer": {"max_epochs": 2}}})
    False
    """
    import hashlib

    kept = {k: v for k, v in config.items() if k not in UNHASHED}
    text = json.dumps(kept, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def same_configuration(a: dict[str, Any] | None, b: dict[str, Any]) -> bool:
    """Equal configurations; where the suite file lives (named or given by path) does not count."""
    if a is None:
        return False
    def strip(c: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in c.items() if k != "suite_file"}
    return strip(json.loads(json.dumps(a, default=str))) == strip(b)


def training_identity(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """What a run's training depends on: its configuration less the evaluation, how results
    are shown, the paper's numbers and the suite file's place. Equal identities train the same
    weights, so a changed evaluation re-evaluates them instead of training again.

    >>> a = {"seed": 0, "run": {"name": "r", "paper": {}}, "evaluation": {"knn": {"k": [5]}}}
    >>> b = {**a, "evaluation": {"knn": {"k": [5, 20]}}, "headline": "knn5_top1"}
    >>> training_identity(a) == training_identity(b)
    True
    >>> training_identity(a) == training_identity({**a, "seed": 1})
    False
    """
    if config is None:
        return None
    config = json.loads(json.dumps(config, default=str))
    kept = {k: v for k, v in config.items()
            if k not in ("evaluation", "headline", "plots", "ranking", "suite_file")}
    if isinstance(kept.get("run"), dict):
        kept["run"] = {k: v for k, v in kept["run"].items() if k != "paper"}
    return kept
