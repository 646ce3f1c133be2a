"""The stop signals in one process: what the handler does outside and inside a graceful stop, a
library's own handler and exit taken back, the line and the exit status, SLURM's requeue with a
fake ``scontrol``, and helper processes that end with their parent however it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.infra import stop_signals
from benchmarks.infra.errors import Preempted


def sent(signum: int) -> None:
    """``signum`` to this process, handled before the call returns (Python runs a handler at
    the next bytecode of the main thread)."""
    os.kill(os.getpid(), signum)
    time.sleep(0.01)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1])
def test_a_stop_signal_raises_preempted_naming_it_and_the_handlers_are_put_back(signum):
    before = {s: signal.getsignal(s) for s in stop_signals.STOP_SIGNALS}
    with stop_signals.stop_handlers():
        with pytest.raises(Preempted) as stopped:
            sent(signum)
        assert stopped.value.signum == signum and stop_signals.received() == signum
    assert {s: signal.getsignal(s) for s in stop_signals.STOP_SIGNALS} == before
    assert stop_signals.received() is None


def test_ctrl_c_is_a_keyboard_interrupt_and_a_signal_ignored_at_start_stays_ignored():
    with stop_signals.stop_handlers():
        with pytest.raises(KeyboardInterrupt) as stopped:
            sent(signal.SIGINT)
        assert not isinstance(stopped.value, Preempted)
        assert stop_signals.received() == signal.SIGINT
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts a command
    try:
        with stop_signals.stop_handlers():
            sent(signal.SIGHUP)  # nothing happens
            assert stop_signals.received() is None
    finally:
        signal.signal(signal.SIGHUP, before)


def test_the_first_signal_asks_the_graceful_stop_and_a_second_one_raises_at_once():
    asked = []
    with stop_signals.stop_handlers(), stop_signals.graceful_stop(asked.append):
        sent(signal.SIGHUP)
        assert asked == [signal.SIGHUP]
        with pytest.raises(Preempted):
            sent(signal.SIGTERM)
    assert asked == [signal.SIGHUP]


def test_a_librarys_own_handler_is_called_through_and_its_exit_is_taken_back():
    """Lightning wraps the command's SIGTERM handler during a fit (its own first, then ours);
    ``ray.init`` replaces it with a ``sys.exit(15)``."""
    calls = []
    with stop_signals.stop_handlers():
        ours = signal.getsignal(signal.SIGTERM)

        def lightnings(signum, frame):  # as Lightning's _HandlersCompose
            calls.append(signum)
            ours(signum, frame)

        signal.signal(signal.SIGTERM, lightnings)
        assert stop_signals.handled_by_another(signal.SIGTERM)
        assert stop_signals.call_handler(signal.SIGTERM)  # ours is not entered again
        assert calls == [signal.SIGTERM] and stop_signals.received() is None

        with pytest.raises(Preempted) as stopped, stop_signals.taken_back():
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # ray.init's
            sent(signal.SIGTERM)
        assert stopped.value.signum == signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is ours
        assert not stop_signals.handled_by_another(signal.SIGTERM)


def test_the_stop_line_names_the_signal_and_how_to_go_on():
    line = stop_signals.stopped_line(
        signal.SIGHUP, "simclr seed 0: stopped by SIGTERM; its checkpoint is c, the same "
        "command resumes it")
    assert line == ("clusterbench: stopped by SIGHUP: simclr seed 0: its checkpoint is c, the "
                    "same command resumes it")
    assert stop_signals.stopped_line(signal.SIGINT, "stopped by SIGINT") == (
        "clusterbench: stopped by SIGINT; the same command continues")
    assert [stop_signals.exit_status(s) for s in stop_signals.STOP_SIGNALS] == [
        128 + int(s) for s in stop_signals.STOP_SIGNALS]


@pytest.fixture
def fake_scontrol(tmp_path, monkeypatch) -> Path:
    """An ``scontrol`` on PATH that writes its arguments to a file, and a SLURM job's
    variables."""
    said = tmp_path / "scontrol.args"
    scontrol = tmp_path / "bin" / "scontrol"
    scontrol.parent.mkdir()
    scontrol.write_text(f"#!/bin/sh\necho \"$@\" >> {said}\n")
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{scontrol.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    monkeypatch.delenv(stop_signals.REQUEUE_ENV, raising=False)
    return said


def test_sigusr1_under_slurm_requeues_the_job_unless_told_not_to(fake_scontrol, monkeypatch):
    assert stop_signals.requeue_slurm_job() == ("SLURM job 4242 requeued: it runs the same "
                                                "command again")
    assert fake_scontrol.read_text() == "requeue 4242\n"
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "7")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    stop_signals.requeue_slurm_job()
    assert fake_scontrol.read_text().splitlines()[-1] == "requeue 7_3"
    monkeypatch.setenv(stop_signals.REQUEUE_ENV, "0")
    assert "not requeued" in stop_signals.requeue_slurm_job()
    monkeypatch.delenv("SLURM_JOB_ID")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID")
    assert stop_signals.requeue_slurm_job() == "not a SLURM job: not requeued"
    assert len(fake_scontrol.read_text().splitlines()) == 2


def test_a_failing_scontrol_is_said_and_an_odd_job_id_is_not_passed_on(fake_scontrol, tmp_path,
                                                                       monkeypatch):
    (tmp_path / "bin" / "scontrol").write_text("#!/bin/sh\necho 'Invalid job id' >&2\nexit 1\n")
    assert stop_signals.requeue_slurm_job() == ("scontrol requeue 4242 failed (exit 1: Invalid "
                                                "job id)")
    monkeypatch.setenv("SLURM_JOB_ID", "1; rm -rf /")
    assert stop_signals.requeue_slurm_job() == "not a SLURM job: not requeued"


#: A parent that starts a helper (``end_with_parent``, the signals left to it), says the
#: helper's pid, and sleeps.
HELPER_TREE = """
import os, subprocess, sys, time
from benchmarks.infra import stop_signals
if sys.argv[1] == "helper":
    stop_signals.end_with_parent(int(sys.argv[2]))
    stop_signals.leave_stop_signals_to_parent(sigterm=sys.argv[3] == "1")
    print("ready", flush=True)
    time.sleep(60)
