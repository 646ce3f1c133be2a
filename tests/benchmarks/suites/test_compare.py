"""``clusterbench compare``: the regression gate between a baseline leaderboard and a new one,
on leaderboards built by ``write_leaderboard`` from result files (the seeds' spread known)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_leaderboard import fake_result, write_result

from benchmarks.cli import main
from benchmarks.suites.leaderboard import write_leaderboard


def board(root: Path, runs: dict[str, list[float]], budget: str = "full") -> Path:
    """A results folder whose runs have these linear-probe accuracies, one per seed."""
    for run, values in runs.items():
        for seed, value in enumerate(values):
            write_result(root, fake_result(run, seed, {"linear_probe_top1": value,
                                                      "knn50_top1": 0.9}, budget=budget))
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


BASELINE = Path(__file__).resolve().parents[3] / "benchmarks" / "baselines" / "smoke-ci.csv"


@pytest.mark.parametrize("budget", ["fast", "full"])
def test_leaderboards_of_two_budgets_are_refused_in_one_line_unless_asked(tmp_path, capsys,
                                                                          budget):
    """The committed ci baseline against results of another budget: one line naming both
    budgets and the flag that compares them anyway, exit 2, whether the numbers rose or fell."""
    from benchmarks.suites.compare import read_board

    runs = {run: [0.5, 0.5] for run in read_board(BASELINE).metrics}
    now = board(tmp_path / budget, runs, budget=budget)
    assert main(["compare", str(BASELINE), str(now)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("clusterbench: error: "), err
    assert f"budget ci and {now} budget {budget}" in err[0] and "--mixed-budgets" in err[0]
    assert main(["compare", str(BASELINE), str(now), "--mixed-budgets"]) == 1  # 50% is a drop
    out = capsys.readouterr().out
    assert f"Budgets differ (--mixed-budgets): baseline ci, current {budget}." in out
    same = board(tmp_path / "ci", {"alpha": [0.8, 0.8]}, budget="ci")
    assert main(["compare", str(same), str(same)]) == 0  # one budget: no word about it
    assert "Budgets differ" not in capsys.readouterr().out


def test_runs_compares_the_runs_both_sides_have_and_names_the_others(tmp_path, capsys):
    """After ``bench --runs alpha`` the results hold alpha alone: without --runs the other runs
    of the baseline are missing, each a regression; with it, only alpha is compared and one
    line names the runs left out, none of them a regression. A drop of alpha still fails."""
    baseline = board(tmp_path / "baseline", {"alpha": [0.80, 0.82], "beta": [0.95, 0.93],
                                             "gamma": [0.7, 0.7]})
    now = board(tmp_path / "now", {"alpha": [0.80, 0.82]})
    assert main(["compare", str(baseline), str(now)]) == 1
    assert capsys.readouterr().out.startswith("**2 regression(s)** in 2 (run, metric) pairs; "
                                              "missing runs: beta, gamma")
    assert main(["compare", str(baseline), str(now), "--runs", "alpha"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "**0 regression(s)** in 2 (run, metric) pairs"
    assert out[2] == ("Only the runs both sides have among --runs alpha; not compared, and no "
                      "regression: beta, gamma (not named by --runs).")
    assert not [line for line in out if "REGRESSION" in line or "| beta" in line]
    assert main(["compare", str(baseline), str(now), "--runs", "alpha", "beta"]) == 0
    assert ("regression: gamma (not named by --runs); beta (only in the baseline)."
            in capsys.readouterr().out)
    dropped = board(tmp_path / "dropped", {"alpha": [0.60, 0.62]})
    assert main(["compare", str(baseline), str(dropped), "--runs", "alpha"]) == 1
    assert capsys.readouterr().out.startswith("**1 regression(s)** in 2")
    assert main(["compare", str(baseline), str(now), "--runs", "alpah"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--runs alpah: neither" in err[0] and "'alpha'" in err[0], err


def one_error(capsys) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("clusterbench: error: "), captured
    assert "Traceback" not in captured.err and not captured.out
    return err[0]


def test_a_row_cut_short_is_refused_naming_the_file_and_line(tmp_path, capsys):
    """A leaderboard.csv whose last row was cut (a copy stopped half-way) lost that run's
    metrics: read in part, the run's regression went unseen ("0 regression(s)", exit 0)."""
    baseline = board(tmp_path / "baseline", {"pixels": [0.8, 0.82], "simclr": [0.95, 0.93]})
    now = board(tmp_path / "now", {"pixels": [0.8, 0.82], "simclr": [0.55, 0.53]})
    text = (now / "leaderboard.csv").read_text()
    last = text.rstrip("\n").rsplit("\n", 1)[1]
    (now / "leaderboard.csv").write_text(text[:len(text) - len(last) // 2])
    assert main(["compare", str(baseline), str(now)]) == 2
    line = one_error(capsys)
    assert f"{now / 'leaderboard.csv'}: line 3 has " in line and "cut short" in line


def test_a_row_of_more_cells_than_the_header_is_refused(tmp_path, capsys):
    baseline = written_board(tmp_path / "baseline.csv", "0.89", "0.01")
    now = tmp_path / "now.csv"
    now.write_text("run,linear_probe_top1_mean,linear_probe_top1_std\nalpha,0.89,0.01,0.5\n")
    assert main(["compare", str(baseline), str(now)]) == 2
    assert f"{now}: line 2 has 4 cells and the header 3" in one_error(capsys)


@pytest.mark.parametrize("length", [70_000, 131_073, 1_000_000])
def test_a_cell_longer_than_any_written_is_one_line(tmp_path, capsys, length):
    """131,073 characters is past the csv module's own limit, whose error was a traceback."""
    baseline = written_board(tmp_path / "baseline.csv", "0.89", "0.01")
    now = tmp_path / "now.csv"
    now.write_text(f"run,linear_probe_top1_mean,linear_probe_top1_std\n{'a' * length},0.8,0\n")
    assert main(["compare", str(baseline), str(now)]) == 2
    line = one_error(capsys)
    assert f"{now}: line 2 " in line and ("65,536" in line or "field limit" in line)


@pytest.mark.parametrize("cell", ["0_89", "٠٫٨٩", "٠.٨٩", "０.８９", " 0.89", "0.89 ", "NaN",
                                  "Infinity", "1e5_0", "0x1p-1"])
def test_a_number_is_read_only_as_the_file_writes_one(tmp_path, capsys, cell):
    """Python's float() takes ``0_89`` (as 89.0), Arabic-Indic and full-width digits, spaces
    and ``Infinity``: none is a number clusterbench writes, and each is refused in one line."""
    baseline = written_board(tmp_path / "baseline.csv", "0.89", "0.01")
    now = written_board(tmp_path / "now.csv", cell, "0.01")
    assert main(["compare", str(baseline), str(now)]) == 2
    line = one_error(capsys)
    assert f"{now}: row 2 (run 'alpha'), column 'linear_probe_top1_mean'" in line


@pytest.mark.parametrize("cell", ["0.89", "8.9e-01", "89E-2", ".89", "+0.89", "0.890"])
def test_every_form_of_a_number_the_file_writes_is_read(tmp_path, capsys, cell):
    baseline = written_board(tmp_path / "baseline.csv", "0.89", "0.01")
    now = written_board(tmp_path / "now.csv", cell, "1e-2")
    assert main(["compare", str(baseline), str(now)]) == 0
    assert "| alpha | Linear probe top-1 (%) | 89.00 | 89.00 | +0.00 |" in capsys.readouterr().out
