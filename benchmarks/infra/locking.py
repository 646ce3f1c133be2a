"""One command at a time on a results folder: two ``bench`` (or ``tune``, ``evaluate``,
``leaderboard``) commands writing the same suite's results would retrain each other's runs,
garble each other's training curves and lose results."""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.infra.paths import open_in_place, write_in_place
from benchmarks.infra.read_back import load_json

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
    """The lock file or its owner note is a link, symbolic or hard (a second name of a file
    that may lie elsewhere): taking the lock would write into the file it leads to, so the
    command refuses the folder (exit 2, naming it)."""


def refuse_linked_lock_files(directory: Path) -> None:
    """Raise :class:`LockThroughLink` if the lock file or the owner note in ``directory`` is a
    symbolic link or a hard link (the note is written over). A link planted after this check is
    refused when the file is opened (:func:`benchmarks.infra.paths.open_in_place`)."""
    for name in (LOCK, OWNER):
        try:
            info = os.lstat(directory / name)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(info.st_mode):
            raise LockThroughLink(
                f"{directory / name} is a symbolic link (to {os.readlink(directory / name)}): "
                "taking the lock would write through it; remove the link")
        if info.st_nlink > 1:
            raise LockThroughLink(
                f"{directory / name} is a hard link (one of {info.st_nlink} names of one file, "
                "which may lie outside the folder): taking the lock would write into that file; "
                "remove it")


#: The errors of ``flock`` on a file system that does not lock (Lustre mounted without
#: ``flock``, some FUSE and NFS setups): not contention, no lock at all.
NO_LOCKS = {errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK, errno.EINVAL}


def check_locks_work(directory: Path) -> None:
    """Raise :class:`LocksUnsupported` if the file system of ``directory`` refuses ``flock``:
    a lock there would be none, or (as filelock falls back to) a lock file that outlives a
    ``kill -9`` (and blocks the folder for good) or that two nodes both take."""
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


#: What ``flock`` says when another process holds the lock.
CONTENTION = {errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES}


def open_lock(path: Path) -> int:
    """A descriptor of the lock file ``path`` (made when missing), never written: opened as
    named, never through a link (:func:`benchmarks.infra.paths.open_in_place`)."""
    return open_in_place(path, os.O_RDWR)


def try_lock(fd: int) -> bool:
    """Whether this process now holds the operating system's lock on ``fd`` (False while
    another holds it); the lock goes when ``fd`` is closed, or when its process dies."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in CONTENTION:
            return False
        raise
    return True


def holder(directory: Path) -> str:
    """Who holds ``directory``'s lock, as its owner note says (read as bounded data: a note
    planted as a FIFO is never waited on)."""
    try:
        owner = load_json(directory / OWNER, limit=2**16)
        return (f"process {owner['pid']} on {owner['host']} since {owner['since']}: "
                f"{owner['command']}")
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


@contextmanager
def folder_lock(directory: str | Path, what: str = "results folder") -> Iterator[None]:
    """Hold ``directory``'s lock while the block runs, or raise :class:`FolderBusy` at once if
    another command holds it. The lock is the operating system's (``flock``): a command that is
    killed, even with SIGKILL, lets go of it, so no stale lock ever blocks a folder."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        refuse_linked_lock_files(directory)
        check_locks_work(directory)
        lock = open_lock(directory / LOCK)
    except (FileExistsError, NotADirectoryError, PermissionError) as err:
        raise FolderUnwritable(unwritable(directory, what, err)) from None
    except OSError as err:
        if err.errno != errno.EROFS:
            raise
        raise FolderUnwritable(unwritable(directory, what, err)) from None
    try:
        if not try_lock(lock):
            raise FolderBusy(f"{what} {directory} is in use by {holder(directory)}; wait for it "
                             "to finish (or stop it), or give this command another --results")
        try:
            write_in_place(directory / OWNER, json.dumps({
                "pid": os.getpid(), "host": socket.gethostname(),
                "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "command": " ".join(["clusterbench", *sys.argv[1:]])}))
            yield
        finally:
            (directory / OWNER).unlink(missing_ok=True)
    finally:
        os.close(lock)  # lets go of the lock


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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = open_lock(path)
    try:
        if not try_lock(lock):
            if report is not None:
                report(f"waiting for the process that still holds {path.name} (at most "
                       f"{SEED_LOCK_WAIT:.0f} s)")
            until = time.monotonic() + SEED_LOCK_WAIT
            while not try_lock(lock):
                if time.monotonic() > until:
                    raise FolderBusy(f"{path} is still held after {SEED_LOCK_WAIT:.0f} s by "
                                     "another process (a task of an earlier command that did "
                                     "not stop?); stop it, or run the command again later")
                time.sleep(0.05)
        yield
    finally:
        os.close(lock)  # lets go of the lock
