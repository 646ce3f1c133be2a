"""The pieces of the self-contained HTML reports: escaped tables that sort and filter in the
page, PNG figures inlined as base64, one stylesheet and one script; nothing is fetched.

At any width a wide table scrolls in its own box, a number never wraps, and a figure shrinks to
the page.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterable
from pathlib import Path

from benchmarks.infra.dot_chart import CHART_CSS, CHART_SCRIPT

esc = html.escape

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;line-height:1.4}
li,p,h1,h2,figcaption{overflow-wrap:anywhere}
.table-box{overflow-x:auto;max-width:100%;margin:0.5em 0 1.5em}
table{border-collapse:collapse}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0}
td{white-space:nowrap}
td.long{white-space:normal;min-width:16em}
td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
table.sortable tr>:first-child{position:sticky;left:0;z-index:1;background:#fff}
table.sortable th:first-child{background:#f0f0f0}
.pm{white-space:nowrap}
th.sortable{cursor:pointer;user-select:none}
th.sortable::after{content:" \\2195";color:#999}
th[aria-sort=ascending]::after{content:" \\25B2";color:#000}
th[aria-sort=descending]::after{content:" \\25BC";color:#000}
tr.filters th{background:#fafafa;padding:2px 4px}
tr.filters input{width:100%;min-width:3em;box-sizing:border-box;font-size:0.85em}
.figures{display:flex;flex-wrap:wrap;gap:1em 2em;align-items:flex-start}
figure{margin:0 0 1em;max-width:100%}
figcaption{max-width:40em}
img{max-width:100%;height:auto}
figure.chart svg{width:36em;max-width:100%;height:auto}
""" + CHART_CSS

#: Sorts a table by a clicked header (numbers by value, descending first; text ascending first;
#: empty and "n/a" cells last either way) and keeps the rows whose cells contain each column's
#: filter text; ``>90`` or ``<0.5`` in a filter compares the cell's number. The charts
#: (:mod:`benchmarks.infra.dot_chart`) show the first table's rows as it shows them.
_SCRIPT = CHART_SCRIPT + """
function cellKey(td){const v=td.dataset.value;return v===undefined?null:parseFloat(v);}
function sortTable(th){
  const table=th.closest('table'),col=+th.dataset.col,body=table.tBodies[0];
  const numeric=th.dataset.type==='number';
  const dir=th.getAttribute('aria-sort')==='descending'?'ascending':
            th.getAttribute('aria-sort')==='ascending'?'descending':
            (numeric?'descending':'ascending');
  table.querySelectorAll('th.sortable').forEach(h=>h.setAttribute('aria-sort','none'));
  th.setAttribute('aria-sort',dir);
  const sign=dir==='ascending'?1:-1,rows=Array.from(body.rows);
  rows.sort((a,b)=>{
    const x=a.cells[col],y=b.cells[col],kx=cellKey(x),ky=cellKey(y);
    if(numeric){if(kx===null||ky===null)return (kx===null)-(ky===null);return sign*(kx-ky);}
    const tx=x.textContent.trim(),ty=y.textContent.trim();
    const ex=tx===''||tx==='n/a'||tx==='\\u2014',ey=ty===''||ty==='n/a'||ty==='\\u2014';
    if(ex||ey)return ex-ey;
    return sign*tx.localeCompare(ty,undefined,{numeric:true});
  });
  rows.forEach(r=>body.appendChild(r));
}
function filterTable(table){
  const filters=Array.from(table.querySelectorAll('tr.filters input'));
  Array.from(table.tBodies[0].rows).forEach(row=>{
    row.hidden=!filters.every(f=>{
      const q=f.value.trim().toLowerCase(),cell=row.cells[+f.dataset.col];
      if(q===''||!cell)return true;
      const m=q.match(/^([<>])\\s*(-?[0-9.]+)$/),k=cellKey(cell);
      if(m)return k!==null&&(m[1]==='>'?k>parseFloat(m[2]):k<parseFloat(m[2]));
      return cell.textContent.toLowerCase().includes(q);
    });
  });
}
function followTable(table){
  const heads=Array.from(table.querySelectorAll('th.sortable')).map(h=>h.textContent.trim());
  const col=heads.findIndex(t=>t.startsWith('Method'));
  if(col<0||table!==document.querySelector('table.sortable'))return;
  const shown=Array.from(table.tBodies[0].rows).filter(r=>!r.hidden)
    .map(r=>r.cells[col].textContent.trim());
  document.querySelectorAll('svg.cb-chart').forEach(svg=>drawChart(svg,shown));
}
document.querySelectorAll('svg.cb-chart').forEach(svg=>drawChart(svg,null));
document.querySelectorAll('th.sortable').forEach(th=>{
  const sort=()=>{sortTable(th);followTable(th.closest('table'));};
  th.addEventListener('click',sort);
  th.addEventListener('keydown',e=>{if(e.key==='Enter'||e.key===' '){e.preventDefault();sort();}});
});
document.querySelectorAll('tr.filters input').forEach(f=>
  f.addEventListener('input',()=>{const t=f.closest('table');filterTable(t);followTable(t);}));
"""

# a cell that is a number: "92.00", "+1.23", "92.00 ± 1.41", "0.0123 CPU"
_NUMBER = r"[+-]?\d+(\.\d+)?(e[+-]?\d+)?"
_NUMBER_CELL = re.compile(rf"^{_NUMBER}( ± {_NUMBER})?( [A-Z]{{3}})?$")
# the number a cell starts with, when it is followed by nothing, a space or "±"
_LEADING_NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?(e[+-]?\d+)?(?=$| )")
_MEAN_STD = re.compile(r"[+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)? ± \d+(?:\.\d+)?(?:e[+-]?\d+)?")


