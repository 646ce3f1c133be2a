"""What a task on another node tells its driver through files in the results: that it runs (a
marker it writes when it starts and touches while it runs), and what it says to the user (each
``clusterbench:`` line it writes on stderr, appended to a file: Ray keeps its workers' output in
their node's logs), which the driver prints as it comes."""

from __future__ import annotations

import pickle
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.infra.errors import ConfigError
from benchmarks.infra.paths import write_in_place

#: How often a running task touches its marker (seconds).
HEARTBEAT_S = 5.0


class SaidToFile:
    """A stderr that writes through to ``stream`` and appends each whole line starting with
    ``clusterbench:`` to ``path``."""

    def __init__(self, stream, path: Path) -> None:
        self.stream, self.path, self.pending = stream, path, ""
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        said = [line for line in lines if line.startswith("clusterbench:")]
        if said:
            try:  # never through a link planted in the results folder
                write_in_place(self.path, "".join(f"{line}\n" for line in said), append=True)
            except (OSError, ConfigError):
                pass  # the user misses a line; the work goes on
        return self.stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


@contextmanager
def said_to(path: Path) -> Iterator[None]:
    """While the block runs, what this process says to the user also goes to ``path``."""
    before = sys.stderr
    sys.stderr = SaidToFile(before, path)
    try:
        yield
    finally:
        sys.stderr = before


def new_lines(path: Path, offset: int) -> tuple[list[str], int]:
    """The whole lines of ``path`` after byte ``offset``, and the offset after them (the same
    offset and no lines when the file cannot be read)."""
    try:
        with path.open("rb") as file:
            file.seek(offset)
            new = file.read()
    except OSError:
        return [], offset
    whole = new[:new.rfind(b"\n") + 1]
    return whole.decode("utf-8", "replace").splitlines(), offset + len(whole)


def print_new_lines(path: Path, offset: int) -> int:
    """Prints the whole lines of ``path`` after byte ``offset`` on stderr (:func:`new_lines`),
    one each; returns the offset after them."""
    lines, offset = new_lines(path, offset)
    for line in lines:
        print(line, file=sys.stderr, flush=True)
    return offset


@contextmanager
def heartbeat(marker: Path, every_s: float | None = None) -> Iterator[None]:
    """Write ``marker`` (this node's name) and touch it every ``every_s`` seconds until the block
    ends; a node that dies stops touching it. It is written in place, never through a link
    (:func:`benchmarks.infra.paths.write_in_place`): a link found there stops the beats."""
    marker.parent.mkdir(parents=True, exist_ok=True)
    write_in_place(marker, socket.gethostname())
    stop = threading.Event()

    def beat() -> None:
        count = 0
        while not stop.wait(HEARTBEAT_S if every_s is None else every_s):
            count += 1
            try:  # the content changes too: a coarse file system's mtime may not
                write_in_place(marker, f"{socket.gethostname()}\n{count}")
            except (OSError, ConfigError):
                return

    thread = threading.Thread(target=beat, name="clusterbench-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def marked_then(marker: str, said: str, payload: bytes):
    """The Ray task of a job: marks that it runs (``marker``, touched while it runs) and keeps
    what it says to the user (``said``), then calls ``function(*args)`` pickled in ``payload``.
    This module imports nothing heavy, and the job's own modules (torch, Lightning) are imported
    only when the payload is unpickled: the marker says the task has its resources and runs
    within a second of its process starting, and the seconds of imports count as running, not
    as waiting for resources."""
    with heartbeat(Path(marker)), said_to(Path(said)):
        function, args = pickle.loads(payload)
        return function(*args)
