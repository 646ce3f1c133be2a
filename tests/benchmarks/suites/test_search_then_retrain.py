"""``clusterbench bench``'s search step, with the Ray search replaced by a stand-in that writes
what a finished search writes: which searches are reused, resumed or replaced, and the run that
is retrained."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import tune.best
from benchmarks.suites.config import load_suite
from tune.best import best_run


def write_suite(path: Path, num_samples: int = 3) -> Path:
    path.write_text(yaml.safe_dump({
        "name": "tiny", "seeds": [0], "data": {"name": "digits"},
        "evaluation": {"linear_probe": {"epochs": 100, "lr": 0.3, "batch_size": 64,
                                        "weight_decay": 1.0e-6},
                       "knn": {"k": [50, 200], "temperature": None}},
        "runs": [{"name": "simclr", "method": "simclr", "model": {"lr": 1e-3},
                  "paper": {"linear_probe_top1": 90.0}},
                 {"name": "pixels", "method": "pixels"}],
        "search": {"space": {"model.lr": {"loguniform": [1e-4, 1e-2]}},
                   "num_samples": num_samples, "max_epochs": 2},
    }))
    return path


@pytest.fixture
def searches(monkeypatch) -> list[dict]:
    """Records each search started and writes the best configuration it 'found'."""
    calls: list[dict] = []

    def fake_run_search(suite, search, run, storage, resume, **kwargs):
        calls.append({"run": run.name, "storage": storage, "resume": resume})
        best = {"method": run.method, "model": {"lr": 5e-3}, "data": {"name": "digits"},
                "trainer": {},
                "metric": "online_val_acc", "best_value": 0.5, "configurations_searched": 3,
                "trials_failed": 1}
        (Path(storage) / "best_config.yaml").write_text(yaml.safe_dump(best))
        return Path(storage)

    monkeypatch.setattr(tune.best, "run_search", fake_run_search)
    return calls


def test_best_configuration_becomes_a_tuned_run(tmp_path, searches):
    suite = load_suite(str(write_suite(tmp_path / "tiny.yaml")))
    assert [r.name for r in suite.searched_runs()] == ["simclr"]  # pixels trains nothing
    tuned = best_run(suite.settings, suite.search, suite.run("simclr"), tmp_path / "results")
    assert tuned.name == "simclr+tuned" and tuned.model["lr"] == 5e-3
    assert tuned.paper == {"linear_probe_top1": 90.0}  # the papers report tuned cases
    assert tuned.searched["configurations_searched"] == 3 and tuned.searched["trials_failed"] == 1
    assert tuned.searched["values"] == {"model.lr": 5e-3}
    assert suite.run("simclr").model["lr"] == 1e-3  # the suite's own run is untouched


def test_a_finished_search_is_reused_and_a_changed_one_replaced_not_deleted(tmp_path, searches):
    path = write_suite(tmp_path / "tiny.yaml")
    results = tmp_path / "results"
    suite = load_suite(str(path))
    best_run(suite.settings, suite.search, suite.run("simclr"), results)
    best_run(suite.settings, suite.search, suite.run("simclr"), results)
    assert len(searches) == 1  # same space, budget and run: reused
    suite = load_suite(str(write_suite(path, num_samples=5)))
    best_run(suite.settings, suite.search, suite.run("simclr"), results)
    assert len(searches) == 2 and not searches[1]["resume"]
    (kept,) = (results / "search").glob("simclr.replaced-*")
    assert (kept / "best_config.yaml").is_file()  # the earlier search's results survive


def test_a_case_at_two_epoch_counts_is_searched_once(tmp_path, searches):
    """Trials train the search's max_epochs, whatever the run's own: the run at 4 epochs reuses
    the search of the same run at 8 epochs; another setting is searched anew."""
    path = tmp_path / "tiny.yaml"
    write_suite(path)
    raw = yaml.safe_load(path.read_text())
    simclr = raw["runs"][0]
    raw["runs"] = [{**simclr, "name": "simclr/8ep", "trainer": {"max_epochs": 8}},
                   {**simclr, "name": "simclr/4ep", "trainer": {"max_epochs": 4},
                    "paper": {"linear_probe_top1": 85.0}},
                   {**simclr, "name": "simclr/wide", "model": {"lr": 1e-3, "backbone_width": 8}}]
    path.write_text(yaml.safe_dump(raw))
    suite, results = load_suite(str(path)), tmp_path / "results"
    long = best_run(suite.settings, suite.search, suite.run("simclr/8ep"), results)
    short = best_run(suite.settings, suite.search, suite.run("simclr/4ep"), results)
    assert len(searches) == 1
    assert short.searched["directory"] == long.searched["directory"]
    assert short.trainer["max_epochs"] == 4 and short.paper == {"linear_probe_top1": 85.0}
    best_run(suite.settings, suite.search, suite.run("simclr/wide"), results)
    assert len(searches) == 2


def test_a_search_recorded_with_the_whole_run_is_still_reused(tmp_path, searches):
    """Searches recorded their run whole (name and epochs included) before runs that differ
    only in epochs shared one: such a finished search is reused, not replaced."""
    from tune.best import search_signature

    suite = load_suite(str(write_suite(tmp_path / "tiny.yaml")))
    results = tmp_path / "results"
    best_run(suite.settings, suite.search, suite.run("simclr"), results)
    record = results / "search/simclr/search.yaml"
    record.write_text(yaml.safe_dump(search_signature(suite.run("simclr"), suite.search,
                                                      legacy=True), sort_keys=False))
    best_run(suite.settings, suite.search, suite.run("simclr"), results)
    assert len(searches) == 1 and not list((results / "search").glob("*.replaced-*"))


def edit_best_config(results: Path, **changes) -> Path:
    """The finished search's best_config.yaml, edited as a hand (or a tool) might."""
    path = results / "search" / "simclr" / "best_config.yaml"
    best = yaml.safe_load(path.read_text())
    for key, value in changes.items():
        section, _, arg = key.partition("__")
        if arg:
            best[section][arg] = value
        else:
            best[section] = value
    path.write_text(yaml.safe_dump(best))
    return path


