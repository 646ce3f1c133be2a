"""The driver-scale benchmark runs end to end at a tiny size and records what it claims."""

from __future__ import annotations

import json

from benchmarks.perf.driver_scale import main


def test_the_driver_benchmark_times_both_ways_and_writes_its_record(tmp_path, capsys):
    record = main(["--results", "3", "6", "--output", str(tmp_path / "driver.json")])
    assert [row["results"] for row in record["rows"]] == [3, 6]
    for row in record["rows"]:
        assert row["now_s"] > 0 and row["before_s"] > 0
        assert row["ratio"] == row["before_s"] / row["now_s"]
    assert json.loads((tmp_path / "driver.json").read_text()) == record
    assert "| 6 |" in capsys.readouterr().out and record["data"].startswith("GENERATED")
