"""Running ``clusterbench bench`` from a test: in this process, or as a process to kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.cli import main


def bench(suite: Path, results: Path, *flags: str) -> int:
    return main(["bench", str(suite), "--results", str(results), "--no-progress", *flags])


def start_bench(suite: Path, results: Path, own_group: bool = False) -> subprocess.Popen:
    """``own_group``: the bench leads a process group of its own, which a test can signal
    whole, as ``timeout`` and cluster schedulers do. Ctrl-C reaches it as it reaches a command
    a shell runs in the foreground, even when the tests run as a background job (whose
    commands a shell starts with SIGINT ignored, which Python keeps)."""
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.cli", "bench", str(suite), "--results", str(results),
         "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "WANDB_MODE": "disabled"}, start_new_session=own_group,
        preexec_fn=foreground_signals)


def foreground_signals() -> None:
    """In the child before it runs: the signals as a command a shell runs in the foreground has
    them, whatever the tests were started under (a background job ignores SIGINT and SIGQUIT,
    ``nohup`` SIGHUP; a blocked signal stays blocked across ``exec``)."""
    for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM, signal.SIGUSR1):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 240) -> None:
    """Until ``path`` (a file or a folder) exists; fails if ``proc`` ends first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
