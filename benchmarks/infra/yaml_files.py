"""The one YAML reader of everything clusterbench reads: suite files, ``--set`` values, ``fit -c``
configs, and what a results folder holds (``best_config.yaml``, ``search.yaml``, a run's
``config.yaml``).

A results folder can be copied from anyone, so what it holds is read as bounded data: a regular
file of at most :data:`MAX_YAML_BYTES`, UTF-8, nested at most :data:`MAX_YAML_DEPTH` deep, and
without anchors, which only a hand-written suite file needs (the files clusterbench writes hold
none; a kilobyte of anchors inside anchors expands to gigabytes). An anchor that refers to itself
is refused everywhere: no setting is a cycle.

Plain values are read as YAML 1.2's core schema reads them (the YAML the docs name), not as
PyYAML's YAML 1.1: ``1e-3`` is a float, while ``1_000``, ``yes``, ``off``, ``1:30``, ``0b101`` and
``2024-01-01`` are strings, ``010`` is ten and ``0o10`` eight; so what a file means never depends
on which YAML its reader spoke. A key given twice in one mapping is refused (YAML 1.2 says keys
are unique; PyYAML kept the last one silently); a key a ``<<`` merge brings in is no repeat.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from benchmarks.infra.errors import ConfigError

#: The largest YAML file read: the largest suite file is 17 KB, a run's config 3 KB.
MAX_YAML_BYTES = 1 << 20
#: The deepest nesting read: a suite nests 6 levels; 5,000 levels overflowed the stack.
MAX_YAML_DEPTH = 64
#: The tag of a ``<<`` key: the mapping (or mappings) after it is merged into the one it is in.
MERGE_TAG = "tag:yaml.org,2002:merge"

#: YAML 1.2.2's core schema (section 10.3.2): each plain value matching one of these is of that
#: type, any other plain value a string. Integers are tried before floats ("12" matches both).
CORE_NULL = re.compile(r"~|null|Null|NULL|")
CORE_BOOL = re.compile(r"true|True|TRUE|false|False|FALSE")
CORE_INT = re.compile(r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+")
CORE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?"
                        r"|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)")
#: How the core schema's types are told apart: (tag, pattern, the first characters it can have).
CORE_RESOLVERS = [
    ("tag:yaml.org,2002:bool", CORE_BOOL, list("tTfF")),
    ("tag:yaml.org,2002:int", CORE_INT, list("-+0123456789")),
    ("tag:yaml.org,2002:float", CORE_FLOAT, list("-+0123456789.")),
    ("tag:yaml.org,2002:null", CORE_NULL, ["~", "n", "N", ""]),
    # not in YAML 1.2, but a hand-written suite's shared settings are merged with it
    ("tag:yaml.org,2002:merge", re.compile(r"<<"), ["<"]),
]


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader reading YAML 1.2's core schema (:data:`CORE_RESOLVERS`), refusing a
    key given twice in one mapping, with a bound on nesting, no anchor referring to itself, and
    no anchor at all unless ``allow_anchors`` is set (:class:`AnchoredLoader`).

    >>> yaml.load("lr: 1e-3\\nwd: -2E+1\\nname: 1e", Loader=BoundedLoader)
    {'lr': 0.001, 'wd': -20.0, 'name': '1e'}
    >>> yaml.load("[1_000, yes, 'on', 1:30, 010, 0o10, 0x1F, .inf, ~]", Loader=BoundedLoader)
    ['1_000', 'yes', 'on', '1:30', 10, 8, 31, inf, None]
    """

    #: Whether anchors and aliases are read (a hand-written suite file's shared settings).
    allow_anchors: bool = False
    #: Only the core schema's resolvers: none of YAML 1.1's (sexagesimals, yes/no, timestamps).
    yaml_implicit_resolvers: dict[str, list] = {}

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

    def compose_mapping_node(self, anchor: Any) -> Any:
        """A mapping node whose keys are each given once: a suite with two ``seeds:`` would
        otherwise run with the second, and the first read as if it counted."""
        node = super().compose_mapping_node(anchor)
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == MERGE_TAG:
                continue  # a merge brings keys its mapping may set again; a list key is refused
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in first_line:
                raise ConfigError(f"line {line}: key {key!r} given twice in one mapping (first "
                                  f"on line {first_line[key]}); accepted: each key once")
            first_line[key] = line
        return node

    def flatten_mapping(self, node: Any) -> None:
        """``node``'s ``<<`` merges put in its pairs, each key once: its own value, else the
        first merged mapping's that has it; in PyYAML's order (merged keys first).

        PyYAML 6.0.4 keeps the first pair of a key a merge brings, among pairs that still hold
        each value a merged mapping overrode: ``b: &b {<<: *a, k: 2}`` merged into ``c`` gave
        ``c`` the ``k`` of ``a``. Here a flattened mapping holds each key once.

        >>> yaml.load("a: &a {k: 1}\\nb: &b {<<: *a, k: 2}\\nc: {<<: *b}", Loader=AnchoredLoader)
        {'a': {'k': 1}, 'b': {'k': 2}, 'c': {'k': 2}}
        """
        pairs: list[tuple[Any, Any]] = []
        position: dict[Any, int] = {}

        def put(pair: tuple[Any, Any], replace: bool) -> None:
            key = ((pair[0].tag, pair[0].value) if isinstance(pair[0], ScalarNode)
                   else id(pair[0]))
            if key not in position:
                position[key] = len(pairs)
                pairs.append(pair)
            elif replace:
                pairs[position[key]] = pair

        for key_node, value_node in node.value:
            if key_node.tag != MERGE_TAG:
                continue
            sources = (value_node.value if isinstance(value_node, SequenceNode)
                       else [value_node])
            for source in sources:
                if not isinstance(source, MappingNode):
                    raise ConstructorError("while constructing a mapping", node.start_mark,
                                           "expected a mapping or list of mappings for merging, "
                                           f"but found {source.id}", source.start_mark)
                self.flatten_mapping(source)
                for pair in source.value:
                    put(pair, replace=False)
        for pair in node.value:
            if pair[0].tag != MERGE_TAG:
                put(pair, replace=True)
        node.value = pairs

    def construct_yaml_int(self, node: Any) -> int:
        """A YAML 1.2 integer: decimal, ``0o`` octal or ``0x`` hexadecimal (also under an
        explicit ``!!int``, which YAML 1.1's ``1_000`` or ``0b1`` no longer is)."""
        text = self.construct_scalar(node)
        if not CORE_INT.fullmatch(text):
            raise ConstructorError(None, None, f"{text!r} is not a YAML 1.2 integer",
                                   node.start_mark)
        try:
            if text.startswith(("0o", "0x")):
                return int(text[2:], 8 if text[1] == "o" else 16)
            return int(text)
        except ValueError as err:  # more digits than Python converts (4,300)
            raise ConstructorError(None, None, str(err), node.start_mark) from None

    def construct_yaml_float(self, node: Any) -> float:
        """A YAML 1.2 float: ``1.5``, ``.5``, ``1e-3``, ``-.inf``, ``.nan``."""
        text = self.construct_scalar(node)
        if not CORE_FLOAT.fullmatch(text):
            raise ConstructorError(None, None, f"{text!r} is not a YAML 1.2 float",
                                   node.start_mark)
        if text.lower().lstrip("+-") in (".inf", ".nan"):
            return float(text.replace(".", "", 1))
        return float(text)

    def construct_yaml_bool(self, node: Any) -> bool:
        """``true`` or ``false`` (any of YAML 1.2's three spellings), never ``yes`` or ``on``."""
        text = self.construct_scalar(node)
        if not CORE_BOOL.fullmatch(text):
            raise ConstructorError(None, None, f"{text!r} is not a YAML 1.2 boolean",
                                   node.start_mark)
        return text.lower() == "true"


