"""A run whose settings are another's: its result is the other's, copied, never trained again.

A search whose best configuration is the suite's own settings gives a ``<run>+tuned`` run that
trains exactly what ``<run>`` trains: seeded runs are deterministic, so training it again would
spend the run's whole budget on the same numbers. Its seed folders are ``<run>``'s, copied, and
its results say so (``same_as``), with no wall time of their own.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from benchmarks.infra.atomic import write_atomic
from benchmarks.infra.locking import seed_lock
from benchmarks.infra.yaml_files import dump_yaml
from benchmarks.run.cache import finished_result, replace_directory, run_dir
from benchmarks.run.identity import configuration_hash, resolved_config
from benchmarks.run.spec import RunSpec, SuiteSettings

#: The search's trials figure a ``+tuned`` row's folder shows (as ``evaluate_and_record`` writes
#: it).
SEARCH_FIGURE = "search-trials.png"


def training_equal(run: RunSpec, twin: RunSpec) -> bool:
    """``twin`` trains and evaluates what ``run`` does: they differ only in name and in the
    search each remembers.

    >>> from benchmarks.run.spec import RunSpec
    >>> run = RunSpec(name="simclr", method="simclr", model={"lr": 1e-3})
    >>> training_equal(run, RunSpec(name="simclr+tuned", method="simclr", model={"lr": 1e-3}))
    True
    >>> training_equal(run, RunSpec(name="simclr+tuned", method="simclr", model={"lr": 2e-3}))
    False
    """
    from dataclasses import asdict

    def kept(spec: RunSpec) -> dict[str, Any]:
        return {k: v for k, v in asdict(spec).items() if k not in ("name", "searched", "paper")}
    return kept(run) == kept(twin)


def copy_result(settings: SuiteSettings, run: RunSpec, twin: RunSpec, seed: int,
                suite_dir: Path) -> dict[str, Any] | None:
    """``run``'s finished result for ``seed`` as ``twin``'s (:func:`training_equal` runs): its
    seed folder copied whole (weights, logs, figures), the result and ``config.yaml`` saying
    ``twin``'s configuration, ``same_as: <run>`` and no wall time (nothing ran). None where
    ``run`` has no finished result for the seed here (it failed, or a cluster node kept it).

    A copy already there that was made from this very result is kept (``"reused": True``); one
    made from an earlier result of ``run`` (trained again since), or anything else in the
    folder, is replaced whole, as a rerun replaces a result."""
    if not training_equal(run, twin):
        raise ValueError(f"{twin.name} does not train what {run.name} trains")
    source = run_dir(suite_dir, run, seed)  # no link in or on the way to either folder
    done = finished_result(source, resolved_config(settings, run, seed))
    if done is None:
        return None
    config = resolved_config(settings, twin, seed)
    final = run_dir(suite_dir, twin, seed)
    with seed_lock(final.with_name(final.name + ".lock")):
        there = finished_result(final, config)
        if there is not None and there.get("same_as") == run.name \
                and there.get("finished_at") == done.get("finished_at") \
                and there.get("metrics") == done.get("metrics"):
            return {**there, "reused": True}
        attempt = final.with_name(final.name + ".attempt")
        if attempt.exists():
            shutil.rmtree(attempt)
        shutil.copytree(source, attempt, symlinks=True)  # run_dir checked it holds no link
        figures = [name for name in done.get("figures") or [] if name != SEARCH_FIGURE]
        trials_png = Path((twin.searched or {}).get("directory", "")) / "trials.png"
        if twin.searched and trials_png.is_file():  # the search behind this row, as a retrained
            write_atomic(attempt / SEARCH_FIGURE, trials_png.read_bytes())  # one shows it
            figures.append(SEARCH_FIGURE)
        result = {**done, "run": twin.name, "search": twin.searched, "config": config,
                  "config_hash": configuration_hash(config), "same_as": run.name,
                  "wall_seconds": 0.0, "figures": figures}
        write_atomic(attempt / "config.yaml", dump_yaml(config))
        write_atomic(attempt / "result.json", json.dumps(result, indent=2, default=str))
        replace_directory(attempt, final)
    return result
