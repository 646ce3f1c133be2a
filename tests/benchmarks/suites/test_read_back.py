"""Every field of a ``result.json`` the leaderboards and reports read is checked when read back:
a malformed one sets its file aside with one warning naming the file and the field, and the
other results are tabled; a file that is no regular file, too large or too deep is never parsed;
names from result files are drawn as text in every figure."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from fifo import finishes
from test_leaderboard import fake_result, write_result

from benchmarks.cli import main
from benchmarks.infra.read_back import MAX_BYTES, Unreadable, json_depth, load_json
from benchmarks.suites.results import load_results

CURVES_CSV = "epoch,train_loss,online_val_acc\n0,1.5,0.4\n1,1.2,0.6\n"


def with_curves(path: Path) -> Path:
    (path.parent / "logs").mkdir()
    (path.parent / "logs/metrics.csv").write_text(CURVES_CSV)
    return path


def good_and_bad(root: Path, edit) -> Path:
    """A good result (alpha) and one edited by ``edit`` (beta); returns the bad one's path."""
    with_curves(write_result(root, fake_result("alpha", 0, {"linear_probe_top1": 0.9})))
    bad = fake_result("beta", 1, {"linear_probe_top1": 0.8})
    edit(bad)
    return write_result(root, bad)


@pytest.mark.parametrize(("edit", "field"), [
    (lambda r: r.update(finished_at="31/12/2025 10:00"), "'finished_at'"),
    (lambda r: r.update(finished_at=1735600000), "'finished_at'"),
    (lambda r: r["config"].update(headline={"metric": "knn"}), "'config.headline'"),
    (lambda r: r["config"].update(plots=[{"x": "model.lr"}]), "'config.plots'"),
    (lambda r: r["config"].update(plots={"x": "a", "y": "b"}), "'config.plots'"),
    (lambda r: r["config"]["run"].update(paper={"knn50_top1": [97.0, "n/a"]}),
     "'config.run.paper'"),
    (lambda r: r["config"]["run"].update(paper="Table 2"), "'config.run.paper'"),
    (lambda r: r["config"]["run"].update(paper={"source": ["T2"]}), "'config.run.paper'"),
    (lambda r: r.update(per_layer=[{"layer": "first", "silhouette": 0.2}]), "'per_layer'"),
    (lambda r: r.update(per_layer=[{"layer": 0, "silhouette": "high"}]), "'per_layer'"),
    (lambda r: r["metrics"].update(knn50_top1=9e307), "'metrics'"),
    (lambda r: r.update(train_seconds=-5.0), "'train_seconds'"),
    (lambda r: r.update(epochs=10**30), "'epochs'"),
    (lambda r: r.update(batch_size=10**400), "'batch_size'"),
    (lambda r: r["config"]["run"].update(searched={"configurations_searched": 3}),
     "'config.run.searched'"),
    (lambda r: r.update(git={"commit": 1234, "dirty": False}), "'git.commit' is 1234"),
    (lambda r: r.update(gpu_speed_settings={"precision": "bf16-mixed", "tf32": "on"}),
     "'gpu_speed_settings'"),
    (lambda r: r.update(train_steps=12.5), "'train_steps'"),
    (lambda r: r["config"]["run"].update(trainer=["max_epochs", 3]), "'config.run.trainer'"),
    (lambda r: r.update(budget="b" * 40), "'budget'"),
    # each made leaderboard or report fail with a traceback before being checked
    (lambda r: r.update(finished_at=None), "'finished_at' is null"),
    (lambda r: r.update(config_hash=[]), "'config_hash' is []"),
    (lambda r: r.update(git={"commit": None, "dirty": False}), "'git.commit' is null"),
    (lambda r: r["metrics"].update(knn50_top1=10**400), "'metrics' 'knn50_top1' is"),
    (lambda r: r.update(train_seconds=10**400), "'train_seconds'"),
    (lambda r: r.update(config_hash=""), "'config_hash'"),
    (lambda r: r.update(git={"commit": "", "dirty": False}), "'git.commit'"),
    (lambda r: r["metrics"].update({"": 0.5}), "'metrics' holds the name ''"),
])
def test_a_malformed_field_sets_its_result_aside_naming_file_and_field(tmp_path, capsys, edit,
                                                                        field) -> None:
    bad = good_and_bad(tmp_path, edit)
    assert [r["run"] for r in load_results(tmp_path)] == ["alpha"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"skipping {bad}:" in err and field in err


@pytest.mark.parametrize("edit", [
    lambda r: r.update(finished_at="2026-13-45T99:00:00"),
    lambda r: r["config"]["run"].update(paper={"linear_probe_top1": {"mean": 97}}),
    lambda r: r.update(per_layer=[{"name": "input", "silhouette": 0.2}]),
    # each a traceback of leaderboard and report before: sorted, grouped, sliced, summed
    lambda r: r.update(finished_at=None),
    lambda r: r.update(config_hash=[]),
    lambda r: r.update(git={"commit": None, "dirty": False}),
    lambda r: r["metrics"].update(linear_probe_top1=10**400),
    lambda r: r.update(train_seconds=10**400),
])
def test_leaderboard_and_report_table_the_other_results(tmp_path, capsys, edit) -> None:
    bad = good_and_bad(tmp_path, edit)
    assert main(["leaderboard", str(tmp_path)]) == 0
    assert main(["report", str(tmp_path), "--out", str(tmp_path / "docs")]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 2 and all(f"skipping {bad}:" in w for w in warnings)
    board = (tmp_path / "leaderboard.md").read_text()
    assert "| alpha |" in board and "| beta |" not in board
    assert "| alpha |" in (tmp_path / "docs/smoke.md").read_text()


def test_every_field_a_run_writes_passes_the_checks(tmp_path, capsys) -> None:
    """The checks refuse only what no run writes: a result with every optional field."""
    def full(r: dict) -> None:
        r.update(finished_at="2026-01-02T03:04:05+00:00", status="diverged", error="at step 3",
                 figures=["tsne.png"], train_steps=40, resumed_from_epoch=2,
                 evaluated_from="/elsewhere/encoder.pt", protocol_seconds={"knn": 1.0},
                 gpu_speed_settings={"precision": "bf16-mixed", "channels_last": True,
                                     "cudnn_benchmark": True, "tf32": True, "compile": False},
                 per_layer=[{"layer": 0, "name": "input", "silhouette": 0.1,
                             "sharpness_median": float("inf"), "sharpness_min": None}])
        r["config"].update(plots=[{"x": "model.lr", "y": "knn50_top1", "series": "data.name",
                                   "log_x": True, "title": "kNN"}], suite_file="s.yaml")
        r["config"]["run"].update(
            paper={"source": "Table 2", "tuned": True, "linear_probe_top1": [97.0, 0.2],
                   "knn50_top1": 95, "per_layer_silhouette": {"0": 0.3}},
            searched={"configurations_searched": 6, "trials_failed": 1, "max_epochs": 4,
                      "wall_seconds": 48.2, "starts": 2, "metric": "online_val_acc"})

    good_and_bad(tmp_path, full)
    assert sorted(r["run"] for r in load_results(tmp_path)) == ["alpha", "beta"]
    assert "skipping" not in capsys.readouterr().err


def test_a_number_beyond_a_float_in_the_file_is_refused_naming_its_field(tmp_path,
                                                                         capsys) -> None:
    """``1e400`` is JSON, which Python reads as an infinite float."""
    bad = good_and_bad(tmp_path, lambda r: None)
    bad.write_text(bad.read_text().replace('"linear_probe_top1": 0.8',
                                           '"linear_probe_top1": 1e400'))
    assert main(["leaderboard", str(tmp_path)]) == 0
    (line,) = [w for w in capsys.readouterr().err.splitlines() if "warning" in w]
    assert f"skipping {bad}:" in line and "'metrics' 'linear_probe_top1' is inf" in line


def test_a_result_computed_outside_a_checkout_is_read(tmp_path, capsys) -> None:
    """``git: null`` is what a run outside clusterbench's checkout writes: no warning."""
    good_and_bad(tmp_path, lambda r: r.update(git=None))
    assert sorted(r["run"] for r in load_results(tmp_path)) == ["alpha", "beta"]
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("depth", [65, 300_000])
def test_json_nested_deeper_than_64_is_refused_before_parsing(tmp_path, capsys, depth) -> None:
    bad = good_and_bad(tmp_path, lambda r: None)
    bad.write_text('{"run": ' + "[" * depth + "]" * depth + "}")
    started = time.perf_counter()
    assert [r["run"] for r in load_results(tmp_path)] == ["alpha"]
    assert time.perf_counter() - started < 5
    err = capsys.readouterr().err
    assert f"skipping {bad}" in err and "nests deeper than 64 levels" in err
    assert err.count("\n") == 1


def test_json_depth_ignores_brackets_in_strings_and_escapes() -> None:
    assert json_depth(r'["[[[[", "\"[[", {"a": {"b": []}}]') == 4
    assert json_depth('"' + '\\"' * 1000 + '[' * 100 + '"') == 0


def test_a_file_larger_than_the_bound_is_not_read(tmp_path) -> None:
    big = tmp_path / "result.json"
    big.write_text('{"notes": "' + "x" * MAX_BYTES + '"}')
    with pytest.raises(Unreadable, match=f"{big} is larger than"):
        load_json(big)


@pytest.mark.parametrize("planted", ["logs/metrics.csv", "result.json"])
def test_a_fifo_in_a_results_folder_is_refused_without_opening_it(tmp_path, capsys,
                                                                  planted) -> None:
    bad = good_and_bad(tmp_path, lambda r: None)
    fifo = bad.parent / planted
    fifo.parent.mkdir(exist_ok=True)
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    finishes(lambda: main(["leaderboard", str(tmp_path)]), fifo, "reading the results folder")
    err = capsys.readouterr().err
    assert f"{fifo} is not a regular file" in err
    assert "| alpha |" in (tmp_path / "leaderboard.md").read_text()


def test_a_run_name_with_mathtext_is_drawn_in_the_curves_and_plots(tmp_path) -> None:
    def odd(r: dict) -> None:
        r.update(run=r"x$\sqrt{$y", dataset=r"d$_{$")
        r["config"].update(plots=[{"x": "model.lr", "y": "linear_probe_top1",
                                   "title": r"$\frac{", "series": "data.name"}])
        r["config"]["run"]["model"]["lr"] = 0.1

    with_curves(good_and_bad(tmp_path, odd))  # the odd run's curves beside alpha's
    assert main(["leaderboard", str(tmp_path)]) == 0
    html = (tmp_path / "leaderboard.html").read_text()
    assert "Learning curves" in html and r"x$\sqrt{$y" in html


def test_a_malformed_experiment_result_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    results = tmp_path / "dynamics-fast"
    results.mkdir()
    (results / "result.json").write_text(json.dumps({
        "suite": "dynamics", "kind": "experiment", "experiment": "dynamics", "budget": "fast",
        "seeds": [0], "settings": {}, "wall_seconds": "1.5 s", "tables": {}, "notes": [],
        "versions": {"torch": "2.4.0"}, "machine": {"cpus": 2, "processor": "x86_64"}}))
    assert main(["report", str(results), "--out", str(tmp_path / "docs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(results / "result.json") in err
    assert "'wall_seconds'" in err
    assert not (tmp_path / "docs").exists()
