"""The example CI workflow: its commands are ones clusterbench takes, its baseline is the one
committed, and its comparison fails on a planted regression and passes without it."""

from __future__ import annotations

import csv

from workflow import ROOT, clusterbench_commands, run_steps

from benchmarks.cli import build_parser, main

BASELINE = ROOT / "benchmarks" / "baselines" / "smoke-ci.csv"


def test_the_workflow_benchmarks_the_ci_budget_then_compares_with_the_committed_baseline():
    commands = clusterbench_commands()
    assert [c[0] for c in commands] == ["bench", "compare"]
    for command in commands:
        build_parser().parse_args(command)  # every flag is one clusterbench takes
    bench, compare = commands
    assert bench[:4] == ["bench", "smoke", "--budget", "ci"]
    assert compare[1] == str(BASELINE.relative_to(ROOT)) and compare[2] == "results/smoke-ci"
    assert any("make install" in step["run"] for step in run_steps())
    rows = list(csv.DictReader(BASELINE.open()))
    assert {r["budget"] for r in rows} == {"ci"} and {r["suite"] for r in rows} == {"smoke"}


def test_the_comparison_fails_on_a_planted_regression_and_passes_without_it(tmp_path, capsys):
    assert main(["compare", str(BASELINE), str(BASELINE), "--points", "1"]) == 0
    rows = list(csv.DictReader(BASELINE.open()))
    for row in rows:  # SimCLR's linear probe 5 points down
        if row["run"] == "simclr":
            row["linear_probe_top1_mean"] = str(float(row["linear_probe_top1_mean"]) - 0.05)
    planted = tmp_path / "leaderboard.csv"
    with planted.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    capsys.readouterr()
    assert main(["compare", str(BASELINE), str(planted), "--points", "1",
                 "--out", str(tmp_path / "comparison.md")]) == 1
    table = (tmp_path / "comparison.md").read_text()
    assert "simclr" in table and "regression" in table.lower()
