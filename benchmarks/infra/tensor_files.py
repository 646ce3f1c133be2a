"""Reading a weights or checkpoint file that anyone may have written, without running its code.

``torch.load(weights_only=False)`` unpickles arbitrary objects, so a crafted file runs code as it
is read (a ``__reduce__`` returning ``os.system``). Every weights file and checkpoint clusterbench
reads goes through :func:`load_tensors`: torch's restricted unpickler, which accepts tensors,
containers and plain numbers and refuses any other global, and one line naming the file when the
file is refused, truncated or not a torch file at all.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any


class BadFile(ValueError):
    """A weights or checkpoint file that cannot be read safely: refused (it holds objects other
    than tensors and plain values), truncated or not a torch file (the CLI exits 2)."""


def load_tensors(path: str | Path, what: str, mmap: bool = False) -> Any:
    """The tensors, containers and plain values saved in ``path``, on the CPU; never any other
    object, so reading runs no code from the file.

    Args:
        path: a file written by ``torch.save`` (an ``encoder.pt``, a Lightning ``.ckpt``).
        what: what the file is, for the message (``"checkpoint"``).
        mmap: map the file instead of reading it (large checkpoints).

    Raises:
        BadFile: one line naming ``path`` and what is wrong with it.

    >>> import io, tempfile, torch
    >>> with tempfile.NamedTemporaryFile(suffix=".pt") as f:
    ...     torch.save({"w": torch.ones(2)}, f.name)
    ...     load_tensors(f.name, "weights file")
    {'w': tensor([1., 1.])}
    """
    import torch  # here: the CLI names BadFile before it knows whether it reads any file

    path = Path(path)

    def broken(err: BaseException) -> BadFile:
        return BadFile(f"{what} {path} is truncated or not a torch file "
                       f"({path.stat().st_size} bytes; {type(err).__name__})")

    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        # torch's restricted unpickler names a refused global ("GLOBAL os.system was not an
        # allowed global"); any other unpickling error is a file that is not a pickle at all
        refused = next((line.strip() for line in str(err).splitlines() if "GLOBAL" in line), None)
        if refused is None:
            raise broken(err) from err
        raise BadFile(f"{what} {path} holds objects other than tensors and plain values, which "
                      f"are never unpickled (they could run code): {refused}") from err
    except (EOFError, RuntimeError, ValueError, OSError, zipfile.BadZipFile, KeyError,
            AttributeError, IndexError) as err:
        if isinstance(err, OSError) and not path.is_file():
            raise BadFile(f"{what} {path} cannot be read: "
                          f"{err.strerror or type(err).__name__}") from err
        raise broken(err) from err
