"""``kind: experiment`` suites: a function's tables, notes and figures become a report."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from repository import ROOT

from benchmarks.cli import main
from benchmarks.experiments import EXPERIMENTS
from benchmarks.suites.experiment import ExperimentOutput, slug


def tiny_png() -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.infra.plots import png_bytes

    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1], [0, 1])
    return png_bytes(fig, dpi=20)


def squares(seeds: list[int], n: int = 3, fail: bool = False) -> ExperimentOutput:
    """A toy experiment: the squares of 0..n-1, one row per value, and the seeds it got."""
    if fail:
        raise RuntimeError("the experiment broke")
    rows = [{"x": i, "x squared": float(i * i), "seeds": len(seeds), "set": "{0} | {1}"}
            for i in range(n)]
    return ExperimentOutput(tables={"Squares: table 1": rows}, figures={"line.png": tiny_png()},
                            notes=[f"{n} values over seeds {seeds}"])


def anything(seeds: list[int], n: int = 1, **kwargs) -> ExperimentOutput:
    """A toy experiment with a ``**kwargs`` catch-all."""
    return ExperimentOutput(notes=[f"{n} {sorted(kwargs)}"])


@pytest.fixture(autouse=True)
def toy_experiments(monkeypatch):
    """The toy experiments, registered for the tests of this module only."""
    monkeypatch.setitem(EXPERIMENTS, "squares", squares)
    monkeypatch.setitem(EXPERIMENTS, "anything", anything)


def write_experiment(path: Path, **extra) -> Path:
    suite = {"name": path.stem, "kind": "experiment", "description": "toy squares",
             "experiment": "squares", "seeds": [0, 1, 2],
             "settings": {"n": 4}, "fast": {"seeds": [0], "settings": {"n": 2}}, **extra}
    path.write_text(yaml.safe_dump(suite))
    return path


def test_report_holds_every_table_note_and_figure(tmp_path):
    suite = write_experiment(tmp_path / "toy.yaml")
    assert main(["bench", str(suite), "--results", str(tmp_path / "results")]) == 0
    out = tmp_path / "results" / "toy"
    rows = list(csv.DictReader((out / f"{slug('Squares: table 1')}.csv").open()))
    assert [float(r["x squared"]) for r in rows] == [0.0, 1.0, 4.0, 9.0]
    assert (out / "figures/line.png").read_bytes().startswith(b"\x89PNG")
    board = (out / "leaderboard.md").read_text()
    assert "## Squares: table 1" in board and "| 3 | 9 | 3 | {0} \\| {1} |" in board
    assert "4 values over seeds [0, 1, 2]" in board and "seeds 0, 1, 2 (3)" in board
    assert "data:image/png;base64," in (out / "leaderboard.html").read_text()
    result = json.loads((out / "result.json").read_text())
    assert result["budget"] == "full" and result["settings"] == {"n": 4}
    assert result["machine"]["cpus"] >= 1 and result["wall_seconds"] >= 0


def test_fast_budget_merges_its_settings_and_writes_apart(tmp_path):
    suite = write_experiment(tmp_path / "toy.yaml")
    assert main(["bench", str(suite), "--fast", "--results", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "toy-fast/result.json").read_text())
    assert result["seeds"] == [0] and result["settings"] == {"n": 2}
    assert "tiny smoke budget" in (tmp_path / "toy-fast/leaderboard.md").read_text()
    assert not (tmp_path / "toy").exists()


def test_unknown_setting_exits_2_naming_it_and_the_accepted_ones(tmp_path, capsys):
    suite = write_experiment(tmp_path / "toy.yaml", settings={"m": 4})
    assert main(["bench", str(suite), "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'm'" in err and "accepted: fail, n" in err


def test_unknown_experiment_exits_2_naming_the_registered_ones(tmp_path, capsys):
    suite = write_experiment(tmp_path / "toy.yaml", experiment="squarez")
    assert main(["bench", str(suite), "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown experiment 'squarez'" in err and "did you mean 'squares'" in err
    assert all(name in err for name in EXPERIMENTS)


def test_a_suite_cannot_name_a_function_to_import_and_call(tmp_path, capsys):
    """``torch.hub.load`` with ``source: local`` runs the ``hubconf.py`` of any directory: a suite
    naming it (a ``package.module:function`` path, as suites once did) is refused, and the
    planted entry point never runs."""
    import torch

    marker = tmp_path / "hubconf-ran"
    hub = tmp_path / "hub"
    hub.mkdir()
    (hub / "hubconf.py").write_text(
        "from pathlib import Path\n\n\n"
        f"def entry(**kwargs):\n    Path({str(marker)!r}).write_text('ran')\n")
    torch.hub.load(str(hub), "entry", source="local")  # the plant is live ...
    assert marker.exists()
    marker.unlink()
    suite = write_experiment(tmp_path / "hub.yaml", experiment="torch.hub:load",
                             settings={"repo_or_dir": str(hub), "model": "entry",
                                       "source": "local"})
    for budget in ([], ["--fast"]):
        assert main(["bench", str(suite), "--results", str(tmp_path / "results"), *budget]) == 2
        err = capsys.readouterr().err
        assert "unknown experiment 'torch.hub:load'" in err and "accepted:" in err
    assert not marker.exists()  # ... and clusterbench never ran it
    assert not (tmp_path / "results").exists()


def test_settings_are_checked_against_named_arguments_even_with_kwargs(tmp_path, capsys):
    suite = write_experiment(tmp_path / "toy.yaml", experiment="anything",
                             settings={"n": 2, "repo_or_dir": "/tmp"})
    assert main(["bench", str(suite), "--results", str(tmp_path)]) == 2
    assert "unknown key 'repo_or_dir'" in capsys.readouterr().err
    assert not (tmp_path / "toy").exists()


#: The experiments the package ships: the registry as it is imported, before a test adds one.
SHIPPED = sorted(EXPERIMENTS)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_experiments_take_every_setting_from_their_suite_file(name):
    """Every setting a shipped experiment accepts is a named argument without a default, so the
    suite check is complete and the suite file is the settings' one home: the shipped suite names
    its experiment and sets every argument in both budgets."""
    import inspect

    from benchmarks.suites.experiment import load_experiment_suite

    parameters = inspect.signature(EXPERIMENTS[name]).parameters.values()
    assert not {p.kind for p in parameters} & {inspect.Parameter.VAR_KEYWORD,
                                               inspect.Parameter.VAR_POSITIONAL}
    assert [p.name for p in parameters if p.default is not inspect.Parameter.empty] == []
    for fast in (False, True):
        suite = load_experiment_suite(name, EXPERIMENTS, fast=fast)
        assert suite.experiment == name and suite.function is EXPERIMENTS[name]
        assert set(suite.settings) == {p.name for p in parameters} - {"seeds"}


def needs_n(seeds: list[int], n: int) -> ExperimentOutput:
    """A toy experiment whose ``n`` has no default: only the suite can give it."""
    return ExperimentOutput(notes=[f"{n}"])


def test_a_setting_without_default_left_unset_exits_2_naming_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(EXPERIMENTS, "needs_n", needs_n)
    suite = write_experiment(tmp_path / "toy.yaml", experiment="needs_n", settings={},
                             fast={"seeds": [0]})
    for budget in ([], ["--fast"]):
        assert main(["bench", str(suite), "--results", str(tmp_path / "results"), *budget]) == 2
        err = capsys.readouterr().err
        assert "missing 'n'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "results").exists()


def test_a_bad_nested_setting_of_a_shipped_suite_exits_2_naming_it(tmp_path, capsys):
    """Nested settings (a part of the paper) are checked key by key, as the top level is, before
    anything is computed: a misspelt key and a missing one each exit 2 with one line."""
    from benchmarks.suites.suite_file import SUITE_DIR

    suite = yaml.safe_load((SUITE_DIR / "invariant_attention.yaml").read_text())
    misspelt = {**suite, "settings": {**suite["settings"], "figure2": {
        **suite["settings"]["figure2"], "bandwith": 0.1}}}
    (tmp_path / "misspelt.yaml").write_text(yaml.safe_dump(misspelt))
    figure2 = {k: v for k, v in suite["settings"]["figure2"].items() if k != "merge_distance"}
    missing = {**suite, "settings": {**suite["settings"], "figure2": figure2}}
    (tmp_path / "missing.yaml").write_text(yaml.safe_dump(missing))
    for path, words in ((tmp_path / "misspelt.yaml", ["unknown key 'bandwith'", "figure2"]),
                        (tmp_path / "missing.yaml", ["missing 'merge_distance'", "figure2"])):
        assert main(["bench", str(path), "--fast", "--results", str(tmp_path / "out")]) == 2
        (error,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
        assert all(word in error for word in words)  # one line, no traceback


def two_tables(seeds: list[int]) -> ExperimentOutput:
    """A toy experiment with two tables of different columns."""
    return ExperimentOutput(tables={
        "Table A": [{"x": 1, "x squared": 1.0}, {"x": 2, "x squared": 4.0}],
        "Table B": [{"method": "kernel", "ARI mean": 0.5, "ARI std": 0.25, "seeds": len(seeds)}],
        "Table C (empty)": []})


def test_leaderboard_csv_is_one_tidy_table(tmp_path, monkeypatch):
    """leaderboard.csv holds every table under one header row, a ``table`` column naming each
    row's table and empty cells where a table lacks a column; the per-table CSVs stay."""
    monkeypatch.setitem(EXPERIMENTS, "two_tables", two_tables)
    suite = write_experiment(tmp_path / "toy.yaml", experiment="two_tables", settings={},
                             fast={"seeds": [0]})
    assert main(["bench", str(suite), "--results", str(tmp_path)]) == 0
    out = tmp_path / "toy"
    with open(out / "leaderboard.csv", newline="") as f:
        header, *body = list(csv.reader(f))
    assert header == ["table", "x", "x squared", "method", "ARI mean", "ARI std", "seeds"]
    assert all(len(row) == len(header) for row in body)
    assert [row[0] for row in body] == ["Table A", "Table A", "Table B"]
    assert body[2] == ["Table B", "", "", "kernel", "0.5", "0.25", "3"]
    assert header not in body  # one header row, not one per table
    for title in ("Table A", "Table B"):
        assert (out / f"{slug(title)}.csv").exists()


