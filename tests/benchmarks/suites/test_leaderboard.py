"""Leaderboards rebuilt from result.json files (schema of benchmarks.run.run_one)."""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import re
import shutil
import statistics
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fake_results import MACHINE_A, MACHINE_B, METRICS, fake_result, write_all, write_result

from benchmarks.cli import main
from benchmarks.suites.leaderboard import FILES, write_leaderboard
from benchmarks.suites.report import write_report
from benchmarks.suites.results import load_results


def read_csv(root: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO((root / "leaderboard.csv").read_text())))


def test_writes_markdown_csv_and_html(tmp_path: Path) -> None:
    write_all(tmp_path)
    paths = write_leaderboard(tmp_path)
    assert sorted(p.name for p in paths) == sorted(FILES)
    assert all(p.parent == tmp_path and p.stat().st_size > 0 for p in paths)
    markdown = (tmp_path / "leaderboard.md").read_text()
    table = [line for line in markdown.splitlines() if line.startswith("|")]
    assert len(table) == 2 + len(METRICS)  # header, rule, one row per run
    assert "Linear probe top-1 (%)" in table[0] and "kNN@50 top-1 (%)" in table[0]
    assert "torch 2.4.0" in markdown  # what the numbers were computed with


def test_csv_mean_and_std_are_the_sample_statistics_over_seeds(tmp_path: Path) -> None:
    write_all(tmp_path)
    write_leaderboard(tmp_path)
    rows = {row["run"]: row for row in read_csv(tmp_path)}
    assert set(rows) == set(METRICS)
    for run, seeds in METRICS.items():
        assert rows[run]["seeds"] == "3"
        for metric in ("linear_probe_top1", "knn50_top1"):
            values = [seeds[s][metric] for s in seeds]
            assert float(rows[run][f"{metric}_mean"]) == pytest.approx(statistics.fmean(values),
                                                                        rel=1e-12)
            assert float(rows[run][f"{metric}_std"]) == pytest.approx(statistics.stdev(values),
                                                                       rel=1e-12)


def test_markdown_shows_percent_mean_and_std(tmp_path: Path) -> None:
    write_all(tmp_path)
    write_leaderboard(tmp_path)
    markdown = (tmp_path / "leaderboard.md").read_text()
    values = [METRICS["beta"][s]["linear_probe_top1"] for s in range(3)]
    shown = f"{100 * statistics.fmean(values):.2f} ± {100 * statistics.stdev(values):.2f}"
    beta_row = next(line for line in markdown.splitlines() if line.startswith("| beta "))
    assert shown in beta_row


def test_rows_are_sorted_by_the_headline_metric(tmp_path: Path) -> None:
    write_all(tmp_path)
    write_leaderboard(tmp_path)
    assert [row["run"] for row in read_csv(tmp_path)] == ["beta", "alpha"]
    # The suite's headline (from the results' config) decides the order.
    shutil.rmtree(tmp_path / "runs")
    write_all(tmp_path, headline="knn50_top1")
    write_leaderboard(tmp_path)
    rows = read_csv(tmp_path)
    assert [row["run"] for row in rows] == ["alpha", "beta"]
    # The headline metric's columns come first.
    metric_columns = [c for c in rows[0] if c.endswith("_mean")
                      and c not in ("train_seconds_mean", "paper_mean")]
    assert metric_columns == ["knn50_top1_mean", "linear_probe_top1_mean"]


def test_runs_without_the_headline_metric_come_last(tmp_path: Path) -> None:
    write_result(tmp_path, fake_result("aardvark", 0, {"knn50_top1": 0.99}))
    write_all(tmp_path)
    write_leaderboard(tmp_path)
    assert [row["run"] for row in read_csv(tmp_path)] == ["beta", "alpha", "aardvark"]


def test_explicit_headline_overrides_the_config(tmp_path: Path) -> None:
    write_all(tmp_path)
    write_leaderboard(tmp_path, headline="knn50_top1")
    assert [row["run"] for row in read_csv(tmp_path)] == ["alpha", "beta"]


def test_generated_data_is_labelled(tmp_path: Path) -> None:
    write_all(tmp_path)
    for seed in range(2):
        write_result(tmp_path, fake_result("gamma", seed, {"linear_probe_top1": 0.5},
                                           dataset="blobs", provenance="generated"))
    write_leaderboard(tmp_path)
    datasets = {row["run"]: row["dataset"] for row in read_csv(tmp_path)}
    assert datasets == {"alpha": "digits", "beta": "digits", "gamma": "blobs (generated)"}
    for name in ("leaderboard.md", "leaderboard.html"):
        text = (tmp_path / name).read_text()
        assert "blobs (generated)" in text
        assert "digits (generated)" not in text


def test_html_embeds_its_charts_inline_each_runs_marks_named(tmp_path: Path) -> None:
    """A chart per metric as inline SVG that the page's script lays out (so it follows the
    table's filters and order), each run's marks carrying its name and its numbers."""
    write_all(tmp_path)
    write_leaderboard(tmp_path)
    page = (tmp_path / "leaderboard.html").read_text()
    charts = re.findall(r'<figure class="chart"><h2>[^<]*</h2><svg class="cb-chart" '
                        r'viewBox="[^"]*" role="img" aria-label="[^"]*"', page)
    assert len(charts) >= 2
    assert '<g class="cb-run" data-run="alpha" data-mean=' in page
    assert '<g class="cb-run" data-run="beta" data-mean=' in page
    assert "function drawChart(svg,order)" in page and "<table" in page


