"""The local Ray instance of ``bench --parallel`` and ``tune``: on the loopback, and gone with
the command that started it, even after SIGKILL.

Ray's dashboard and runtime-environment agents outlive a killed driver, so a small watchdog
process waits for the driver to end (the end of a pipe only it holds) and then stops every
process of its Ray session. Run as a script (``python local_ray.py SESSION_DIR PID...``), this
file is that watchdog.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.infra import stop_signals
from benchmarks.infra.errors import ConfigError

#: What the Ray workers take from this process's environment: where the data are and how W&B
#: logs. Never a secret: a job's runtime environment is shown to anyone who can list the
#: cluster's jobs (``ray list jobs``, the dashboard), so the W&B key stays out of it.
WORKER_ENV = ("CLUSTERBENCH_DATA", "WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT", "WANDB_ENTITY",
              "WANDB_SILENT")


def worker_env() -> dict[str, str]:
    """The variables of :data:`WORKER_ENV` this process has, for the workers' runtime
    environment; a node's workers log in to W&B with that node's own login (``~/.netrc``, or a
    ``WANDB_API_KEY`` in the environment ``ray start`` ran in), else run offline."""
    return {k: v for k, v in os.environ.items() if k in WORKER_ENV}


def start_local_ray(env_vars: dict[str, str] | None = None) -> subprocess.Popen:
    """``ray.init`` of a local instance sized to the machine, its nodes on 127.0.0.1 (Ray's own
    servers still listen on every interface; its token authentication is on), plus the watchdog;
    returns the watchdog for :func:`stop_local_ray`. Always a new instance of its own
    (``address="local"``): without it Ray joins the cluster ``RAY_ADDRESS`` names or the last
    one ``ray start`` began on this machine, and refuses the ``num_cpus`` asked of it."""
    import ray

    # ray.init's own SIGTERM handler exits unsaid; Ray's processes leave SIGHUP to this one
    with stop_signals.taken_back(), stop_signals.group_signals_blocked():
        ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False,
                 log_to_driver=False,
                 _node_ip_address="127.0.0.1",
                 **({"runtime_env": {"env_vars": env_vars}} if env_vars else {}))
    session = ray._private.worker._global_node.get_session_dir_path()
    # Noted here, while they surely run (a dead raylet's pid says nothing). The watchdog runs
    # this file as a script, which imports nothing but the standard library: it is watching
    # within a fraction of a second. The pipe's write end stays in this process alone (Python's
    # pipes are not inherited by the processes Ray starts), so the watchdog reads end-of-file
    # exactly when this process ends, however it ends.
    raylets = sorted(session_processes(session))
    return subprocess.Popen([sys.executable, __file__, session, *map(str, raylets)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def joined(address: str) -> str:
    """The one line said after joining the cluster at ``address``: which one it is (``auto``
    takes the one ``RAY_ADDRESS`` names, else the last started on this machine) and its size."""
    import ray

    alive = [n for n in ray.nodes() if n.get("Alive")]
    total = ray.cluster_resources()
    return (f"--address {address}: joined the Ray cluster at "
            f"{ray.get_runtime_context().gcs_address} ({len(alive)} node(s), "
            f"{total.get('CPU', 0):g} CPU, {total.get('GPU', 0):g} GPU)")


def stop_local_ray(watchdog: subprocess.Popen) -> None:
    """``ray.shutdown`` and let the watchdog go (it finds nothing left to stop)."""
    import ray

    ray.shutdown()
    if watchdog.stdin is not None:
        watchdog.stdin.close()


def session_processes(session: str, raylets: set[int] = frozenset()) -> set[int]:
    """The other processes of a Ray session: those whose command line names the session folder,
    and those carrying a session raylet's ``RAY_RAYLET_PID`` (workers rename themselves)."""
    marks = [f"RAY_RAYLET_PID={pid}".encode() for pid in raylets]
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if session.encode() in (entry / "cmdline").read_bytes() or (marks and any(
                    mark in (entry / "environ").read_bytes().split(b"\0") for mark in marks)):
                pids.add(int(entry.name))
        except OSError:
            continue
    return pids


def wait_for_driver() -> None:
    """Until the driver, this process's parent, has ended: end-of-file on stdin (the driver's
    end of the pipe closed), or this process handed to another parent (should a process the
    driver forked still hold the pipe open)."""
    import select

    driver = os.getppid()
    while os.getppid() == driver:
        readable, _, _ = select.select([sys.stdin], [], [], 0.5)
        if readable and not os.read(sys.stdin.fileno(), 4096):
            return


def watch(session: str, raylets: set[int], grace: float = 5.0) -> None:
    """Wait for the driver to end, give Ray ``grace`` seconds to stop its own processes, then
    kill what is left of the session."""
    wait_for_driver()
    deadline = time.monotonic() + grace
    while session_processes(session, raylets) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in session_processes(session, raylets):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


if __name__ == "__main__":
    watch(sys.argv[1], {int(pid) for pid in sys.argv[2:]})


def check_ray_address(address: str, flag: str = "--address", timeout: float = 5.0) -> None:
    """``address`` names a Ray cluster that answers within ``timeout`` seconds (Ray itself would
    retry an unreachable one for minutes).

    >>> check_ray_address("garbage")
    Traceback (most recent call last):
    benchmarks.infra.errors.ConfigError: --address 'garbage' is not auto, HOST:PORT or ray://HOST:PORT

    Raises:
        ConfigError: naming the address and what is wrong with it.
    """
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{flag} {address!r} is not auto, HOST:PORT or ray://HOST:PORT")
    if address.startswith("ray://") and not ray_client_installed():
        raise ConfigError(f"{flag} {address}: a ray:// address connects through Ray Client, "
                          "which this installation lacks: pip install 'ray[client]', or give "
                          "HOST:PORT (the head's GCS port, 6379 by default) from a node of the "
                          "cluster")
    try:
        grpc = speaks_grpc(host.strip("[]"), int(port), timeout)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ConfigError(f"{flag} {address}: nothing answers at {host}:{port} ({reason}); "
                          "start the cluster first (ray start --head) or check the address"
                          ) from None
    if not grpc:
        raise ConfigError(f"{flag} {address}: the service at {host}:{port} is not a Ray "
                          "cluster's (its GCS speaks gRPC, this one does not); give the head's "
                          "GCS port (6379 by default, `ray start --head` prints it)")
    if not address.startswith("ray://"):
        check_ray_token(address, flag)


