"""The signals that stop a command (a scheduler's SIGTERM, Ctrl-C's SIGINT, a closed terminal's
SIGHUP, SLURM's SIGUSR1 before its time limit), and what a command does on them: it ends within
a bounded grace, with what can be checkpointed saved, one line saying what stopped and how to
go on, and the exit status a shell gives a process the signal killed (128 + its number), its
children ending with it.

The command's main thread takes the signals (:func:`stop_handlers`). Outside a graceful stop it
raises :class:`~benchmarks.infra.errors.Preempted` (SIGINT: ``KeyboardInterrupt``), which
unwinds through every ``finally`` (locks released, pools and Ray stopped). A Lightning fit or a
Ray Tune search in progress registers a graceful stop instead (:func:`graceful_stop`): the first
signal asks it to stop after the step in flight and checkpoint; a second one raises at once.

The processes a command starts end with it whatever signal reaches them: a helper (a loader
worker, a pool worker) ends when its parent does (:func:`end_with_parent`, Linux's
``PR_SET_PDEATHSIG``) and leaves the signals a whole process group gets to its parent
(:func:`leave_stop_signals_to_parent`); a child command that leads its own process group is
registered (:func:`forwarded_to`) and gets the stop forwarded, then SIGKILL after a grace.

On SIGUSR1 under SLURM (``SLURM_JOB_ID`` set), the command checkpoints, then requeues its job
with ``scontrol requeue``, as Lightning's ``SLURMEnvironment(auto_requeue=True)`` does, unless
``CLUSTERBENCH_REQUEUE=0`` (:func:`requeue_slurm_job`).
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from benchmarks.infra.errors import Preempted

#: The signals a command stops on, gracefully where it can.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)
#: Seconds a child command gets, once the stop is forwarded to it, before SIGKILL: SLURM's own
#: default KillWait between its SIGTERM and SIGKILL.
CHILD_GRACE_S = 30.0
#: Set to 0 to stop on SIGUSR1 under SLURM without requeueing the job.
REQUEUE_ENV = "CLUSTERBENCH_REQUEUE"

_received: list[int] = []  # the stop signals this command got, in order
_active: set[int] = set()  # the signals the command's handler takes
_graceful: list[Callable[[int], None]] = []  # the innermost graceful stop, last
_forwarding = threading.local()
_children: dict[int, subprocess.Popen] = {}  # child commands leading their own group, by pid


def exit_status(signum: int) -> int:
    """The exit status a shell reports for a process ``signum`` stopped.

    >>> exit_status(signal.SIGTERM), exit_status(signal.SIGINT), exit_status(signal.SIGHUP)
    (143, 130, 129)
    """
    return 128 + int(signum)


def received() -> int | None:
    """The first stop signal this command got (None: none)."""
    return _received[0] if _received else None


def signal_name(signum: int) -> str:
    """The signal's name.

    >>> signal_name(signal.SIGUSR1)
    'SIGUSR1'
    """
    return signal.Signals(signum).name


def stopped_line(signum: int, detail: str = "", prog: str = "clusterbench") -> str:
    """The one line a stopped command ends with: the signal, what stopped (``detail``) and how
    to go on, the same command unless ``detail`` says otherwise.

    >>> stopped_line(signal.SIGTERM)
    'clusterbench: stopped by SIGTERM; the same command continues'
    >>> stopped_line(signal.SIGHUP, "smoke seed 0: stopped by SIGTERM; its checkpoint is c")
    'clusterbench: stopped by SIGHUP: smoke seed 0: its checkpoint is c; the same command continues'
    """
    name = signal_name(signum)
    # a lower layer's message may name the signal it was built for: the one that came is said
    detail = re.sub(r"(^|: )stopped by SIG[A-Z0-9]+(; |: |$)", r"\1", detail.strip()).strip()
    line = f"{prog}: stopped by {name}" + (f": {detail}" if detail else "")
    if "same command" not in detail and "--resume" not in detail and "--ckpt_path" not in detail:
        line += "; the same command continues"
    return line


def _default_disposition(signum: int) -> bool:
    """Whether ``signum`` is as Python starts a process: a signal ignored when the command
    started (``nohup``'s SIGHUP, a background job's SIGINT) stays ignored."""
    return signal.getsignal(signum) in (signal.SIG_DFL, signal.default_int_handler)


def _on_stop(signum: int, frame: FrameType | None) -> None:
    if getattr(_forwarding, "active", False):
        return  # our own call of a graceful stop's handler came back here
    first = not _received
    _received.append(signum)
    _forward_to_children(signum)
    if first and _graceful:
        _graceful[-1](signum)
        return
    _stop_process_children()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Preempted(f"stopped by {signal_name(signum)}", signum=signum)


def _stop_process_children() -> None:
    """SIGTERM to this process's ``multiprocessing`` children as it stops: a DDP fit's ranks
    (which save after the step in flight; the exit of this process waits for them), a pool's
    workers (which end at once). Loader workers ignore it and end with their parent."""
    import multiprocessing

    for child in multiprocessing.active_children():
        if child.pid is not None:
            try:
                os.kill(child.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


@contextmanager
def stop_handlers() -> Iterator[None]:
    """The command's handlers of :data:`STOP_SIGNALS` while it runs (in the main thread only; a
    signal ignored when the command started stays ignored), its received signals forgotten and
    the handlers it found put back afterwards. Inside another command's (``clusterbench`` called
    by the GPU check's child), the outer handlers hold."""
    if threading.current_thread() is not threading.main_thread() or _active:
        yield  # another thread's, or a command run inside one (the outer one's handlers hold)
        return
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    hook = sys.unraisablehook
    _received.clear()
    for s in STOP_SIGNALS:
        if _default_disposition(s):
            signal.signal(s, _on_stop)
            _active.add(s)
    sys.unraisablehook = functools.partial(_stop_swallowed, hook)
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for s, handler in before.items():
            if handler is not None:  # None: set outside Python, which Python cannot put back
                signal.signal(s, handler)
        _received.clear()
        _graceful.clear()
        _active.clear()


