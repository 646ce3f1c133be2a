"""The GPU check stopped by a signal while a section's child runs (a child of its own session,
which a signal to the check's group does not reach): the child gets the stop forwarded and ends
with the check, the record keeps the sections so far and says which one was stopped, one line
says so, and the exit status is 128 + the signal's number."""

from __future__ import annotations

import json
import signal

import pytest
from stopped_commands import Followed, last_line, start


@pytest.mark.parametrize(("signum", "group"), [(signal.SIGTERM, False), (signal.SIGHUP, True)])
def test_the_gpu_check_stopped_in_a_section_ends_its_child_and_keeps_its_record(tmp_path,
                                                                               signum, group):
    output = tmp_path / "check"
    followed = Followed(start(["-m", "benchmarks.gpu_check", "--cpu", "--sections", "machine",
                               "protocols", "--output", str(output), "--budget", "300"]))
    followed.signal_when(lambda: followed.runs_one_with("--section"),
                         "the machine section's child", signum, group=group)
    code, _, err = followed.finish()
    name = signal.Signals(signum).name
    assert code == 128 + signum, err[-3000:]
    assert last_line(err) == (f"gpu_check: stopped by {name}: in section machine; the sections "
                              f"before it are in {output / 'gpu_check.json'}; the same command "
                              "runs the check again")
    record = json.loads((output / "gpu_check.json").read_text())
    assert record["sections"] == {"machine": {"status": f"stopped by {name}", "seconds": 0}}
