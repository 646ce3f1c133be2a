"""A run's training curves and logs: its logger (CSV, or one W&B run per run and seed), the
CSV curves carried across a resume, and what its W&B run is given."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from benchmarks.infra.atomic import write_atomic
from benchmarks.infra.errors import ConfigError, control_free
from benchmarks.infra.read_back import load_csv
from benchmarks.run.identity import configuration_hash
from benchmarks.run.spec import RunSpec, SuiteSettings
from benchmarks.run.wandb_runs import WandbSettings

#: Where a run's curves go: a CSV file in its folder, or a W&B run (``--logger``).
LOGGERS = ("csv", "wandb")


def make_logger(kind: str, directory: Path, settings: SuiteSettings, run: RunSpec, seed: int,
                config: dict[str, Any], wandb: WandbSettings, trains: bool = True):
    """A CSV logger (``<directory>/logs/metrics.csv``), or one W&B run per (run, seed) that
    stays open for the evaluation, its files in the suite's ``wandb/`` folder (not the attempt
    folder, which is renamed: the ``wandb sync`` path W&B prints must stay true)."""
    from lightning.pytorch.loggers import CSVLogger

    from benchmarks.run.wandb_runs import make_wandb_logger

    if kind == "csv":
        return CSVLogger(save_dir=directory, name="logs", version="")
    if kind == "wandb":
        suite_dir = directory.parents[2]  # <suite>/runs/<run>/seed-k.attempt
        return make_wandb_logger(wandb, suite=settings, run=run.name, seed=seed, trains=trains,
                                 suite_dir=suite_dir, config=config)
    raise ConfigError(f"unknown logger {kind!r}; available: {', '.join(LOGGERS)}")


def keep_earlier_curves(logs: Path) -> None:
    """Lightning's CSV logger starts ``metrics.csv`` afresh; before a resume, what the earlier
    attempts logged is set aside to be put back in front by :func:`join_curves`."""
    current, earlier = logs / "metrics.csv", logs / "metrics.earlier.csv"
    if current.is_file():
        rows = read_rows(earlier) + read_rows(current)
        write_atomic(earlier, rows_csv(rows))
        current.unlink()


def join_curves(logs: Path, resumed_step: int) -> None:
    """``metrics.csv`` = the earlier attempts' rows before the step the run resumed at, then
    this attempt's."""
    earlier = logs / "metrics.earlier.csv"
    if not earlier.is_file():
        return
    kept = [r for r in read_rows(earlier) if int(float(r.get("step") or 0)) < resumed_step]
    write_atomic(logs / "metrics.csv", rows_csv(kept + read_rows(logs / "metrics.csv")))
    earlier.unlink()


#: The largest log read back to join a resumed run's curves: a long run logged at every step
#: passes :data:`~benchmarks.infra.read_back.MAX_BYTES`; the bound keeps out a device.
LONGEST_LOG = 2**30


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of the CSV log ``path`` (none where there is none); one that is not a regular
    file of bounded size or not UTF-8 CSV is left out with one line saying so: the run goes on
    with the curves it can read."""
    import sys

    if not path.is_file():
        return []
    try:
        return load_csv(path, LONGEST_LOG)
    except (OSError, ValueError) as err:
        print(control_free(f"clusterbench: warning: the curves in {path} are not kept: {err}"),
              file=sys.stderr, flush=True)
        return []


def rows_csv(rows: list[dict[str, str]]) -> str:
    columns = sorted({k for r in rows for k in r})
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def wandb_config(config: dict[str, Any], model) -> dict[str, Any]:
    """A W&B run's config: the run as resolved, its ``config_hash`` (the leaderboard's: seeds
    with equal hashes make one row), and under ``hyperparameters`` the model's arguments this
    configuration uses (not those it never reads)."""
    return {**config, "config_hash": configuration_hash(config),
            "hyperparameters": {k: v for k, v in model.hparams.items()
                                if k not in model.unused_arguments}}


def time_summary(result: dict[str, Any]) -> dict[str, float]:
    """A result's seconds as a W&B run's summary gives them, beside its ``eval/`` metrics: the
    training, the whole evaluation and each of its steps (``time/<step>_seconds``).

    >>> time_summary({"train_seconds": 9.5, "eval_seconds": 3.0, "protocol_seconds": {"knn": 2}})
    {'time/train_seconds': 9.5, 'time/eval_seconds': 3.0, 'time/knn_seconds': 2}
    """
    return {"time/train_seconds": result["train_seconds"],
            "time/eval_seconds": result["eval_seconds"],
            **{f"time/{step}_seconds": seconds
               for step, seconds in result.get("protocol_seconds", {}).items()}}
