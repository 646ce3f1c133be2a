"""A command run as a process of its own, to be stopped by a signal: it leads a process group
and session of its own (which a test signals whole, as ``timeout``, SLURM and ``kill -TERM
-PGID`` do, or the command's process alone), and every process it started is followed, to check
that none is left once it has ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench_cli import foreground_signals
from repository import ROOT


def start(argv: list[str], env: dict[str, str] | None = None,
          cwd: Path | None = None) -> subprocess.Popen:
    """``argv`` (a Python program's arguments: ``["-m", "benchmarks.cli", "bench", ...]``) in a
    session of its own, Ctrl-C as a foreground command gets it; stdout and stderr kept."""
    return subprocess.Popen(
        [sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "WANDB_MODE": "disabled", **(env or {})}, cwd=cwd or ROOT,
        start_new_session=True, preexec_fn=foreground_signals)


def clusterbench(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return start(["-m", "benchmarks.cli", *args], env=env)


def started_at(pid: int) -> int | None:
    """The process's start time (clock ticks after boot): with the pid, who it is (a pid is
    reused); None once it has gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def parent_and_session(pid: int) -> tuple[int, int] | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if fields[0] == "Z":  # a zombie has ended; only its parent's wait is left
        return None
    return int(fields[1]), int(fields[3])


def family(root: int) -> dict[int, int]:
    """Every living process descended from ``root``, or in its session, with its start time."""
    tree: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (ps := parent_and_session(int(entry.name))) is not None:
            tree[int(entry.name)] = ps
    found = {pid for pid, (_, session) in tree.items() if session == root}
    found.add(root)
    grown = True
    while grown:
        new = {pid for pid, (parent, _) in tree.items() if parent in found} - found
        found |= new
        grown = bool(new)
    return {pid: start for pid in found if (start := started_at(pid)) is not None}


class Followed:
    """The processes of a command started with :func:`start`, looked at now and then while it
    runs (:meth:`look`), so that those it starts and stops in between are seen too."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.seen = proc, {}

    def look(self) -> dict[int, int]:
        self.seen.update(family(self.proc.pid))
        return self.seen

    def wait_for(self, condition, what: str, timeout: float = 240) -> None:
        """Until ``condition()`` holds, looking at the processes as it waits; fails if the
        command ends first."""
        deadline = time.monotonic() + timeout
        while not condition():
            self.look()
            assert self.proc.poll() is None, (what, self.proc.communicate())
            assert time.monotonic() < deadline, f"{what}: never happened"
            time.sleep(0.02)
        self.look()

    def runs_one_with(self, argument: str) -> bool:
        """Whether one of the command's processes has ``argument`` among its own (a child
        started with ``--section``, say)."""
        for pid in self.look():
            try:
                if f"\0{argument}\0".encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return True
            except OSError:
                continue
        return False

    def signal_when(self, condition, what: str, signum: int, group: bool,
                    timeout: float = 240) -> None:
        """``signum`` to the command (``group``: to its whole process group) at the moment
        ``condition()`` is first seen to hold: the group is frozen there (SIGSTOP), signalled,
        and let go (SIGCONT), so that the signal lands where the condition found the command
        however busy the machine is (a signal sent a moment later, from a test process the
        scheduler had put aside, used to land after the run had ended)."""
        self.wait_for(condition, what, timeout)
        os.killpg(self.proc.pid, signal.SIGSTOP)
        try:
            self.signal(signum, group)
        finally:
            os.killpg(self.proc.pid, signal.SIGCONT)

    def signal(self, signum: int, group: bool) -> None:
        self.look()
        if group:
            os.killpg(self.proc.pid, signum)
        else:
            self.proc.send_signal(signum)

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        """The command's exit status, stdout and stderr, once it has ended; fails if a process
        it started is left after it (after a grace: Ray's watchdog stops its session within
        seconds)."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            running = self.left(within=0)  # killed, with what each was
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, err = self.proc.communicate()
            raise AssertionError(f"no end within {timeout} s (running: {running}, the command "
                                 f"{self.proc.pid}):\n{err[-3000:]}") from None
        left = self.left(within=20)
        assert not left, f"processes left behind: {left}\n{err[-3000:]}"
        return self.proc.returncode, out, err

    def left(self, within: float) -> dict[int, str]:
        """Those of the processes seen that still run after ``within`` seconds, with their
        command lines (killed, so that a failing test leaves none either)."""
        deadline = time.monotonic() + within
        while True:
            alive = {pid: start for pid, start in {**self.seen, **family(self.proc.pid)}.items()
                     if (pid != self.proc.pid or not within) and started_at(pid) == start}
            if not alive or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        said = {}
        for pid in alive:
            try:
                said[pid] = (Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:200]
                             + b" [" + Path(f"/proc/{pid}/wchan").read_bytes() + b"]")
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return {pid: text.decode(errors="replace") for pid, text in said.items()}


def last_line(err: str) -> str:
    return err.strip().splitlines()[-1] if err.strip() else ""
