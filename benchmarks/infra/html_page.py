"""The pieces of the self-contained HTML reports (leaderboards and experiment reports):
escaped tables, PNG figures inlined as base64, and the page with its one stylesheet."""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable

esc = html.escape

_CSS = ("body{font-family:system-ui,sans-serif;margin:2em}table{border-collapse:collapse}\n"
        "th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}\n"
        "th{background:#f0f0f0}img{max-width:100%}")


def table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    """An HTML table of escaped cells.

    >>> table(["a", "b<"], [["1", "2"]])
    '<table><tr><th>a</th><th>b&lt;</th></tr>\\n<tr><td>1</td><td>2</td></tr></table>'
    """
    head = "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>"
    body = ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>" for cells in rows]
    return "<table>" + "\n".join([head, *body]) + "</table>"


def figure(title: str, png: bytes, alt: str | None = None) -> str:
    """A heading and the PNG inlined as a data URI, so the page needs no other file."""
    data = base64.b64encode(png).decode()
    return (f'<h2>{esc(title)}</h2><img alt="{esc(alt or title)}" '
            f'src="data:image/png;base64,{data}">')


def bullets(lines: Iterable[str]) -> str:
    """An escaped bullet list."""
    return "<ul>" + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>"


def page(title: str, heading: str, parts: Iterable[str], css: str = "") -> str:
    """A whole HTML document: ``parts`` (already HTML) under an ``<h1>``; ``css`` is added to the
    shared stylesheet."""
    body = "\n".join([f"<h1>{esc(heading)}</h1>", *parts])
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}'
            f"</title>\n<style>{_CSS}{css}</style></head><body>\n{body}\n</body></html>\n")