def _stop_swallowed(hook: Callable[[Any], None], unraisable: Any) -> None:
    """``sys.unraisablehook`` while the handlers are on: the stop a handler raised where Python
    cannot pass an exception on (a ``__del__``, a callback after ``fork``: logging's, as a loader
    starts its workers) is printed as "Exception ignored" and lost, and the command went on to
    its end. It is sent again instead, from another thread a moment later (a signal sent here
    would be taken inside this hook, and lost again), and raised at the next point that can take
    it."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _received:
        again = threading.Timer(0.05, os.kill, (os.getpid(), _received[-1]))
        again.daemon = True
        again.start()
        return
    hook(unraisable)


def reinstate(*signums: int) -> None:
    """Takes ``signums`` (default SIGTERM) back where a library took them while this command's
    handlers are on: ``ray.init`` sets a SIGTERM handler that exits with status 15 and no word,
    Ray Tune one on SIGUSR1 that ends the search unsaid."""
    if threading.current_thread() is threading.main_thread() and _active:
        for signum in signums or (signal.SIGTERM,):
            if signum in _active:
                signal.signal(signum, _on_stop)


@contextmanager
def taken_back(*signums: int) -> Iterator[None]:
    """Around a call that installs its own handler on ``signums`` (default SIGTERM; ``ray.init``
    does): ours put back afterwards, and the call's own exit on the signal in between
    (``sys.exit(15)``) made this command's stop."""
    signums = signums or (signal.SIGTERM,)
    try:
        yield
    except SystemExit as err:
        if not _active or err.code not in signums:
            raise
        _received.append(int(err.code))
        raise Preempted(f"stopped by {signal_name(int(err.code))}", signum=int(err.code)) from None
    finally:
        reinstate(*signums)


@contextmanager
def graceful_stop(stop: Callable[[int], None]) -> Iterator[None]:
    """While the block runs, the first stop signal calls ``stop(signum)`` (which asks the work
    in progress to stop at its next safe point and checkpoint) instead of raising; a second one
    raises at once."""
    _graceful.append(stop)
    try:
        yield
    finally:
        _graceful.remove(stop)


def handled_by_another(signum: int) -> bool:
    """Whether another library's handler of ``signum`` wraps ours (Lightning's on SIGTERM during
    a fit, which calls ours after its own): the signal went through it first."""
    return _another_handler(signum) is not None


def call_handler(signum: int, frame: FrameType | None = None) -> bool:
    """Calls the handler another library installed on ``signum`` (Lightning's on SIGTERM, Ray
    Tune's on SIGINT), as if the signal had come; False when there is none to call (the
    handler is ours, or a default)."""
    handler = _another_handler(signum)
    if handler is None:
        return False
    _forwarding.active = True
    try:
        handler(signum, frame)
    finally:
        _forwarding.active = False
    return True


