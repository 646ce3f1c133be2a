"""What a process on another node says to the user, carried to the driver through a file: the
process appends each ``clusterbench:`` line it writes on stderr to a file in the results (Ray
keeps its workers' output in their node's logs), and the driver prints each file's new whole
lines as they come."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
            try:
                with self.path.open("a", encoding="utf-8") as file:
                    file.write("".join(f"{line}\n" for line in said))
            except OSError:
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
