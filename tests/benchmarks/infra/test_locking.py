"""A results folder's lock file and its owner note are the folder's own files: a link planted at
either name, symbolic or hard (a second name of a file elsewhere), is refused in one line, exit 2,
and the file it leads to is left as it was, even when the link appears after the check."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fifo import finishes

from benchmarks.cli import main
from benchmarks.infra import locking
from benchmarks.infra.errors import ConfigError
from benchmarks.infra.locking import LOCK, OWNER, FolderBusy, FolderRefused, folder_lock


def untouched(path: Path) -> tuple[bytes, int, int]:
    """What writing through a link would change: the bytes, the mode, the modification time."""
    info = path.stat()
    return path.read_bytes(), info.st_mode, info.st_mtime_ns


def plant(link: Path, outside: Path, kind: str) -> None:
    if kind == "hard link":
        os.link(outside, link)
    else:
        link.symlink_to(outside)


@pytest.mark.parametrize("kind", ["hard link", "symbolic link"])
@pytest.mark.parametrize("name", [LOCK, OWNER])
def test_leaderboard_refuses_a_linked_lock_file_in_one_line(name, kind, tmp_path, capsys):
    results, outside = tmp_path / "results", tmp_path / "thesis.tex"
    results.mkdir()
    outside.write_text("a thesis, not a lock")
    before = untouched(outside)
    plant(results / name, outside, kind)
    assert main(["leaderboard", str(results)]) == 2
    assert untouched(outside) == before
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(results / name) in err[0] and kind in err[0], err


@pytest.mark.parametrize("kind", ["hard link", "symbolic link"])
@pytest.mark.parametrize("name", [LOCK, OWNER])
def test_a_link_planted_after_the_check_is_never_written_through(name, kind, tmp_path,
                                                                 monkeypatch):
    """The check before the lock is taken cannot see a link planted a moment later: the lock
    file and the note are opened as named (never through a symbolic link) and refused when the
    file opened has another name, before a byte of it changes."""
    monkeypatch.setattr(locking, "refuse_linked_lock_files", lambda directory: None)
    results, outside = tmp_path / "results", tmp_path / "thesis.tex"
    results.mkdir()
    outside.write_text("a thesis, not a lock")
    before = untouched(outside)
    plant(results / name, outside, kind)
    with pytest.raises((ConfigError, FolderRefused), match=kind), folder_lock(results):
        pass
    assert untouched(outside) == before


def test_the_note_is_written_and_removed_and_a_second_command_is_busy(tmp_path):
    """The healthy case beside them: the note names this process while the lock is held."""
    results = tmp_path / "results"
    with folder_lock(results):
        assert f'"pid": {os.getpid()}' in (results / OWNER).read_text()
        with pytest.raises(FolderBusy, match=f"process {os.getpid()}"), folder_lock(results):
            pass
    assert not (results / OWNER).exists()
    with folder_lock(results):  # let go of
        pass


def test_a_stale_note_of_a_killed_command_is_written_over(tmp_path):
    """A kill -9 leaves the note behind: the folder's own file, of one name, written over."""
    results = tmp_path / "results"
    results.mkdir()
    (results / OWNER).write_text('{"pid": 1, "host": "gone", "since": "then", "command": "x"}'
                                 + " " * 1000)
    with folder_lock(results):
        note = (results / OWNER).read_text()
        assert f'"pid": {os.getpid()}' in note and note.endswith("}")


def test_a_fifo_for_a_note_is_refused_and_never_waited_on(tmp_path):
    """Writing the note, or reading it to name the holder, would block on a FIFO for good."""
    results = tmp_path / "results"
    results.mkdir()
    os.mkfifo(results / OWNER)
    said = []

    def take() -> None:
        try:
            with folder_lock(results):
                pass
        except ConfigError as err:
            said.append(str(err))
        said.append(locking.holder(results))

    finishes(take, results / OWNER, "taking the lock")
    assert len(said) == 2 and "not a regular file" in said[0], said
    assert said[1] == "another process"


@pytest.mark.parametrize("kind", ["hard link", "symbolic link"])
def test_a_linked_seed_lock_is_refused_and_the_file_outside_kept(kind, tmp_path):
    outside, lock = tmp_path / "thesis.tex", tmp_path / "runs/simclr/seed-0.lock"
    outside.write_text("a thesis, not a lock")
    before = untouched(outside)
    lock.parent.mkdir(parents=True)
    plant(lock, outside, kind)
    with pytest.raises((ConfigError, FolderRefused), match=kind), locking.seed_lock(lock):
        pass
    assert untouched(outside) == before
