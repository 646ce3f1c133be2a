"""The training-throughput benchmark runs on a CPU at toy sizes, so that it never rots."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_the_throughput_benchmark_times_the_three_pipelines_and_writes_its_record(tmp_path,
                                                                                   capsys):
    from benchmarks.perf.train_throughput import main

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


@pytest.mark.slow
def test_the_search_start_up_benchmark_compares_fresh_and_reused_workers(tmp_path, capsys):
    from benchmarks.perf.search_startup import main

    record = main(["--trials", "2", "--output", str(tmp_path / "startup.json")])
    assert record["fresh_workers_seconds"] > 0 and record["reused_workers_seconds"] > 0
    assert "Start-up saved per trial" in capsys.readouterr().out


def test_a_worker_keeps_the_prepared_datamodule_for_its_next_trial():
    """Trials with the same data settings and seed share one set-up datamodule in a worker;
    another seed gets its own."""
    from benchmarks.run import RunSpec
    from tune.trial import TrialSpec, build_trial

    run = RunSpec(name="r", method="simclr", model={"backbone_width": 4},
                  data={"name": "digits", "limit_per_class": 10}, trainer={"max_epochs": 1})
    first, _, _ = build_trial(TrialSpec(run=run, max_epochs=1, metric="online_val_acc", seed=0),
                              {"model.lr": 1e-3}, callbacks=[], logger=False)
    again, _, _ = build_trial(TrialSpec(run=run, max_epochs=1, metric="online_val_acc", seed=0),
                              {"model.lr": 3e-3}, callbacks=[], logger=False)
    other, _, _ = build_trial(TrialSpec(run=run, max_epochs=1, metric="online_val_acc", seed=1),
                              {}, callbacks=[], logger=False)
    assert again is first and other is not first
    assert first.split_sizes() == other.split_sizes()  # same sizes, its own draw
