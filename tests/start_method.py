"""How a test starts the processes of a multi-process check: forked where torch runs one thread
(as the tests do: tests/conftest.py), else spawned."""

from __future__ import annotations

import torch


def start_method() -> str:
    """``fork`` where torch runs one thread, else ``spawn``. A forked process has this one's
    imports (a spawned one imports torch, Lightning and the methods again, about 10 s each on two
    cores); with one thread no OpenMP pool is copied into a child half-way."""
    return "fork" if torch.get_num_threads() == 1 else "spawn"
