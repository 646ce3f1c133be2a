"""``clusterbench compare``: the regression gate between a baseline leaderboard and a new one,
on leaderboards built by ``write_leaderboard`` from result files (the seeds' spread known)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_leaderboard import fake_result, write_result

from benchmarks.cli import main
from benchmarks.suites.leaderboard import write_leaderboard


def board(root: Path, runs: dict[str, list[float]]) -> Path:
    """A results folder whose runs have these linear-probe accuracies, one per seed."""
    for run, values in runs.items():
        for seed, value in enumerate(values):
            write_result(root, fake_result(run, seed, {"linear_probe_top1": value,
                                                      "knn50_top1": 0.9}))
    assert write_leaderboard(root)
    return root


@pytest.mark.parametrize("current, code, verdict", [
    ({"alpha": [0.80, 0.82], "beta": [0.95, 0.93]}, 0, "**0 regression(s)** in 4"),
    # beta drops 10 points with a spread of about 1 point: a regression
    ({"alpha": [0.80, 0.82], "beta": [0.85, 0.83]}, 1, "**1 regression(s)** in 4"),
    # alpha gone: every metric of it is missing
    ({"beta": [0.95, 0.93]}, 1, "**1 regression(s)** in 2 (run, metric) pairs; missing runs: "
                                "alpha"),
])
def test_a_drop_beyond_the_seeds_spread_or_a_lost_run_is_a_regression(
        tmp_path, capsys, current, code, verdict):
    baseline = board(tmp_path / "baseline", {"alpha": [0.80, 0.82], "beta": [0.95, 0.93]})
    now = board(tmp_path / "now", current)
    assert main(["compare", str(baseline / "leaderboard.csv"), str(now),
                 "--out", str(tmp_path / "comment.md")]) == code
    out = capsys.readouterr().out
    assert out.startswith(verdict) and out == (tmp_path / "comment.md").read_text()
    if code and "alpha" in current:  # beta dropped
        (line,) = [row for row in out.splitlines() if "REGRESSION" in row]
        assert line.startswith("| beta | Linear probe top-1 (%) | 94.00 | 84.00 | -10.00 |")


def test_the_tolerance_is_points_or_sigmas_whichever_is_larger(tmp_path, capsys):
    baseline = board(tmp_path / "baseline", {"alpha": [0.80, 0.80]})  # no spread at all
    now = board(tmp_path / "now", {"alpha": [0.79, 0.79]})  # one point lower
    assert main(["compare", str(baseline), str(now)]) == 1
    assert main(["compare", str(baseline), str(now), "--points", "1.5"]) == 0
    capsys.readouterr()


def test_a_point_of_a_score_is_a_hundredth(tmp_path, capsys):
    """``--points 1`` lets an ARI drop by 0.01, not by 1 (which would let any drop through)."""
    def scored(root: Path, ari: float) -> Path:
        for seed in (0, 1):
            write_result(root, fake_result("alpha", seed, {"kmeans_ari": ari}))
        assert write_leaderboard(root)
        return root

    baseline = scored(tmp_path / "baseline", 0.80)
    assert main(["compare", str(baseline), str(scored(tmp_path / "near", 0.795)),
                 "--points", "1"]) == 0
    assert main(["compare", str(baseline), str(scored(tmp_path / "far", 0.70)),
                 "--points", "1"]) == 1
    capsys.readouterr()


@pytest.mark.parametrize("argv, message", [
    (["nowhere", "nowhere"], "nowhere is neither a results folder with a leaderboard.csv"),
    (["{b}", "{b}", "--sigmas", "-1"], "--points and --sigmas must be finite and >= 0"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    baseline = board(tmp_path / "baseline", {"alpha": [0.8]})
    assert main(["compare", *[a.format(b=baseline) for a in argv]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def written_board(path: Path, mean: str, std: str) -> Path:
    """A leaderboard.csv of one run with this linear-probe mean and std, as cells."""
    path.write_text(f"run,linear_probe_top1_mean,linear_probe_top1_std\nalpha,{mean},{std}\n")
    return path


@pytest.mark.parametrize("mean, std", [("nan", "0.01"), ("0.8", "inf"), ("-inf", "0.01")])
def test_a_mean_or_std_that_is_not_finite_is_a_regression(tmp_path, capsys, mean, std):
    baseline = written_board(tmp_path / "baseline.csv", "0.89", "0.01")
    now = written_board(tmp_path / "now.csv", mean, std)
    assert main(["compare", str(baseline), str(now)]) == 1  # inf std: no infinite tolerance
    assert "| alpha | Linear probe top-1 (%) |" in capsys.readouterr().out
    assert main(["compare", str(now), str(baseline)]) == 1  # nor a baseline of nan
    assert "REGRESSION (not finite)" in capsys.readouterr().out


@pytest.mark.parametrize("mean, std, column", [("high", "0.01", "linear_probe_top1_mean"),
                                               ("0.8", "n/a", "linear_probe_top1_std")])
def test_a_cell_that_is_not_a_number_is_one_line_naming_file_row_and_column(
        tmp_path, capsys, mean, std, column):
    baseline = written_board(tmp_path / "baseline.csv", "0.89", "0.01")
    now = written_board(tmp_path / "now.csv", mean, std)
    assert main(["compare", str(baseline), str(now)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("clusterbench: error: ")
    assert f"{now}: row 2 (run 'alpha'), column {column!r}" in err[0]


def test_run_names_are_one_markdown_cell_without_control_characters(tmp_path, capsys):
    name = "a|b\x1b]0;owned\x07"
    for path in (tmp_path / "baseline.csv", tmp_path / "now.csv"):
        path.write_text(f'run,linear_probe_top1_mean\n"{name}",0.8\n')
    assert main(["compare", str(tmp_path / "baseline.csv"), str(tmp_path / "now.csv")]) == 0
    out = capsys.readouterr().out
    assert "| a\\|b?]0;owned? | Linear probe top-1 (%) |" in out
    assert "\x1b" not in out and "\x07" not in out