def cell_value(text: str) -> float | None:
    """The number a table cell sorts by: the one it starts with (a mean), else None.

    >>> cell_value("92.00 ± 1.41"), cell_value("+1.2 (Table 1)"), cell_value("2-core CPU")
    (92.0, 1.2, None)
    """
    match = _LEADING_NUMBER.match(text.strip())
    return float(match.group(0)) if match else None


#: A text cell longer than this wraps (within a minimum width); shorter ones stay on one line.
LONG_CELL = 40


def _cell(text: str) -> str:
    value = cell_value(text)
    kind = ("num" if _NUMBER_CELL.match(text.strip()) else
            "long" if len(text) > LONG_CELL else None)
    attrs = (f' class="{kind}"' if kind else "") + (
        f' data-value="{value!r}"' if value is not None else "")
    # "mean ± std" inside text (a paper's value and its source) stays on one line too
    body = _MEAN_STD.sub(lambda m: f'<span class="pm">{m.group(0)}</span>', esc(text))
    return f"<td{attrs}>{body}</td>"


def table(header: Iterable[str], rows: Iterable[Iterable[str]], sortable: bool = False) -> str:
    """An HTML table of escaped cells in a box that scrolls sideways when the table is wider
    than the page. Number cells are right-aligned and never wrap, and carry the number they sort
    by in ``data-value``. A ``sortable`` table sorts by a click on a column's header and has a
    row of filter boxes under the header.

    >>> print(table(["a", "b<"], [["x", "2"]]))  # doctest: +NORMALIZE_WHITESPACE
    <div class="table-box"><table><thead><tr><th>a</th><th>b&lt;</th></tr></thead>
    <tbody><tr><td>x</td><td class="num" data-value="2.0">2</td></tr></tbody></table></div>
    """
    header, rows = list(header), [list(cells) for cells in rows]
    if sortable:
        numeric = [bool(rows) and all(cell_value(r[i]) is not None or r[i].strip() in
                                      ("", "n/a", "—") for r in rows)
                   and any(cell_value(r[i]) is not None for r in rows)
                   for i in range(len(header))]
        head = "<tr>" + "".join(
            f'<th class="sortable" data-col="{i}" data-type="{"number" if n else "text"}" '
            f'aria-sort="none" tabindex="0" title="sort by {esc(h)}">{esc(h)}</th>'
            for i, (h, n) in enumerate(zip(header, numeric, strict=True))) + "</tr>"
        head += '<tr class="filters">' + "".join(
            f'<th><input type="search" data-col="{i}" placeholder="filter" '
            f'aria-label="filter {esc(h)}"></th>' for i, h in enumerate(header)) + "</tr>"
        opening = '<table class="sortable">'
    else:
        head = "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>"
        opening = "<table>"
    body = ["<tr>" + "".join(_cell(c) for c in cells) + "</tr>" for cells in rows]
    return (f'<div class="table-box">{opening}<thead>{head}</thead>\n<tbody>'
            + "\n".join(body) + "</tbody></table></div>")


def figure(title: str, png: bytes, alt: str | None = None, caption: str | None = None) -> str:
    """A heading and the PNG inlined as a data URI, so the page needs no other file; an optional
    caption under it."""
    data = base64.b64encode(png).decode()
    return (f'<figure><h2>{esc(title)}</h2><img alt="{esc(alt or title)}" '
            f'src="data:image/png;base64,{data}">'
            + (f"<figcaption>{esc(caption)}</figcaption>" if caption else "") + "</figure>")


def chart_figure(title: str, svg: str, caption: str | None = None) -> str:
    """A heading and an inline chart (:func:`benchmarks.infra.dot_chart.dot_chart_svg`), which
    the page's script lays out and which follows the table's filters and order."""
    return (f'<figure class="chart"><h2>{esc(title)}</h2>{svg}'
            + (f"<figcaption>{esc(caption)}</figcaption>" if caption else "") + "</figure>")


def figures(parts: Iterable[str]) -> str:
    """Figures side by side while the page is wide enough, one under another when it is not."""
    return '<div class="figures">' + "".join(parts) + "</div>"


def bullets(lines: Iterable[str]) -> str:
    """An escaped bullet list."""
    return "<ul>" + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>"


def page(title: str, heading: str, parts: Iterable[str], css: str = "") -> str:
    """A whole HTML document: ``parts`` (already HTML) under an ``<h1>``; ``css`` is added to the
    shared stylesheet. The sorting and filtering script comes last, inline."""
    body = "\n".join([f"<h1>{esc(heading)}</h1>", *parts])
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title>\n<style>{_CSS}{css}</style></head><body>\n{body}\n"
            f"<script>{_SCRIPT}</script>\n</body></html>\n")


#: The browsers a screenshot can be taken with, by the names their commands have.
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def screenshot(page: Path, out: Path, width: int = 1400, height: int = 900) -> Path:
    """A PNG of ``page`` as headless Chromium shows it in a window ``width`` by ``height``
    pixels (the top of the page); FileNotFoundError naming the install command without one."""
    import shutil
    import subprocess
    import tempfile

    browser = next((shutil.which(name) for name in BROWSERS if shutil.which(name)), None)
    if browser is None:
        raise FileNotFoundError("no Chromium to take the screenshot with (tried "
                                f"{', '.join(BROWSERS)}): apt-get install chromium")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:  # written whole, then moved into place
        shot = Path(scratch) / "shot.png"
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", f"--window-size={width},{height}",
                        f"--screenshot={shot}", page.resolve().as_uri()],
                       capture_output=True, timeout=120, check=True)
        shutil.move(shot, out)
    return out
