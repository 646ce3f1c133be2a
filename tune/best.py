"""A searched run's best configuration as the ``<run>+tuned`` run that ``clusterbench bench``
retrains: the finished search reused, an interrupted one resumed, or a new one started, in
``<suite results>/search/<run>``."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console

from benchmarks.infra.atomic import write_atomic
from benchmarks.infra.errors import ConfigError
from benchmarks.infra.paths import inside
from benchmarks.infra.yaml_files import dump_yaml, read_yaml
from benchmarks.run.spec import RunSpec, SuiteSettings
from tune.outputs import read_best_config
from tune.records import refuse_links
from tune.search import MISSING, can_resume, run_search, space_of, values_in_space
from tune.spec import SearchSpec
from tune.trial import apply_config

console = Console(stderr=True)


def best_run(settings: SuiteSettings, search: SearchSpec, run: RunSpec, suite_dir: Path,
             address: str | None = None, wandb: Any = False, fast_gpu: bool = True,
             compile: bool = True) -> RunSpec:
    """ASHA over ``run``'s search space in ``<suite_dir>/search/<run>``; returns the best
    configuration as the run ``<run>+tuned``, which remembers the search.

    A finished search with the same signature is reused, also one under another run's folder
    (trials train the search's ``max_epochs``, so runs differing only in epochs share it); an
    interrupted one is resumed. The tuned run keeps the paper numbers: the papers report tuned
    configurations."""
    storage = inside(suite_dir, suite_dir / "search" / run.slug)  # no link: it is renamed aside
    refuse_links(suite_dir / "search", suite_dir)  # nor below: this search's, or a twin's read
    signature = search_signature(run, search)
    same = same_search_recorded(storage, run, search)
    best = read_best_config(storage) if same else None
    twin = None if best is not None else finished_twin(suite_dir / "search", storage, signature)
    if best is not None:
        console.print(f"{run.name}: reusing the finished search in {storage}")
    elif twin is not None:
        storage, best = twin, read_best_config(twin)
        console.print(f"{run.name}: reusing the finished search of the same case in {storage} "
                      f"(its trials train at most {search.max_epochs} epochs, whatever the "
                      "run's own)")
    else:
        best = search_afresh_or_resume(settings, search, run, storage, signature, same,
                                       address, wandb, fast_gpu=fast_gpu, compile=compile)
    return tuned_run(run, best, storage, search)


def same_search_recorded(storage: Path, run: RunSpec, search: SearchSpec) -> bool:
    """Whether ``storage/search.yaml`` records this search's signature (or its legacy form); one
    that is not bounded YAML records none, said in one line (the search there is then kept
    aside, ``<storage>.replaced-<time>``, as any other search is)."""
    recorded = recorded_signature(storage / "search.yaml")
    return recorded is not None and recorded in (
        search_signature(run, search), search_signature(run, search, legacy=True))


def recorded_signature(path: Path) -> Any:
    """The signature a ``search.yaml`` records, or None where there is none or it cannot be read
    (:func:`read_yaml`), said in one line naming it."""
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return read_yaml(path)
    except ConfigError as err:
        print(f"clusterbench: {err}; the search in {path.parent} is not reused", file=sys.stderr,
              flush=True)
        return None


def search_afresh_or_resume(settings: SuiteSettings, search: SearchSpec, run: RunSpec,
                            storage: Path, signature: dict[str, Any], same: bool,
                            address: str | None, wandb: Any, fast_gpu: bool = True,
                            compile: bool = True) -> dict[str, Any]:
    """Searches ``run``'s space in ``storage``, resuming a ``same`` search where one can be, else
    anew with any other search kept aside; returns the best configuration."""
    resume = same and can_resume(storage / run.slug)
    if not resume and storage.exists():  # another space or budget: keep the old search aside
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        storage.rename(storage.with_name(f"{storage.name}.replaced-{stamp}"))
    storage.mkdir(parents=True, exist_ok=True)
    write_atomic(storage / "search.yaml", dump_yaml(signature))
    console.rule(f"[bold]{settings.name}[/]: searching {run.name} ({search.num_samples} "
                 f"configurations, ASHA, at most {search.max_epochs} epochs)"
                 + (" - resuming" if resume else ""))
    run_search(settings, search, run, storage=str(storage), resume=resume, address=address,
               wandb=wandb, fast_gpu=fast_gpu, compile=compile)
    return read_best_config(storage)


def tuned_run(run: RunSpec, best: dict[str, Any], storage: Path, search: SearchSpec) -> RunSpec:
    """``run`` with the ``best`` searched values that differ from its own, named
    ``<run>+tuned``."""
    config = {key: value for key, value in searched_values(
        best, run, search, storage / "best_config.yaml").items()
        if getattr(run, key.partition(".")[0]).get(key.partition(".")[2], object()) != value}
    tuned = apply_config(run, config)
    tuned.name = f"{run.name}+tuned"  # keeps run.paper: the papers tuned every case
    tuned.searched = {
        "configurations_searched": best["configurations_searched"],
        "trials_failed": best["trials_failed"], "max_epochs": search.max_epochs,
        "metric": best["metric"], "best_value": best["best_value"],
        # the search's own time: its last start's, of ``starts`` (older searches lack it)
        **{key: best["budget"][key] for key in ("wall_seconds", "starts")
           if key in (best.get("budget") or {})},
        "values": config, "directory": str(storage),
    }
    return tuned


def searched_values(best: dict[str, Any], run: RunSpec, search: SearchSpec | None,
                    path: Path) -> dict[str, Any]:
    """The searched keys' values in ``best``, each checked against the space; nothing else of
    the file is trusted, since anyone may have edited a results folder.

    Raises:
        ConfigError: naming the file, the key and the space, for a value the space cannot give.
    """
    values = {}
    for key, value, problem in values_in_space(space_of(run, search), best):
        if problem == MISSING:
            raise ConfigError(f"{path}: {key} is missing; it is searched (delete the file to "
                              "search again)")
        if problem:
            raise ConfigError(f"{path}: {key} = {value!r} {problem}; delete the file to search "
                              "again")
        values[key] = value
    return values


def search_signature(run: RunSpec, search: SearchSpec, legacy: bool = False) -> dict[str, Any]:
    """What decides a search's trials (its ``search.yaml``): the run's settings less its name,
    paper numbers and ``trainer.max_epochs``, plus the space and budget. ``legacy``: the whole
    run, so that searches recorded that way are still reused."""
    recorded = asdict(run)
    if not legacy:
        recorded = {k: v for k, v in recorded.items() if k not in ("name", "paper")}
        recorded["trainer"] = {k: v for k, v in run.trainer.items() if k != "max_epochs"}
    signature = {"run": recorded, "space": run.search or search.space,
                 "budget": {k: getattr(search, k) for k in (
                     "num_samples", "max_epochs", "grace_period", "reduction_factor", "metric",
                     "mode", "workers_per_trial")}}
    return json.loads(json.dumps(signature, default=str))


def finished_twin(searches: Path, storage: Path, signature: dict[str, Any]) -> Path | None:
    """Another run's finished search under ``searches`` with the same ``signature``; one whose
    files cannot be read is passed over, said in one line."""
    for record in sorted(searches.glob("*/search.yaml")) if searches.is_dir() else []:
        if record.parent == storage or recorded_signature(record) != signature:
            continue
        try:
            if read_best_config(record.parent) is not None:
                return record.parent
        except ConfigError as err:
            print(f"clusterbench: {err}", file=sys.stderr, flush=True)
    return None
