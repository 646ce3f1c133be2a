"""The driver's watch over Ray jobs waiting for resources: a job whose task keeps touching its
marker runs; one whose marker stopped changing lost its attempt with its node, and its retry
waits like a job never started, so the resource-wait budget ends the wait in one line naming
it, instead of the driver waiting without end."""

from __future__ import annotations

import os
import time

import pytest

from benchmarks.infra.said import heartbeat
from benchmarks.run.local_ray import ResourcesNeverFree
from benchmarks.suites.started import StartWatch, started_marker


@pytest.fixture
def free_cluster(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "available_resources", lambda: {"CPU": 1.0, "GPU": 0.0})


def test_a_job_whose_marker_stopped_changing_is_lost_and_the_budget_ends_its_wait(
        tmp_path, free_cluster):
    watch = StartWatch(tmp_path, budget_s=0.3, needs="2 GPU and 1 CPU", lost_after_s=0.2)
    name = "supcon/seed-1"
    watch.submitted(name)
    marker = started_marker(tmp_path, name)
    marker.parent.mkdir(parents=True)
    marker.write_text("node-b")  # its task started on a node, then the node died
    watch.check([name])  # running: the wait restarts
    assert watch.running(name) is True
    time.sleep(0.6)
    assert watch.running(name) is False
    with pytest.raises(ResourcesNeverFree) as err:
        watch.check([name])
    message = str(err.value)
    assert message.startswith("no run (supcon/seed-1: its node was lost, it waits to be placed "
                              "again) could start for 0.3 s: each needs 2 GPU and 1 CPU")
    assert "{'CPU': 1.0, 'GPU': 0.0} free" in message and "\n" not in message


def test_a_job_whose_marker_keeps_changing_holds_the_wait_off(tmp_path, free_cluster):
    watch = StartWatch(tmp_path, budget_s=0.3, needs="1 CPU", lost_after_s=0.2)
    name = "simclr/seed-0"
    marker = started_marker(tmp_path, name)
    with heartbeat(marker, every_s=0.05):
        for _ in range(8):  # 0.8 s: past the budget and past lost_after_s
            watch.check([name])
            time.sleep(0.1)
    assert marker.read_text().startswith(os.uname().nodename)
    watch.finished(name)
    assert not marker.exists() and watch.running(name) is None


def test_a_job_never_started_is_named_by_what_it_needs(tmp_path, free_cluster):
    watch = StartWatch(tmp_path, budget_s=0.1, needs="4 GPU and 1 CPU")
    watch.submitted("pixels/seed-0")
    time.sleep(0.2)
    with pytest.raises(ResourcesNeverFree,
                       match=r"^no run could start for 0\.1 s: each needs 4 GPU"):
        watch.check(["pixels/seed-0"])


def test_what_a_task_says_to_the_user_reaches_the_driver_once_and_nothing_else(tmp_path, capsys):
    import io
    import sys

    from benchmarks.infra.said import SaidToFile, said_to
    from benchmarks.suites.started import said_file

    name = "simclr/seed-2"
    watch = StartWatch(tmp_path, budget_s=60, needs="1 CPU")
    watch.submitted(name)
    own = io.StringIO()  # the task's own stderr, in its node's log
    task = SaidToFile(own, said_file(tmp_path, name))
    task.write("clusterbench: simclr seed 2: waiting for the process that still holds "
               "seed-2.lock (at most 300 s)\nEpoch 0: 100%|#####| 2/2 [00:01<00:00]\n")
    task.write("clusterbench: simclr seed 2: last.ckpt is unreadable")  # half a line
    assert own.getvalue().count("\n") == 2  # everything still reaches the task's stderr
    watch.check([name])  # the driver's side
    assert capsys.readouterr().err.splitlines() == [
        "clusterbench: simclr seed 2: waiting for the process that still holds seed-2.lock "
        "(at most 300 s)"]
    watch.check([name])
    assert capsys.readouterr().err == ""  # said once, and no half line
    task.write("; it is kept aside and the run starts again\n")
    watch.finished(name)
    assert capsys.readouterr().err.splitlines() == [
        "clusterbench: simclr seed 2: last.ckpt is unreadable; it is kept aside and the run "
        "starts again"]
    assert not said_file(tmp_path, name).exists()
    with said_to(said_file(tmp_path, name)):  # how a task puts it in place of its stderr
        assert isinstance(sys.stderr, SaidToFile)
        print("clusterbench: simclr seed 2: resumed at epoch 3", file=sys.stderr)
    assert not isinstance(sys.stderr, SaidToFile)
    assert said_file(tmp_path, name).read_text() == (
        "clusterbench: simclr seed 2: resumed at epoch 3\n")


def test_how_long_a_marker_may_stand_still_is_a_setting_checked_in_one_line(monkeypatch):
    from benchmarks.infra.errors import ConfigError
    from benchmarks.suites.started import LOST_AFTER_S, LOST_AFTER_VARIABLE, lost_after_setting

    monkeypatch.delenv(LOST_AFTER_VARIABLE, raising=False)
    assert lost_after_setting() == LOST_AFTER_S
    monkeypatch.setenv(LOST_AFTER_VARIABLE, "8")
    assert lost_after_setting() == 8.0
    for bad in ("3", "abc", "inf", "nan"):  # at most the heartbeat's 5 s, or not a number
        monkeypatch.setenv(LOST_AFTER_VARIABLE, bad)
        with pytest.raises(ConfigError, match=f"{LOST_AFTER_VARIABLE}='{bad}': accepted: a "
                                              "number of seconds above the 5 s"):
            lost_after_setting()


def test_a_link_planted_among_the_markers_is_never_written_through(tmp_path):
    """A marker or said file planted as a link to a file outside is removed before the task is
    sent out, not written through; a link in place of the markers' folder is refused in one
    line."""
    from benchmarks.infra.errors import ConfigError
    from benchmarks.suites.started import said_file

    suite_dir, outside = tmp_path / "suite", tmp_path / "outside"
    outside.mkdir()
    (outside / "thesis.tex").write_text("keep")
    watch = StartWatch(suite_dir, budget_s=60, needs="1 CPU")
    for path in (started_marker(suite_dir, "simclr/seed-0"), said_file(suite_dir, "simclr/seed-0")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(outside / "thesis.tex")
    watch.submitted("simclr/seed-0")
    assert not started_marker(suite_dir, "simclr/seed-0").is_symlink()
    assert not said_file(suite_dir, "simclr/seed-0").is_symlink()
    assert (outside / "thesis.tex").read_text() == "keep"
    (suite_dir / ".started").rename(suite_dir / "gone")
    (suite_dir / ".started").symlink_to(outside)
    with pytest.raises(ConfigError, match=r"\.started"):
        watch.submitted("simclr/seed-1")