else:
    helper = subprocess.Popen([sys.executable, __file__, "helper", str(os.getpid()), sys.argv[2]],
                              stdout=subprocess.PIPE, text=True)
    assert helper.stdout.readline() == "ready\\n"
    print(helper.pid, flush=True)
    time.sleep(60)
"""


def helper_tree(script: Path, keeps_sigterm: bool) -> tuple[subprocess.Popen, int]:
    script.write_text(HELPER_TREE)
    parent = subprocess.Popen([sys.executable, str(script), "parent", str(int(keeps_sigterm))],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    return parent, int(parent.stdout.readline())


def gone(pid: int, within: float = 10) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_helper_leaves_group_signals_to_its_parent_and_ends_when_it_is_killed(tmp_path):
    parent, helper = helper_tree(tmp_path / "tree.py", keeps_sigterm=True)
    try:
        for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGTERM):
            os.kill(helper, signum)  # as a signal to the whole process group reaches it
        assert not gone(helper, within=0.5)
        parent.kill()  # however the parent ends, SIGKILL included
        parent.wait()
        assert gone(helper)
    finally:
        parent.kill()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_pool_worker_ends_at_once_on_sigterm(tmp_path):
    parent, helper = helper_tree(tmp_path / "tree.py", keeps_sigterm=False)
    try:
        os.kill(helper, signal.SIGTERM)
        assert gone(helper)
    finally:
        parent.kill()
        parent.wait()


def test_a_child_command_gets_the_stop_forwarded_and_ends_with_the_block():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             start_new_session=True)
    with stop_signals.stop_handlers():
        with pytest.raises(Preempted), stop_signals.forwarded_to(child, grace=10):
            sent(signal.SIGTERM)
    assert child.poll() == -signal.SIGTERM


def test_a_stop_raised_where_python_swallows_it_is_raised_again_after():
    """A handler runs where an exception cannot pass (a ``__del__``; a callback after ``fork``,
    as a loader starts its workers): Python prints "Exception ignored" and the command went on
    to its end. The stop is sent again and raised at the next point that can take it."""

    class Finalised:
        def __del__(self) -> None:
            sent(signal.SIGTERM)

    with stop_signals.stop_handlers():
        with pytest.raises(Preempted):
            Finalised()
            time.sleep(1)
