"""Suite files: the registry of ``benchmarks/*.yaml``, and the reading of one file as YAML.

Read with YAML 1.2's floats and bounded in size before any of it is checked
(:mod:`benchmarks.suites.config` checks a training suite's settings,
:mod:`benchmarks.suites.experiment` an experiment suite's), so that what a suite means never
depends on how YAML 1.1 spells a number and no file can expand beyond memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.infra.errors import ConfigError, resolve_name
from benchmarks.infra.yaml_files import read_yaml

SUITE_DIR = Path(__file__).resolve().parent.parent  # the suite files are benchmarks/*.yaml
#: A suite's budgets: its settings as written, and the override sections ``fast`` (a tiny budget
#: that checks the plumbing) and ``ci`` (numbers that mean something in minutes on a CPU).
BUDGETS = ("full", "fast", "ci")


def suites() -> dict[str, Path]:
    """The suite registry: every YAML file in ``benchmarks/``, by file name (without .yaml)."""
    return {p.stem: p for p in sorted(SUITE_DIR.glob("*.yaml"))}


def suite_path(name_or_path: str) -> Path:
    """A registered suite's file, or the file ``name_or_path`` names, as an absolute path: Ray
    runs search trials and placed runs in other working directories, where a relative path
    names nothing."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ConfigError(f"suite file {str(path)!r} does not exist")
        return path.resolve()
    return resolve_name(suites(), name_or_path.replace("-", "_"), "suite")


#: The most values a suite file may expand to, its anchors' aliases counted each time they are
#: used: a real suite holds a few thousand; 1 KB of nested anchors (a "billion laughs") expands
#: to billions, which the first deep copy of a run turns into a MemoryError after other runs
#: have trained.
MAX_SUITE_VALUES = 1_000_000


def read_suite_file(name_or_path: str) -> tuple[Path, dict[str, Any]]:
    """The suite file's path and settings, read by :func:`benchmarks.infra.yaml_files.read_yaml`
    with anchors allowed (a suite's shared settings), then bounded in expansion
    (:func:`check_expansion`); YAML 1.2's floats (``1e-3`` is a float).

    >>> from benchmarks.infra.yaml_files import load_yaml
    >>> load_yaml("base: &b {lr: 1e-3, name: 1e}\\nrun: *b", "suite.yaml", anchors=True)
    {'base': {'lr': 0.001, 'name': '1e'}, 'run': {'lr': 0.001, 'name': '1e'}}

    Raises:
        ConfigError: one line naming the file, for a file that is not a suite's YAML.
    """
    path = suite_path(name_or_path)
    raw = read_yaml(path, anchors=True)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must hold a mapping of suite settings")
    check_expansion(raw, str(path))
    return path, raw


def check_expansion(value: Any, where: str, limit: int = MAX_SUITE_VALUES) -> None:
    """``value`` (as YAML loaded it, aliases shared) expands to at most ``limit`` values, counted
    without expanding anything: each shared part's size is computed once.

    >>> laughs = ["lol"] * 10
    >>> for _ in range(8):
    ...     laughs = [laughs] * 10
    >>> check_expansion(laughs, "suite.yaml")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    benchmarks.infra.errors.ConfigError: suite.yaml expands to more than 1000000 values ...

    Raises:
        ConfigError: naming ``where``.
    """
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        if id(node) not in sizes:
            sizes[id(node)] = 0  # a cycle (an anchor inside itself) counts once
            children = node.values() if isinstance(node, dict) else node
            sizes[id(node)] = 1 + sum(min(size(child), limit + 1) for child in children)
        return sizes[id(node)]

    if size(value) > limit:
        raise ConfigError(f"{where} expands to more than {limit} values (YAML anchors used inside "
                          "anchors?); a suite holds a few thousand")


def suite_kind(name_or_path: str) -> str:
    """``"training"`` or ``"experiment"`` (the ``kind`` key)."""
    path, raw = read_suite_file(name_or_path)
    kind = raw.get("kind", "training")
    if kind not in ("training", "experiment"):
        raise ConfigError(f"{path}: unknown kind {kind!r}; accepted: experiment, training")
    return kind
