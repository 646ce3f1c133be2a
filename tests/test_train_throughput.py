"""The training-throughput benchmark runs on a CPU at toy sizes, so that it never rots."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_the_throughput_benchmark_times_the_three_pipelines_and_writes_its_record(tmp_path,
                                                                                   capsys):
    from benchmarks.train_throughput import main

    out = tmp_path / "train.json"
    record = main(["--tiny", "--repeats", "2", "--steps", "1", "--warmup", "1", "--output",
                   str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(record))
    (case,) = record["results"].values()
    assert set(case) == {"clusterbench", "bare loop", "anchors' pipeline"}
    for timing in case.values():
        assert len(timing["samples_per_second"]) == 2
        assert all(rate > 0 for rate in timing["samples_per_second"])
    assert case["clusterbench"]["flops_per_step"] > 0
    printed = capsys.readouterr().out
    assert "| pipeline | samples/s | vs clusterbench | MFU |" in printed
    assert "data generated" in printed and record["machine"] in printed
