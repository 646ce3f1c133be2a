"""What the project's own files say: the README is a manual of under 10 KB, and no file names a
path outside the repository (a user who clones the project has nothing there) or talks about how
the project is developed rather than about the project."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from repository import ROOT

TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".cfg", ".txt", ".html", ""}

OUTSIDE_PATHS = re.compile(r"\.\./(shared|\.library|hooks)\b|(?<![\w.])/(work|home|root|Users)/")
DEVELOPMENT_TALK = re.compile(r"\bthe (issue|ticket)\b|\bthis (issue|session|ticket)\b"
                              r"|\bissue #?\d+\b", re.IGNORECASE)


def project_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the project's file list is unknown")
    return [ROOT / name for name in listed
            if (ROOT / name).is_file() and (ROOT / name).suffix in TEXT_SUFFIXES]


def offending_lines(pattern: re.Pattern[str]) -> list[str]:
    found = []
    for path in project_files():
        if path.resolve() == Path(__file__).resolve():
            continue  # the patterns themselves
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
                  for number, line in enumerate(text.splitlines(), 1) if pattern.search(line)]
    return found


def test_the_readme_is_a_manual_under_10_kb() -> None:
    readme = (ROOT / "README.md").read_bytes()
    assert len(readme) < 10_000, f"README.md is {len(readme)} bytes"
    for section in ("Quick start", "make bench", "make test", "docs/"):
        assert section.encode() in readme


def test_no_file_names_a_path_outside_the_repository() -> None:
    assert offending_lines(OUTSIDE_PATHS) == []


def test_no_file_talks_about_how_the_project_is_developed() -> None:
    assert offending_lines(DEVELOPMENT_TALK) == []


def test_the_patterns_catch_what_they_are_for() -> None:
    assert OUTSIDE_PATHS.search("see ../shared/papers/transfusion.md")
    assert OUTSIDE_PATHS.search("written to /home/someone/elsewhere/results")  # made up
    assert not OUTSIDE_PATHS.search("a run name like ../../x is refused")
    assert DEVELOPMENT_TALK.search("as the issue specifies")
    assert DEVELOPMENT_TALK.search("fixed in this session")
    assert not DEVELOPMENT_TALK.search("a known Ray fault: placement groups are kept")


def test_no_source_has_an_invalid_escape_sequence() -> None:
    """A docstring's ``\\theta`` in a plain string is a tab and ``heta``, and Python 3.12 warns
    at every import (an error in a later release): such docstrings must be raw strings."""
    import warnings

    found = []
    for path in project_files():
        if path.suffix != ".py":
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compile(path.read_text(), str(path), "exec")
        found += [f"{path.relative_to(ROOT)}:{w.lineno}: {w.message}" for w in caught]
    assert found == []


#: A Markdown link or image: ``[text](target)``, ``![alt](target)``.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def heading_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens.

    >>> heading_anchor("Search, then retrain: `clusterbench bench`")
    'search-then-retrain-clusterbench-bench'
    """
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_links(path: Path) -> list[str]:
    """The relative links of a Markdown file whose file, or heading (``#anchor``), is not there."""
    found = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file) if file else path
        if not linked.exists():
            found.append(f"{path.relative_to(ROOT)}: {target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in {
                heading_anchor(h) for h in re.findall(r"^#+\s+(.*)$", linked.read_text(), re.M)}:
            found.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    return found


def test_every_relative_link_of_the_readme_and_docs_leads_somewhere():
    found = [link for path in project_files() if path.suffix == ".md"
             for link in broken_links(path)]
    assert found == []


def test_the_link_check_catches_a_missing_file_and_heading(tmp_path, monkeypatch):
    import test_project_text

    monkeypatch.setattr(test_project_text, "ROOT", tmp_path)
    (tmp_path / "a.md").write_text("# Where results go\n[x](b.md) [y](#where-results-go) "
                                   "[z](#nowhere) [w](https://example.org/missing)\n")
    assert broken_links(tmp_path / "a.md") == ["a.md: b.md (no such file)",
                                               "a.md: #nowhere (no such heading)"]


#: How the docs quote a time a generated results page gives: ``4 min 59 s ([results](results/
#: smoke.md))``, the time (or the compute, ``0.950 CPU hours``) and then, in brackets, first the
#: link to its page.
TIME_QUOTE = re.compile(r"(\d+ min \d+ s|\d+ s|\d+\.\d+ [CG]PU hours)\s+"
                        r"\(\[[^\]]+\]\((?:docs/)?results/([\w.-]+)\.md\)")


def page_times(page: Path) -> set[str]:
    """The times a generated results page gives: its ``Wall time``, each ``Search time`` and
    its ``Compute``."""
    text = page.read_text(encoding="utf-8") if page.is_file() else ""
    rows = re.findall(r"^\| (?:Wall time|Search time|Compute) \| ([^|]+?) \|", text, re.M)
    return {m for row in rows
            for m in re.findall(r"\b(\d+ min \d+ s|\d+ s|\d+\.\d+ [CG]PU hours)\b", row)}


def misquoted_times(docs: dict[str, str], pages: Path) -> list[str]:
    """Each quoted time (:data:`TIME_QUOTE`) in ``docs`` (name -> text) that its page in
    ``pages`` does not give, and each page whose wall time no doc quotes."""
    found, quoted = [], set()
    for name, text in docs.items():
        for match in TIME_QUOTE.finditer(text):
            time, stem = match.groups()
            quoted.add((stem, time))
            if time not in page_times(pages / f"{stem}.md"):
                found.append(f"{name}: {time} (not a time results/{stem}.md gives)")
    for page in sorted(pages.glob("*.md")):
        wall = re.search(r"^\| Wall time \| ([^|]+?) \|", page.read_text(encoding="utf-8"),
                         re.M)
        if wall and (page.stem, wall.group(1)) not in quoted:
            found.append(f"results/{page.name}: its wall time {wall.group(1)} is quoted nowhere")
    return found


def test_the_times_the_docs_quote_come_from_the_generated_pages() -> None:
    """A time the docs quote from a results page is the one the page gives (``Wall time``,
    ``Search time``: from the results themselves), not a hand-typed copy that drifts; every
    page's wall time is quoted."""
    docs = {str(path.relative_to(ROOT)): path.read_text(encoding="utf-8")
            for path in project_files() if path.suffix == ".md"
            and "results" not in path.relative_to(ROOT).parts}
    assert misquoted_times(docs, ROOT / "docs" / "results") == []
    assert sum(len(TIME_QUOTE.findall(text)) for text in docs.values()) >= 5


def test_a_misquoted_time_is_caught(tmp_path) -> None:
    (tmp_path / "smoke.md").write_text("| Wall time | 4 min 59 s |\n"
                                       "| Search time | simclr+tuned: 48 s (6 configurations) |\n")
    (tmp_path / "other.md").write_text("| Wall time | 12 s |\n")
    docs = {"a.md": "took 4 min 59 s ([results](results/smoke.md)), searched in 48 s "
                    "([results](results/smoke.md)) and 47 s ([page](results/smoke.md))"}
    assert misquoted_times(docs, tmp_path) == [
        "a.md: 47 s (not a time results/smoke.md gives)",
        "results/other.md: its wall time 12 s is quoted nowhere"]