for _tag, _pattern, _first in CORE_RESOLVERS:
    BoundedLoader.add_implicit_resolver(_tag, re.compile(f"^(?:{_pattern.pattern})$"), _first)
BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)
BoundedLoader.add_constructor("tag:yaml.org,2002:float", BoundedLoader.construct_yaml_float)
BoundedLoader.add_constructor("tag:yaml.org,2002:bool", BoundedLoader.construct_yaml_bool)


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


class UnambiguousDumper(yaml.SafeDumper):
    """PyYAML's safe dumper quoting every string that a YAML 1.1 or a YAML 1.2 reader would
    read as something else: PyYAML writes ``1e3`` or ``0o17`` plain (YAML 1.1 reads them as
    strings), and :class:`BoundedLoader`, which reads YAML 1.2, would read them back as numbers."""


for _tag, _pattern, _first in CORE_RESOLVERS:
    UnambiguousDumper.add_implicit_resolver(_tag, re.compile(f"^(?:{_pattern.pattern})$"), _first)


def dump_yaml(value: Any) -> str:
    """``value`` as YAML, keys in their order, that :func:`load_yaml` reads back as ``value``
    (and PyYAML's own YAML 1.1 reader too).

    >>> dump_yaml({"name": "1e3", "other": "0o17", "word": "yes", "lr": 1e-3, "n": 10})
    "name: '1e3'\\nother: '0o17'\\nword: 'yes'\\nlr: 0.001\\nn: 10\\n"
    """
    return yaml.dump(value, Dumper=UnambiguousDumper, sort_keys=False)
