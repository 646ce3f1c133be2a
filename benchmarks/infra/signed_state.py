"""Keyed digests of a folder's files: is this the state this installation wrote?

Some state in a results folder is made of pickles (Ray Tune's ``tuner.pkl``, its searcher and
trial states, trial checkpoints), and loading a pickle runs whatever code it names. A results
folder is data: it may come from a colleague's archive or a shared disk. So whoever writes such a
folder records, beside it, an HMAC-SHA256 of every file under it, keyed with a secret that never
lives in a results folder; whoever would load it first checks that every file under it has a
digest and that the digest matches (:func:`check_tree`). A folder planted or edited by anyone
without the secret fails the check.

The secret is 32 random bytes in ``$CLUSTERBENCH_SECRET_FILE``, else
``$XDG_CONFIG_HOME/clusterbench/secret``, else ``~/.config/clusterbench/secret``, created with
mode 0600 on first use. Two installations with different secrets do not accept each other's
state; copying the secret file makes them one installation.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from benchmarks.infra.atomic import write_atomic

SECRET_FILE_ENV = "CLUSTERBENCH_SECRET_FILE"
#: The record's ``format``: a reader refuses a record it does not know.
RECORD_FORMAT = "clusterbench-hmac-sha256/1"


def secret_path() -> Path:
    """Where this installation's secret is kept (never under a results folder)."""
    if os.environ.get(SECRET_FILE_ENV):
        return Path(os.environ[SECRET_FILE_ENV]).expanduser()
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "clusterbench" / "secret"


def secret_key() -> bytes:
    """This installation's secret, created (mode 0600) on first use. Created under a temporary
    name and linked into place, so two processes starting at once end up with the same one."""
    return _secret_key(secret_path())


@functools.cache
def _secret_key(path: Path) -> bytes:
    if not path.is_file():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(descriptor, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
            try:
                os.link(temporary, path)
            except FileExistsError:  # another process made it first: use theirs
                pass
        finally:
            temporary.unlink()
    key = bytes.fromhex(path.read_text().strip())
    if len(key) < 16:
        raise ValueError(f"{path} holds a secret of {len(key)} bytes; remove it to make a new one")
    return key


def file_digest(key: bytes, relative: str, path: Path) -> str:
    """HMAC-SHA256 of a file's relative path and content: a digest moved to another file's name
    does not match it."""
    mac = hmac.new(key, relative.encode() + b"\0", hashlib.sha256)
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            mac.update(chunk)
    return mac.hexdigest()


def _entries(root: Path):
    """``(relative path, path)`` of every file under ``root``, and of every link to a folder
    (links are not followed: :func:`check_tree` refuses them)."""
    for directory, dirnames, filenames in os.walk(root):
        links = [name for name in dirnames if (Path(directory) / name).is_symlink()]
        for name in [*filenames, *links]:
            path = Path(directory) / name
            yield path.relative_to(root).as_posix(), path


class TreeSigner:
    """Signs the files under ``root`` into ``record`` (JSON: relative path -> digest), hashing
    again only the files whose size or modification time changed since its last call, so that
    a running search can be signed often."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, int, str]] = {}
        self._written: dict[str, str] | None = None

    def sign(self, root: Path, record: Path) -> None:
        key = secret_key()
        digests, seen = {}, {}
        for relative, path in _entries(root):
            try:
                if path.is_symlink() or not path.is_file():
                    continue  # not something a search writes; check_tree refuses it
                stat = path.stat()
                stamp = (stat.st_size, stat.st_mtime_ns)
                known = self._seen.get(relative)
                digest = known[2] if known and known[:2] == stamp else \
                    file_digest(key, relative, path)
            except FileNotFoundError:  # removed while we walked (an old checkpoint)
                continue
            digests[relative], seen[relative] = digest, (*stamp, digest)
        self._seen = seen
        if digests != self._written or not record.is_file():
            write_atomic(record, json.dumps({"format": RECORD_FORMAT, "files": digests},
                                            indent=1, sort_keys=True))
            self._written = digests


def check_tree(root: Path, record: Path) -> str | None:
    """Why the files under ``root`` are not (all) the ones signed into ``record``, or ``None``
    when every one of them is. A signed file that is gone is not a reason: nothing loads it."""
    try:
        recorded = json.loads(record.read_text())
    except FileNotFoundError:
        return f"there is no {record.name} beside it"
    except (OSError, ValueError) as err:
        return f"{record.name} cannot be read ({err})"
    if not isinstance(recorded, dict) or recorded.get("format") != RECORD_FORMAT or \
            not isinstance(recorded.get("files"), dict):
        return f"{record.name} is not a record this installation writes"
    digests, key = recorded["files"], secret_key()
    for relative, path in _entries(root):
        if path.is_symlink() or not path.is_file():
            return f"{relative} is not a plain file"
        expected = digests.get(relative)
        if not isinstance(expected, str):
            return f"{relative} was not signed"
        if not hmac.compare_digest(expected, file_digest(key, relative, path)):
            return f"{relative} differs from what was signed"
    return None
