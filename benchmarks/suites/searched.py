"""A suite's searched runs after their training: each run's search (reused, resumed or started,
:func:`tune.best.best_run`) gives its ``<run>+tuned`` run, which trains for the suite's budget
and seeds unless the search's winner is the run's own settings: then its results are the run's
own, copied and marked so (:mod:`benchmarks.run.same_training`), not trained again."""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from benchmarks.infra.errors import ConfigError
from benchmarks.run.same_training import copy_result, training_equal
from benchmarks.run.spec import RunSpec
from benchmarks.run.trainer import RunOptions
from benchmarks.suites.config import Suite
from benchmarks.suites.preflight import check_values
from benchmarks.suites.tally import Outcome, Tally

console = Console(stderr=True)


def search_winners(suite: Suite, only: list[str] | None, suite_dir: Path,
                   address: str | None, options: RunOptions, tally: Tally,
                   search: bool = True) -> Iterator[tuple[RunSpec, RunSpec]]:
    """Each searched run with its ``+tuned`` run, one search at a time (the caller trains each
    before the next search starts; ``address``: the Ray cluster the trials go to). A search that
    breaks is reported and counted as failed; bad input (a search state it will not load, say)
    and Ctrl-C stop the suite."""
    from tune.best import best_run

    for run in suite.searched_runs(only) if search else []:
        try:
            tuned = best_run(suite.settings, suite.search, run, suite_dir, address=address,
                             wandb=options.wandb if options.logger == "wandb" else False,
                             fast_gpu=options.fast_gpu, compile=options.compile)
        except (KeyboardInterrupt, ConfigError):
            raise
        except Exception:
            console.print(traceback.format_exc(), style="red", markup=False)
            tally.failed.append(f"{run.name}+tuned (search)")
            continue
        # its values come from a file in the results folder: checked as a suite's are
        check_values(replace(suite, runs=[tuned]), options=options, here=address is None)
        shown = ", ".join(f"{k} = {v:.3g}" if isinstance(v, float) else f"{k} = {v}"
                          for k, v in tuned.searched["values"].items())
        console.print(f"{run.name}: best of {tuned.searched['configurations_searched']} "
                      f"configurations: {shown or 'the suite settings'}"
                      + ("" if shown else f" ({tuned.name} takes {run.name}'s results, "
                         "not trained again)"), soft_wrap=True)
        yield run, tuned


def seeds_to_train(suite: Suite, run: RunSpec, tuned: RunSpec, suite_dir: Path,
                   tally: Tally) -> list[int]:
    """The seeds ``tuned`` still has to train: none where its settings are ``run``'s and
    ``run`` finished them here (each copied, :func:`copy_result`, its outcome into ``tally``);
    a seed ``run`` did not finish here (it failed, or another node keeps it) trains."""
    if tuned.searched["values"] or not training_equal(run, tuned):
        return list(suite.seeds)
    left = []
    for seed in suite.seeds:
        result = copy_result(suite.settings, run, tuned, seed, suite_dir)
        if result is None:
            left.append(seed)
            continue
        tally.total += 1
        tally.record(Outcome(f"{tuned.name}/seed-{seed}", result=result))
    return left
