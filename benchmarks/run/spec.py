"""What one run is: its specification, the suite settings it carries, and the key checks.

The bottom of the run layer: the suite files (:mod:`benchmarks.suites.config`), the search
(:mod:`tune`) and the run itself (:mod:`benchmarks.run.one`) all speak of a run through
:class:`RunSpec`, and nothing here reads a suite file. The errors it raises live in
:mod:`benchmarks.infra.errors`, the name and path checks in :mod:`benchmarks.infra.paths`.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from benchmarks.infra.errors import ConfigError, suggest
from benchmarks.infra.paths import NAME_PART

#: Set by the runner itself; a suite may not override them.
RUNNER_TRAINER_KEYS = {"logger", "callbacks", "default_root_dir", "enable_progress_bar"}
RUNNER_DATA_KEYS = {"seed"}
RUNNER_MODEL_KEYS = {"num_classes", "input_shape"}


def check_keys(mapping: Any, accepted: set[str], where: str) -> None:
    if not isinstance(mapping, dict):
        raise ConfigError(f"{where} must be a mapping, got {mapping!r}")
    for key in mapping:
        if key not in accepted:
            raise ConfigError(f"unknown key {key!r} in {where}{suggest(key, accepted)}")


def init_parameters(cls: type, exclude: set[str]) -> set[str]:
    """The keyword arguments ``cls(...)`` accepts (to validate suite keys against)."""
    return set(init_types(cls, frozenset(exclude)))


@functools.cache
def init_types(cls: type, exclude: frozenset[str]) -> dict[str, Any]:
    """The keyword arguments ``cls(...)`` accepts and their type hints (``Any`` where there is
    none, or where the hints cannot be resolved).

    A method whose ``__init__`` takes ``**kwargs`` passes them to its base class (as every method
    does to ``RepresentationModule``), so the base's arguments are accepted too; a subclass's own
    argument of the same name as one of its base's is the one it means."""
    types: dict[str, Any] = {}
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass is object:
            continue
        params = inspect.signature(klass.__init__).parameters
        try:
            hints = typing.get_type_hints(klass.__init__)
        except Exception:  # noqa: BLE001 - a hint naming what only a type checker imports
            hints = {}
        for name, param in params.items():
            if (name != "self" and name not in exclude
                    and param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD)):
                types.setdefault(name, hints.get(name, Any))
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
    return types


def argument_default(cls: type, name: str, missing: Any) -> Any:
    """The default of ``cls``'s keyword argument ``name``, looked up the classes its
    ``**kwargs`` pass to (as :func:`init_types` does), else ``missing``."""
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass is object:
            continue
        params = inspect.signature(klass.__init__).parameters
        if name in params and params[name].default is not inspect.Parameter.empty:
            return params[name].default
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
    return missing


def type_name(hint: Any) -> str:
    """A type hint as a suite author reads it: ``int | None``, ``float``, ``'16-mixed' | 32``.

    >>> type_name(typing.Optional[typing.Literal["max", "min"]])
    "'max' | 'min' | None"
    """
    if hint is type(None):
        return "None"
    if typing.get_origin(hint) is typing.Literal:
        return " | ".join(repr(v) for v in typing.get_args(hint))
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " | ".join(type_name(h) for h in typing.get_args(hint))
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    return str(hint).replace("typing.", "").replace("collections.abc.", "")