def _another_handler(signum: int) -> Callable[[int, FrameType | None], Any] | None:
    handler = signal.getsignal(signum)
    if not callable(handler) or handler in (_on_stop, signal.default_int_handler):
        return None
    return handler


# -- the processes a command starts ---------------------------------------------------------------
def end_with_parent(parent: int | None = None) -> None:
    """In a child: SIGKILL when its parent ends, however it ends (Linux's ``PR_SET_PDEATHSIG``;
    elsewhere nothing). ``parent``: the pid it was started by; a child whose parent has already
    gone when this runs exits at once. The parent's thread that started it must outlive it (the
    main thread, as for loader and pool workers)."""
    if not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if parent is not None and os.getppid() != parent:  # it died before the line above
        os._exit(1)


#: The stop signals a command's services leave to it when its whole process group gets them
#: (SLURM signals every process of a step, a closed terminal sends SIGHUP to the group): the
#: command stops them itself, in order (:func:`group_signals_blocked`). Ctrl-C's SIGINT is not
#: among them: Ray and the resource tracker take or ignore it themselves.
LEFT_TO_THE_COMMAND = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)


@contextmanager
def group_signals_blocked() -> Iterator[None]:
    """While the block starts the command's services (a local Ray instance, ``multiprocessing``'s
    resource tracker), :data:`LEFT_TO_THE_COMMAND` are blocked: the processes started meanwhile
    inherit the mask and never take them, where their default action would end them under the
    command (Ray's GCS on a SIGTERM or SIGHUP to the group: the search failed a minute later,
    exit 1). The command then stops them itself (Ray kills a service that does not end on its
    SIGTERM after a second). What came meanwhile is delivered once the block ends."""
    with signals_blocked(LEFT_TO_THE_COMMAND):
        yield


@contextmanager
def signals_blocked(signums: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """``signums`` blocked in this thread while the block runs; what came meanwhile is taken
    once it ends. The threads and processes started in the block inherit the mask:

    - a helper thread (a pool's, a loader's pin-memory thread) keeps it, so that a stop signal
      is always the main thread's (one that landed on a helper while the main thread waited on
      a lock, as it does for a pool's result, was never seen: after a SIGSTOP and SIGCONT, a
      suspended job's, the command waited forever);
    - a helper process (a loader or pool worker) takes its signals once its own handlers are in
      place (:func:`take_stop_signals`): one that came in between, while it started, would
      have ended it by the default action or by a library's handler (torch's loader workers
      die of a SIGTERM that is not their parent's, and the training process raised "DataLoader
      worker is killed")."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set(signums))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def take_stop_signals() -> None:
    """In a helper process started inside :func:`signals_blocked`, once its handlers are in
    place: the stop signals are delivered again (one ignored meanwhile is dropped)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(STOP_SIGNALS))


def start_resource_tracker() -> None:
    """``multiprocessing``'s resource tracker (of spawned processes' semaphores), started once
    with :data:`LEFT_TO_THE_COMMAND` blocked (:func:`group_signals_blocked`): it ignores SIGINT
    and SIGTERM itself, but SIGHUP would end it, and its restart would print ``KeyError``\\ s
    after the command's last line. It ends when the command and its workers have."""
    from multiprocessing import resource_tracker

    with group_signals_blocked():
        resource_tracker.ensure_running()


def end_helpers(grace: float = 1.0) -> None:
    """In a stopped command, before it exits: its helper processes end now. What still holds a
    loader's workers (an exception's traceback, kept in a reference cycle until the collector
    runs) is let go, so that they end through their own shutdown; a daemonic helper still alive
    after that is killed. Without it, Python's exit sends them SIGTERM, which they ignore (a
    loader worker leaves it to its parent), and waits for them without end."""
    import gc
    import multiprocessing

    gc.collect()
    if threading.current_thread() is threading.main_thread():
        # a loader's SIGCHLD handler raises "DataLoader worker ... is killed" from inside the
        # join below, which left the other helpers running and the exit waiting on them forever
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for child in multiprocessing.active_children():
        if child.daemon:
            try:
                child.join(timeout=grace)
                if child.is_alive():
                    child.kill()
                    child.join(timeout=grace)
            except (OSError, RuntimeError, ValueError):
                pass  # gone meanwhile, or its handle already closed