def test_a_column_named_table_is_refused():
    from benchmarks.suites.experiment import check_output

    with pytest.raises(ValueError, match="column named 'table'"):
        check_output(ExperimentOutput(tables={"t": [{"table": 1}]}), "toy")


def test_the_report_says_its_std_is_the_sample_std(tmp_path):
    suite = write_experiment(tmp_path / "toy.yaml")
    assert main(["bench", str(suite), "--results", str(tmp_path)]) == 0
    assert "sample standard deviation (ddof 1)" in (tmp_path / "toy/leaderboard.md").read_text()


# -- one experiment kit: no helper written twice -------------------------------------------------
EXPERIMENTS_DIR = ROOT / "benchmarks" / "experiments"
#: Names every experiment package defines on purpose: its entry point.
SHARED_NAMES = {"run"}


def duplicate_helpers(root: Path) -> list[str]:
    """Top-level functions and classes defined in two experiment packages (or a package and the
    kit) under ``root``: the same name, or the same function body once its docstring is dropped
    (``ast.dump`` without positions: the same code, whatever its name, spacing or comments).
    A file directly under ``root`` is a package of its own."""
    import ast

    names: dict[str, set[str]] = {}
    bodies: dict[str, set[tuple[str, str]]] = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        owner = relative.parts[0] if len(relative.parts) > 1 else relative.stem
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            names.setdefault(node.name, set()).add(owner)
            if isinstance(node, ast.ClassDef):
                continue
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                body = body[1:]  # the docstring
            code = ast.dump(ast.Module(body=body, type_ignores=[]))
            bodies.setdefault(code, set()).add((owner, node.name))
    found = [f"{name} in {sorted(owners)}" for name, owners in names.items()
             if len(owners) > 1 and name not in SHARED_NAMES]
    found += [f"the same body in {sorted(places)}" for places in bodies.values()
              if len({owner for owner, _ in places}) > 1]
    return found


