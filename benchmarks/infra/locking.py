"""One command at a time on a results folder: two ``bench`` (or ``tune``, ``evaluate``,
``leaderboard``) commands writing the same suite's results would retrain each other's runs,
garble each other's training curves and lose results."""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

#: The lock file, and the note beside it saying who holds it.
LOCK, OWNER = ".clusterbench.lock", ".clusterbench.lock.owner"


class FolderRefused(RuntimeError):
    """The command cannot take the folder (the command line exits 2, naming it and why)."""


class FolderBusy(FolderRefused):
    """Another command holds the folder's lock."""


class FolderUnwritable(FolderRefused):
    """The folder cannot be made or written: a file is in the way, the file system is
    read-only, or the permissions say no."""


class LocksUnsupported(FolderRefused):
    """The folder's file system does not lock files (``flock``): a lock there would be a file
    that a killed command leaves behind, or no lock at all."""


class LockThroughLink(FolderRefused):
    """The lock file or its owner note is a symbolic link: taking the lock would truncate or
    overwrite the file it leads to, so the command refuses the folder (exit 2, naming it)."""


def refuse_linked_lock_files(directory: Path) -> None:
    """Raise :class:`LockThroughLink` if the lock file or the owner note in ``directory`` is a
    symbolic link (opening the lock truncates its file; the note is written over)."""
    for name in (LOCK, OWNER):
        if (directory / name).is_symlink():
            raise LockThroughLink(
                f"{directory / name} is a symbolic link (to {os.readlink(directory / name)}): "
                "taking the lock would write through it; remove the link")


#: The errors of ``flock`` on a file system that does not lock (Lustre mounted without
#: ``flock``, some FUSE and NFS setups): not contention, no lock at all.
NO_LOCKS = {errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK, errno.EINVAL}


def check_locks_work(directory: Path) -> None:
    """Raise :class:`LocksUnsupported` if the file system of ``directory`` refuses ``flock``:
    filelock would fall back there to a lock file that outlives a ``kill -9`` (and blocks the
    folder for good) or that two nodes both take."""
    import fcntl

    probe = directory / ".clusterbench.lockprobe"
    fd = os.open(probe, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError as err:
        if err.errno in NO_LOCKS:
            raise LocksUnsupported(
                f"the file system of {directory} does not lock files (flock: {err.strerror}): "
                "two commands could overwrite each other's results there; mount it with locks "
                "(Lustre: -o flock) or choose another folder") from None
    finally:
        os.close(fd)
        probe.unlink(missing_ok=True)


def unwritable(directory: Path, what: str, err: OSError) -> str:
    """The one line that says why ``directory`` cannot be made or written.

    >>> unwritable(Path("r/x"), "folder", NotADirectoryError(20, "Not a directory"))
    'folder r/x cannot be made or written (Not a directory): choose one this command can write'
    """
    return (f"{what} {directory} cannot be made or written ({err.strerror or err}): choose one "
            "this command can write")


def holder(directory: Path) -> str:
    """Who holds ``directory``'s lock, as its owner note says."""
    try:
        owner = json.loads((directory / OWNER).read_text())
        return (f"process {owner['pid']} on {owner['host']} since {owner['since']}: "
                f"{owner['command']}")
    except (OSError, ValueError, KeyError):
        return "another process"


@contextmanager
def folder_lock(directory: str | Path, what: str = "results folder") -> Iterator[None]:
    """Hold ``directory``'s lock while the block runs, or raise :class:`FolderBusy` at once if
    another command holds it. The lock is the operating system's (``fcntl``): a command that is
    killed, even with SIGKILL, lets go of it, so no stale lock ever blocks a folder."""
    from filelock import FileLock, Timeout

    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        refuse_linked_lock_files(directory)
        check_locks_work(directory)
        lock = FileLock(directory / LOCK, thread_local=False)
        lock.acquire(timeout=0)
    except Timeout:  # an OSError too: caught first
        raise FolderBusy(f"{what} {directory} is in use by {holder(directory)}; wait for it to "
                         "finish (or stop it), or give this command another --results") from None
    except (FileExistsError, NotADirectoryError, PermissionError) as err:
        raise FolderUnwritable(unwritable(directory, what, err)) from None
    except OSError as err:
        if err.errno != errno.EROFS:
            raise
        raise FolderUnwritable(unwritable(directory, what, err)) from None
    try:
        note = os.open(directory / OWNER, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                       0o644)  # never through a link planted after the check
        with os.fdopen(note, "w") as out:
            out.write(json.dumps({
                "pid": os.getpid(), "host": socket.gethostname(),
                "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "command": " ".join(["clusterbench", *sys.argv[1:]])}))
        yield
    finally:
        (directory / OWNER).unlink(missing_ok=True)
        lock.release()


#: Seconds a (run, seed) task waits for the process still holding its seed's lock (a task of a
#: killed command, cancelled by Ray within seconds) before it gives up, naming the lock.
SEED_LOCK_WAIT = 300.0


@contextmanager
def seed_lock(path: str | Path, report=None) -> Iterator[None]:
    """Holds the lock of one (run, seed) folder while the block runs, waiting while another
    process holds it: a task of a killed command can outlive it on a Ray cluster, and must not
    share ``seed-N.attempt`` with the next command's task. The lock is the operating system's,
    released when its process dies; ``report`` hears once that the task waits.
    """
    from filelock import FileLock, Timeout

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, thread_local=False)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if report is not None:
            report(f"waiting for the process that still holds {path.name} (at most "
                   f"{SEED_LOCK_WAIT:.0f} s)")
        try:
            lock.acquire(timeout=SEED_LOCK_WAIT)
        except Timeout:
            raise FolderBusy(f"{path} is still held after {SEED_LOCK_WAIT:.0f} s by another "
                             "process (a task of an earlier command that did not stop?); stop "
                             "it, or run the command again later") from None
    try:
        yield
    finally:
        lock.release()
