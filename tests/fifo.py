"""A FIFO a test plants where a file is read: the reader must refuse it, never block on it."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest


def finishes(target, fifo: Path, doing: str = "the reader", seconds: float = 20.0) -> None:
    """Runs ``target`` in a thread, failing (not hanging) if it does not return in time."""
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # lets the blocked reader go
        pytest.fail(f"{doing} hung on the FIFO {fifo}")