@pytest.mark.parametrize("changes, message", [
    ({"model__lr": -1.0}, r"model\.lr = -1\.0 is not a value the search space gives "
                          r"\(loguniform \[0\.0001, 0\.01\]\)"),
    ({"model__lr": ".inf"}, r"model\.lr = '\.inf' is not a value the search space gives"),
    ({"model": ["lr", 5e-3]}, r"not a search's best configuration \(model missing or not a"),
    ({"best_value": "high"}, r"not a search's best configuration \(best_value missing"),
])
def test_an_edited_best_config_is_refused_naming_the_file_and_the_value(
        tmp_path, searches, changes, message):
    """The file lies in a results folder: a value its search space cannot give, or a file that
    is not what a search writes, is bad input (one line), never a run that crashes later."""
    from benchmarks.infra.errors import ConfigError

    suite = load_suite(str(write_suite(tmp_path / "tiny.yaml")))
    results = tmp_path / "results"
    best_run(suite.settings, suite.search, suite.run("simclr"), results)
    path = edit_best_config(results, **changes)
    with pytest.raises(ConfigError, match=message) as info:
        best_run(suite.settings, suite.search, suite.run("simclr"), results)
    assert str(path) in str(info.value) and len(searches) == 1  # refused, not searched again


def test_values_the_search_did_not_search_are_the_runs_own(tmp_path, searches):
    suite = load_suite(str(write_suite(tmp_path / "tiny.yaml")))
    results = tmp_path / "results"
    best_run(suite.settings, suite.search, suite.run("simclr"), results)
    edit_best_config(results, model__temperature=-3.0, trainer__callbacks=["os.system"])
    tuned = best_run(suite.settings, suite.search, suite.run("simclr"), results)
    assert tuned.model.get("temperature") == suite.run("simclr").model.get("temperature")
    assert "callbacks" not in tuned.trainer and tuned.searched["values"] == {"model.lr": 5e-3}