def test_merging_results_from_two_machines(tmp_path: Path) -> None:
    machine_a, machine_b, merged = tmp_path / "a", tmp_path / "b", tmp_path / "merged"
    for run, seeds in METRICS.items():
        for seed, metrics in seeds.items():
            root, machine = (machine_a, MACHINE_A) if seed < 2 else (machine_b, MACHINE_B)
            write_result(root, fake_result(run, seed, metrics, machine=machine))
    for root in (machine_a, machine_b):
        write_leaderboard(root)
        shutil.copytree(root, merged / root.name)
    write_leaderboard(merged)
    rows = read_csv(merged)
    assert sorted(row["run"] for row in rows) == sorted(METRICS)
    for row in rows:
        assert row["seeds"] == "3"
        values = [METRICS[row["run"]][s]["linear_probe_top1"] for s in range(3)]
        assert float(row["linear_probe_top1_mean"]) == pytest.approx(statistics.fmean(values))
        assert "2-core x86_64 CPU" in row["machines"]
        assert "NVIDIA H100 80GB HBM3" in row["machines"]
        assert row["device"] == "cpu/gpu"
    # The per-machine leaderboards copied along are not counted again.
    assert (merged / "leaderboard.md").read_text().count("| alpha ") == 1


def test_a_seed_run_on_two_machines_counts_once_keeping_the_newest(tmp_path: Path) -> None:
    old = fake_result("alpha", 0, {"linear_probe_top1": 0.10}, machine=MACHINE_A)
    new = fake_result("alpha", 0, {"linear_probe_top1": 0.60}, machine=MACHINE_B)
    old["finished_at"] = "2026-01-01T00:00:00+00:00"
    new["finished_at"] = "2026-02-01T00:00:00+00:00"
    write_result(tmp_path / "b", new)  # the newer result; files are read in path order,
    write_result(tmp_path / "a", old)  # so the older one is read last: order must not matter
    write_result(tmp_path / "a", fake_result("alpha", 1, {"linear_probe_top1": 0.80}))
    write_leaderboard(tmp_path)
    (row,) = read_csv(tmp_path)
    assert row["seeds"] == "2"
    assert float(row["linear_probe_top1_mean"]) == pytest.approx(statistics.fmean([0.60, 0.80]))


def test_fast_and_full_budgets_are_never_averaged_together(tmp_path: Path) -> None:
    write_all(tmp_path)
    write_result(tmp_path, fake_result("alpha", 0, {"linear_probe_top1": 0.1}, budget="fast"))
    write_leaderboard(tmp_path)
    rows = read_csv(tmp_path)
    alpha = {row["budget"]: row for row in rows if row["run"] == "alpha"}
    assert set(alpha) == {"full", "fast"}
    assert alpha["fast"]["seeds"] == "1"
    values = [METRICS["alpha"][s]["linear_probe_top1"] for s in range(3)]
    assert float(alpha["full"]["linear_probe_top1_mean"]) == pytest.approx(statistics.fmean(values))


def test_single_seed_has_no_std(tmp_path: Path) -> None:
    write_result(tmp_path, fake_result("alpha", 0, {"linear_probe_top1": 0.5}))
    write_leaderboard(tmp_path)
    (row,) = read_csv(tmp_path)
    assert float(row["linear_probe_top1_mean"]) == pytest.approx(0.5)
    assert row["linear_probe_top1_std"] == ""


def test_empty_directory_writes_nothing_and_keeps_an_old_leaderboard(tmp_path: Path) -> None:
    assert write_leaderboard(tmp_path) == []
    assert list(tmp_path.iterdir()) == []
    old = tmp_path / "leaderboard.md"
    old.write_text("# an earlier leaderboard\n")
    assert write_leaderboard(tmp_path) == []
    assert old.read_text() == "# an earlier leaderboard\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["leaderboard.md"]


@pytest.mark.parametrize("text", ["{not json", '{"run": "broken", "seed"', "[1, 2]", ""])
def test_an_unreadable_result_is_skipped_with_a_warning_naming_it(tmp_path: Path, capsys,
                                                                  text: str) -> None:
    write_all(tmp_path)
    broken = tmp_path / "runs" / "broken" / "seed-0" / "result.json"
    broken.parent.mkdir(parents=True)
    broken.write_text(text)  # truncated by a crash, or edited by hand
    assert write_leaderboard(tmp_path)
    assert f"skipping {broken}" in capsys.readouterr().err
    assert sorted(r["run"] for r in read_csv(tmp_path)) == ["alpha", "beta"]
    assert main(["leaderboard", str(tmp_path)]) == 0


def test_unfinished_attempts_and_replaced_results_are_never_read(tmp_path: Path) -> None:
    write_all(tmp_path)
    for staging in ("seed-0.attempt", "seed-1.replaced"):  # what a run writes before it ends
        leftover = fake_result("alpha", 0, {"linear_probe_top1": 0.01, "knn50_top1": 0.01})
        leftover["finished_at"] = "9999"  # newer than everything: it would win if it were read
        path = tmp_path / "runs" / "alpha-full" / staging / "result.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(leftover))
    alpha = next(r for r in read_csv_after_write(tmp_path) if r["run"] == "alpha")
    assert float(alpha["linear_probe_top1_mean"]) == pytest.approx(
        statistics.fmean(METRICS["alpha"][s]["linear_probe_top1"] for s in (0, 1, 2)))


def read_csv_after_write(root: Path) -> list[dict[str, str]]:
    write_leaderboard(root)
    return read_csv(root)


def test_seeds_of_an_edited_run_are_never_averaged_with_the_current_ones(tmp_path: Path) -> None:
    """Seed 1 was trained for 40 epochs; the suite was then edited to 2 epochs and seed 0
    retrained: two rows, the older one marked with its configuration."""
    old = fake_result("alpha", 1, {"linear_probe_top1": 0.90})
    old["config"]["run"]["trainer"] = {"max_epochs": 40}
    old["finished_at"] = "2026-01-01T00:00:00+00:00"
    new = fake_result("alpha", 0, {"linear_probe_top1": 0.20})
    new["config"]["run"]["trainer"] = {"max_epochs": 2}
    new["finished_at"] = "2026-02-01T00:00:00+00:00"
    write_result(tmp_path, old)
    write_result(tmp_path, new)
    rows = {r["run"]: r for r in read_csv_after_write(tmp_path)}
    assert float(rows["alpha"]["linear_probe_top1_mean"]) == pytest.approx(0.20)
    assert rows["alpha"]["seeds"] == "1"
    (stale,) = [name for name in rows if name.startswith("alpha [earlier configuration ")]
    assert float(rows[stale]["linear_probe_top1_mean"]) == pytest.approx(0.90)
    assert rows[stale]["config_hash"] != rows["alpha"]["config_hash"]
    assert "earlier configuration" in (tmp_path / "leaderboard.md").read_text()


