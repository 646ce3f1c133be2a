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


def test_the_suite_times_the_docs_quote_come_from_the_generated_pages() -> None:
    """docs/suites.md quotes a suite's time as its generated results page gives it (``Wall
    time``, from the results themselves), not as a hand-typed copy that drifts."""
    table = (ROOT / "docs" / "suites.md").read_text(encoding="utf-8").splitlines()
    checked = 0
    for page in sorted((ROOT / "docs" / "results").glob("*.md")):
        match = re.search(r"^\| Wall time \| ([^|]+?) \|", page.read_text(encoding="utf-8"),
                          re.M)
        if match is None:
            continue
        (row,) = [line for line in table if line.startswith(f"| `{page.stem}` |")]
        assert f"{match.group(1)} on " in row, (page.stem, match.group(1), row)
        checked += 1
    assert checked >= 1
