"""Atomic file writes: a reader sees the old file or the new one, never half of one; and a full
disk is said in one line that names the device and the file."""

from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path

#: The errors a full file system (or a spent quota) raises.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(OSError):
    """No space left where a result was being written: the write was abandoned and every earlier
    file is as it was (each write goes to a temporary file that replaces its target only once
    whole). The command line says this in one line and exits 1."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        super().__init__(errno.ENOSPC, f"no space left on {device_of(self.path)} while writing "
                                       f"{self.path}; earlier results are intact")

    def __str__(self) -> str:
        return self.strerror or ""

    def __reduce__(self):  # it crosses process boundaries (a Ray task's error)
        return DiskFull, (self.path,)


def device_of(path: Path) -> str:
    """The file system holding ``path``: its device and mount point (``/dev/vda mounted on /``).

    >>> device_of(Path("/")).endswith("mounted on /")
    True
    """
    path = Path(os.path.abspath(path))
    mount = next((p for p in (path, *path.parents) if os.path.ismount(p)), Path("/"))
    device = "a device"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) > 1 and fields[1] == str(mount):
                device = fields[0]
    except OSError:
        pass
    return f"{device} mounted on {mount}"


def is_disk_full(err: BaseException) -> bool:
    return isinstance(err, OSError) and err.errno in NO_SPACE


def lost_own_file(err: BaseException, folder: str | Path) -> bool:
    """Whether ``err`` is a file missing below ``folder``, the results a command writes itself:
    its loss is a crash to be shown whole, not a missing input said in one line.

    >>> lost_own_file(FileNotFoundError(2, "No such file", "r/s/x.json"), "r/s")
    True
    >>> lost_own_file(FileNotFoundError(2, "No such file", "data/x.npz"), "r/s")
    False
    """
    if not isinstance(err, FileNotFoundError) or err.filename is None:
        return False
    named = Path(os.path.abspath(os.fsdecode(err.filename)))
    top = Path(os.path.abspath(folder))
    return named != top and named.is_relative_to(top)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_temporary(path: Path, data: str | bytes) -> str:
    """``data`` in a new temporary file beside ``path``, on disk (fsync); returns its name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file 0600; give it the mode open() would (or the replaced file's).
        os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask())
        with os.fdopen(fd, mode, **({} if isinstance(data, bytes) else {"encoding": "utf-8"})) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if is_disk_full(err):
            raise DiskFull(path) from err
        raise
    return tmp


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Write ``data`` to a temporary file beside ``path``, fsync it, rename it over ``path``.

    Raises:
        DiskFull: the disk filled up; ``path`` is as it was.
    """
    path = Path(path)
    tmp = _write_temporary(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_atomic_together(files: dict[Path, str | bytes],
                          journal: Path | None = None) -> list[Path]:
    """Replaces several files together or not at all: every new file is written whole before
    any is renamed over its old one, so a leaderboard's ``.md``, ``.csv`` and ``.html`` never
    disagree.

    With ``journal``, the renames are recorded first and the record removed after the last, so a
    kill between two renames is completed by the next call (or :func:`finish_together`).

    Raises:
        DiskFull: the disk filled up; every file is as it was.
    """
    if journal is not None:
        finish_together(journal, [Path(p) for p in files])
    written: dict[Path, str] = {}
    try:
        for path, data in files.items():
            written[Path(path)] = _write_temporary(Path(path), data)
        if journal is not None:
            write_atomic(journal, json.dumps({str(p): tmp for p, tmp in written.items()}))
        for path, tmp in written.items():  # a rename takes no space
            os.replace(tmp, path)
        if journal is not None:
            Path(journal).unlink(missing_ok=True)
    except BaseException:
        if journal is None or not Path(journal).exists():
            for tmp in written.values():
                Path(tmp).unlink(missing_ok=True)
        raise
    return list(written)


def finish_together(journal: Path, paths: list[Path] | None = None) -> None:
    """Finish what a kill left of :func:`write_atomic_together`: the renames its ``journal``
    records whose written file is still there; then the temporary files of ``paths`` that no
    record names (a kill while they were being written) are removed."""
    journal = Path(journal)
    if journal.is_file():
        try:
            pairs = json.loads(journal.read_text())
        except ValueError:
            pairs = {}
        for path, tmp in pairs.items() if isinstance(pairs, dict) else []:
            if Path(tmp).is_file() and Path(tmp).parent == Path(path).parent:
                os.replace(tmp, path)
        journal.unlink(missing_ok=True)
    for path in paths or []:
        for orphan in Path(path).parent.glob(f".{Path(path).name}.*.tmp"):
            orphan.unlink(missing_ok=True)