def test_a_diverged_seed_is_a_row_that_says_so_not_a_number(tmp_path: Path) -> None:
    for seed in (0, 1):
        result = fake_result("alpha", seed, {})
        result.update(status="diverged", error="diverged at epoch 0, step 3 (loss nan)")
        write_result(tmp_path, result)
    write_result(tmp_path, fake_result("beta", 0, {"linear_probe_top1": 0.9}))
    rows = {r["run"]: r for r in read_csv_after_write(tmp_path)}
    assert rows["alpha"]["linear_probe_top1_mean"] == ""
    assert "seed 0 diverged at epoch 0, step 3 (loss nan)" in rows["alpha"]["failed_seeds"]
    board = (tmp_path / "leaderboard.md").read_text()
    alpha_line = next(line for line in board.splitlines() if line.startswith("| alpha |"))
    assert "diverged at epoch 0, step 3" in alpha_line and "n/a" in alpha_line


def test_paper_numbers_are_shown_beside_ours_with_the_difference(tmp_path: Path) -> None:
    for seed, value in enumerate([0.80, 0.84]):
        result = fake_result("alpha", seed, {"linear_probe_top1": value})
        result["config"]["run"]["paper"] = {"source": "Table 1", "linear_probe_top1": [88.11, 0.09],
                                            "tuned": True}
        write_result(tmp_path, result)
    write_leaderboard(tmp_path)
    (row,) = read_csv(tmp_path)
    assert float(row["paper_mean"]) == 88.11 and float(row["paper_std"]) == 0.09
    assert row["paper_source"] == "Table 1"
    ours = 100 * statistics.fmean([0.80, 0.84])
    board = (tmp_path / "leaderboard.md").read_text()
    assert "88.11 ± 0.09 (Table 1)" in board and f"{ours - 88.11:+.2f} (untuned)" in board
    assert "Ours − paper" in board
    section = board.split("## Against the papers")[1]
    assert any(line.endswith("| Table 1 | untuned: the suite's values |")
               for line in section.splitlines())


def test_a_row_of_a_paper_that_did_not_tune_is_not_marked_untuned(tmp_path: Path) -> None:
    # MoCo's and TransFusion's tables report fixed settings: no search to fall short of
    result = fake_result("alpha", 0, {"linear_probe_top1": 0.80})
    result["config"]["run"]["paper"] = {"source": "Table 4", "linear_probe_top1": 84.45}
    write_result(tmp_path, result)
    write_leaderboard(tmp_path)
    board = (tmp_path / "leaderboard.md").read_text()
    line = next(x for x in board.splitlines() if x.startswith("| alpha |"))
    assert f"| {80 - 84.45:+.2f} |" in line
    assert "untuned" not in board
    section = board.split("## Against the papers")[1]
    assert any(x.endswith("| Table 4 | the suite's values |") for x in section.splitlines())
    assert not any("tuned" in key for key in read_csv(tmp_path)[0])  # not a metric column


def test_a_tuned_row_keeps_the_papers_number_and_says_it_was_searched(tmp_path: Path) -> None:
    result = fake_result("alpha+tuned", 0, {"linear_probe_top1": 0.86})
    result["config"]["run"]["paper"] = {"source": "Table 1", "linear_probe_top1": 88.11,
                                        "tuned": True}
    result["config"]["run"]["searched"] = result["searched"] = {
        "configurations_searched": 500, "trials_failed": 0, "max_epochs": 50,
        "metric": "online_val_acc", "best_value": 0.8, "values": {}, "directory": "search"}
    write_result(tmp_path, result)
    write_leaderboard(tmp_path)
    board = (tmp_path / "leaderboard.md").read_text()
    line = next(x for x in board.splitlines() if x.startswith("| alpha+tuned |"))
    assert f"| {86 - 88.11:+.2f} |" in line and "(untuned)" not in line
    section = board.split("## Against the papers")[1]
    assert "| tuned: 500 configs (ASHA, ≤ 50 epochs) |" in section


def test_every_recorded_paper_metric_is_compared_not_only_the_headline(tmp_path: Path) -> None:
    for seed, (svm, knn) in enumerate([(0.90, 0.80), (0.92, 0.84)]):
        result = fake_result("alpha", seed, {"svm_top1": svm, "knn50_top1": knn},
                             headline="svm_top1")
        result["config"]["run"]["paper"] = {"source": "Table 3", "svm_top1": 93.09,
                                            "knn50_top1": 93.55}
        write_result(tmp_path, result)
    write_leaderboard(tmp_path)
    board = (tmp_path / "leaderboard.md").read_text()
    section = board.split("## Against the papers")[1]
    assert f"| 93.55 | {100 * statistics.fmean([0.80, 0.84]) - 93.55:+.2f} | Table 3 |" in section
    assert f"| 93.09 | {100 * statistics.fmean([0.90, 0.92]) - 93.09:+.2f} | Table 3 |" in section
    (row,) = read_csv(tmp_path)
    assert float(row["paper_knn50_top1_mean"]) == 93.55 and row["paper_knn50_top1_std"] == ""
    assert "Against the papers" in (tmp_path / "leaderboard.html").read_text()


def test_no_paper_column_without_paper_numbers(tmp_path: Path) -> None:
    write_all(tmp_path)
    write_leaderboard(tmp_path)
    assert "Paper (%)" not in (tmp_path / "leaderboard.md").read_text()