def test_no_helper_is_written_twice_across_the_experiment_packages():
    """Statistics, figures, ARI, threads and the quiet Trainer live in ``kit.py``; a second
    definition of one in a paper's package (by name or by body) fails here."""
    assert sorted(p.name for p in EXPERIMENTS_DIR.iterdir() if p.is_dir()
                  and p.name != "__pycache__") == sorted(SHIPPED)
    assert duplicate_helpers(EXPERIMENTS_DIR) == []


def test_the_duplicate_check_finds_a_rewritten_helper(tmp_path):
    """The check can fail: two packages that each wrap pyplot under other names (as two
    experiment files once did), and two that each define ``_fmt``."""
    a = "def _plt():\n    plt = pyplot()\n    return plt\n\n\ndef _fmt(v):\n    return f'{v:.3g}'\n"
    b = ('def _pyplot():\n    """Agg pyplot."""\n    plt = pyplot()\n\n    return plt\n\n\n'
         "def _fmt(v):\n    return str(v)\n")
    for package, source in (("a", a), ("b", b)):
        (tmp_path / package).mkdir()
        (tmp_path / package / "figures.py").write_text(source)
    found = duplicate_helpers(tmp_path)
    assert "_fmt in ['a', 'b']" in found
    assert "the same body in [('a', '_plt'), ('b', '_pyplot')]" in found


