"""Every file read back from a results folder goes through the one reader
(``benchmarks/infra/read_back.py``: a regular file, no link, of bounded size and nesting, strict
UTF-8) or the readers beside it (a result through ``read_result``, YAML through ``read_yaml``,
weights through ``load_tensors``): no other module parses JSON from a file, reads a CSV straight
from an open file, or opens a results file itself. The scan reads the source of ``benchmarks/``
and ``tune/``; what it may not hold is listed here with the reason."""

from __future__ import annotations

import ast
import re

from repository import ROOT

SCANNED = ("benchmarks", "tune")
#: The readers themselves: what they hold is the reading every other module goes through.
READERS = {
    "benchmarks/infra/read_back.py",  # the bounded reader
    "benchmarks/infra/yaml_files.py",  # YAML, read through its own bounded stream
    # weights and checkpoints: a regular file of bounded size, through torch's restricted
    # unpickler
    "benchmarks/infra/tensor_files.py",
}
#: A results file, by how the code names it: where a ``read_text`` or ``read_bytes`` of one is
#: named so, it is a read back that skipped the reader.
RESULTS_FILE = re.compile(r"result\.json|leaderboard\.(md|csv|html)|metrics[\w.*]*\.csv|"
                          r"trials\.csv|\bRECORD\b|\bMANIFEST\b|\bOWNER\b|journal")
#: Reads outside the readers that are not of a results folder, or not yet moved to the reader,
#: by (file, function or ``*`` for any of the file's, what the scan says of it). Each says why.
ALLOWED = {
    # a GPU acceptance check reads what its own child processes just wrote into the check's
    # own fresh work folder, and --render a record the user names on the command line
    ("benchmarks/gpu_check.py", "*", "json.loads"),
    # a task's log of what it said, followed as it grows, from the byte where the last read
    # ended (the reader reads a file whole)
    ("benchmarks/infra/said.py", "new_lines", "open"),
    # the lock's owner note, read only to name its holder in a message (anything unreadable
    # says "another process"); locking.py is being reworked on its own
    ("benchmarks/infra/locking.py", "holder", "json.loads"),
    ("benchmarks/infra/locking.py", "holder", "read_text"),
}


def function_at(tree: ast.AST) -> dict[ast.AST, str]:
    """Each node -> the name of the function (or class body) it lies in, ``<module>`` outside."""
    owner: dict[ast.AST, str] = {}

    def visit(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else name
            owner[child] = inner
            visit(child, inner)

    visit(tree, "<module>")
    return owner


def is_call_of(node: ast.AST, *names: str) -> bool:
    """``node`` is a call of ``module.name`` or ``name`` for one of ``names`` (dotted)."""
    return isinstance(node, ast.Call) and ast.unparse(node.func) in names


def reads_for_writing(call: ast.Call) -> bool:
    """An ``open`` whose mode writes or appends (``"w"``, ``"a"``, ``"x"``, ``"+"``), or an
    ``os.open`` whose flags do."""
    if ast.unparse(call.func) == "os.open":
        return bool(re.search(r"O_WRONLY|O_RDWR|O_CREAT", ast.unparse(call)))
    mode = call.args[1] if len(call.args) > 1 and ast.unparse(call.func) == "open" else (
        call.args[0] if call.args and not ast.unparse(call.func) == "open" else None)
    mode = next((k.value for k in call.keywords if k.arg == "mode"), mode)
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) \
        and any(c in mode.value for c in "wax+")


def findings(source: str, path: str) -> set[tuple[str, str, str]]:
    """(file, function, what) for each read in ``source`` that skips the reader:

    - ``json.load``/``json.loads`` (or ``load``/``loads`` imported from ``json``), unless of a
      ``json.dumps(...)`` in the same call (a round trip of a value in memory);
    - ``csv.reader``/``csv.DictReader`` of anything but an ``io.StringIO`` (a CSV read straight
      from an open file, unbounded);
    - an ``open``, ``Path.open`` or ``os.open`` that reads, of any file, unless of bytes or text
      already in memory;
    - ``read_text``/``read_bytes`` of a file named like a results file (:data:`RESULTS_FILE`).
    """
    tree = ast.parse(source)
    owner = function_at(tree)
    json_names = {"json.load": "json.load", "json.loads": "json.loads"} | {
        a.asname or a.name: f"json.{a.name}" for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "json"
        for a in node.names if a.name in ("load", "loads")}
    in_memory = {item.optional_vars.id for node in ast.walk(tree) if isinstance(node, ast.With)
                 for item in node.items if isinstance(item.optional_vars, ast.Name)
                 and is_call_of(item.context_expr, "io.StringIO")}
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name, where = ast.unparse(node.func), owner.get(node, "<module>")
        if name in json_names:
            if not (node.args and is_call_of(node.args[0], "json.dumps")):
                found.add((path, where, json_names[name]))
        elif name in ("csv.reader", "csv.DictReader"):
            text = node.args[0] if node.args else None
            if not (is_call_of(text, "io.StringIO")
                    or isinstance(text, ast.Name) and text.id in in_memory):
                found.add((path, where, name))
        elif name in ("open", "os.open") or name.endswith(".open") and not name[:1].isupper():
            # (a class's ``open``, Pillow's ``Image.open`` or a record's, opens no file here)
            if not (node.args and is_call_of(node.args[0], "io.BytesIO", "io.StringIO")
                    or reads_for_writing(node)):
                found.add((path, where, "open"))
        elif name.endswith((".read_text", ".read_bytes")):
            if RESULTS_FILE.search(ast.unparse(node.func.value)):
                found.add((path, where, name.rsplit(".", 1)[1]))
    return found


def scanned_findings() -> set[tuple[str, str, str]]:
    found = set()
    for folder in SCANNED:
        for file in sorted((ROOT / folder).rglob("*.py")):
            path = str(file.relative_to(ROOT))
            if path not in READERS:
                found |= findings(file.read_text(encoding="utf-8"), path)
    return found


def allowed(finding: tuple[str, str, str]) -> bool:
    path, _, what = finding
    return finding in ALLOWED or (path, "*", what) in ALLOWED


def test_every_results_file_is_read_through_the_one_reader() -> None:
    assert sorted(f for f in scanned_findings() if not allowed(f)) == []


def test_the_scan_finds_each_way_of_reading_around_the_reader() -> None:
    source = '''
import csv, io, json, os
from json import loads as parse

def result_of(folder):
    return json.loads((folder / "result.json").read_text())

def record(path):
    with open(path) as file:
        return json.load(file)

def table(path):
    with path.open(newline="") as file:
        return list(csv.DictReader(file))

def note(folder):
    return parse((folder / RECORD).read_bytes())

def raw(path):
    return os.open(path, os.O_RDONLY)

def fine(path, value, text):
    with open(path, "w") as out:
        out.write(json.dumps(value))
    os.open(path, os.O_WRONLY | os.O_CREAT)
    return json.loads(json.dumps(value)), list(csv.reader(io.StringIO(text)))
'''
    assert sorted(findings(source, "x.py")) == [
        ("x.py", "note", "json.loads"), ("x.py", "note", "read_bytes"),
        ("x.py", "raw", "open"),
        ("x.py", "record", "json.load"), ("x.py", "record", "open"),
        ("x.py", "result_of", "json.loads"), ("x.py", "result_of", "read_text"),
        ("x.py", "table", "csv.DictReader"), ("x.py", "table", "open"),
    ]
