"""The evaluation-speed benchmark runs end to end at a tiny size and records what it claims."""

from __future__ import annotations

import json

import torch

from benchmarks.perf.eval_speed import main


def test_eval_speed_writes_a_table_and_json(tmp_path, capsys) -> None:
    output = tmp_path / "speed.json"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the previous probe at the current one's thread count: same sums
    try:
            main(["--scale", "0.004", "--probe-epochs", "1", "--device", "cpu", "--output",
              str(output)])
    finally:
        torch.set_num_threads(threads)
    printed = capsys.readouterr().out
    result = json.loads(output.read_text())
    assert result["sizes"]["train"] == 200 and result["sizes"]["test"] == 40
    assert "GENERATED" in result["features"] and "GENERATED" in printed
    assert result["torch"] and result["machine"]["cpu"] and result["threads"] >= 1
    rows = {row["protocol"]: row for row in result["rows"]}
    assert set(rows) == {"linear_probe", "knn (k=200)", "svm", "cluster (test split)"}
    # Previous and current probes are the same training on the CPU: the same score.
    assert rows["linear_probe"]["previous_score"] == rows["linear_probe"]["current_score"]
    for name in ("linear_probe", "svm", "cluster (test split)"):
        assert rows[name]["previous_s"] > 0 and rows[name]["current_s"] > 0
        assert name.split(" ")[0] in printed