#: What an HTTP/2 client sends first: the connection preface, then its (empty) settings.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def speaks_grpc(host: str, port: int, timeout: float) -> bool:
    """Whether the service at ``host:port`` answers as a gRPC server does, with HTTP/2
    settings, within ``timeout`` seconds (an HTTP/1 server or any other service answers
    otherwise or not at all); True where Ray's connections are TLS (``RAY_USE_TLS``), which
    this plain probe cannot tell. Raises OSError when nothing answers."""
    import socket

    with socket.create_connection((host, port), timeout=timeout) as connection:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return True
        try:
            connection.sendall(HTTP2_PREFACE)
            reply = b""
            while len(reply) < 9:  # a frame header: length (3), type (1), flags, stream
                chunk = connection.recv(9 - len(reply))
                if not chunk:
                    return False
                reply += chunk
        except (TimeoutError, ConnectionError):
            return False
    return reply[3] == 4  # a SETTINGS frame


def check_ray_token(address: str, flag: str = "--address") -> None:
    """The cluster at ``address`` (its GCS, ``HOST:PORT``) accepts this process: one that checks
    a token (``ray start`` on Ray 2.59 and later) refuses a driver without
    ``RAY_AUTH_MODE=token``, which Ray reports as 20 seconds of warnings and a traceback."""
    try:
        from ray._raylet import GcsClient
        from ray.exceptions import AuthenticationError
    except ImportError:  # another Ray: let ray.init say what it says
        return
    try:
        with native_stderr_silenced():  # Ray's C++ client warns on stderr before it raises
            GcsClient(address=address)
    except AuthenticationError:
        mode = os.environ.get("RAY_AUTH_MODE", "unset")
        raise ConfigError(
            f"{flag} {address}: the cluster checks a token and this command has none "
            f"(RAY_AUTH_MODE is {mode}): run it with RAY_AUTH_MODE=token and the cluster's "
            "token in ~/.ray/auth_token or RAY_AUTH_TOKEN") from None
    except Exception:  # noqa: BLE001 - anything else is ray.init's to report
        return


def ray_client_installed() -> bool:
    """Whether Ray Client (``ray://`` addresses) can run here: it needs ``grpcio``, which only
    the ``ray[client]`` extra installs."""
    import importlib.util

    return importlib.util.find_spec("grpc") is not None


def largest_node(resource: str) -> tuple[float, str]:
    """The most of ``resource`` (``"CPU"``, ``"GPU"``) one alive node of the connected Ray
    cluster has, and that node's address."""
    import ray

    alive = [(node["Resources"].get(resource, 0.0), node.get("NodeManagerAddress", "?"))
             for node in ray.nodes() if node.get("Alive")]
    return max(alive, default=(0.0, "none"))


def check_fits_a_node(wanted: dict[str, float], flags: dict[str, str], per: str) -> None:
    """Each task (or trial worker) takes its ``wanted`` resources on one node: refuse one that
    no alive node has, at once, rather than wait for it forever. ``flags`` names the option that
    asked for each resource; ``per`` says what takes them (``"a run"``)."""
    import ray

    from benchmarks.infra.errors import ConfigError

    for resource, amount in wanted.items():
        most, node = largest_node(resource)
        if amount and amount > most:
            total = ray.cluster_resources().get(resource, 0)
            raise ConfigError(
                f"{flags[resource]} {amount:g} is more than any one node of the Ray cluster has "
                f"(the largest, {node}, has {most:g} {resource}; {total:g} in all): {per} takes "
                "its resources on one node, so it would wait forever")


@contextmanager
def ray_messages_to(log: Path) -> Iterator[None]:
    """Ray's own log lines (its start-up, its authentication notice, Tune's progress tables and
    state saving) go to ``log`` while the block runs, not to the terminal; the handlers Ray set
    are put back afterwards."""
    import logging

    log.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    ray_logger = logging.getLogger("ray")
    saved = ray_logger.handlers[:], ray_logger.propagate
    ray_logger.handlers, ray_logger.propagate = [handler], False
    try:
        yield
    finally:
        ray_logger.handlers, ray_logger.propagate = saved
        handler.close()


class ResourcesNeverFree(ConfigError):
    """Work waited longer than its resource-wait budget with nothing of it started: a cluster
    busy with other work, or a node gone (the command exits 2)."""


def never_free(what: str, waited: float, needs: str, flag: str, then: str) -> ResourcesNeverFree:
    """The one line said when ``what`` (``"no trial"``) could not start for ``waited`` seconds:
    what each needs, what the cluster has free, what ``then`` continues it, and the ``flag``
    that waits longer."""
    import ray

    free = {k: round(v, 2) for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
    return ResourcesNeverFree(
        f"{what} could start for {waited:g} s: each needs {needs} on one node, and the cluster "
        f"has {free} free; what finished is kept, {then} continues (raise {flag} to wait "
        "longer)")


@contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """File descriptor 2 on ``/dev/null`` while the block runs: what native code writes there
    (it bypasses ``sys.stderr``) is dropped."""
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
