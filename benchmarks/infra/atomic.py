"""Atomic file writes: a reader sees the old file or the new one, never half of one; and a full
disk is said in one line that names the device and the file."""

from __future__ import annotations

import errno
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


def write_atomic_together(files: dict[Path, str | bytes]) -> list[Path]:
    """Replace several files together or not at all: every new file is written whole first, and
    only then are they renamed over the old ones (a leaderboard's ``.md``, ``.csv`` and ``.html``
    never disagree because the disk filled up between two of them).

    Raises:
        DiskFull: the disk filled up; every file is as it was.
    """
    written: dict[Path, str] = {}
    try:
        for path, data in files.items():
            written[Path(path)] = _write_temporary(Path(path), data)
        for path, tmp in written.items():  # a rename takes no space
            os.replace(tmp, path)
    except BaseException:
        for tmp in written.values():
            Path(tmp).unlink(missing_ok=True)
        raise
    return list(written)
