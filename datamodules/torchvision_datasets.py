"""Opening torchvision's dataset classes with errors that say where we looked and what to do.

torchvision answers a missing or a corrupt dataset alike with ``RuntimeError("Dataset not found
or corrupted")``; clusterbench raises ``FileNotFoundError`` naming the directory, which files
are missing or fail torchvision's check, and how to get the data (the CLI turns it into a
one-line error and exit code 2).
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: What goes wrong when torchvision reads a truncated or garbled file: its MNIST reader asserts,
#: pickle raises UnpicklingError or EOFError, a short buffer raises RuntimeError or ValueError.
READ_ERRORS = (AssertionError, EOFError, IndexError, KeyError, OSError, RuntimeError, TypeError,
               ValueError, pickle.UnpicklingError)

DOWNLOAD_FLAG = "--data.download true (download=True in Python)"


def not_found(title: str, folder: Path, expected: Sequence[str], where_from: str) -> str:
    return (f"{title} not found: looked in {folder} (expected {', '.join(expected)}). "
            f"Fetch it with {DOWNLOAD_FLAG}, or put the files there yourself ({where_from}); "
            f"the data root is --data.data_dir or $CLUSTERBENCH_DATA.")


def corrupt(title: str, folder: Path, problem: str, where_from: str) -> str:
    return (f"{title} in {folder} is incomplete or corrupt: {problem}. Delete {folder} and fetch "
            f"it again with {DOWNLOAD_FLAG}, or replace the files ({where_from}).")


def open_torchvision_split(cls: type, root: Path, train: bool, folder: Path, title: str,
                           files: Sequence[tuple[str, str | None]], where_from: str) -> Any:
    """``cls(root, train=train)`` (never downloading), or ``FileNotFoundError`` naming ``folder``.

    Args:
        cls: a torchvision dataset class, e.g. ``torchvision.datasets.CIFAR10``.
        root: the root ``cls`` takes; ``folder`` is where under it the files live.
        files: ``(file name, md5 or None)`` of what ``cls`` checks, to name the bad ones.
        where_from: where to get the files by hand, for the message.
    """
    from torchvision.datasets.utils import check_integrity

    if not folder.is_dir():
        raise FileNotFoundError(not_found(title, folder, [name for name, _ in files], where_from))
    try:
        dataset = cls(root=str(root), train=train, download=False)
    except READ_ERRORS as err:
        bad = [name for name, md5 in files if not check_integrity(str(folder / name), md5)]
        problem = (f"missing or failing torchvision's checksum: {', '.join(bad)}" if bad
                   else f"torchvision could not read it ({type(err).__name__}: {err})")
        raise FileNotFoundError(corrupt(title, folder, problem, where_from)) from err
    if len(dataset.data) != len(dataset.targets):
        raise FileNotFoundError(corrupt(
            title, folder, f"{len(dataset.data)} images but {len(dataset.targets)} labels in the "
            f"{'training' if train else 'test'} split", where_from))
    return dataset