@functools.cache
def _type_parser(hint: Any):
    """A jsonargparse parser of one value of type ``hint`` (None where it cannot read that type:
    such a value is left to the constructor)."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    try:
        parser.add_argument("--value", type=hint)
    except Exception:  # noqa: BLE001 - a type jsonargparse does not support
        return None
    return parser


def check_arguments(values: Any, cls: type, exclude: set[str], where: str,
                    extra: set[str] = frozenset()) -> None:
    """The keys of ``values`` are keyword arguments of ``cls`` (or in ``extra``), and each value
    is of the argument's annotated type, checked by jsonargparse as ``clusterbench fit`` checks
    its command line: ``max_epochs: two`` or ``lr: fast`` is refused here, by name, rather than
    by a traceback once the run has started, and so is text jsonargparse would read as a number
    or a boolean (:func:`read_from_text`). Ranges are the constructors' to check.

    Raises:
        ConfigError: ``<where>.<key> must be <type>, got <value>``.
    """
    hints = init_types(cls, frozenset(exclude))
    check_keys(values, set(hints) | set(extra), where)
    for key, value in values.items():
        hint = hints.get(key, Any)
        if hint is Any:
            continue
        try:
            parser = _type_parser(hint)
        except TypeError:  # an unhashable hint: not cached
            parser = _type_parser.__wrapped__(hint)
        if parser is None:
            continue
        try:
            parsed = parser.parse_object({"value": value}).value
        except Exception as err:  # noqa: BLE001 - jsonargparse's ArgumentError, said in one line
            raise ConfigError(f"{where}.{key} must be {type_name(hint)}, got {value!r}") from err
        if read_from_text(value, parsed, hint):
            raise ConfigError(f"{where}.{key} must be {type_name(hint)}, got the text {value!r} "
                              "(YAML 1.2 reads a quoted value, 1_000, yes/no and 1:30 as text)")


def read_from_text(value: Any, parsed: Any, hint: Any) -> bool:
    """Whether jsonargparse made a number or a boolean of the text ``value`` that ``hint`` does
    not name as it is: it reads text as YAML 1.1 does (``'1_000'`` as 1000, ``'no'`` as false),
    while the constructor would be given the text itself (and ``'no'`` is true).

    >>> read_from_text("1_000", 1000, int), read_from_text("64", 64, typing.Literal[64, "64"])
    (True, False)
    """
    if not isinstance(value, str) or not isinstance(parsed, (bool, int, float)):
        return False
    taken = text_values(hint)
    return taken is not str and value not in taken


def text_values(hint: Any) -> set[Any] | type[str]:
    """The text ``hint`` takes as it is: ``str`` itself where it names ``str``, else every value
    a ``Literal`` inside it names (``Optional``/``Union`` looked into)."""
    if hint is str:
        return str
    if typing.get_origin(hint) is typing.Literal:
        return set(typing.get_args(hint))
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        parts = [text_values(h) for h in typing.get_args(hint)]
        return str if str in parts else set().union(*parts)
    return set()


#: The paper key of per-layer silhouettes, ``{layer: silhouette}`` (layer 0: the first block's
#: input; TransFusion's Table 2), shown beside the per-layer fusion table's own.
PER_LAYER_PAPER_KEY = "per_layer_silhouette"
#: The paper key saying the paper tuned this row's hyperparameters (``tuned: true``; Kernel-InfoNCE
#: searched every case of its Table 1): a row no search of ours chose is then marked "(untuned)"
#: beside the paper's number. Papers that report fixed settings leave it out.
PAPER_TUNED_KEY = "tuned"


@dataclass
class RunSpec:
    """One row of a suite: a method, its arguments, its data and its trainer settings."""

    name: str
    method: str
    model: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    trainer: dict[str, Any] = field(default_factory=dict)
    #: The paper's reported numbers for this row, in percent: ``{"source": "Table 1",
    #: "linear_probe_top1": [88.11, 0.09]}`` (a number or ``[mean, std]`` per metric), and
    #: per-layer silhouettes as they are under :data:`PER_LAYER_PAPER_KEY`, and
    #: ``tuned: true`` where the paper searched this row's hyperparameters
    #: (:data:`PAPER_TUNED_KEY`).
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

    ``evaluation`` holds the protocols and their settings (:mod:`benchmarks.protocols.evaluate`);
    ``headline``, ``plots`` and ``ranking`` are recorded in every result for the leaderboard."""

    name: str
    path: str
    fast: bool = False
    headline: str = "linear_probe_top1"
    evaluation: dict[str, Any] = field(default_factory=dict)
    plots: list[dict[str, Any]] = field(default_factory=list)
    #: Which differences between rows the leaderboard tests against the spread over seeds
    #: (:mod:`benchmarks.suites.rankings`); None when the suite has no ``ranking`` section.
    ranking: dict[str, Any] | None = None
    #: ``clusterbench bench --set KEY=VALUE`` settings, recorded in every result's configuration.
    overrides: dict[str, Any] = field(default_factory=dict)
    #: ``full``, ``fast`` (``--fast``) or ``ci`` (``--budget ci``): the suite's overrides used.
    budget: str = "full"

    @property
    def label(self) -> str:
        """What tells this suite as run from the same suite run otherwise: its name, then the
        budget unless full, then the ``--set`` settings (:func:`overrides_tag`); the name of its
        results folder and the first part of its W&B names.

        >>> SuiteSettings("smoke", "smoke.yaml", budget="fast",
        ...               overrides={"data.val_fraction": 0.2}).label
        'smoke-fast+data.val_fraction=0.2'
        """
        budget = "" if self.budget == "full" else f"-{self.budget}"
        return self.name + budget + overrides_tag(self.overrides)


def overrides_tag(overrides: dict[str, Any]) -> str:
    """The ``--set`` settings as a name's suffix: readable when they make a safe name part of
    at most 80 characters, else a hash of them.

    >>> overrides_tag({"trainer.max_epochs": 3, "data.batch_size": 512})
    '+data.batch_size=512+trainer.max_epochs=3'
    >>> overrides_tag({"evaluation.knn.k": [10, 20]})[:5]  # "[" is no part of a safe name
    '+set-'
    >>> overrides_tag({})
    ''
    """
    if not overrides:
        return ""
    tag = "+".join(f"{key}={value if isinstance(value, str) else json.dumps(value)}"
                   for key, value in sorted(overrides.items()))
    if len(tag) <= 80 and NAME_PART.fullmatch(tag):
        return "+" + tag
    text = json.dumps(overrides, sort_keys=True, default=str)
    return "+set-" + hashlib.sha256(text.encode()).hexdigest()[:10]
