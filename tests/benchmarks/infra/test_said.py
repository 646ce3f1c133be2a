"""A running task's marker and the file of what it says are written in place in the results
folder, never through a link planted there: the file a link leads to is left as it was."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from benchmarks.infra.errors import ConfigError
from benchmarks.infra.said import SaidToFile, heartbeat


def plant(link: Path, outside: Path, kind: str) -> Path:
    outside.write_text("a thesis")
    link.parent.mkdir(parents=True, exist_ok=True)
    if kind == "hard link":
        os.link(outside, link)
    else:
        link.symlink_to(outside)
    return link


@pytest.mark.parametrize("kind", ["hard link", "symbolic link"])
def test_a_linked_marker_is_refused_and_the_file_outside_kept(kind, tmp_path):
    marker = plant(tmp_path / "suite/.started/simclr%seed-0", tmp_path / "thesis.tex", kind)
    with pytest.raises(ConfigError, match=kind), heartbeat(marker):
        pass
    assert (tmp_path / "thesis.tex").read_text() == "a thesis"


@pytest.mark.parametrize("kind", ["hard link", "symbolic link"])
def test_a_linked_said_file_gets_no_line_and_the_file_outside_kept(kind, tmp_path):
    said = plant(tmp_path / "suite/.started/simclr%seed-0.said", tmp_path / "thesis.tex", kind)
    stream = io.StringIO()
    SaidToFile(stream, said).write("clusterbench: waiting for seed-0.lock\n")
    assert stream.getvalue() == "clusterbench: waiting for seed-0.lock\n"  # still on stderr
    assert (tmp_path / "thesis.tex").read_text() == "a thesis"


def test_the_marker_is_rewritten_and_the_said_lines_appended(tmp_path):
    marker, said = tmp_path / ".started/job", tmp_path / ".started/job.said"
    marker.parent.mkdir()
    marker.write_text("an earlier attempt's marker, longer than a host name")
    with heartbeat(marker, every_s=0.01):
        out = SaidToFile(io.StringIO(), said)
        out.write("clusterbench: one\nnot said\nclusterbench: two\n")
        out.write("clusterbench: three\n")
    assert "earlier" not in marker.read_text()
    assert said.read_text() == "clusterbench: one\nclusterbench: two\nclusterbench: three\n"
