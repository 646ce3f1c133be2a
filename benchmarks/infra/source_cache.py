"""What is read from the registries, kept between processes: a JSON file whose name holds a hash
of the source it was read from (:func:`source_fingerprint`), in the user's cache folder.

Reading a registry imports the classes and functions in it, and with them torch, Lightning and
torchvision (seconds on two cores); ``clusterbench list`` keeps its registries' sentences this
way, and the leaderboards what each protocol's metrics are (:mod:`benchmarks.run.metrics`), so
that the next process reads them in milliseconds. Any change to the source is a new name, so a
kept file is never read for other code; a file that cannot be written costs the next process its
imports, nothing more.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def source_fingerprint(packages: Iterable[str]) -> str:
    """A hash of every Python file of ``packages`` (path and content: the 160 files of
    ``benchmarks``, ``modules`` and ``datamodules``, 1.5 MB, read in about 20 ms) and of whether
    Python strips docstrings (``-OO``). A package is found, not imported (a dotted one imports
    its parents)."""
    import hashlib
    import importlib.util
    import sys

    digest = hashlib.blake2b(f"optimize={sys.flags.optimize}".encode(), digest_size=16)
    for package in packages:
        spec = importlib.util.find_spec(package)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            for path in sorted(Path(folder).rglob("*.py")):
                digest.update(f"\0{package}/{path.relative_to(folder).as_posix()}\0".encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_folder(name: str) -> Path:
    """``$XDG_CACHE_HOME/<name>``, else ``~/.cache/<name>``."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / name


def kept_file(folder: str, kind: str, packages: Iterable[str]) -> Path:
    """The file that keeps ``kind`` as read from this source of ``packages``:
    ``<cache_folder(folder)>/<kind>-<source_fingerprint(packages)>.json``."""
    return cache_folder(folder) / f"{kind}-{source_fingerprint(packages)}.json"


def read_kept(path: Path) -> object | None:
    """The JSON ``path`` holds, or None where there is none that can be read. The file is in the
    user's folder: read only as a bounded regular file (its shape is the caller's to check)."""
    from benchmarks.infra.read_back import load_json

    try:
        return load_json(path)
    except (OSError, ValueError):  # none yet, or not one that was written here
        return None


def keep(path: Path, value: object) -> None:
    """Writes ``value`` to ``path`` (:func:`kept_file`) as JSON and removes the files of the same
    kind kept for other source; a folder that cannot be written is left as it is."""
    import json

    from benchmarks.infra.atomic import write_atomic

    kind = path.name.rsplit("-", 1)[0]
    try:
        write_atomic(path, json.dumps(value, indent=1))
        for other in path.parent.glob(f"{kind}-*.json"):
            if other != path:
                other.unlink(missing_ok=True)
    except OSError:
        pass
