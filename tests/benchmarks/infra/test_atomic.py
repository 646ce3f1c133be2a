"""write_atomic: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

import benchmarks.infra.atomic as atomic
from benchmarks.infra.atomic import write_atomic


def leftovers(directory: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


def test_writes_text_and_creates_parent_directories(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "result.json"
    text = '{"metric": 0.5, "name": "ünïcödé ±"}\n'
    assert write_atomic(target, text) == target
    assert target.read_text(encoding="utf-8") == text
    assert leftovers(target.parent, {"result.json"}) == []


def test_writes_bytes_exactly(tmp_path: Path) -> None:
    data = bytes(range(256)) + b"\r\n\x00"
    target = write_atomic(str(tmp_path / "chart.png"), data)
    assert Path(target).read_bytes() == data


def test_replaces_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "leaderboard.md"
    target.write_text("old, and longer than the new content\n")
    write_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    assert leftovers(tmp_path, {"leaderboard.md"}) == []


@pytest.mark.parametrize("data", ["new text", b"new bytes"])
@pytest.mark.parametrize("fail_in", ["fsync", "replace"])
def test_failure_leaves_the_old_file_and_no_temp_file(tmp_path: Path, monkeypatch, data,
                                                      fail_in: str) -> None:
    target = tmp_path / "leaderboard.csv"
    target.write_text("old content\n")

    def boom(*args, **kwargs):
        raise OSError(f"simulated failure in {fail_in}")

    monkeypatch.setattr(atomic.os, fail_in, boom)
    with pytest.raises(OSError, match="simulated"):
        write_atomic(target, data)
    monkeypatch.undo()
    assert target.read_text() == "old content\n"
    assert leftovers(tmp_path, {"leaderboard.csv"}) == []


def test_failure_midway_through_the_write(tmp_path: Path, monkeypatch) -> None:
    # The data is partly written to the temporary file before the write fails.
    target = tmp_path / "result.json"
    target.write_text("old content\n")
    real_fdopen = os.fdopen

    class HalfWriter:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()
            return False

        def write(self, data):
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "fdopen", lambda *a, **k: HalfWriter(real_fdopen(*a, **k)))
    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, "x" * 10_000)
    monkeypatch.undo()
    assert target.read_text() == "old content\n"
    assert leftovers(tmp_path, {"result.json"}) == []


def test_keyboard_interrupt_also_cleans_up(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "out.txt"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, "data")
    monkeypatch.undo()
    assert not target.exists()
    assert leftovers(tmp_path, set()) == []


def test_rejects_non_text_non_bytes_without_touching_the_file(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(TypeError):
        write_atomic(target, 123)  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert leftovers(tmp_path, {"f.txt"}) == []


def test_new_file_permissions_follow_the_umask(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)
    try:
        plain = tmp_path / "plain.txt"
        plain.write_text("x")
        atomic_file = write_atomic(tmp_path / "atomic.txt", "x")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(atomic_file.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)


def plant(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def link(path: Path, target: Path) -> Path:
    path.symlink_to(target)
    return path


#: Planted journals: each record renames a file over another that is not the folder's own
#: file, or from a file that is not one of its temporary files.
PLANTED = {
    "a file in a sibling folder": lambda board, out: {
        out / "draft.md": plant(out / ".draft.md.k3j9x0qa.tmp", "junk")},
    "a finished run's result": lambda board, out: {
        board / "runs/alpha/seed-2/result.json":
            plant(board / "runs/alpha/seed-2/.result.json.q8w7e6r5.tmp", '{"stale": 2}')},
    "a file above the folder, through ..": lambda board, out: {
        board / "../draft.md": plant(out.parent / ".draft.md.a1b2c3d4.tmp", "junk")},
    "a plain file of the folder as the new file": lambda board, out: {
        board / "leaderboard.csv": plant(board / "notes.txt", "junk")},
    "a link named as a temporary file": lambda board, out: {
        board / "leaderboard.csv": link(board / ".leaderboard.csv.z9y8x7w6.tmp", out / "draft.md")},
}


@pytest.mark.parametrize("case", list(PLANTED))
def test_a_planted_journal_renames_nothing(tmp_path: Path, capsys, case: str) -> None:
    """A journal names this folder's own temporary files and the files beside it: one naming
    anything else is discarded with a one-line warning, and no file of its records is renamed,
    not even a record that would have been followed alone."""
    board, out = tmp_path / "results" / "suite", tmp_path / "thesis"
    victims = {p: plant(p, f"kept {p.name}") for p in (
        out / "draft.md", board / "runs/alpha/seed-2/result.json", board / "leaderboard.csv",
        board / "leaderboard.md", tmp_path / "results" / "draft.md")}
    good = plant(board / ".leaderboard.md.m4n5b6v7.tmp", "new board")
    records = {**PLANTED[case](board, out), board / "leaderboard.md": good}
    journal = plant(board / ".leaderboard.journal",
                    json.dumps({str(k): str(v) for k, v in records.items()}))
    atomic.finish_together(journal, [board / "leaderboard.md"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"discarding {journal}" in err and "nothing was renamed" in err
    for path in victims:
        assert not path.is_symlink() and path.read_text() == f"kept {path.name}", path
    assert not journal.exists()


def test_a_journal_written_by_the_folder_is_still_followed(tmp_path: Path, capsys) -> None:
    """The journal's own records (file names beside it) are renamed as before."""
    board = tmp_path / "board"
    plant(board / "leaderboard.md", "old")
    tmp = plant(board / ".leaderboard.md.p0o9i8u7.tmp", "new")
    journal = plant(board / ".leaderboard.journal", json.dumps({"leaderboard.md": tmp.name}))
    atomic.finish_together(journal)
    assert (board / "leaderboard.md").read_text() == "new" and not tmp.exists()
    assert capsys.readouterr().err == "" and not journal.exists()


