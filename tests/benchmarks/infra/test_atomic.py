"""write_atomic: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

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
