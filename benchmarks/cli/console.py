"""What every ``clusterbench`` command shares on the console: its exit statuses, Lightning's
boilerplate kept off it, first sentences of docstrings, and leaderboards printed as tables."""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

EXIT_BAD_INPUT = 2

#: Where Lightning says what is not about the run: the accelerators it did not use ("GPU
#: available: False, used: False"), "Seed set to 0", the "Tip:" advertisements for its cloud
#: services, the batches a limit leaves, the device's environment variables.
LIGHTNING_CHATTER = ("lightning.pytorch.utilities.rank_zero",
                     "lightning.fabric.utilities.rank_zero", "lightning.fabric.utilities.seed",
                     "lightning.pytorch.accelerators.cuda")


class Chatter(logging.Filter):
    """Drops Lightning's information lines (not its warnings) unless one of ``keep`` matches."""

    def __init__(self, keep: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.keep = [re.compile(pattern) for pattern in keep]

    def filter(self, record: logging.LogRecord) -> bool:
        return (record.levelno >= logging.WARNING
                or any(p.search(record.getMessage()) for p in self.keep))


@contextmanager
def quiet_lightning(keep: tuple[str, ...] = (), ignore: tuple[str, ...] = ()
                    ) -> Iterator[None]:
    """Silences Lightning's boilerplate (:data:`LIGHTNING_CHATTER` but lines matching ``keep``),
    the libraries' deprecation notes, which a user cannot act on, and warnings matching ``ignore``;
    warnings about the run itself still show."""
    chatter = Chatter(keep)
    loggers = [logging.getLogger(name) for name in LIGHTNING_CHATTER]
    for logger in loggers:
        logger.addFilter(chatter)
    try:
        with warnings.catch_warnings():
            for category in (DeprecationWarning, FutureWarning):
                warnings.filterwarnings("ignore", category=category)
            for message in ignore:
                warnings.filterwarnings("ignore", message=message)
            yield
    finally:
        for logger in loggers:
            logger.removeFilter(chatter)


#: Words whose full stop ends no sentence (``Fig. 5``, ``Tan et al. (arXiv...)``, ``app. C``).
ABBREVIATIONS = {"al", "app", "cf", "ch", "e.g", "eq", "eqs", "fig", "figs", "fn", "i.e", "no",
                 "prop", "ref", "refs", "sec", "tab", "thm", "vs"}


def first_sentence(text: str | None) -> str:
    """The first sentence of a docstring on one line, without reST markup and always ending in a
    full stop; a first paragraph running into a formula (``eq. 3:`` then ``.. math::``) gives its
    clause up to the colon.

    >>> first_sentence("SimCLR (arXiv:2002.05709) with NT-Xent,\\nor a kernel. Details.")
    'SimCLR (arXiv:2002.05709) with NT-Xent, or a kernel.'
    >>> first_sentence("TVAE, eq. 4-6: shared and specific parts, trained on\\n\\n.. math:: x")
    'TVAE, eq. 4-6.'
    >>> first_sentence("Tan et al. (arXiv:2303.15103) app. C spectral clustering")
    'Tan et al. (arXiv:2303.15103) app. C spectral clustering.'
    """
    paragraphs = (text or "").strip().split("\n\n")
    paragraph = " ".join(paragraphs[0].split())
    paragraph = re.sub(r":math:`([^`]*)`|``([^`]*)``", lambda m: m[1] or m[2], paragraph)
    for end in re.finditer(r"[.!?](?=\s+[A-Z]|$)", paragraph):
        word = re.search(r"(\S*)$", paragraph[:end.start()])[1].lower()
        if end.group() != "." or word not in ABBREVIATIONS:
            return paragraph[:end.end()]
    if len(paragraphs) > 1:  # the sentence goes on in a formula or a list
        paragraph = paragraph.split(": ")[0]
    paragraph = paragraph.rstrip(":,; ")
    return paragraph + "." if paragraph else ""


def markdown_cells(line: str) -> list[str]:
    r"""The cells of a Markdown table row (``\|`` is a bar inside a cell).

    >>> markdown_cells(r"| simclr | 99.1 ± 0.2 | a \| b |")
    ['simclr', '99.1 ± 0.2', 'a | b']
    """
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [cell.strip().replace("\\|", "|") for cell in cells]


#: The console's width where the output is no terminal and ``COLUMNS`` is not set (a log file).
DEFAULT_WIDTH = 120


def console_width() -> int:
    """The terminal's columns: ``COLUMNS`` where set, else the terminal's own, else
    :data:`DEFAULT_WIDTH`."""
    import shutil

    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


def print_report(markdown: str, files: str = "leaderboard.md", width: int | None = None) -> None:
    """A leaderboard's Markdown on the terminal: its headings in bold, its notes as text and
    its tables as rich tables that fit the console's ``width`` (:func:`console_width`): a table
    too wide keeps the columns that matter most (:func:`fitted_columns`), whole, and one line
    below it names those left out and ``files``, which hold every column. Its text comes from
    result files: every control character (an ANSI or OSC escape, a bell, a carriage return) is
    shown as ``?``."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from benchmarks.infra.errors import control_free
    from benchmarks.suites.render_table import column_priority

    console = Console(highlight=False, width=width or console_width())
    lines = control_free(markdown).splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(markdown_cells(lines[i]))
                i += 1
            header, body = rows[0], [(r + [""] * len(rows[0]))[:len(rows[0])] for r in rows[1:]
                                     if not all(re.fullmatch(r":?-+:?", c) for c in r)]
            widths = fitted_columns(header, body, *column_priority(header), console.width)
            table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
            for column, column_width in widths.items():
                table.add_column(Text(header[column], style="bold"), width=column_width,
                                 overflow="fold")
            for row in body:
                table.add_row(*(Text(row[column]) for column in widths))
            console.print(table)
            left_out = [label or "(unnamed)" for column, label in enumerate(header)
                        if column not in widths]
            if left_out:
                console.print(Text(f"Left out at {console.width} columns: "
                                   f"{'; '.join(left_out)}. All columns: {files}"))
            continue
        if line.startswith("#"):
            console.print(Text(line.lstrip("#").strip(), style="bold"))
        elif line.startswith("- "):
            console.print(Text("• " + line[2:]))
        else:
            console.print(Text(line))
        i += 1


#: What a rich table (``SIMPLE_HEAD``, no edge, no padding at its edges) adds between two
#: columns: a space of padding each side of a one-character rule.
COLUMN_GAP = 3
#: The most lines a header takes on a narrow console (``Linear probe`` over ``top-1 (%)``).
HEADER_LINES = 2


def header_width(label: str) -> int:
    """The narrowest width that wraps ``label`` between its words into at most
    :data:`HEADER_LINES` lines.

    >>> header_width("Linear probe top-1 (%)"), header_width("Seeds"), header_width("")
    (12, 5, 1)
    """
    import textwrap

    from rich.cells import cell_len

    widest = max(1, cell_len(label))
    for width in range(max((cell_len(word) for word in label.split()), default=1), widest):
        if len(textwrap.wrap(label, width, break_long_words=False)) <= HEADER_LINES:
            return width
    return widest


def fitted_columns(header: list[str], body: list[list[str]], priority: list[int],
                   required: int, width: int) -> dict[int, int]:
    """The columns of a table to show in ``width`` characters, in their order, each with its
    width: the first ``required`` of ``priority`` whatever the width, then the next while the
    table fits, each as wide as its widest cell, so that no cell is ever cut or wrapped (a
    header wraps between its words into :data:`HEADER_LINES` lines where room is short); the
    room left puts headers back on one line, the most wanted first.

    >>> fitted_columns(["Method", "Top-1 (%)", "Machine"], [["simclr", "99.1 ± 0.3", "cpu"]],
    ...                [0, 1, 2], 2, 24)
    {0: 6, 1: 10}
    """
    from rich.cells import cell_len

    def widest(column: int, header_width: int) -> int:
        return max([header_width, *(cell_len(row[column]) for row in body)])

    compact = [widest(c, header_width(label)) for c, label in enumerate(header)]
    full = [widest(c, cell_len(label)) for c, label in enumerate(header)]

    def table_width(columns: list[int]) -> int:
        return sum(compact[c] for c in columns) + COLUMN_GAP * max(0, len(columns) - 1)

    kept = priority[:required]
    for column in priority[required:]:
        if table_width([*kept, column]) > width:
            break  # the rest matter less than this one: none is shown in its place
        kept.append(column)
    widths = {column: compact[column] for column in kept}
    room = width - table_width(kept)
    for column in kept:  # a header on one line where it fits: half a line more is no help
        if full[column] - widths[column] <= room:
            room -= full[column] - widths[column]
            widths[column] = full[column]
    return {column: widths[column] for column in sorted(kept)}


def written_leaderboard(results_dir: Path) -> str:
    """The ``leaderboard.md`` this command wrote in ``results_dir``, read back as every results
    file is: a regular file of bounded size, in UTF-8."""
    from benchmarks.infra.read_back import regular_file_bytes

    return regular_file_bytes(results_dir / "leaderboard.md").decode("utf-8")


def print_leaderboard(results_dir: Path, sources: list[Path] | None = None) -> None:
    """The leaderboard in ``results_dir`` as tables, and where its files and per-run results
    are (the ``sources`` folders' ``runs/`` when it puts several side by side)."""
    files = f"{results_dir}/leaderboard.{{md,csv,html}}"
    print_report(written_leaderboard(results_dir), files=files)
    runs = ", ".join(f"{folder}/runs/" for folder in (sources or [results_dir]))
    print(f"\nLeaderboard: {files}; per-run results and configs: {runs}")


def print_entries(title: str, entries: dict[str, str], width: int) -> None:
    """``title``, then one entry a line: the name, and its description wrapped beside it."""
    import textwrap

    print(title)
    column = max(map(len, entries)) + 4
    for name, description in entries.items():
        print(textwrap.fill(description, width=max(width, column + 30),
                            initial_indent=f"  {name:<{column - 2}}",
                            subsequent_indent=" " * column, break_on_hyphens=False))