def test_suite_plots_draw_a_metric_against_a_run_setting(tmp_path: Path) -> None:
    from benchmarks.suites.render_html import plot_series
    from benchmarks.suites.results import aggregate

    plot = {"x": "model.lr", "y": "svm_top1", "series": "model.loss", "log_x": True}
    values = {("jsd_sq", 0.01): [0.80, 0.90], ("jsd_sq", 0.1): [0.70, 0.72],
              ("kl_sm", 0.01): [0.50, 0.60]}
    for (loss, lr), accuracies in values.items():
        for seed, accuracy in enumerate(accuracies):
            result = fake_result(f"{loss}-{lr}", seed, {"svm_top1": accuracy})
            result["config"]["run"]["model"] = {"loss": loss, "lr": lr}
            result["config"]["plots"] = [plot]
            write_result(tmp_path, result)
    series = plot_series(aggregate(load_results(tmp_path), "svm_top1"), plot)
    assert set(series) == {"jsd_sq", "kl_sm"}
    assert [x for x, _, _ in series["jsd_sq"]] == [0.01, 0.1]
    for (loss, lr), accuracies in values.items():
        (point,) = [p for p in series[loss] if p[0] == lr]
        assert point[1] == pytest.approx(100 * statistics.fmean(accuracies))
        assert point[2] == pytest.approx(100 * statistics.stdev(accuracies))
    write_leaderboard(tmp_path)
    png = (tmp_path / "plot-svm_top1-vs-model.lr.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    html = (tmp_path / "leaderboard.html").read_text()
    assert base64.b64encode(png).decode()[:200] in html


def test_scores_are_shown_as_they_are_and_accuracies_in_percent(tmp_path: Path) -> None:
    for seed, (accuracy, ari) in enumerate([(0.91, 0.612), (0.93, 0.634)]):
        write_result(tmp_path, fake_result("alpha", seed, {"linear_probe_top1": accuracy,
                                                           "kmeans_ari": ari}))
    write_leaderboard(tmp_path)
    board = (tmp_path / "leaderboard.md").read_text()
    assert "| 92.00 ± 1.41 |" in board  # percent
    assert f"| 0.623 ± {statistics.stdev([0.612, 0.634]):.3f} |" in board  # raw score
    assert "k-means ARI" in board
    assert (tmp_path / "leaderboard.html").read_text().count('<figure class="chart">') == 2


@pytest.mark.parametrize(("searched", "expected"), [
    (None, "—"),
    ({"configurations_searched": 6, "max_epochs": 4}, "6 configs (ASHA, ≤ 4 epochs)"),
    ({"configurations_searched": 1, "max_epochs": 1, "trials_failed": 1},
     "1 config (ASHA, ≤ 1 epoch, 1 failed)"),
])
def test_searched_cell_counts_configurations_epochs_and_failures(searched, expected) -> None:
    from benchmarks.suites.render_table import searched_cell

    assert searched_cell({"searched": searched}) == expected


def test_merged_suites_get_a_suite_column(tmp_path: Path) -> None:
    write_result(tmp_path / "a", fake_result("alpha", 0, {"linear_probe_top1": 0.8}, suite="one"))
    write_result(tmp_path / "b", fake_result("alpha", 0, {"linear_probe_top1": 0.9}, suite="two"))
    write_leaderboard(tmp_path)
    board = (tmp_path / "leaderboard.md").read_text()
    assert "| Suite | Method |" in board
    assert "| two | alpha |" in board and "| one | alpha |" in board
    write_leaderboard(tmp_path / "a")  # one suite: no such column
    assert "| Suite |" not in (tmp_path / "a/leaderboard.md").read_text()


# -- the HTML page: what a reader relies on --------------------------------------------------
class _Page(HTMLParser):
    """Each table's header cells (their attributes) and body cells (attributes and text)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict[str, list]] = []
        self.cell: dict | None = None
        self.in_body = False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append({"attrs": dict(attrs), "th": [], "td": []})
        elif tag == "tbody":
            self.in_body = True
        elif tag in ("th", "td") and self.tables:
            self.cell = {"attrs": dict(attrs), "text": ""}
            self.tables[-1]["td" if self.in_body else "th"].append(self.cell)

    def handle_endtag(self, tag):
        if tag in ("th", "td"):
            self.cell = None
        elif tag == "tbody":
            self.in_body = False

    def handle_data(self, data):
        if self.cell is not None:
            self.cell["text"] += data


def parsed_page(root: Path) -> tuple[str, _Page]:
    page = (root / "leaderboard.html").read_text()
    parser = _Page()
    parser.feed(page)
    return page, parser


def test_html_columns_sort_and_filter(tmp_path: Path) -> None:
    write_all(tmp_path)
    write_leaderboard(tmp_path)
    page, parsed = parsed_page(tmp_path)
    board = parsed.tables[0]
    assert board["attrs"].get("class") == "sortable"
    headers = [h for h in board["th"] if "data-col" in h["attrs"]]
    titles = [h["text"] for h in headers]
    assert "Method" in titles and "Linear probe top-1 (%)" in titles
    for i, h in enumerate(headers):  # every column: a sortable header and a filter box
        assert h["attrs"]["data-col"] == str(i) and h["attrs"]["aria-sort"] == "none"
        assert "sortable" in h["attrs"]["class"].split() and h["attrs"]["tabindex"] == "0"
    kinds = {h["text"]: h["attrs"]["data-type"] for h in headers}
    assert kinds["Method"] == "text" and kinds["Machine"] == "text"
    assert kinds["Linear probe top-1 (%)"] == "number" and kinds["Seeds"] == "number"
    assert page.count('<input type="search" data-col=') == len(headers)
    script = page[page.index("<script>"):page.index("</script>")]
    assert "function sortTable" in script and "function filterTable" in script
    assert "addEventListener('click'" in script and "addEventListener('input'" in script


def test_html_cells_carry_the_number_they_sort_by(tmp_path: Path) -> None:
    write_all(tmp_path)
    write_leaderboard(tmp_path)
    _, parsed = parsed_page(tmp_path)
    board = parsed.tables[0]
    headers = [h["text"] for h in board["th"] if "data-col" in h["attrs"]]
    column = headers.index("Linear probe top-1 (%)")
    width = len(headers)
    rows = [board["td"][i:i + width] for i in range(0, len(board["td"]), width)]
    for row in rows:
        run = row[headers.index("Method")]["text"]
        values = [METRICS[run][s]["linear_probe_top1"] for s in range(3)]
        cell = row[column]
        assert cell["text"] == (f"{100 * statistics.fmean(values):.2f} ± "
                                f"{100 * statistics.stdev(values):.2f}")
        assert float(cell["attrs"]["data-value"]) == pytest.approx(
            100 * statistics.fmean(values), abs=0.005)
        assert cell["attrs"]["class"] == "num"  # right-aligned, on one line
        assert "data-value" not in row[headers.index("Machine")]["attrs"]


def test_html_values_never_wrap_and_wide_tables_scroll_in_their_box(tmp_path: Path) -> None:
    write_all(tmp_path)
    write_leaderboard(tmp_path)
    page = (tmp_path / "leaderboard.html").read_text()
    css = page[page.index("<style>"):page.index("</style>")].replace(" ", "")
    rule = re.search(r"td\.num\{([^}]*)\}", css)
    assert rule is not None and "white-space:nowrap" in rule.group(1)
    assert re.search(r"\.pm\{white-space:nowrap\}", css)  # a mean ± std inside text
    assert re.search(r"\.table-box\{[^}]*overflow-x:auto", css)
    assert re.search(r"img\{[^}]*max-width:100%", css)
    assert page.count('<div class="table-box"><table') == page.count("<table")


def test_html_mean_and_std_inside_text_stay_together() -> None:
    from benchmarks.infra.html_page import table

    html = table(["Paper (%)"], [["88.11 ± 0.09 (Table 1, a long source name that wraps)"]])
    assert '<span class="pm">88.11 ± 0.09</span> (Table 1' in html


def test_html_page_fetches_nothing(tmp_path: Path) -> None:
    write_all(tmp_path)
    result = fake_result("gamma", 0, {"linear_probe_top1": 0.5})
    result["config"]["run"]["paper"] = {"source": "Table 1", "linear_probe_top1": [88.1, 0.1]}
    write_result(tmp_path, result)
    write_leaderboard(tmp_path)
    page = (tmp_path / "leaderboard.html").read_text()
    for reference in re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', page):
        # a PNG inlined, or a chart's reference to a marker defined inside it
        assert reference.startswith(("data:image/png;base64,", "#")), reference
    # url(#clip) in a chart refers to a clip path inside it; any other url( would be fetched
    assert not re.search(r"https?:|@import|url\((?!#)|<link|<iframe|fetch\(|XMLHttpRequest",
                         page)
    assert "<script src" not in page


def test_bar_chart_marks_the_papers_value(tmp_path: Path) -> None:
    from benchmarks.suites.render_html import bar_chart_alt, bar_chart_data
    from benchmarks.suites.results import aggregate

    write_all(tmp_path)
    for seed, value in enumerate([0.80, 0.84]):
        result = fake_result("gamma", seed, {"linear_probe_top1": value, "knn50_top1": 0.5})
        result["config"]["run"]["paper"] = {"source": "Table 1", "linear_probe_top1": [88.11, 0.09]}
        write_result(tmp_path, result)
    rows = aggregate(load_results(tmp_path), "linear_probe_top1")
    bars = {b["label"]: b for b in bar_chart_data(rows, "linear_probe_top1")}
    assert bars["gamma (digits)"]["paper_mean"] == 88.11
    assert bars["gamma (digits)"]["paper_std"] == 0.09
    assert bars["gamma (digits)"]["paper_source"] == "Table 1"
    assert bars["gamma (digits)"]["mean"] == pytest.approx(100 * statistics.fmean([0.80, 0.84]))
    assert bars["alpha (digits)"]["paper_mean"] is None  # no number recorded for it
    # the paper's value is a metric's own: kNN's chart has none
    assert all(b["paper_mean"] is None for b in bar_chart_data(rows, "knn50_top1"))
    assert "gamma (digits) 82.00 ± 2.83 (paper: 88.11 ± 0.09)" in bar_chart_alt(
        rows, "linear_probe_top1")
    # the marker is drawn: the chart has a diamond beside its legend's, with the paper's numbers
    from benchmarks.suites.render_html import bar_chart_svg

    svg = bar_chart_svg(rows, "linear_probe_top1")
    assert svg.count('class="cb-paper"') == 2 and 'data-paper-mean="88.11"' in svg
    unmarked = [{**row, "paper": {}} for row in rows]
    assert 'class="cb-paper"' not in bar_chart_svg(unmarked, "linear_probe_top1")
    write_leaderboard(tmp_path)
    page = (tmp_path / "leaderboard.html").read_text()
    assert "(paper: 88.11 ± 0.09)" in page and "Black diamonds: the paper&#x27;s value" in page


def test_a_chart_takes_its_axis_from_the_metrics_bounds(monkeypatch) -> None:
    """A metric with an open range (a rank in the hundreds) gets no bounds on its axis, a score
    its [-1, 1] and an accuracy its [0, 100] percent; the least padding is half a point of an
    accuracy, 0.005 of anything else (a chart once spanned a score's whole [-1, 1] around ranks
    in the hundreds, 15,187 pixels wide)."""
    from benchmarks.protocols import PROTOCOLS
    from benchmarks.protocols.protocol import Metric
    from benchmarks.suites.render_html import bar_chart_svg

    rank = Metric("rankme", "RankMe", percent=False)
    monkeypatch.setitem(PROTOCOLS, "rank", replace(PROTOCOLS["knn"], name="rank",
                                                   metrics=(rank,)))
    rows = [{"run": f"r{i}", "dataset": "digits", "paper": {},
             "metrics": {"rankme": {"mean": value, "std": 3.0},
                         "silhouette": {"mean": value / 1000, "std": None},
                         "linear_probe_top1": {"mean": value / 500, "std": None}}}
            for i, value in enumerate([120.0, 480.0])]

    def bounds(metric: str) -> str:
        return re.search(r'aria-label="[^"]*"( data-[^>]*)>', bar_chart_svg(rows, metric))[1]

    assert bounds("rankme") == ' data-pad="0.005"'
    assert bounds("silhouette") == ' data-low="-1.0" data-high="1.0" data-pad="0.005"'
    assert bounds("linear_probe_top1") == ' data-low="0.0" data-high="100.0" data-pad="0.5"'
    assert 'data-mean="96.0"' in bar_chart_svg(rows, "linear_probe_top1")  # in percent


@pytest.mark.parametrize(("edit", "says"), [
    (lambda r: r["metrics"].update(linear_probe_top1="0.9"), "'metrics' 'linear_probe_top1' is"),
    (lambda r: r["metrics"].update(linear_probe_top1=float("inf")),
     "'metrics' 'linear_probe_top1' is inf"),
    (lambda r: r.update(metrics=[0.9]), "'metrics' is"),
    (lambda r: r.pop("machine"), "no 'machine'"),
    (lambda r: r.update(seed="0"), "'seed' is"),
    (lambda r: r.update(run="x" * 1_000_000), "'run' is"),
    (lambda r: r.update(status="diverged"), "a diverged result without its error"),
])
def test_a_malformed_result_is_skipped_naming_it_and_the_others_are_tabled(
        tmp_path: Path, capsys, edit, says) -> None:
    good = fake_result("alpha", 0, {"linear_probe_top1": 0.9})
    bad = fake_result("beta", 1, {"linear_probe_top1": 0.8})
    edit(bad)
    write_result(tmp_path, good)
    path = tmp_path / "runs/beta-full/seed-1/result.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(bad))
    write_leaderboard(tmp_path)
    err = capsys.readouterr().err
    assert f"skipping {path}: cannot be read as a result" in err and says in err
    board = (tmp_path / "leaderboard.md").read_text()
    assert "| alpha |" in board and "| beta |" not in board


def test_a_run_name_with_dollar_signs_is_drawn_as_text(tmp_path: Path) -> None:
    """matplotlib reads $...$ as mathtext: a name like $\\frac$ broke the chart."""
    write_result(tmp_path, fake_result(r"a$\frac$b", 0, {"linear_probe_top1": 0.9}))
    write_leaderboard(tmp_path)
    assert r"a$\frac$b" in (tmp_path / "leaderboard.md").read_text()


def test_a_kill_between_the_leaderboard_renames_is_finished_by_the_next_write(
        tmp_path: Path, monkeypatch) -> None:
    """The leaderboard's files are renamed into place one after another; a kill after the
    first left leaderboard.md with two seeds and the CSV and HTML with one. The renames still
    to do are recorded first, so the next write (or finish_together) completes the set, and
    temporary files that a kill left half-written are removed."""
    import benchmarks.infra.atomic as atomic
    from benchmarks.suites.leaderboard import JOURNAL

    write_result(tmp_path, fake_result("alpha", 0, {"linear_probe_top1": 0.80}))
    write_leaderboard(tmp_path)
    write_result(tmp_path, fake_result("alpha", 1, {"linear_probe_top1": 0.84}))
    replace, done = os.replace, []

    def killed_after_one(src, dst):
        if Path(dst).name.startswith("leaderboard."):
            if done:
                raise SystemExit("killed")  # the process dies between two renames
            done.append(Path(dst))
        replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", killed_after_one)
    with pytest.raises(SystemExit):
        write_leaderboard(tmp_path)
    monkeypatch.setattr(atomic.os, "replace", replace)
    assert (tmp_path / JOURNAL).is_file()
    assert done == [tmp_path / "leaderboard.md"]
    assert "0, 1" in (tmp_path / "leaderboard.md").read_text()  # the set disagrees after the kill
    assert "0, 1" not in (tmp_path / "leaderboard.html").read_text()
    orphan = tmp_path / ".leaderboard.csv.abcd1234.tmp"  # a kill while writing, before the record
    atomic.finish_together(tmp_path / JOURNAL, [tmp_path / "leaderboard.csv"])
    assert not (tmp_path / JOURNAL).exists()
    for name in ("leaderboard.md", "leaderboard.html"):
        assert "0, 1" in (tmp_path / name).read_text(), name
    (row,) = read_csv(tmp_path)
    assert row["seeds"] == "2"  # the CSV counts the seeds
    orphan.write_text("half")
    write_leaderboard(tmp_path)
    assert not orphan.exists()


def test_a_screenshot_without_chromium_is_one_line_naming_the_install(tmp_path, capsys,
                                                                     monkeypatch) -> None:
    import shutil

    from benchmarks.cli import main

    root = tmp_path / "board"
    write_result(root, fake_result("alpha", 0, {"linear_probe_top1": 0.8}))
    write_leaderboard(root)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["report", str(root), "--out", str(tmp_path / "docs"), "--screenshot",
                 str(tmp_path / "shot.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["clusterbench: error: no Chromium to take the screenshot with (tried "
                   "chromium, chromium-browser, google-chrome, google-chrome-stable): apt-get "
                   "install chromium"]


def test_every_seeds_figures_are_on_the_page_titled_in_words(tmp_path: Path) -> None:
    """A t-SNE per seed (they differ), the search's trials once (every seed keeps the same)."""
    from benchmarks.suites.results import load_results, run_figures

    for seed in (0, 1):
        result = fake_result("alpha", seed, {"linear_probe_top1": 0.8})
        result["figures"] = ["tsne.png", "search-trials.png"]
        folder = write_result(tmp_path, result).parent
        (folder / "tsne.png").write_bytes(b"\x89PNG tsne of seed %d" % seed)
        (folder / "search-trials.png").write_bytes(b"\x89PNG the search")
    titles = list(run_figures(load_results(tmp_path)))
    assert titles == [
        "alpha (digits, seed 0): t-SNE of the test features, coloured by class",
        "alpha (digits, seed 0): the search's trials: the metric ASHA scheduled on, by epoch",
        "alpha (digits, seed 1): t-SNE of the test features, coloured by class"]


def test_learning_curves_are_each_runs_mean_over_seeds_by_epoch(tmp_path: Path) -> None:
    """Each epoch's training loss is the mean of its logged steps, then the mean over seeds;
    a seed without a readable metrics.csv adds nothing, and the page shows the figure."""
    from benchmarks.suites.curves import TITLE, run_curves
    from benchmarks.suites.results import load_results

    logs = {0: "epoch,online_val_acc,step,train_loss\n0,,4,2.0\n0,,8,4.0\n0,0.5,8,\n1,,12,1.0\n"
               "1,0.7,16,\n",
            1: "epoch,online_val_acc,step,train_loss\n0,,4,5.0\n0,0.3,8,\n1,,12,nan\n",
            2: "\x00\x01 not a csv"}
    for seed, text in logs.items():
        folder = write_result(tmp_path, fake_result("alpha", seed,
                                                    {"linear_probe_top1": 0.8})).parent
        (folder / "logs").mkdir()
        (folder / "logs" / "metrics.csv").write_text(text)
    curves = run_curves(load_results(tmp_path))["alpha"]
    assert curves["train_loss"] == {0: (3.0 + 5.0) / 2, 1: 1.0}
    assert curves["online_val_acc"] == {0: pytest.approx(0.4), 1: 0.7}
    write_leaderboard(tmp_path)
    assert TITLE.split(":")[0] in (tmp_path / "leaderboard.html").read_text()


def write_curve(root: Path, result: dict, curve: dict[int, float]) -> None:
    """``result`` written under ``root`` with its seed's online probe ``curve`` (epoch ->
    accuracy, a fraction) in its logs/metrics.csv."""
    folder = write_result(root, result).parent
    (folder / "logs").mkdir()
    (folder / "logs" / "metrics.csv").write_text(
        "epoch,online_val_acc\n" + "".join(f"{e},{v}\n" for e, v in curve.items()))


def test_a_run_still_rising_is_marked_under_trained_next_to_its_numbers(tmp_path: Path
                                                                        ) -> None:
    """The mean of the last quarter of epochs against the quarter before: 8 epochs rising 2
    points an epoch rose 4 points (under-trained), a plateau with noise did not; the Curve
    column says so next to each row's numbers, the page's training table in words."""
    from benchmarks.suites.curves import flatness

    rising = {e: (50 + 2 * e) / 100 for e in range(8)}
    plateau = {e: v / 100 for e, v in enumerate([60, 75, 80, 81, 82, 81.5, 82.5, 81.8])}
    assert flatness(rising).rise == pytest.approx((62 + 64) / 2 - (58 + 60) / 2)
    assert flatness(rising).under_trained
    assert flatness(plateau).rise == pytest.approx((82.5 + 81.8) / 2 - (82 + 81.5) / 2)
    assert not flatness(plateau).under_trained
    assert not flatness({0: 0.5}).under_trained  # one epoch is no curve: not judged
    assert flatness({0: 0.5}).said() == "too short to judge (1 epoch)"
    assert flatness({}) is None
    for name, curve in (("alpha", rising), ("beta", plateau)):
        write_curve(tmp_path, fake_result(name, 0, {"linear_probe_top1": 0.8}), curve)
    write_result(tmp_path, fake_result("pixels", 0, {"linear_probe_top1": 0.7}))
    write_leaderboard(tmp_path)
    board = (tmp_path / "leaderboard.md").read_text()
    table = board.split("| Method")[1].split("\n\n")[0].splitlines()
    header, rows = "| Method" + table[0], table[2:]
    cells = {line.split(" | ")[0]: line.split(" | ") for line in rows}
    column = header.split(" | ").index("Curve")
    assert cells["| alpha"][column] == "under-trained (+4.00)"
    assert cells["| beta"][column] == "flattened (+0.40)"
    assert cells["| pixels"][column] == "n/a"
    assert "| alpha | 8 | 1: 50.0, 3: 54.0, 5: 58.0, 6: 60.0, 8: 64.0 | under-trained (+4.00 " \
           "points over its last 2 epochs) |" in board
    assert "| beta | 8 |" in board and "flattened (+0.40 points over its last 2 epochs)" in board
    page = write_report(tmp_path, tmp_path / "docs")
    assert "| under-trained (+4.00) |" in page.read_text()
    assert "![Learning curves" in page.read_text()
    assert (tmp_path / "docs" / f"{page.stem}-curves.png").read_bytes().startswith(b"\x89PNG")


def test_a_run_with_a_decaying_rate_is_judged_on_its_epochs_at_a_constant_rate(
        tmp_path: Path) -> None:
    """Under a warm-up-stable-decay schedule the online probe jumps in the decay (the rate goes
    to 0): judged on all its epochs, a run flat at its constant rate would read under-trained,
    and one still rising at its constant rate could read flattened once the decay's last epochs
    level off. The verdict reads the epochs before the decay (``decay_epochs``, rounded up)."""
    flat_then_decay = [70, 80, 82, 82.2, 82.1, 82.3, 82.2, 82.3, 84.5, 85.5]  # 10 epochs
    rising_then_decay = [60, 64, 68, 72, 76, 80, 84, 86.6, 86.6, 86.6]
    for name, curve in (("alpha", flat_then_decay), ("gamma", rising_then_decay)):
        result = fake_result(name, 0, {"linear_probe_top1": 0.8})
        result["config"]["run"]["model"] = {"decay_epochs": 1.5}  # the last 2 epochs decay
        write_curve(tmp_path, result, {e: v / 100 for e, v in enumerate(curve)})
    write_leaderboard(tmp_path)
    board = (tmp_path / "leaderboard.md").read_text()
    # the 8 epochs before the decay, in quarters of 2: (82.2 + 82.3) / 2 - (82.1 + 82.3) / 2
    assert ("| alpha | 10 | 1: 70.0, 3: 82.0, 5: 82.1, 8: 82.3, 10: 85.5 | flattened (+0.05 "
            "points over its last 2 epochs at a constant rate, of the 8 before its decay) |"
            in board)
    assert "under-trained (+7.30, constant rate)" in board  # (84 + 86.6) / 2 - (76 + 80) / 2
    assert "flattened (+0.05, constant rate)" in board


def test_a_falling_curve_is_called_falling_and_a_short_one_too_short(tmp_path: Path) -> None:
    """A 3-epoch curve that ends below where it was is not "flattened": falling, by its last
    epoch's drop, or by its drop since the first epoch where its last two are level; a curve
    that never moved is flat; the Curve cell and the training table say the same. A run whose
    decay took all but one of its epochs has no constant-rate curve to judge."""
    from benchmarks.suites.curves import flatness

    curves = {"alpha": [80.0, 85.0, 84.6], "beta": [85.0, 84.6, 84.6], "gamma": [10.0, 10.0],
              "delta": [70.0, 80.0, 84.0]}
    said = {name: flatness({e: v / 100 for e, v in enumerate(curve)})
            for name, curve in curves.items()}
    assert {name: (f.verdict, round(f.rise, 2), round(f.gain, 2)) for name, f in said.items()} \
        == {"alpha": ("falling", -0.4, 4.6), "beta": ("falling", 0.0, -0.4),
            "gamma": ("flat", 0.0, 0.0), "delta": ("under-trained", 4.0, 14.0)}
    assert not any(f.under_trained for name, f in said.items() if name != "delta")
    for name, curve in curves.items():
        result = fake_result(name, 0, {"linear_probe_top1": 0.8})
        if name == "delta":  # 3 epochs, the last 2 decaying: one epoch at a constant rate
            result["config"]["run"]["model"] = {"decay_epochs": 2}
        write_curve(tmp_path, result, {e: v / 100 for e, v in enumerate(curve)})
    write_leaderboard(tmp_path)
    board = (tmp_path / "leaderboard.md").read_text()
    table = board.split("| Method")[1].split("\n\n")[0].splitlines()
    column = ("| Method" + table[0]).split(" | ").index("Curve")
    cells = {line.split(" | ")[0]: line.split(" | ")[column] for line in table[2:]}
    assert cells == {"| alpha": "falling (-0.40)", "| beta": "falling (-0.40 since epoch 1)",
                     "| gamma": "flat (+0.00 since epoch 1)",
                     "| delta": "too short (1 epoch, constant rate)"}
    assert "falling (-0.40 points over its last epoch) |" in board
    assert "falling (-0.40 points since its first epoch) |" in board
    assert "too short to judge (1 epoch at a constant rate, before its decay) |" in board


def test_two_suites_side_by_side_in_one_leaderboard(tmp_path: Path, capsys) -> None:
    """``clusterbench leaderboard DIR1 DIR2 --out DIR``: one table with a Suite column, the
    sources left as they were; several folders without --out are refused in one line."""
    from benchmarks.cli import main

    for suite, value in (("smoke", 0.8), ("fashion", 0.6)):
        for seed in (0, 1):
            write_result(tmp_path / suite, fake_result("alpha", seed, {"linear_probe_top1":
                                                                        value}, suite=suite))
    out = tmp_path / "both"
    assert main(["leaderboard", str(tmp_path / "smoke"), str(tmp_path / "fashion"),
                 "--out", str(out)]) == 0
    rows = {(r["suite"], r["run"]): r for r in csv.DictReader((out / "leaderboard.csv").open())}
    assert set(rows) == {("smoke", "alpha"), ("fashion", "alpha")}
    assert "| Suite | Method |" in (out / "leaderboard.md").read_text()
    assert not (tmp_path / "smoke" / "leaderboard.md").exists()
    printed = capsys.readouterr().out
    assert f"{tmp_path / 'smoke'}/runs/, {tmp_path / 'fashion'}/runs/" in printed
    assert main(["leaderboard", str(tmp_path / "smoke"), str(tmp_path / "fashion")]) == 2
    assert "2 results folders side by side need --out DIR" in capsys.readouterr().err


def test_a_run_finishing_elsewhere_while_the_board_is_read_is_no_error(
        tmp_path: Path, monkeypatch) -> None:
    """On a Ray cluster the driver rebuilds the board while the other runs go on. A folder the
    walk listed can be gone when it comes to read it: ``seed-1`` renamed to ``seed-1.replaced``
    by a run replacing it, ``seed-1.attempt`` (and its ``logs``) renamed into place by a run
    that finished. Neither is an error: the board has what was finished by then, and the walk
    never goes into a run's staging folders."""
    write_all(tmp_path)
    runs = tmp_path / "runs" / "alpha-full"
    (runs / "seed-0.attempt" / "logs").mkdir(parents=True)
    scandir, scanned = os.scandir, []

    def replaced_meanwhile(path="."):
        scanned.append(Path(path))
        if Path(path) == runs / "seed-1":  # its task is replacing it: renamed aside first
            (runs / "seed-1").rename(runs / "seed-1.replaced")
        return scandir(path)

    monkeypatch.setattr(os, "scandir", replaced_meanwhile)
    results = load_results(tmp_path)
    monkeypatch.undo()
    assert (runs / "seed-1.replaced").is_dir()  # the race took place
    assert sorted((r["run"], r["seed"]) for r in results) == [
        (run, seed) for run, seeds in sorted(METRICS.items()) for seed in sorted(seeds)
        if (run, seed) != ("alpha", 1)]
    assert not [p for p in scanned if p.name.endswith((".attempt", ".replaced"))]
