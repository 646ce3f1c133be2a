"""Reading a weights or checkpoint file that anyone may have written, without running its code.

``torch.load(weights_only=False)`` unpickles arbitrary objects, so a crafted file runs code as it
is read (a ``__reduce__`` returning ``os.system``). Every weights file and checkpoint clusterbench
reads goes through :func:`load_tensors`: torch's restricted unpickler, which accepts tensors,
containers and plain numbers and refuses any other global, and one line naming the file when the
file is refused, truncated or not a torch file at all. Only a regular file of bounded size is
opened (:func:`opened_regular_file`): a FIFO or a device given as a checkpoint is one line too,
never a read that waits or never ends.
"""

from __future__ import annotations

import os
import pickle
import stat
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

#: The largest weights or checkpoint file read: far above any a run here writes (a ResNet-50's
#: checkpoint with its optimiser state is about 300 MB), far below a file that would fill memory.
MAX_TENSOR_BYTES = 16 * 2**30


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
        BadFile: one line naming ``path`` and what is wrong with it (not a regular file, larger
            than :data:`MAX_TENSOR_BYTES`, refused, truncated).

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

    fd = opened_regular_file(path, what)
    try:
        if mmap:  # torch maps a file by its name: this process's handle on the file checked
            mapped = f"/proc/self/fd/{fd}" if os.path.isdir("/proc/self/fd") else path
            return torch.load(mapped, map_location="cpu", weights_only=True, mmap=True)
        with os.fdopen(os.dup(fd), "rb") as file:
            return torch.load(file, map_location="cpu", weights_only=True)
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
    finally:
        os.close(fd)


def opened_regular_file(path: Path, what: str, limit: int = MAX_TENSOR_BYTES) -> int:
    """A read-only descriptor of ``path`` once it is known to be a regular file of at most
    ``limit`` bytes. It is opened non-blocking and checked with ``fstat``: a FIFO is never
    waited on (opening one to read blocks until a writer comes), a device such as ``/dev/zero``
    never read without end, and a file swapped in after a check is the file checked. A link the
    user named is followed; what it points to is held to the same rules.

    Raises:
        BadFile: one line naming ``path``, what it is and what is accepted.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        raise BadFile(f"{what} {path} cannot be read: "
                      f"{err.strerror or type(err).__name__}") from err
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(info.st_mode) else "a folder"
                if stat.S_ISDIR(info.st_mode) else "a device or socket")
        problem = f"is {kind}, not a regular file: never read"
    elif info.st_size > limit:
        problem = f"is {info.st_size:,} bytes, larger than any weights file or checkpoint here"
    if problem is not None:
        os.close(fd)
        raise BadFile(f"{what} {path} {problem}; accepted: a regular file written by "
                      f"torch.save, of at most {limit // 2**30} GiB")
    return fd


#: State-dict entries a file may lack: BatchNorm's batch counter, which torch fills in when a
#: file has none (torchvision's published ImageNet weights have none).
FILLED_IN = ("num_batches_tracked",)


def shape_of(value: Any) -> str:
    """A tensor's shape as ``(64, 3, 7, 7)``, or what the value is instead of a tensor."""
    shape = getattr(value, "shape", None)
    if shape is None:
        return f"a {type(value).__name__}, not a tensor"
    return str(tuple(shape))


def state_mismatch(own: dict[str, Any], given: dict[Any, Any], model: str,
                   may_lack: tuple[str, ...] = ()) -> str | None:
    """None when the state dict ``given`` (read from a file) fits ``own`` (a model's
    ``state_dict()``, on any device, ``meta`` included) key for key and shape for shape; else
    the first mismatch, in the model's order, and a count of the others by kind, for a one-line
    error. ``model`` names the model; keys starting with one of ``may_lack`` may be absent from
    the file, and so may BatchNorm's counters (:data:`FILLED_IN`).

    >>> import torch
    >>> own = {"w": torch.zeros(4, 2), "b": torch.zeros(4)}
    >>> state_mismatch(own, {"w": torch.zeros(4, 3), "head.w": 1}, "net")
    'w: file has (4, 3), net has (4, 2) (and 2 more: 1 key the file lacks, 1 key net lacks)'
    """
    if not given:
        return "the file's state dict is empty"
    shape, lacks, extra_key = (("other shape", "other shapes"),
                               ("key the file lacks", "keys the file lacks"),
                               (f"key {model} lacks", f"keys {model} lacks"))
    found: list[tuple[tuple[str, str], str]] = []  # (kind, line): the model's order, then extras
    for key, value in own.items():
        if key in given and shape_of(given[key]) != shape_of(value):
            found.append((shape,
                          f"{key}: file has {shape_of(given[key])}, {model} has {shape_of(value)}"))
        elif (key not in given and not key.startswith(may_lack)
              and key.rpartition(".")[2] not in FILLED_IN):
            found.append((lacks,
                          f"{key}: {model} has {shape_of(value)}, the file has no such key"))
    extra = [key for key in given if key not in own]
    if len(extra) == len(given):  # nothing in common: another model's, or no weights
        return (f"the file shares no key with {model} (it has {len(given)}, the first "
                f"{str(extra[0])[:80]!r}; {model} has {len(own)}, the first "
                f"{next(iter(own), '')!r})")
    found += [(extra_key, f"{str(key)[:80]}: the file has {shape_of(given[key])}, "
               f"{model} has no such key") for key in extra]
    if not found:
        return None
    first, rest = found[0][1], [kind for kind, _ in found[1:]]
    if not rest:
        return first
    counts = ", ".join(f"{n} {kind[n != 1]}" for kind, n in Counter(rest).items())
    return f"{first} (and {len(rest)} more: {counts})"
