"""What a search records of itself, in files it never unpickles, so that a search killed at any
moment can be rebuilt from them.

In a search's state folder (``<storage>/<run>/``):

- ``search.json``: the run, the seed, the space and the ASHA budget, every configuration
  the search tries, in order (:func:`sample_configs`: a function of the space and the seed), and
  the search's id (:func:`new_search_id`), which a resumed search keeps.
- ``trials/<index>/record.json``: one trial's configuration, the metric after each of its
  validation epochs, how many epochs its checkpoint holds, its error if it failed, and where each
  of its attempts started.
- ``trials/<index>/last.ckpt``: Lightning's checkpoint at the end of the trial's last epoch,
  read back only through ``torch.load(weights_only=True)``
  (:func:`benchmarks.infra.tensor_files.load_tensors`).
- ``ray/``: Ray Tune's own files, never read back (they hold pickles). A resumed search is a new
  Tune run whose trials first replay the epochs their checkpoints hold, so ASHA decides on the
  same results.

Each epoch a trial writes its record's new row, then its checkpoint, then the number of epochs
the checkpoint holds: a kill at any point loses at most the epoch in flight.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.infra.atomic import keep_aside, write_atomic
from benchmarks.infra.errors import ConfigError
from benchmarks.infra.paths import refuse_link
from benchmarks.infra.read_back import load_json

#: The manifest of a search in its state folder.
MANIFEST = "search.json"
#: One trial's record and checkpoint in ``trials/<index>/``.
RECORD, CHECKPOINT = "record.json", "last.ckpt"
#: The manifest's settings a resumed search must share with the search it continues.
SHARED = ("run", "seed", "space", "num_samples", "max_epochs", "grace_period",
          "reduction_factor", "metric", "mode")


def draw(kind: str, args: list[Any], rng) -> Any:
    """One value of a suite's ``kind`` distribution over ``args`` (not ``grid``), from ``rng``
    (a NumPy Generator); a choice keeps the suite's own value and type."""
    if kind == "choice":
        return args[int(rng.integers(len(args)))]
    if kind == "randint":
        return int(rng.integers(args[0], args[1]))
    low, high = args
    value = (math.exp(rng.uniform(math.log(low), math.log(high))) if kind == "loguniform"
             else float(rng.uniform(low, high)))
    return min(max(value, low), high)  # exp(log(x)) may round past a bound


