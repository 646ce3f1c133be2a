"""``kind: experiment`` suites: a function's tables, notes and figures become a report."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

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


@pytest.mark.parametrize("name", ["contrastive_dynamics", "invariant_attention", "tensorized",
                                  "transfusion_theorem2"])
def test_shipped_experiments_are_registered_with_named_arguments_only(name):
    """Every setting a shipped experiment accepts is a named argument, so the suite check is
    complete; the shipped suite names its experiment and loads in both budgets."""
    import inspect

    from benchmarks.suites.config import load_experiment_suite

    kinds = {p.kind for p in inspect.signature(EXPERIMENTS[name]).parameters.values()}
    assert not kinds & {inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL}
    for fast in (False, True):
        suite = load_experiment_suite(name, EXPERIMENTS, fast=fast)
        assert suite.experiment == name and suite.function is EXPERIMENTS[name]


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
