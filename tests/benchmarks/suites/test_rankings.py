"""The section "Rankings beyond the spread": which differences between rows hold beyond the
spread over seeds, as the leaderboard and the report page say it, and the suite's ``ranking``
section refused in one line when it names something that is not there.

Every expected interval is computed here from the per-seed values, by scipy's own Welch test or
by hand formulas with a closed-form t quantile, never read back from the code's output.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import re
import statistics
import warnings
from pathlib import Path

import pytest
import yaml
from scipy import stats
from test_leaderboard import fake_result, write_result

from benchmarks.cli import main
from benchmarks.infra.errors import ConfigError
from benchmarks.run.cache import configuration_hash, resolved_config
from benchmarks.suites.config import load_suite
from benchmarks.suites.leaderboard import RANKINGS_CSV, write_leaderboard
from benchmarks.suites.report import write_report

METRIC = "linear_probe_top1"
#: run -> the per-seed linear-probe accuracies. "pixels" is deterministic: every seed the same.
VALUES = {
    "pixels": [0.80, 0.80, 0.80],
    "winner": [0.90, 0.91, 0.92],   # clear of pixels by 11 points, a spread of 1
    "close": [0.80, 0.83, 0.78],    # 0.3 points above pixels, a spread of 2.5
    "loser": [0.70, 0.71, 0.69],    # 10 points below pixels
    "lonely": [0.95],               # one seed: its spread is unknown
}
RANKING = {"metrics": [METRIC], "baselines": ["pixels"], "margin": None, "orderings": [
    {"source": "Paper A, Table 1", "runs": ["close", "winner", "loser", "lonely"]},
    {"source": "Paper B, Table 2", "runs": ["winner", "pixels", "close"]},
]}
#: The t quantile of 0.975 with 2 degrees of freedom, in closed form: (2p - 1) / sqrt(2p(1 - p)).
T_975_2 = (2 * 0.975 - 1) / math.sqrt(2 * 0.975 * (1 - 0.975))


def write_board(root: Path, ranking: dict | None = RANKING,
                values: dict[str, list[float]] = VALUES) -> str:
    """The fake results of ``values`` (each recording ``ranking``) and their leaderboard's
    Markdown."""
    for run, seeds in values.items():
        for seed, value in enumerate(seeds):
            result = fake_result(run, seed, {METRIC: value, "knn50_top1": 0.5})
            result["finished_at"] = "2026-01-01T00:00:00+00:00"
            if ranking is not None:
                result["config"]["ranking"] = ranking
            write_result(root, result)
    write_leaderboard(root)
    return (root / "leaderboard.md").read_text()


def welch(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """(difference, low, high) of Welch's 95% interval by scipy's own test (which warns of a
    side whose values are all equal, as pixels' are)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Precision loss", RuntimeWarning)
        ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    return statistics.fmean(a) - statistics.fmean(b), float(ci.low), float(ci.high)


def shown(difference: float, low: float, high: float) -> str:
    """The two cells of a difference in points: ``+11.00 | [+8.52, +13.48]``."""
    return f"{100 * difference:+.2f} | [{100 * low:+.2f}, {100 * high:+.2f}]"


def line(markdown: str, start: str, after: str | None = None) -> str:
    """The one line of ``markdown`` (after the line containing ``after``) starting ``start``."""
    lines = markdown.splitlines()
    if after is not None:
        lines = lines[next(i for i, text in enumerate(lines) if after in text):]
    return next(text for text in lines if text.startswith(start))


def section(markdown: str) -> str:
    return markdown.partition("## Rankings beyond the spread")[2]


def test_a_clear_winner_over_a_deterministic_baseline_is_above_beyond_the_spread(tmp_path):
    """pixels has no spread (std 0): the interval is the winner's alone, a t interval with
    n - 1 = 2 degrees of freedom around the difference of the means."""
    board = section(write_board(tmp_path))
    winner = VALUES["winner"]
    difference = statistics.fmean(winner) - 0.80
    half = T_975_2 * statistics.stdev(winner) / math.sqrt(len(winner))
    assert line(board, "| winner | pixels |") == (
        f"| winner | pixels | 3 vs 3 | {shown(difference, difference - half, difference + half)}"
        " | above beyond the spread |")
    assert (difference, difference - half, difference + half) == pytest.approx(
        welch(winner, VALUES["pixels"]), rel=1e-9)


def test_a_difference_inside_the_spread_is_within_and_one_below_is_below(tmp_path) -> None:
    board = section(write_board(tmp_path))
    assert line(board, "| close | pixels |") == (
        f"| close | pixels | 3 vs 3 | {shown(*welch(VALUES['close'], VALUES['pixels']))} "
        "| within the spread |")
    assert line(board, "| loser | pixels |") == (
        f"| loser | pixels | 3 vs 3 | {shown(*welch(VALUES['loser'], VALUES['pixels']))} "
        "| below beyond the spread |")


def test_one_seed_is_not_ranked(tmp_path) -> None:
    board = section(write_board(tmp_path))
    assert line(board, "| lonely | pixels |") == (
        "| lonely | pixels | 1 vs 3 | n/a | n/a | n/a (one seed) |")
    assert line(board, "| loser | lonely |") == (
        "| loser | lonely | 3 vs 1 | n/a | n/a | n/a (one seed) |")


def test_a_claimed_order_is_checked_pair_by_pair_and_summed_up(tmp_path) -> None:
    """Paper A claims close > winner > loser > lonely: the first pair is reversed beyond the
    spread, the second holds, the third has one seed; paper B's pixels > close is within."""
    board = section(write_board(tmp_path))
    assert ("Claimed by Paper A, Table 1: close > winner > loser > lonely. 1 of 3 adjacent "
            "pairs hold beyond the spread, 1 reversed, 0 within the spread, 1 n/a.") in board
    assert line(board, "| close | winner |") == (
        f"| close | winner | 3 vs 3 | {shown(*welch(VALUES['close'], VALUES['winner']))} "
        "| reversed beyond the spread |")
    assert line(board, "| winner | loser |") == (
        f"| winner | loser | 3 vs 3 | {shown(*welch(VALUES['winner'], VALUES['loser']))} "
        "| holds beyond the spread |")
    assert ("Claimed by Paper B, Table 2: winner > pixels > close. 1 of 2 adjacent pairs hold "
            "beyond the spread, 0 reversed, 1 within the spread.") in board
    assert line(board, "| pixels | close |") == (
        f"| pixels | close | 3 vs 3 | {shown(*welch(VALUES['pixels'], VALUES['close']))} "
        "| within the spread |")


def test_the_other_pairs_beyond_the_spread_are_listed_higher_first(tmp_path) -> None:
    """Of the three non-baseline rows with two seeds or more, winner > close and winner > loser
    and close > loser differ beyond the spread (close - loser: 10 points, spreads of 2.5, 1)."""
    board = section(write_board(tmp_path))
    pairs = [text for text in board.splitlines() if text.startswith("- ")]
    expected = []
    for a, b in (("winner", "close"), ("winner", "loser"), ("close", "loser")):
        difference, low, high = welch(VALUES[a], VALUES[b])
        assert low > 0
        expected.append(f"- {a} > {b}: {100 * difference:+.2f} [{100 * low:+.2f}, "
                        f"{100 * high:+.2f}]")
    assert pairs == expected
    assert "3 of the 3 pairs of the other rows" in board


@pytest.mark.parametrize("margin, verdict", [
    (0.05, "above by more than the margin"),
    (0.10, "above beyond the spread, not by the margin"),  # its lower end is under 10 points
])
def test_a_margin_is_cleared_by_the_intervals_lower_end(tmp_path, margin: float,
                                                       verdict: str) -> None:
    _, low, _ = welch(VALUES["winner"], VALUES["pixels"])
    assert 0.05 < low < 0.10
    board = section(write_board(tmp_path, {**RANKING, "margin": margin}))
    assert line(board, "| winner | pixels |").endswith(f"| {verdict} |")
    assert f"Margin {margin:g} in the metrics' stored units" in board
    # within and below stay what they were: the margin only splits what is above
    assert line(board, "| close | pixels |").endswith("| within the spread |")


def test_two_sides_without_spread_differ_exactly(tmp_path) -> None:
    values = {"pixels": [0.80, 0.80], "fixed": [0.85, 0.85], "same": [0.80, 0.80]}
    board = section(write_board(tmp_path, {**RANKING, "orderings": []}, values))
    assert line(board, "| fixed | pixels |") == (
        "| fixed | pixels | 2 vs 2 | +5.00 | [+5.00, +5.00] | above beyond the spread (exact: "
        "no spread on either side) |")
    assert line(board, "| same | pixels |") == (
        "| same | pixels | 2 vs 2 | +0.00 | [+0.00, +0.00] | within the spread (exact: no "
        "spread on either side) |")


def test_rows_without_a_result_are_said_to_have_none(tmp_path) -> None:
    ranking = {**RANKING, "orderings": [{"source": "Paper C", "runs": ["winner", "absent"]}]}
    board = section(write_board(tmp_path, ranking))
    assert line(board, "| winner | absent |") == (
        "| winner | absent | 3 vs 0 | n/a | n/a | n/a (no result) |")


def test_the_report_page_html_and_csv_say_the_same(tmp_path) -> None:
    results = tmp_path / "results"
    write_board(results)
    page = write_report(results, tmp_path / "docs").read_text()
    assert "### Rankings beyond the spread" in page  # under the page's own title
    assert line(section(page), "| winner | pixels |") == line(
        section((results / "leaderboard.md").read_text()), "| winner | pixels |")
    html = (results / "leaderboard.html").read_text()
    assert "<h2>Rankings beyond the spread</h2>" in html
    assert re.search(r"<td>winner</td><td>pixels</td>.*?<td>above beyond the spread</td>", html)
    rows = list(csv.DictReader(io.StringIO((results / RANKINGS_CSV).read_text())))
    winner = next(r for r in rows if r["comparison"] == "baseline" and r["first"] == "winner")
    difference, low, high = welch(VALUES["winner"], VALUES["pixels"])
    assert [float(winner[k]) for k in ("difference", "low", "high")] == pytest.approx(
        [difference, low, high], rel=1e-9)  # stored units: fractions
    assert float(winner["degrees_of_freedom"]) == pytest.approx(2.0)


def test_without_a_ranking_there_is_no_section_and_no_csv(tmp_path) -> None:
    write_board(tmp_path)
    assert (tmp_path / RANKINGS_CSV).is_file()
    for path in (tmp_path / "runs").rglob("result.json"):  # the suite dropped its ranking
        result = json.loads(path.read_text())
        del result["config"]["ranking"]
        path.write_text(json.dumps(result))
    write_leaderboard(tmp_path)
    assert "Rankings beyond the spread" not in (tmp_path / "leaderboard.md").read_text()
    assert not (tmp_path / RANKINGS_CSV).exists()


def test_an_earlier_configuration_of_a_run_is_not_ranked(tmp_path) -> None:
    """The suite was edited after two seeds of "winner" finished: their row is the earlier
    configuration's, shown on the board but never compared (the current row is)."""
    for seed in (0, 1):
        old = fake_result("winner", seed, {METRIC: 0.5})
        old["config"]["run"]["model"] = {"lr": 1.0}
        old["config"]["ranking"] = RANKING
        old["finished_at"] = "2000-01-01T00:00:00+00:00"
        write_result(tmp_path / "earlier", old)
    board = write_board(tmp_path)
    assert "| winner [earlier configuration " in board
    assert "winner [earlier" not in section(board)
    assert line(section(board), "| winner | pixels |").endswith("| above beyond the spread |")


def test_a_result_with_a_malformed_ranking_is_skipped_naming_it(tmp_path, capsys) -> None:
    write_board(tmp_path)
    bad = fake_result("winner", 7, {METRIC: 0.99})
    bad["config"]["ranking"] = {**RANKING, "orderings": [{"source": "T1", "runs": ["winner"]}]}
    write_result(tmp_path, bad)
    write_leaderboard(tmp_path)
    assert "'config.ranking' is" in capsys.readouterr().err
    assert line(section((tmp_path / "leaderboard.md").read_text()),
                "| winner | pixels |").startswith("| winner | pixels | 3 vs 3 |")


# -- the suite's ranking section -------------------------------------------------------------

SUITE = {
    "name": "ranked", "seeds": [0, 1],
    "data": {"name": "digits", "batch_size": 32},
    "trainer": {"max_epochs": 1, "accelerator": "cpu"},
    "evaluation": {"linear_probe": {"epochs": 2, "lr": 0.1, "batch_size": 64,
                                    "weight_decay": 1.0e-6},
                   "knn": {"k": [5], "temperature": None}},
    "runs": [{"name": "simclr/nt_xent", "method": "simclr"},
             {"name": "simclr/sum", "method": "simclr", "model": {"loss": "sum"}},
             {"name": "pixels", "method": "pixels"}],
    "ranking": {"metrics": ["linear_probe_top1", "knn5_top1"], "baselines": ["pixels"],
                "margin": 0.02, "orderings": [{"source": "Kernel-InfoNCE Table 1",
                                               "runs": ["simclr/sum", "simclr/nt_xent"]}]},
}


def load(tmp_path: Path, ranking) -> object:
    suite = copy.deepcopy(SUITE)
    suite["ranking"] = ranking
    path = tmp_path / "ranked.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return load_suite(str(path))


def test_a_ranking_is_recorded_in_every_result_without_changing_its_hash(tmp_path) -> None:
    suite = load(tmp_path, SUITE["ranking"])
    assert suite.ranking == SUITE["ranking"]
    run = suite.run("simclr/sum")
    config = resolved_config(suite.settings, run, 0)
    assert config["ranking"] == SUITE["ranking"]
    unranked = resolved_config(load(tmp_path, None).settings, run, 0)
    assert "ranking" not in unranked  # a suite without one records none
    assert configuration_hash(config) == configuration_hash(unranked)  # its row stays its row


def test_a_short_ranking_is_filled_in(tmp_path) -> None:
    suite = load(tmp_path, {"metrics": ["knn5_top1"], "baselines": ["pixels"]})
    assert suite.ranking == {"metrics": ["knn5_top1"], "baselines": ["pixels"], "margin": None,
                             "orderings": []}


RANKED = SUITE["ranking"]


@pytest.mark.parametrize("ranking, message", [
    ({**RANKED, "baselines": ["pixel"]},
     "unknown run in {where}: ranking.baselines 'pixel' (did you mean 'pixels'?); accepted: "
     "pixels, simclr/nt_xent, simclr/sum"),
    ({**RANKED, "metrics": ["knn50_top1"]},
     "{where}: ranking.metrics: 'knn50_top1' is not a metric this suite's evaluation records "
     "(did you mean 'knn5_top1'?); accepted: knn5_top1, linear_probe_top1"),
    ({**RANKED, "metrics": ["online_val_acc"]},
     "{where}: ranking.metrics: 'online_val_acc' is not recorded by run 'pixels', which the "
     "section compares; it records: knn5_top1, linear_probe_top1"),
    ({**RANKED, "orderings": [{"source": "Table 1", "runs": ["simclr/sum"]}]},
     "{where}: ranking.orderings[0].runs must be a list of at least 2 of the suite's runs, best "
     "first, got ['simclr/sum']"),
    ({**RANKED, "orderings": [{"source": "Table 1", "runs": ["simclr/sum", "simclr/sum"]}]},
     "{where}: ranking.orderings[0].runs names 'simclr/sum' twice; each may appear once"),
    ({**RANKED, "orderings": [{"runs": ["simclr/sum", "simclr/nt_xent"]}]},
     "{where}: ranking.orderings[0].source must say whose order it is (a paper and its table), "
     "got None"),
    ({**RANKED, "orderings": [{"source": "T1", "runs": ["simclr/sum", "simclr/ntxent"]}]},
     "unknown run in {where}: ranking.orderings[0].runs 'simclr/ntxent' (did you mean "
     "'simclr/nt_xent'?)"),
    ({**RANKED, "margin": -0.01},
     "{where}: ranking.margin must be a number of at least 0 in the metrics' stored units (0.02: "
     "two points of an accuracy), got -0.01"),
    ({**RANKED, "margin": "2%"}, "ranking.margin must be a number of at least 0"),
    ({"metrics": ["knn5_top1"], "margin": 0.02, "orderings": RANKED["orderings"]},
     "{where}: ranking.margin 0.02 is a margin over the baselines, and the section names none"),
    ({"metrics": ["knn5_top1"]},
     "{where}: ranking needs baselines or orderings: with neither it compares nothing"),
    ({**RANKED, "metrics": []}, "{where}: ranking.metrics must be a non-empty list"),
    ({**RANKED, "baseline": ["pixels"]},
     "unknown key 'baseline' in {where}: ranking (did you mean 'baselines'?)"),
    ({**RANKED, "orderings": {"source": "T1"}}, "{where}: ranking.orderings must be a list"),
    (["linear_probe_top1"], "{where}: ranking must be a mapping, got ['linear_probe_top1']"),
])
def test_a_bad_ranking_is_refused_in_one_line_naming_it(tmp_path, ranking, message) -> None:
    with pytest.raises(ConfigError) as err:
        load(tmp_path, ranking)
    said = str(err.value)
    assert "\n" not in said
    assert message.format(where=tmp_path / "ranked.yaml") in said


def test_set_cannot_drop_a_ranked_metric(tmp_path) -> None:
    from benchmarks.suites.overrides import override_suite

    suite = load(tmp_path, SUITE["ranking"])
    with pytest.raises(ConfigError, match="--set evaluation: a ranked metric 'knn5_top1' is not "
                                          "a metric this suite's evaluation records"):
        override_suite(suite, ["evaluation.knn.k=[10]"])


def test_a_bad_ranking_exits_2_before_anything_trains(tmp_path, capsys) -> None:
    suite = copy.deepcopy(SUITE)
    suite["ranking"]["baselines"] = ["random_init"]
    path = tmp_path / "ranked.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    results = tmp_path / "results"
    assert main(["bench", str(path), "--results", str(results), "--no-progress"]) == 2
    errors = [text for text in capsys.readouterr().err.splitlines()
              if text.startswith("clusterbench: error: ")]
    assert len(errors) == 1 and "ranking.baselines 'random_init'" in errors[0]
    assert not any(results.rglob("result.json"))
