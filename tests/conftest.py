"""Fixtures shared by the test modules."""

from __future__ import annotations

import os

# The tests run as two pytest workers on two cores, and each worker starts CLI, Ray and DDP
# processes of its own: with OpenMP's default of one thread per core every training process
# oversubscribes the cores, and OpenMP's idle threads spin while they wait. One thread a process
# (inherited by every process a test starts) halved the CPU time of the heaviest test files.
# Set before torch is imported: OpenMP reads it once.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def no_system_datasets(request, monkeypatch):
    """Tests see only the data they write: a dataset installed system-wide (Debian's
    ``dataset-fashion-mnist``) is not looked for, except in tests marked ``system_data``."""
    if "system_data" not in request.keywords:
        from datamodules.mnist import _IdxDataModule

        for cls in (_IdxDataModule, *_IdxDataModule.__subclasses__()):
            monkeypatch.setattr(cls, "system_folders", ())


#: The signals whose handlers a test may leave behind in its pytest worker: ``ray.init`` sets
#: one on SIGTERM that exits, Lightning's and Ray Tune's stay after a failed fit or search.
#: A command installs its stop handlers only where it finds the default, so one left there
#: would decide how a later test's command stops.
KEPT_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGCHLD")


def _signal_state() -> tuple[dict, set]:
    import signal

    return ({s: signal.getsignal(s) for s in (getattr(signal, n) for n in KEPT_SIGNALS)},
            signal.pthread_sigmask(signal.SIG_BLOCK, []))


_STARTING_SIGNALS = _signal_state()  # the worker's, before any test or fixture ran


def _put_back_starting_signals() -> None:
    import signal

    handlers, mask = _STARTING_SIGNALS
    for s, handler in handlers.items():
        if handler is not None and signal.getsignal(s) is not handler:
            signal.signal(s, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@pytest.fixture(autouse=True)
def starting_signal_handlers():
    """Each test starts and ends with the signal handlers and mask the pytest worker started
    with, whatever an earlier test or a module's fixture (a Ray instance started in this
    process) left."""
    _put_back_starting_signals()
    yield
    _put_back_starting_signals()


@pytest.fixture
def one_thread():
    """torch on one intra-op thread for the test, its count restored after: for test files of
    many tiny operations (thousands of small SGD steps), where on a busy 2-core machine the
    second thread's synchronisation and spin-waits only slow them down (``pytestmark =
    pytest.mark.usefixtures("one_thread")``)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance, on the loopback, for the searches and placement runs of a test
    module: starting one takes about ten seconds on two cores, and ``run_search`` and
    ``bench --parallel`` use an instance that is already up (and leave it up)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    from benchmarks.run.local_ray import start_local_ray, stop_local_ray

    # the suite's own local instance: on the loopback, and gone with this process even when a
    # test run is killed
    watchdog = None if ray.is_initialized() else start_local_ray()
    yield
    if watchdog is not None:
        stop_local_ray(watchdog)