def test_temporary_files_a_kill_left_go_with_the_next_write_and_a_fresh_one_stays(
        tmp_path: Path) -> None:
    """A kill mid-write leaves ``.result.json.<random>.tmp``: the next write of that file removes
    it once it is older than a write takes, but not another writer's file in progress, nor a
    file of another name, and it never follows a link."""
    import os
    import time

    from benchmarks.infra.atomic import ORPHAN_AGE_S

    target = tmp_path / "result.json"
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    old, fresh = tmp_path / ".result.json.k1ll3d.tmp", tmp_path / ".result.json.wr1t1ng.tmp"
    other, link = tmp_path / ".metrics.csv.k1ll3d.tmp", tmp_path / ".result.json.l1nk3d.tmp"
    for path in (old, fresh, other):
        path.write_text("half")
    link.symlink_to(outside)
    long_ago = time.time() - ORPHAN_AGE_S - 60
    for path in (old, other):
        os.utime(path, (long_ago, long_ago))
    os.utime(link, (long_ago, long_ago), follow_symlinks=False)
    write_atomic(target, "{}")
    assert not old.exists() and not link.is_symlink()
    assert fresh.read_text() == "half" and other.read_text() == "half"
    assert outside.read_text() == "keep" and target.read_text() == "{}"


#: Journals no reader should parse: nested past Python's recursion limit (RecursionError, not a
#: ValueError, before), not UTF-8, a FIFO (never opened: it would block the reader).
UNREADABLE_JOURNALS = {
    "200k-deep JSON": lambda journal: journal.write_text("[" * 200_000 + "]" * 200_000),
    "200k-deep JSON object": lambda journal: journal.write_text('{"a": ' * 200_000 + "1"
                                                                + "}" * 200_000),
    "not UTF-8": lambda journal: journal.write_bytes(b'{"leaderboard.md": "\xff"}'),
    "a FIFO": lambda journal: os.mkfifo(journal),
}


@pytest.mark.parametrize("case", list(UNREADABLE_JOURNALS))
def test_an_unreadable_journal_is_discarded_in_one_line(tmp_path: Path, capsys,
                                                        case: str) -> None:
    board = tmp_path / "board"
    plant(board / "leaderboard.md", "old")
    UNREADABLE_JOURNALS[case](board / ".leaderboard.journal")
    atomic.write_atomic_together({board / "leaderboard.md": "new"},
                                 journal=board / ".leaderboard.journal")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "discarding" in err and "nothing was renamed" in err, err
    assert (board / "leaderboard.md").read_text() == "new"
    assert leftovers(board, {"leaderboard.md"}) == []


def test_a_journal_that_is_a_folder_is_set_aside_and_the_board_written(tmp_path: Path,
                                                                       capsys) -> None:
    """IsADirectoryError before, the board not written and its temporary files left behind."""
    board = tmp_path / "board"
    plant(board / "leaderboard.md", "old")
    plant(board / ".leaderboard.journal" / "notes.txt", "someone's")
    atomic.write_atomic_together({board / "leaderboard.md": "new"},
                                 journal=board / ".leaderboard.journal")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a journal of renames" in err, err
    assert "nothing was renamed" in err
    assert (board / "leaderboard.md").read_text() == "new"
    [aside] = leftovers(board, {"leaderboard.md"})
    assert (board / aside / "notes.txt").read_text() == "someone's"


@pytest.mark.parametrize("lock", [".clusterbench.lock", ".clusterbench.lock.owner",
                                  "seed-0.lock"])
def test_a_journal_never_renames_over_a_lock_file_while_it_is_held(tmp_path: Path, capsys,
                                                                   lock: str) -> None:
    """``{".clusterbench.lock": "..clusterbench.lock.<x>.tmp"}`` passes the "beside it" rule: it
    replaced the held lock file with a new one, which a second command could take."""
    from benchmarks.infra.locking import FolderBusy, folder_lock, seed_lock

    board = tmp_path / "board"
    with folder_lock(board), seed_lock(board / "seed-0.lock"):
        held = {p.name: p.stat().st_ino for p in board.iterdir()}
        tmp = plant(board / f".{lock}.k1ll3d.tmp", "a new lock file")
        journal = plant(board / ".leaderboard.journal", json.dumps({lock: tmp.name}))
        atomic.finish_together(journal)
        assert {p.name: p.stat().st_ino for p in board.iterdir() if p.name in held} == held
        with pytest.raises(FolderBusy), folder_lock(board):
            pass
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"discarding {journal}" in err and "lock" in err, err
