"""Atomic file writes: a reader sees the old file or the new one, never half of one; and a full
disk is said in one line that names the device and the file."""

from __future__ import annotations

import errno
import json
import os
import re
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.infra.read_back import load_json

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


def keep_aside(path: Path, aside: Path, why: object, then: str) -> None:
    """Moves the unreadable ``path`` to ``aside`` and says so on stderr in one line: ``why``,
    where it is kept, and ``then`` (what happens instead)."""
    os.replace(path, aside)
    print(f"clusterbench: {why}; it is kept as {aside} and {then}", file=sys.stderr, flush=True)


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
    remove_orphans(path)
    return path


#: How long a temporary file of :func:`write_atomic` must have gone unchanged to be an orphan:
#: a write fills and syncs its file within seconds, so one untouched this long lost its writer
#: to a kill.
ORPHAN_AGE_S = 600.0


def remove_orphans(path: Path, older_than_s: float | None = ORPHAN_AGE_S) -> None:
    """Removes the temporary files of ``path`` (:func:`temporary_of` it, beside it) that a kill
    left mid-write, once unchanged for ``older_than_s`` seconds (another writer's file in
    progress is younger; None: whatever their age). A link is removed, never followed."""
    import time

    now = time.time()
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        if not temporary_of(name, path.name):
            continue
        orphan = path.parent / name
        try:
            if older_than_s is None or now - orphan.lstat().st_mtime > older_than_s:
                orphan.unlink()
        except OSError:  # gone meanwhile, or not ours to remove
            pass


def write_atomic_together(files: dict[Path, str | bytes],
                          journal: Path | None = None) -> list[Path]:
    """Replaces several files together or not at all: every new file is written whole before
    any is renamed over its old one, so a leaderboard's ``.md``, ``.csv`` and ``.html`` never
    disagree.

    With ``journal``, the renames are recorded first and the record removed after the last, so a
    kill between two renames is completed by the next call (or :func:`finish_together`); the
    files must then lie in the journal's folder, which the record names them by.

    Raises:
        DiskFull: the disk filled up; every file is as it was.
    """
    if journal is not None:
        folder = os.path.abspath(Path(journal).parent)
        if any(os.path.dirname(os.path.abspath(p)) != folder for p in files):
            raise ValueError(f"files written under the journal {journal} must lie beside it")
        finish_together(journal, [Path(p) for p in files])
    written: dict[Path, str] = {}
    try:
        for path, data in files.items():
            written[Path(path)] = _write_temporary(Path(path), data)
        if journal is not None:  # names only: the record says nothing of any other folder
            write_atomic(journal, json.dumps({p.name: Path(tmp).name
                                              for p, tmp in written.items()}))
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
    record names (a kill while they were being written) are removed.

    A journal is a file anyone may have planted in the folder: it is followed only when every
    record renames one of this folder's own temporary files (``.<name>.<random>.tmp``) over
    its file ``<name>`` beside the journal (never a file elsewhere or in a folder below, a
    finished run's, say, nor a lock file). Otherwise nothing is renamed, and the journal is
    discarded with a one-line warning naming the first bad record; one that is not a regular
    file of bounded size and nesting in UTF-8 (:func:`benchmarks.infra.read_back.load_json`)
    is discarded too, and a folder in its place is kept aside with one line.
    """
    journal = Path(journal)
    if journal.is_dir() and not journal.is_symlink():
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        keep_aside(journal, journal.with_name(f"{journal.name}.set-aside-{stamp}"),
                   f"warning: {journal} is a folder, not a journal of renames",
                   "nothing was renamed")
    elif os.path.lexists(journal):
        pairs, problem = journal_renames(journal)
        if problem is not None:
            print(f"clusterbench: warning: discarding {journal}: {problem}; nothing was renamed",
                  file=sys.stderr, flush=True)
        for target, tmp in pairs:
            if tmp.is_file():
                os.replace(tmp, target)
        journal.unlink(missing_ok=True)
    for path in paths or []:
        remove_orphans(Path(path), older_than_s=None)


#: What :func:`tempfile.mkstemp` adds between a temporary file's prefix and suffix.
_RANDOM_PART = re.compile(r"[A-Za-z0-9_]{6,16}")


def temporary_of(name: str, target: str) -> bool:
    """Whether the file name ``name`` is one :func:`_write_temporary` gives a temporary file of
    the file named ``target``: ``.<target>.<random>.tmp``.

    >>> temporary_of(".result.json.k1ll3d.tmp", "result.json"), temporary_of("x.tmp", "x")
    (True, False)
    """
    prefix, suffix = f".{target}.", ".tmp"
    return (name.startswith(prefix) and name.endswith(suffix)
            and _RANDOM_PART.fullmatch(name[len(prefix):-len(suffix)]) is not None)


def lock_file(name: str) -> bool:
    """Whether the file name ``name`` is a lock's (``*.lock``, the folder lock's owner note),
    which no journal renames: a lock file replaced while it is held is a new file, free for a
    second command to take.

    >>> lock_file(".clusterbench.lock.owner"), lock_file("seed-0.lock"), lock_file("a.md")
    (True, True, False)
    """
    return name.endswith((".lock", ".lock.owner"))


def journal_renames(journal: Path) -> tuple[list[tuple[Path, Path]], str | None]:
    """The renames ``journal`` records, as ``(target, temporary file)`` beside it, and None; or
    no renames and what is wrong with the first record that is not one
    :func:`write_atomic_together` writes for this folder.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "j").write_text('{"/x/thesis.tex": "/x/junk.txt"}')
    >>> journal_renames(folder / "j")[1]
    "'/x/thesis.tex' is not a file beside the journal"
    """
    try:  # bounded: a planted journal may be a FIFO, a link, a bomb or 200k levels deep
        pairs = load_json(journal)
    except (OSError, ValueError) as err:
        return [], f"it is not a journal of renames ({' '.join(str(err).split())})"
    if not isinstance(pairs, dict):
        return [], "it is not a journal of renames (not a mapping)"
    folder = Path(os.path.abspath(journal.parent))
    renames = []
    for target, tmp in pairs.items():
        if not isinstance(tmp, str):
            return [], f"{target[:200]!r} is renamed from {str(tmp)[:200]!r}, not a file name"
        # names as written now; an absolute path beside the journal as written before
        target_path, tmp_path = (Path(os.path.abspath(folder / name)) for name in (target, tmp))
        if ("\0" in target + tmp or target_path.parent != folder
                or target_path == Path(os.path.abspath(journal))):
            return [], f"{target[:200]!r} is not a file beside the journal"
        if tmp_path.parent != folder or not temporary_of(tmp_path.name, target_path.name):
            return [], (f"{tmp[:200]!r} is not a temporary file of {target_path.name!r} "
                        "beside the journal")
        if lock_file(target_path.name) or lock_file(tmp_path.name):
            return [], f"{target[:200]!r} is a lock file, never renamed over"
        if tmp_path.is_symlink() or target_path.is_symlink():
            return [], f"{tmp[:200]!r} or {target[:200]!r} is a symbolic link"
        if (tmp_path.exists() and not tmp_path.is_file()) or target_path.is_dir():
            return [], f"{tmp[:200]!r} or {target[:200]!r} is not a plain file"
        renames.append((target_path, tmp_path))
    return renames, None
