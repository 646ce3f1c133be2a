"""Files read back from a results folder (results, logs, figures, leaderboards): read only when
they are regular files of bounded size, and JSON only of bounded nesting, so that a planted
FIFO, device, link or bomb is refused in one line instead of hanging or exhausting the reader."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

#: The largest file read back: a run's result is tens of kB, its curves' CSV a few MB at most.
MAX_BYTES = 8 * 2**20
#: The deepest nesting of a JSON file read back: a result nests about five levels.
MAX_DEPTH = 64

#: What the nesting count looks at: an escaped character (skipped whole), a quote, a bracket.
_JSON_TOKEN = re.compile(r'\\.|["\[\]{}]', re.DOTALL)


class Unreadable(ValueError):
    """A file read back that is not a regular file, too large or too deeply nested."""


def regular_file_bytes(path: str | Path, limit: int = MAX_BYTES, *,
                       follow_links: bool = False) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes.

    A FIFO, socket or device is refused from its ``lstat`` before any ``open`` (opening a FIFO
    blocks until a writer comes, and the reader may hold a folder's lock), a symbolic link too
    unless ``follow_links`` (a path the user named); the file is opened non-blocking and checked
    again, so one swapped in between is refused as well.

    Raises:
        Unreadable: naming the file and what it is.
        OSError: the file cannot be read (missing, no permission).
    """
    path = Path(path)
    info = os.stat(path) if follow_links else os.lstat(path)
    _check_regular(path, info, limit)
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow_links else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        _check_regular(path, os.fstat(fd), limit)
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise Unreadable(f"{path} is larger than {limit:,} bytes, more than any file clusterbench "
                         "writes there")
    return data


def _check_regular(path: Path, info: os.stat_result, limit: int) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise Unreadable(f"{path} is a symbolic link, not a file: never followed")
    if not stat.S_ISREG(info.st_mode):
        raise Unreadable(f"{path} is not a regular file (a FIFO, socket, device or folder): "
                         "never opened")
    if info.st_size > limit:
        raise Unreadable(f"{path} is larger than {limit:,} bytes ({info.st_size:,}), more than "
                         "any file clusterbench writes there")


def json_depth(text: str, limit: int = MAX_DEPTH) -> int:
    """The deepest nesting of arrays and objects in the JSON ``text``, counted no further than
    ``limit + 1`` (brackets inside strings do not count), without parsing it.

    >>> json_depth('{"a": [1, {"b": "[[["}]}'), json_depth("[" * 10**6, limit=64)
    (3, 65)
    """
    depth = deepest = 0
    in_string = False
    for token in _JSON_TOKEN.finditer(text):  # linear: no backtracking over long strings
        char = token.group()
        if char == '"':
            in_string = not in_string
        elif in_string or len(char) > 1:
            continue
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                break
        elif char in "]}":
            depth -= 1
    return deepest


def load_json(path: str | Path, limit: int = MAX_BYTES, depth: int = MAX_DEPTH) -> Any:
    """The JSON value in ``path``, a regular file (:func:`regular_file_bytes`) nested at most
    ``depth`` levels (bounded before parsing: Python's parser recurses once a level).

    Raises:
        Unreadable: the file is not one to read, or nested deeper than ``depth``.
        ValueError: not UTF-8 JSON.
        OSError: the file cannot be read.
    """
    return parse_json(regular_file_bytes(path, limit).decode("utf-8"), str(path), depth)


def parse_json(text: str, source: str, depth: int = MAX_DEPTH) -> Any:
    """The JSON value in ``text`` (read from ``source``, which the message names) nested at
    most ``depth`` levels, bounded before parsing: for JSON read back from within a file, such
    as the record line of a page; a whole file is :func:`load_json`'s.

    >>> parse_json('{"a": [1]}', "line 1")
    {'a': [1]}

    Raises:
        Unreadable: nested deeper than ``depth``.
        ValueError: not JSON.
    """
    if json_depth(text, depth) > depth:
        raise Unreadable(f"{source} nests deeper than {depth} levels, deeper than any file "
                         "clusterbench writes")
    return json.loads(text)


def load_csv(path: str | Path, limit: int = MAX_BYTES) -> list[dict[str, str]]:
    """The rows of the CSV file ``path`` by its header: a regular file
    (:func:`regular_file_bytes`) in UTF-8.

    Raises:
        Unreadable: the file is not one to read.
        ValueError: not UTF-8 CSV (a cell past the csv module's limit among them).
        OSError: the file cannot be read.
    """
    text = regular_file_bytes(path, limit).decode("utf-8")
    try:
        return list(csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error as err:
        raise ValueError(f"{path} is not CSV ({err})") from None
