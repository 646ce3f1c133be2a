"""The one YAML reader of everything clusterbench reads: suite files, ``--set`` values, ``fit -c``
configs, and what a results folder holds (``best_config.yaml``, ``search.yaml``, a run's
``config.yaml``).

A results folder can be copied from anyone, so what it holds is read as bounded data: a regular
file of at most :data:`MAX_YAML_BYTES`, UTF-8, nested at most :data:`MAX_YAML_DEPTH` deep, and
without anchors, which only a hand-written suite file needs (the files clusterbench writes hold
none; a kilobyte of anchors inside anchors expands to gigabytes). An anchor that refers to itself
is refused everywhere: no setting is a cycle. Numbers are read as YAML 1.2 reads them (``1e-3`` is
a float), so that what a file means never depends on how YAML 1.1 spells a number.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent

from benchmarks.infra.errors import ConfigError

#: The largest YAML file read: the largest suite file is 17 KB, a run's config 3 KB.
MAX_YAML_BYTES = 1 << 20
#: The deepest nesting read: a suite nests 6 levels; 5,000 levels overflowed the stack.
MAX_YAML_DEPTH = 64


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's floats, a bound on nesting, no anchor referring to
    itself, and no anchor at all unless ``allow_anchors`` is set (:class:`AnchoredLoader`).

    >>> yaml.load("lr: 1e-3\\nwd: -2E+1\\nname: 1e", Loader=BoundedLoader)
    {'lr': 0.001, 'wd': -20.0, 'name': '1e'}
    """

    #: Whether anchors and aliases are read (a hand-written suite file's shared settings).
    allow_anchors: bool = False

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.depth = 0
        self.open_anchors: set[str] = set()

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        line = event.start_mark.line + 1
        if isinstance(event, AliasEvent) and event.anchor in self.open_anchors:
            raise ConfigError(f"line {line}: alias *{event.anchor} refers to the value it is "
                              "inside (a cycle); accepted: a value that holds no copy of itself")
        if (isinstance(event, AliasEvent) or event.anchor is not None) and not self.allow_anchors:
            raise ConfigError(f"line {line}: YAML anchor or alias "
                              f"{'*' if isinstance(event, AliasEvent) else '&'}{event.anchor}; "
                              "accepted: plain values (clusterbench writes no anchors)")
        if self.depth >= MAX_YAML_DEPTH:
            raise ConfigError(f"line {line}: nested more than {MAX_YAML_DEPTH} levels deep; "
                              f"accepted: at most {MAX_YAML_DEPTH}")
        anchor = None if isinstance(event, AliasEvent) else event.anchor
        self.depth += 1
        if anchor is not None:
            self.open_anchors.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1
            self.open_anchors.discard(anchor)


BoundedLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


class AnchoredLoader(BoundedLoader):
    """:class:`BoundedLoader` reading anchors and aliases: a suite file's shared settings (its
    expansion is bounded by :func:`benchmarks.suites.suite_file.check_expansion`)."""

    allow_anchors = True


def load_yaml(text: str, where: str, anchors: bool = False) -> Any:
    """``text`` read by :class:`BoundedLoader` (:class:`AnchoredLoader` with ``anchors``).

    >>> load_yaml("a: &x [1]\\nb: *x", "best_config.yaml")
    Traceback (most recent call last):
    ...
    benchmarks.infra.errors.ConfigError: best_config.yaml: line 1: YAML anchor or alias &x; ...

    Raises:
        ConfigError: one line naming ``where`` and what is wrong.
    """
    if len(text) > MAX_YAML_BYTES:
        raise ConfigError(f"{where} holds {len(text)} characters; accepted: at most "
                          f"{MAX_YAML_BYTES}")
    try:
        return yaml.load(text, Loader=AnchoredLoader if anchors else BoundedLoader)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    except yaml.YAMLError as err:
        # PyYAML's report spans lines (a snippet and a caret); the first 300 characters say it
        raise ConfigError(f"{where} is not valid YAML: {' '.join(str(err).split())[:300]}"
                          ) from None
    except RecursionError:  # a bound on nesting above Python's stack: said in one line too
        raise ConfigError(f"{where}: nested too deep; accepted: at most {MAX_YAML_DEPTH} "
                          "levels") from None


def read_yaml(path: Path | str, anchors: bool = False) -> Any:
    """The YAML file at ``path``, read by :func:`load_yaml`: a regular file (a FIFO or a
    device would block or never end) of at most :data:`MAX_YAML_BYTES`, in UTF-8.

    Raises:
        ConfigError: one line naming ``path`` and what is wrong.
    """
    path = Path(path)
    try:
        if not path.is_file():  # checked before any open: opening a FIFO blocks
            raise ConfigError(f"{path} does not exist" if not path.exists() else
                              f"{path} is not a regular file (a FIFO, device or folder is "
                              "never opened); accepted: a YAML file")
        with path.open("rb") as file:
            data = file.read(MAX_YAML_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"{path} cannot be read: {err.strerror}") from None
    if len(data) > MAX_YAML_BYTES:
        raise ConfigError(f"{path} is larger than {MAX_YAML_BYTES} bytes; accepted: at most "
                          f"{MAX_YAML_BYTES} (a YAML file clusterbench reads)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path} is not UTF-8 text (byte {err.start}); accepted: YAML in "
                          "UTF-8") from None
    return load_yaml(text, str(path), anchors=anchors)
