"""Text from result files (run and budget names, machines) reaches the leaderboard's CSV, its
Markdown and the terminal as text: a CSV cell starting like a formula is quoted with ``'`` while
numbers stay numbers, a Markdown cell keeps its ``|`` and line breaks inside it, and control
characters never reach the terminal."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from test_leaderboard import MACHINE_A, fake_result, write_result

from benchmarks.cli import main
from benchmarks.suites.leaderboard import write_leaderboard

#: A run name that is a formula, an OSC sequence that retitles the terminal, a bell and a CR.
RUN = '=HYPERLINK("x")|\x1b]0;owned\x07\rdone'


def hostile_board(root: Path) -> Path:
    machine = {**MACHINE_A, "processor": "\x1b[31mred"}
    for seed in (0, 1):
        write_result(root, fake_result(RUN, seed, {"linear_probe_top1": 0.8, "kmeans_ari": -0.25},
                                       machine=machine))
    assert write_leaderboard(root)
    return root


def test_csv_text_cells_that_start_like_formulas_are_quoted_and_numbers_are_not(tmp_path):
    board = hostile_board(tmp_path / "r")
    text = (board / "leaderboard.csv").read_bytes().decode()  # a CR in a cell kept as it is
    (row,) = csv.DictReader(io.StringIO(text, newline=""))
    assert row["run"] == "'" + RUN
    assert not any(value.startswith(("=", "+", "-", "@", "\t", "\r"))
                   for column, value in row.items() if not column.endswith(("_mean", "_std")))
    # the numbers are still numbers, a negative one included
    assert float(row["kmeans_ari_mean"]) == -0.25 and float(row["linear_probe_top1_mean"]) == 0.8


def test_markdown_cells_stay_one_cell_and_the_terminal_gets_no_control_characters(tmp_path,
                                                                                  capsys,
                                                                                  monkeypatch):
    board = hostile_board(tmp_path / "r")
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "400")  # a terminal wide enough for the Machine column
    markdown = (board / "leaderboard.md").read_text()
    (line,) = [line for line in markdown.splitlines() if "HYPERLINK" in line]
    assert '=HYPERLINK("x")\\|' in line and line.count(" | ") >= 2
    assert main(["leaderboard", str(board)]) == 0
    out = capsys.readouterr().out
    assert "HYPERLINK" in out and "red" in out
    assert not any(c in out for c in "\x1b\x07\r\x9b")


def test_report_out_naming_an_existing_file_is_one_line_and_leaves_it(tmp_path, capsys):
    board = hostile_board(tmp_path / "r")
    page = tmp_path / "page.md"
    page.write_text("earlier page\n")
    capsys.readouterr()
    assert main(["report", str(board), "--out", str(page)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"clusterbench: error: --out {page} is a file")
    assert page.read_text() == "earlier page\n"


def test_warnings_and_errors_naming_a_hostile_folder_carry_no_control_characters(tmp_path,
                                                                                 capsys):
    """A result file that cannot be read, in a folder whose name retitles the terminal: the
    warning that skips it names it without the control characters; so does an error naming a
    suite file with such a name."""
    board = hostile_board(tmp_path / "r")
    broken = board / "runs" / "x\x1b]0;owned\x07" / "seed-0"
    broken.mkdir(parents=True)
    (broken / "result.json").write_text("{not json")
    capsys.readouterr()
    assert main(["leaderboard", str(board)]) == 0
    err = capsys.readouterr().err
    assert "skipping" in err and "owned" in err
    assert not any(c in err for c in "\x1b\x07")
    assert main(["bench", str(tmp_path / "suite\x1b[2J.yaml")]) == 2
    err = capsys.readouterr().err
    assert "2J.yaml" in err and "\x1b" not in err