def end_helpers_at_exit() -> None:
    """:func:`end_helpers` when this process exits, before ``multiprocessing``'s own ending of
    its children (which waits without end for a loader worker that ignores SIGTERM): a DDP rank
    a stop ended, say, whose loaders were never shut down. A finalizer of ``multiprocessing``'s
    exit (which a spawned process runs before Python's ``atexit``), registered once a
    process."""
    global _helpers_ended_at_exit
    if not _helpers_ended_at_exit:
        from multiprocessing import util

        util.Finalize(None, end_helpers, exitpriority=100)
        _helpers_ended_at_exit = True


_helpers_ended_at_exit = False


def leave_stop_signals_to_parent(*, sigterm: bool) -> None:
    """In a helper process: the signals a whole process group gets (Ctrl-C, a closed terminal,
    SLURM's SIGUSR1 to every process of a step) are its parent's to act on, which stops the
    helper itself. ``sigterm``: SIGTERM too (a loader worker serves until the training process
    has saved its checkpoint); else SIGTERM ends the helper at once, whatever handler a library
    it runs installs (a pool worker, which has nothing to save)."""
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(signum, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN if sigterm else _exit_at_once)
    take_stop_signals()


def _exit_at_once(signum: int, frame: FrameType | None) -> None:
    # Lightning's handler, composed with this one, would only ask a fit to stop at its next step
    os._exit(exit_status(signum))


@contextmanager
def forwarded_to(process: subprocess.Popen, grace: float = CHILD_GRACE_S) -> Iterator[None]:
    """While the block runs, a stop of this command is forwarded to ``process`` (started with
    ``start_new_session=True``: it leads its own process group), which gets ``grace`` seconds
    before SIGKILL; and it ends with the block when the block is left by an exception."""
    _children[process.pid] = process
    try:
        yield
    except BaseException:
        end_group(process, signal.SIGTERM, grace)
        raise
    finally:
        _children.pop(process.pid, None)


def end_group(process: subprocess.Popen, signum: int, grace: float) -> None:
    """``signum`` to ``process``'s group, then SIGKILL to what is left of it after ``grace``
    seconds."""
    if process.poll() is None:
        _signal_group(process.pid, signum)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(process.pid, signal.SIGKILL)  # its own children, should it have left any
    process.wait()


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _forward_to_children(signum: int) -> None:
    """The stop to every registered child command: SIGINT as SIGINT, any other as SIGTERM (a
    child requeues no SLURM job: its parent does); SIGKILL after the grace, from a timer, so that
    a thread waiting on a child is released even if the child ignores it."""
    if not _children:
        return
    forwarded = signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM
    groups = list(_children)
    for pid in groups:
        _signal_group(pid, forwarded)

    def kill_left() -> None:
        for pid in groups:
            if pid in _children and _children[pid].poll() is None:
                _signal_group(pid, signal.SIGKILL)

    timer = threading.Timer(CHILD_GRACE_S, kill_left)
    timer.daemon = True
    timer.start()


# -- SLURM ---------------------------------------------------------------------------------------
def slurm_job_id(env: dict[str, str] | None = None) -> str | None:
    """The job ``scontrol requeue`` takes: ``ARRAYJOB_TASK`` for an array task, else the job id;
    None outside SLURM or for an id that is not one (only digits and ``_``).

    >>> slurm_job_id({"SLURM_JOB_ID": "812"}), slurm_job_id({})
    ('812', None)
    >>> slurm_job_id({"SLURM_JOB_ID": "9", "SLURM_ARRAY_JOB_ID": "7", "SLURM_ARRAY_TASK_ID": "3"})
    '7_3'
    """
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID")
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        job = f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return job if job and re.fullmatch(r"[0-9]+(_[0-9]+)?", job) else None


def requeue_slurm_job() -> str:
    """After SIGUSR1: ``scontrol requeue`` of this SLURM job, unless ``CLUSTERBENCH_REQUEUE=0``;
    what was done, in words for the stop line."""
    job = slurm_job_id()
    if job is None:
        return "not a SLURM job: not requeued"
    if os.environ.get(REQUEUE_ENV, "1").strip() == "0":
        return f"SLURM job {job} not requeued ({REQUEUE_ENV}=0)"
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as err:
        return f"scontrol requeue {job} failed: {err}"
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        return (f"scontrol requeue {job} failed (exit {done.returncode}"
                + (f": {why[-1]}" if why else "") + ")")
    return f"SLURM job {job} requeued: it runs the same command again"
