"""The leaderboard on the console (the end of ``bench``, ``clusterbench leaderboard``): a table
that fits the terminal, its columns whole, the headline always among them, and one line naming
the columns left out and the files that hold them all."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_leaderboard import MACHINE_B, fake_result, write_result

from benchmarks.cli.console import markdown_cells, print_leaderboard
from benchmarks.suites.leaderboard import write_leaderboard

#: Every metric a suite's evaluation records, two seeds a run: a board as wide as smoke's.
SCORES = {"linear_probe_top1": 0.885, "svm_top1": 0.871, "knn50_top1": 0.862,
          "knn200_top1": 0.848, "kmeans_ari": 0.489, "kmeans_nmi": 0.607,
          "silhouette": -0.199, "online_val_acc": 0.808}
RUNS = ("simclr/concat_sum+tuned", "transfusion/5-blocks", "supcon", "pixels")


def wide_board(root: Path) -> Path:
    """A results folder whose leaderboard has every column: the scores with their spread, the
    paper's number, a diverged seed, a long machine name."""
    for number, run in enumerate(RUNS):
        for seed in (0, 1):
            shift = 0.01 * (seed - number)
            result = fake_result(run, seed, {k: v + shift for k, v in SCORES.items()},
                                 machine=MACHINE_B)
            if run == "transfusion/5-blocks":
                result["config"]["run"]["paper"] = {"source": "Table 1",
                                                    "linear_probe_top1": [88.11, 0.09]}
            if run == "supcon" and seed == 1:
                result.update(status="diverged", error="diverged at epoch 3, step 120 (loss nan)")
            write_result(root, result)
    assert write_leaderboard(root)
    return root


def leaderboard_table(markdown: str) -> tuple[list[str], list[list[str]]]:
    """The main table of ``leaderboard.md``: its header and rows, as cells."""
    lines = [line for line in markdown.split("\n\n")
             if line.startswith("| Method")][0].splitlines()
    return markdown_cells(lines[0]), [markdown_cells(line) for line in lines[2:]]


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> Path:
    """:func:`wide_board` once for the widths below (its page draws a chart per metric)."""
    return wide_board(tmp_path_factory.mktemp("wide") / "r")


@pytest.mark.parametrize("width", [80, 100, 120, 160, 220])
def test_the_leaderboard_fits_the_terminal_with_its_headline_and_whole_cells(
        wide, capsys, monkeypatch, width):
    """What ``bench`` and ``clusterbench leaderboard`` print at the end, at ``COLUMNS``."""
    monkeypatch.chdir(wide.parent)
    header, rows = leaderboard_table((wide / "leaderboard.md").read_text())
    assert len(" | ".join(header)) > 220  # the whole table fits no terminal here
    monkeypatch.setenv("COLUMNS", str(width))
    print_leaderboard(Path("r"))
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert all(len(line) <= width for line in lines), max(lines, key=len)
    assert "…" not in out
    # one line below the table names the columns left out and the files that hold them all
    table, _, rest = out.partition("Left out at ")
    note = " ".join(rest.split("\n\n")[0].split())
    left_out = note.split(": ", 1)[1].split(". All columns: ")[0].split("; ")
    assert note.endswith(". All columns: r/leaderboard.{md,csv,html}")
    assert set(left_out) < set(header) and "Linear probe top-1 (%)" not in left_out
    assert {"Method", "Dataset", "Seeds"}.isdisjoint(left_out)
    for cells in rows:  # each run's line holds every cell shown, whole, the headline's too
        (line,) = [line for line in table.splitlines() if line.split()[:1] == [cells[0]]]
        shown = [cell for label, cell in zip(header, cells, strict=True)
                 if label not in left_out and cell]
        assert cells[header.index("Linear probe top-1 (%)")] in shown
        assert all(cell in line for cell in shown), (shown, line)
    if width >= 220:  # room for the paper's number beside ours
        assert "Paper (%)" not in left_out and "Ours − paper" not in left_out


def test_a_table_whose_required_columns_are_wider_than_the_terminal_cuts_no_number():
    """The method and the headline are shown whatever the width; a console narrower than
    them folds a cell onto a second line, never an ellipsis."""
    from benchmarks.cli.console import fitted_columns

    header = ["Method", "Dataset", "Seeds", "Linear probe top-1 (%)", "Machine"]
    body = [["simclr/a-very-long-run-name-of-a-search+tuned", "digits", "2", "99.11 ± 0.31",
             "2-core x86_64 CPU"]]
    assert list(fitted_columns(header, body, [0, 3, 1, 2, 4], 2, 40)) == [0, 3]
    assert list(fitted_columns(header, body, [0, 3, 1, 2, 4], 2, 300)) == [0, 1, 2, 3, 4]