def sample_configs(space: dict[str, Any], num_samples: int, seed: int) -> list[dict[str, Any]]:
    """Every configuration of a search in trial order: ``num_samples`` draws, each over every
    combination of the ``grid`` keys; a function of the space and seed alone.

    >>> space = {"model.lr": {"loguniform": [1e-4, 1e-2]}, "model.tau": {"grid": [0.1, 0.5]}}
    >>> configs = sample_configs(space, 2, seed=0)
    >>> [c["model.tau"] for c in configs], configs == sample_configs(space, 2, seed=0)
    ([0.1, 0.5, 0.1, 0.5], True)
    >>> all(1e-4 <= c["model.lr"] <= 1e-2 for c in configs)
    True
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    grid = {key: dist["grid"] for key, dist in space.items() if "grid" in dist}
    configs = []
    for _ in range(num_samples):
        for combination in itertools.product(*grid.values()):
            chosen = dict(zip(grid, combination, strict=True))
            configs.append({key: chosen[key] if key in chosen else draw(*next(iter(
                dist.items())), rng) for key, dist in space.items()})
    return configs


def as_json(value: Any) -> Any:
    """``value`` as a JSON file gives it back (tuples become lists; inf and nan stay)."""
    return json.loads(json.dumps(value, default=str))


def new_search_id() -> str:
    """The id of a search started now: the time (UTC) and a random part, so that two searches
    started in one second differ; it names the search's W&B group.

    >>> import re
    >>> re.fullmatch(r"[0-9]{8}T[0-9]{6}-[0-9a-f]{4}", new_search_id()) is not None
    True
    """
    import uuid
    from datetime import datetime, timezone

    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:4]}"


def write_manifest(state: Path, manifest: dict[str, Any]) -> None:
    state.mkdir(parents=True, exist_ok=True)
    write_atomic(state / MANIFEST, json.dumps(manifest, indent=1, default=str))


def read_manifest(state: Path) -> dict[str, Any] | None:
    """The manifest of the search in ``state``, or None where there is none; one that is not a
    manifest is a ConfigError naming it."""
    path = state / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = load_json(path)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path} is not a search's manifest ({type(err).__name__}); remove "
                          f"{state} to start the search anew") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("configs"), list):
        raise ConfigError(f"{path} is not a search's manifest (no list of configurations); "
                          f"remove {state} to start the search anew")
    return manifest


def check_same_search(state: Path, saved: dict[str, Any], now: dict[str, Any]) -> None:
    """A resume continues the search ``saved`` only with its settings (``now`` as the command
    gives them); else a ConfigError naming the first that differs."""
    for key in (*SHARED, "configs"):
        if as_json(saved.get(key)) != as_json(now.get(key)):
            said = ("its configurations" if key == "configs"
                    else f"{key} {saved.get(key)!r}, not {now.get(key)!r}")
            raise ConfigError(f"the search in {state} was started with {said}: resume it with "
                              "the same settings, or drop --resume to start a new search")


def record_problem(saved: dict[str, Any]) -> str | None:
    """What in a trial's ``record.json`` (as JSON read it) is not what a trial writes, else None:
    ``checkpointed`` a count, ``rows`` a list of mappings with an ``epoch``, the error a text.

    >>> record_problem({"rows": [], "checkpointed": float("inf")})
    'checkpointed = inf is not a count of epochs (an integer of at least 0)'
    """
    held = saved.get("checkpointed")
    if isinstance(held, bool) or not isinstance(held, int) or held < 0:
        return (f"checkpointed = {str(held)[:40]} is not a count of epochs (an integer of at "
                "least 0)")
    rows = saved.get("rows")
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "epoch" in r for r in rows):
        return "rows is not a list of mappings with an epoch each"
    for key in ("error", "error_session"):
        if not isinstance(saved.get(key), (str, type(None))):
            return f"{key} is a {type(saved[key]).__name__}, not a text"
    if not isinstance(saved.get("attempts", []), list):
        return "attempts is not a list"
    return None


@dataclass
class TrialRecord:
    """One trial's record (``trials/<index>/record.json``); rows hold ``epoch`` (counted from
    1) and the reported values."""

    folder: Path
    index: int
    config: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    checkpointed: int = 0  # epochs the checkpoint holds
    error: str | None = None
    error_session: str | None = None  # the start of the search it failed in
    attempts: list[dict[str, Any]] = field(default_factory=list)  # {session, from_epoch}

    @property
    def checkpoint(self) -> Path:
        return self.folder / CHECKPOINT

    @classmethod
    def open(cls, folder: Path, index: int, config: dict[str, Any]) -> TrialRecord:
        """The trial's record in ``folder``, or a new one where there is none or the file is not
        this trial's record (a record for another configuration, an edited file). A record whose
        fields are not what a trial writes (``checkpointed: Infinity``, a string) is set aside
        (``record.json.set-aside``, its checkpoint too: without the rows it cannot be replayed)
        with one line naming the file and the field, and the trial starts again."""
        fresh = cls(Path(folder), index, as_json(config))
        try:
            saved = load_json(fresh.folder / RECORD)
        except (OSError, ValueError):
            return fresh
        if not isinstance(saved, dict):
            return fresh
        if (problem := record_problem(saved)) is not None:
            fresh.set_aside(problem)
            return fresh
        record = cls(fresh.folder, index, fresh.config,
                     rows=[dict(r) for r in saved["rows"] if isinstance(r["epoch"], int)],
                     checkpointed=saved["checkpointed"], error=saved.get("error"),
                     error_session=saved.get("error_session"),
                     attempts=list(saved.get("attempts", [])))
        return record if saved.get("config") == fresh.config else fresh

    def set_aside(self, problem: str) -> None:
        """Moves the record (and its checkpoint) aside as ``<name>.set-aside``, in one line."""
        for path in (self.folder / RECORD, self.checkpoint):
            if path.exists():
                os.replace(path, path.with_name(path.name + ".set-aside"))
        print(f"clusterbench: {self.folder / RECORD}: {problem}; it is kept as "
              f"{RECORD}.set-aside and the trial starts again", file=sys.stderr, flush=True)

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        fields = asdict(self)
        fields.pop("folder")
        write_atomic(self.folder / RECORD, json.dumps(fields, indent=1, default=str))

    def rewind(self) -> None:
        """Drops the rows past the checkpoint's epochs; an unreadable checkpoint is moved aside
        (``last.ckpt.unreadable``) and the trial starts again."""
        from benchmarks.infra.tensor_files import BadFile
        from benchmarks.run.checkpoint import resumable_checkpoint

        held = 0
        if self.checkpoint.is_file():
            try:
                held = resumable_checkpoint(self.checkpoint, "trial checkpoint")["epoch"] + 1
            except BadFile as err:
                keep_aside(self.checkpoint, self.checkpoint.with_name(CHECKPOINT + ".unreadable"),
                           err, "the trial starts again")
        self.checkpointed = held
        self.rows = [r for r in self.rows if r["epoch"] <= held]


#: The folders of a search that Ray Tune and W&B fill themselves (W&B links its latest run
#: there; ``ray/`` is removed before each start): they may not be links, their contents are
#: theirs.
OWN_FOLDERS = ("ray", "wandb")


def refuse_links(storage: Path, root: Path | None = None) -> None:
    """A ConfigError naming the first symbolic link below a search's ``storage`` (outside
    :data:`OWN_FOLDERS`' contents), before anything is written there: a link at the state folder
    or a trial's folder would carry checkpoints and records outside it. ``storage`` itself may
    be a link, as ``--results`` may; ``root`` is the folder the message names (the results
    folder holding ``storage``, else ``storage``)."""
    for directory, folders, files in os.walk(storage):
        for name in sorted([*folders, *files]):
            refuse_link(Path(directory) / name, root or storage)
        folders[:] = [f for f in folders if f not in OWN_FOLDERS]


#: The file in a trial's folder that holds the lines the trial said to the user.
SAID = "said"


def trial_folder(state: Path, index: int) -> Path:
    return state / "trials" / f"{index:04d}"


def read_records(state: Path, configs: list[dict[str, Any]]) -> list[TrialRecord]:
    """The records of the search in ``state``, one per configuration, in order."""
    return [TrialRecord.open(trial_folder(state, i), i, c) for i, c in enumerate(configs)]
