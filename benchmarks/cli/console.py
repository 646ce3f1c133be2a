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
EXIT_INTERRUPTED = 130  # as a shell reports a process stopped by SIGINT
EXIT_PREEMPTED = 143  # as a shell reports a process stopped by SIGTERM

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


def print_report(markdown: str) -> None:
    """A leaderboard's Markdown on the terminal: its headings in bold, its notes as text and
    its tables as rich tables (as wide as they need when the output is not a terminal, so that
    a log file keeps one row a line). Its text comes from result files: every control
    character (an ANSI or OSC escape, a bell, a carriage return) is shown as ``?``."""
    from rich import box
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    from benchmarks.infra.errors import control_free

    console = Console(highlight=False)
    lines = control_free(markdown).splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(markdown_cells(lines[i]))
                i += 1
            header, body = rows[0], [r for r in rows[1:] if not all(
                re.fullmatch(r":?-+:?", c) for c in r)]
            table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
            for column in header:
                table.add_column(Text(column, style="bold"))
            for row in body:
                table.add_row(*(Text(cell) for cell in row))
            if not console.is_terminal:
                wanted = Measurement.get(console, console.options.update_width(10_000), table)
                console.width = max(console.width, wanted.maximum)
            console.print(table)
            continue
        if line.startswith("#"):
            console.print(Text(line.lstrip("#").strip(), style="bold"))
        elif line.startswith("- "):
            console.print(Text("• " + line[2:]))
        else:
            console.print(Text(line))
        i += 1


def print_leaderboard(results_dir: Path, sources: list[Path] | None = None) -> None:
    """The leaderboard in ``results_dir`` as tables, and where its files and per-run results
    are (the ``sources`` folders' ``runs/`` when it puts several side by side)."""
    print_report((results_dir / "leaderboard.md").read_text())
    runs = ", ".join(f"{folder}/runs/" for folder in (sources or [results_dir]))
    print(f"\nLeaderboard: {results_dir}/leaderboard.{{md,csv,html}}; per-run results and "
          f"configs: {runs}")


def print_entries(title: str, entries: dict[str, str], width: int) -> None:
    """``title``, then one entry a line: the name, and its description wrapped beside it."""
    import textwrap

    print(title)
    column = max(map(len, entries)) + 4
    for name, description in entries.items():
        print(textwrap.fill(description, width=max(width, column + 30),
                            initial_indent=f"  {name:<{column - 2}}",
                            subsequent_indent=" " * column, break_on_hyphens=False))