def test_bench_refuses_a_best_value_the_method_refuses_before_the_tuned_run_trains(
        tmp_path, monkeypatch, capsys):
    """A space wide enough to hold a value the method refuses (a negative temperature): the
    tuned run is checked as a suite's runs are, one line and exit 2, nothing trained for it."""
    from benchmarks.cli import main

    def fake_run_search(suite, search, run, storage, resume, **kwargs):
        best = {"method": run.method, "model": {**run.model, "temperature": -0.5},
                "data": run.data, "trainer": run.trainer, "metric": "online_val_acc",
                "best_value": 0.5, "configurations_searched": 3, "trials_failed": 0}
        (Path(storage) / "best_config.yaml").write_text(yaml.safe_dump(best))

    monkeypatch.setattr(tune.best, "run_search", fake_run_search)
    path = tmp_path / "tiny.yaml"
    write_suite(path)
    raw = yaml.safe_load(path.read_text())
    raw["data"] = {"name": "digits", "limit_per_class": 5, "batch_size": 16}
    raw["trainer"] = {"max_epochs": 1, "accelerator": "cpu"}
    raw["evaluation"] = {"knn": {"k": [3], "temperature": None}}
    raw["runs"] = [{"name": "simclr", "method": "simclr",
                    "model": {"backbone_width": 4, "temperature": 0.5}}]
    raw["search"]["space"] = {"model.temperature": {"uniform": [-1.0, 1.0]}}
    path.write_text(yaml.safe_dump(raw))
    results = tmp_path / "results"
    assert main(["bench", str(path), "--results", str(results), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # the suite's own run trained first
    assert err[-1].startswith("clusterbench: error: ") and "Traceback" not in "".join(err)
    assert "simclr+tuned" in err[-1] and "temperature" in err[-1], err[-1]
    assert not (results / "tiny/runs/simclr+tuned").exists()


def test_a_winner_that_is_the_suites_own_settings_takes_its_results_not_a_retraining(
        tmp_path, monkeypatch, capsys):
    """The search's best is the run's own settings: ``simclr+tuned`` would train what ``simclr``
    trained, seed for seed. Its rows are ``simclr``'s results, copied and saying so (the
    console, the leaderboard's Searched cell, the CSV), nothing trained or timed for them; a
    second bench keeps the copies, and a rerun of ``simclr`` copies its new results."""
    import csv
    import json

    import benchmarks.suites.runner as runner
    from benchmarks.cli import main

    def fake_run_search(suite, search, run, storage, resume, **kwargs):
        best = {"method": run.method, "model": run.model, "data": run.data,
                "trainer": run.trainer, "metric": "online_val_acc", "best_value": 0.5,
                "configurations_searched": 3, "trials_failed": 0}
        (Path(storage) / "best_config.yaml").write_text(yaml.safe_dump(best))
        (Path(storage) / "trials.png").write_bytes(b"\x89PNG trials")

    trained = []  # the jobs that trained (a job finds a finished result and keeps it)
    run_job = runner.run_job

    def counted(settings, run, seed, *args):
        result = run_job(settings, run, seed, *args)
        trained.extend([] if result.get("reused") else [f"{run.name}/{seed}"])
        return result

    monkeypatch.setattr(tune.best, "run_search", fake_run_search)
    monkeypatch.setattr(runner, "run_job", counted)
    path = tmp_path / "tiny.yaml"
    write_suite(path)
    raw = yaml.safe_load(path.read_text())
    raw["seeds"] = [0, 1]
    raw["data"] = {"name": "digits", "limit_per_class": 5, "batch_size": 16}
    raw["trainer"] = {"max_epochs": 1, "accelerator": "cpu"}
    raw["evaluation"] = {"knn": {"k": [3], "temperature": None}}
    raw["runs"] = [{"name": "simclr", "method": "simclr",
                    "model": {"backbone_width": 4, "lr": 1e-3}}]
    path.write_text(yaml.safe_dump(raw))
    results = tmp_path / "results"
    bench = ["bench", str(path), "--results", str(results), "--no-progress"]
    assert main(bench) == 0
    assert trained == ["simclr/0", "simclr/1"]  # the tuned run trained nothing
    err = capsys.readouterr().err
    assert "best of 3 configurations: the suite settings (simclr+tuned takes simclr's " \
           "results, not trained again)" in err
    assert "simclr+tuned/seed-1: knn3_top1" in err and "simclr's: the same settings" in err
    runs = results / "tiny/runs"
    for seed in (0, 1):
        own = json.loads((runs / f"simclr/seed-{seed}/result.json").read_text())
        copy = json.loads((runs / f"simclr+tuned/seed-{seed}/result.json").read_text())
        assert copy["metrics"] == own["metrics"] and copy["same_as"] == "simclr"
        assert copy["run"] == copy["config"]["run"]["name"] == "simclr+tuned"
        assert copy["wall_seconds"] == 0.0 and copy["search"]["values"] == {}
        assert copy["figures"] == [*own["figures"], "search-trials.png"]  # the search's figure
        assert (runs / f"simclr+tuned/seed-{seed}/encoder.pt").read_bytes() == \
            (runs / f"simclr/seed-{seed}/encoder.pt").read_bytes()
    board = (results / "tiny/leaderboard.md").read_text()
    assert "3 configs (ASHA, ≤ 2 epochs); won: simclr's settings, its results" in board
    rows = {r["run"]: r for r in csv.DictReader(open(results / "tiny/leaderboard.csv"))}
    assert rows["simclr+tuned"]["same_as"] == "simclr" and rows["simclr"]["same_as"] == ""
    assert rows["simclr+tuned"]["device_hours"] == "0.0"

    trained.clear()  # again: both kept
    assert main(bench) == 0 and trained == []
    assert "already done, same configuration" in capsys.readouterr().err
    assert main([*bench, "--rerun"]) == 0 and trained == ["simclr/0", "simclr/1"]
    own = json.loads((runs / "simclr/seed-0/result.json").read_text())
    copy = json.loads((runs / "simclr+tuned/seed-0/result.json").read_text())
    assert copy["finished_at"] == own["finished_at"]  # the new result's copy
