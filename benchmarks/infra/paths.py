"""Names and paths that are safe under a results folder.

A suite's name and its runs' names become folders, and a suite's results are written, replaced
and deleted there: these checks keep every such path a plain folder under the results folder,
whatever a suite file says or a link planted in the folder points to.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import Any

from benchmarks.infra.errors import ConfigError

#: One path component of a suite or run name: a letter or digit, then letters, digits and
#: ``. _ - + @ =`` (``lr1.0e-2``, ``simclr+tuned``, ``simclr@evaluated``).
NAME_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+@=-]*")
#: The longest suite or run name: a run's folder is its name with ``__`` for ``/`` plus a
#: staging suffix (``.replaced-<UTC time>``), one path component of at most 255 bytes.
MAX_NAME = 150
#: What a run's folder name ends with while it is being written or replaced (never a result).
STAGING_SUFFIXES = (".attempt", ".replaced")


def check_name(name: Any, what: str, nested: bool = False) -> str:
    """A suite or run name that is safe as (part of) a path under the results folder: no
    ``..``, no absolute path, no separator but ``/`` between the parts of a ``nested`` run name
    (``cifar10/sum/200ep``), no part ending like a staging folder.

    >>> check_name("cifar10/sum/200ep", "run", nested=True)
    'cifar10/sum/200ep'
    >>> check_name("../../x", "suite name")
    Traceback (most recent call last):
    ...
    benchmarks.infra.errors.ConfigError: suite name '../../x' is not a safe name: ...
    """
    parts = str(name).split("/") if nested else [str(name)]
    bad = (not isinstance(name, str) or not all(NAME_PART.fullmatch(p) for p in parts)
           or any(p.endswith(STAGING_SUFFIXES) for p in parts))
    if bad:
        raise ConfigError(
            f"{what} {str(name)[:200]!r} is not a safe name: use letters, digits and . _ - + @ =, "
            f"starting with a letter or digit{', with / between parts' if nested else ''} (no "
            f"'..', no absolute path, no part ending in .attempt or .replaced)")
    if len(name) > MAX_NAME:
        raise ConfigError(f"{what} {name[:40]!r}... is {len(name)} characters long; at most "
                          f"{MAX_NAME} are accepted (it becomes one folder name, and file "
                          "systems stop at 255 bytes)")
    return name


def inside(root: Path, path: Path, tree: bool = False) -> Path:
    """``path``, after checking that it lies under ``root`` (a results folder) and that no part
    of it below ``root`` is a symbolic link (with ``tree``, nothing under it either): nothing a
    suite says is written, deleted or renamed anywhere else, even through a link planted in the
    folder, which a rename would carry into place. ``root`` itself may be a link (``--results``
    on another disk): it is resolved once and trusted.

    Raises:
        ConfigError: naming the path outside, or the first link met.
    """
    path, top = Path(path), Path(root).resolve()
    try:
        parts = Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).parts
    except ValueError:
        parts = ()
    step = Path(root)
    for part in parts:
        step = step / part
        refuse_link(step, root)
    if tree and path.is_dir():
        for directory, dirnames, filenames in os.walk(path):
            for name in [*dirnames, *filenames]:
                refuse_link(Path(directory) / name, root)
    resolved = path.resolve()
    if resolved != top and top not in resolved.parents:
        raise ConfigError(f"{path} is outside the results folder {root}: refusing to write there")
    return path


def refuse_link(path: Path, root: Path) -> None:
    """A ConfigError when ``path`` (under the results folder ``root``) is a symbolic link."""
    if path.is_symlink():
        target, top = os.path.realpath(path), os.path.realpath(root)
        where = "within" if os.path.commonpath([target, top]) == top else "leading outside"
        raise ConfigError(f"{path} is a symbolic link {where} the results folder {root} (to "
                          f"{os.readlink(path)}): refusing to write, delete or rename through "
                          "it; remove the link (nothing under a results folder may be one)")


def open_in_place(path: Path, flags: int) -> int:
    """A descriptor of the file ``path`` under a results folder (made when missing), for a file
    written in place there (a lock, its owner note, a running task's marker): opened as named,
    never through a symbolic link (``O_NOFOLLOW``), and refused when the file opened has another
    name too (a hard link: ``st_nlink`` above 1) or is no regular file, before a byte of it is
    written: a link planted there may lead to any file of the user's.

    Raises:
        ConfigError: naming ``path`` and what it is.
    """
    try:  # non-blocking: a FIFO without a reader is refused at once (ENXIO), never waited on
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise
        what = "a symbolic link" if err.errno == errno.ELOOP else "not a regular file"
    else:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
            return fd
        os.close(fd)
        what = (f"a hard link (one of {info.st_nlink} names of one file, which may lie outside "
                "the results folder)" if stat.S_ISREG(info.st_mode) else "not a regular file")
    raise ConfigError(f"{path} is {what}: refusing to write into it; remove it")


def write_in_place(path: Path, text: str, append: bool = False) -> None:
    """``text`` written into the file ``path`` (:func:`open_in_place`), in place of what it held
    or, with ``append``, after it."""
    fd = open_in_place(path, os.O_WRONLY | (os.O_APPEND if append else 0))
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        if not append:
            file.truncate(0)
        file.write(text)