def test_a_failing_experiment_leaves_the_earlier_report_as_it_was(tmp_path):
    suite = write_experiment(tmp_path / "toy.yaml")
    assert main(["bench", str(suite), "--results", str(tmp_path)]) == 0
    before = (tmp_path / "toy/leaderboard.md").read_text()
    write_experiment(tmp_path / "toy.yaml", settings={"n": 4, "fail": True})
    with pytest.raises(RuntimeError, match="the experiment broke"):
        main(["bench", str(suite), "--results", str(tmp_path)])
    assert (tmp_path / "toy/leaderboard.md").read_text() == before


def test_rows_with_different_columns_are_refused():
    from benchmarks.suites.experiment import check_output

    bad = ExperimentOutput(tables={"t": [{"a": 1}, {"b": 2}]})
    with pytest.raises(ValueError, match="different columns"):
        check_output(bad, "toy")


def test_kit_thread_count_and_quiet_lightning_are_restored():
    """The kit's TorchThreads and QuietLightning change torch's threads, Lightning's log level
    and the warning filters only inside their block."""
    import logging
    import warnings

    import torch

    from benchmarks.experiments.kit import QuietLightning, TorchThreads

    threads, level = torch.get_num_threads(), logging.getLogger("lightning.pytorch").level
    other = 1 if threads != 1 else 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with TorchThreads(other), QuietLightning():
            assert torch.get_num_threads() == other
            assert logging.getLogger("lightning.pytorch").level == logging.ERROR
            warnings.warn("inside", UserWarning, stacklevel=1)
        warnings.warn("outside", UserWarning, stacklevel=1)
    assert torch.get_num_threads() == threads
    assert logging.getLogger("lightning.pytorch").level == level
    assert [str(w.message) for w in caught] == ["outside"]
    with TorchThreads(None):  # None leaves torch's setting
        assert torch.get_num_threads() == threads


def test_kit_columns_carry_the_sample_std_over_seeds():
    """add_mean_std's std is the sample std: sqrt(sum (x - mean)^2 / (n - 1)), by a loop."""
    import math

    from benchmarks.experiments.kit import add_mean_std

    values = [0.25, 1.5, -2.0, 3.125, 0.0]
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    row: dict = {}
    add_mean_std(row, "x", values)
    assert (row["x mean"], row["x std"]) == pytest.approx((mean, std), rel=1e-15)


def test_the_worked_example_of_the_contributing_guide_is_a_working_experiment(
        tmp_path, monkeypatch, capsys):
    """The guide's experiment and suite file, as they stand there: registered, run through
    ``bench`` on both budgets, and turned into a page by ``report``."""
    from documented import documented_block, documented_module

    example = documented_module("A worked example, complete: the mean of a seeded random sample",
                                "documented_experiment")
    monkeypatch.setitem(EXPERIMENTS, "sample_means", example.run)
    suite = tmp_path / "sample_means.yaml"
    suite.write_text(documented_block("A worked example, complete: the mean of a seeded", "yaml"))
    for fast in ([], ["--fast"]):
        assert main(["bench", str(suite), "--results", str(tmp_path / "results"), *fast]) == 0
    rows = list(csv.DictReader((tmp_path / "results/sample_means/sample-means.csv").open()))
    assert [int(r["size"]) for r in rows] == [10, 1000] and {r["seeds"] for r in rows} == {"3"}
    spread = [float(r["mean std"]) for r in rows]
    assert spread[1] < spread[0]  # the claim the note makes, on these seeds
    assert main(["report", str(tmp_path / "results/sample_means"),
                 "--out", str(tmp_path / "docs")]) == 0
    assert "Sample means" in (tmp_path / "docs/sample_means.md").read_text()
