"""How the driver tells a Ray job that runs from one that waits for resources, and hears what
the job says: the job's task writes a start marker and keeps touching it while it runs
(:func:`benchmarks.infra.said.marked_then`; a cluster's task states need Ray's dashboard, and
Ray's task-id query in a driver warns on every run). A marker that stopped changing belongs to
an attempt lost with its node: Ray retries the job, which waits again, and the resource-wait
budget counts from then. The lines the task writes for the user (``clusterbench: ...`` on
stderr: a seed lock waited for, a checkpoint set aside) go to a file beside the marker too,
which the driver prints as they come (Ray's workers keep their output in their node's logs)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from benchmarks.infra.paths import inside
from benchmarks.infra.said import HEARTBEAT_S, print_new_lines
from benchmarks.run.local_ray import never_free

#: How long the driver waits without a change of a running job's marker (touched every
#: HEARTBEAT_S) before it counts the attempt as lost (seconds). The driver compares the marker
#: with what it saw before, never with its own clock: a node's clock may be off.
LOST_AFTER_S = 30.0
#: The environment variable that sets how long a marker may go unchanged (a shared file system
#: that shows a touched file late wants longer; a test of a lost node, shorter).
LOST_AFTER_VARIABLE = "CLUSTERBENCH_LOST_AFTER_S"


def lost_after_setting() -> float:
    """:data:`LOST_AFTER_S`, or the seconds :data:`LOST_AFTER_VARIABLE` gives: a finite number
    above the heartbeat's :data:`HEARTBEAT_S`, else a ConfigError naming it."""
    import math

    from benchmarks.infra.errors import ConfigError

    given = os.environ.get(LOST_AFTER_VARIABLE)
    if given is None:
        return LOST_AFTER_S
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > HEARTBEAT_S):
        raise ConfigError(f"{LOST_AFTER_VARIABLE}={given[:100]!r}: accepted: a number of "
                          f"seconds above the {HEARTBEAT_S:g} s between two touches of a "
                          "running job's marker")
    return seconds


def started_marker(suite_dir: Path, name: str) -> Path:
    """The file a job's Ray task writes when it starts and touches while it runs."""
    return suite_dir / ".started" / name.replace("/", "%")


def said_file(suite_dir: Path, name: str) -> Path:
    """Where a job's task writes the lines it says to the user."""
    marker = started_marker(suite_dir, name)
    return marker.with_name(marker.name + ".said")


class StartWatch:
    """How long the submitted jobs have all waited for resources, none of them running: past
    ``budget_s`` seconds, :class:`~benchmarks.run.local_ray.ResourcesNeverFree` naming the jobs
    (Ray would wait without a word, a lost attempt's retry included)."""

    def __init__(self, suite_dir: Path, budget_s: float, needs: str,
                 lost_after_s: float | None = None) -> None:
        self.suite_dir, self.budget_s, self.needs = suite_dir, budget_s, needs
        self.lost_after_s = lost_after_setting() if lost_after_s is None else lost_after_s
        self.since = time.monotonic()
        self.seen: dict[str, tuple[tuple[int, int, bytes], float]] = {}
        self.heard: dict[str, int] = {}  # how much of each job's said file was printed

    def submitted(self, name: str) -> None:
        """Before the job's task is sent out: its marker folder is the suite's own (no link on
        the way), and an earlier command's marker and said file (or a link planted in their
        place, which the task would write through) are removed."""
        inside(self.suite_dir, started_marker(self.suite_dir, name).parent)
        for path in (started_marker(self.suite_dir, name), said_file(self.suite_dir, name)):
            path.unlink(missing_ok=True)
        self.seen.pop(name, None)
        self.heard[name] = 0

    def finished(self, name: str) -> None:
        self.since = time.monotonic()
        self.relay([name])
        for path in (started_marker(self.suite_dir, name), said_file(self.suite_dir, name)):
            path.unlink(missing_ok=True)
        self.seen.pop(name, None)
        self.heard.pop(name, None)

    def relay(self, names: list[str]) -> None:
        """Print the whole lines the jobs ``names`` said since the last call."""
        for name in names:
            self.heard[name] = print_new_lines(said_file(self.suite_dir, name),
                                               self.heard.get(name, 0))

    def running(self, name: str) -> bool | None:
        """True while the job's marker keeps changing, False once it stopped changing for
        ``lost_after_s`` (its attempt lost), None without a marker (never started)."""
        marker = started_marker(self.suite_dir, name)
        try:
            stat = marker.stat()
            state = (stat.st_mtime_ns, stat.st_size, marker.read_bytes())
        except OSError:
            return None
        now = time.monotonic()
        before = self.seen.get(name)
        if before is None or before[0] != state:
            self.seen[name] = (state, now)
            return True
        return now - before[1] < self.lost_after_s

    def check(self, names: list[str]) -> None:
        """Called while none of the jobs ``names`` has finished for a while."""
        self.relay(names)
        states = {name: self.running(name) for name in names}
        if any(states.values()):
            self.since = time.monotonic()
        elif time.monotonic() - self.since > self.budget_s:
            lost = [name for name, state in states.items() if state is False]
            what = "no run" + (f" ({', '.join(lost)}: its node was lost, it waits to be "
                               "placed again)" if lost else "")
            raise never_free(what, self.budget_s, self.needs, "--resource-wait",
                             "the same command")
