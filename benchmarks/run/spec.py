"""What one run is: its specification, the suite settings it carries, and the key checks.

The bottom of the run layer: the suite files (:mod:`benchmarks.config`), the search
(:mod:`tune`) and the run itself (:mod:`benchmarks.run.one`) all speak of a run through
:class:`RunSpec`, and nothing here reads a suite file.
"""

from __future__ import annotations

import difflib
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Set by the runner itself; a suite may not override them.
RUNNER_TRAINER_KEYS = {"logger", "callbacks", "default_root_dir", "enable_progress_bar"}
RUNNER_DATA_KEYS = {"seed"}
RUNNER_MODEL_KEYS = {"num_classes", "input_shape"}

class ConfigError(ValueError):
    """A bad name, key or value in a suite or on the command line (the CLI exits 2)."""


class Preempted(KeyboardInterrupt):
    """The process got SIGTERM while training (a cluster scheduler preempting it): the run's
    checkpoint is saved and the same command resumes it. A KeyboardInterrupt, so that a suite
    stops rather than starting its next run; the CLI exits 143, as a shell reports SIGTERM."""


def suggest(name: str, accepted: set[str] | list[str]) -> str:
    close = difflib.get_close_matches(str(name), list(accepted), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{hint}; accepted: {', '.join(sorted(accepted))}"


#: One path component of a suite or run name: a letter or digit, then letters, digits and
#: ``. _ - + @ =`` (``lr1.0e-2``, ``simclr+tuned``, ``simclr@evaluated``).
NAME_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+@=-]*")
#: What a run's folder name ends with while it is being written or replaced (never a result).
STAGING_SUFFIXES = (".attempt", ".replaced")


def check_name(name: Any, what: str, nested: bool = False) -> str:
    """A suite or run name that is safe as (part of) a path under the results folder: no
    ``..``, no absolute path, no separator but ``/`` between the parts of a ``nested`` run name
    (``cifar10/sum/200ep``), no part ending like a staging folder.

    >>> check_name("cifar10/sum/200ep", "run", nested=True)
    'cifar10/sum/200ep'
    >>> check_name("../../x", "suite name")
    Traceback (most recent call last):
    ...
    benchmarks.run.spec.ConfigError: suite name '../../x' is not a safe name: ...
    """
    parts = str(name).split("/") if nested else [str(name)]
    bad = (not isinstance(name, str) or not all(NAME_PART.fullmatch(p) for p in parts)
           or any(p.endswith(STAGING_SUFFIXES) for p in parts))
    if bad:
        raise ConfigError(
            f"{what} {name!r} is not a safe name: use letters, digits and . _ - + @ =, starting "
            f"with a letter or digit{', with / between parts' if nested else ''} (no '..', no "
            f"absolute path, no part ending in .attempt or .replaced)")
    return name


def inside(root: Path, path: Path) -> Path:
    """``path``, after checking that it lies under ``root`` (a results folder): nothing a suite
    says is written anywhere else."""
    resolved, top = Path(path).resolve(), Path(root).resolve()
    if resolved != top and top not in resolved.parents:
        raise ConfigError(f"{path} is outside the results folder {root}: refusing to write there")
    return Path(path)


def check_keys(mapping: Any, accepted: set[str], where: str) -> None:
    if not isinstance(mapping, dict):
        raise ConfigError(f"{where} must be a mapping, got {mapping!r}")
    for key in mapping:
        if key not in accepted:
            raise ConfigError(f"unknown key {key!r} in {where}{suggest(key, accepted)}")


def init_parameters(cls: type, exclude: set[str]) -> set[str]:
    """The keyword arguments ``cls(...)`` accepts (to validate suite keys against).

    A method whose ``__init__`` takes ``**kwargs`` passes them to its base class (as every method
    does to ``RepresentationModule``), so the base's arguments are accepted too."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass is object:
            continue
        params = inspect.signature(klass.__init__).parameters
        names |= {n for n, p in params.items() if n != "self" and n not in exclude
                  and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
    return names


@dataclass
class RunSpec:
    """One row of a suite: a method, its arguments, its data and its trainer settings."""

    name: str
    method: str
    model: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    trainer: dict[str, Any] = field(default_factory=dict)
    #: The paper's reported numbers for this row, in percent: ``{"source": "Table 1",
    #: "linear_probe_top1": [88.11, 0.09]}`` (a number or ``[mean, std]`` per metric).
    paper: dict[str, Any] = field(default_factory=dict)

    #: This run's own search space (``search:`` in the run), replacing the suite's ``space``.
    search: dict[str, Any] | None = None
    #: Set on the retrained best configuration of a search (``clusterbench bench``): how many
    #: configurations were searched, with which budget, and the best one's search metric.
    searched: dict[str, Any] | None = None

    @property
    def dataset(self) -> str:
        return self.data["name"]

    @property
    def slug(self) -> str:
        """The run's name as one path component (``cifar10/sum/200ep`` -> ``cifar10__sum__200ep``):
        its folder under ``runs/`` and ``search/``, and its Ray Tune experiment name."""
        return self.name.replace("/", "__")

    def data_kwargs(self) -> dict[str, Any]:
        return {k: v for k, v in self.data.items() if k != "name"}


@dataclass(frozen=True)
class SuiteSettings:
    """What a run takes from its suite: where it is written and how it is evaluated and shown.

    ``evaluation`` holds the protocols and their settings (:mod:`benchmarks.evaluate`);
    ``headline`` and ``plots`` are recorded in every result for the leaderboard."""

    name: str
    path: str
    fast: bool = False
    headline: str = "linear_probe_top1"
    evaluation: dict[str, Any] = field(default_factory=dict)
    plots: list[dict[str, Any]] = field(default_factory=list)
