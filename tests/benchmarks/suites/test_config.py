"""Suite loading and validation: every misspelling is caught, by name, before anything runs."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from benchmarks.infra.errors import ConfigError
from benchmarks.run.spec import RunSpec
from benchmarks.suites.config import Suite, load_suite
from benchmarks.suites.suite_file import suites
from datamodules import DATAMODULES
from modules.methods import METHODS

BASE = {
    "name": "tiny",
    "headline": "linear_probe_top1",
    "seeds": [3, 4],
    "data": {"name": "digits", "batch_size": 32},
    "trainer": {"max_epochs": 2, "accelerator": "cpu"},
    "evaluation": {"linear_probe": {"epochs": 3, "lr": 0.1, "batch_size": 64,
                                    "weight_decay": 1.0e-6},
                   "knn": {"k": [5], "temperature": None}},
    "runs": [
        {"name": "simclr", "method": "simclr",
         "model": {"backbone": "small_cnn", "temperature": 0.5}},
        {"name": "pixels", "method": "pixels"},
    ],
    "fast": {"seeds": [0], "trainer": {"max_epochs": 1}},
}


def write_suite(tmp_path: Path, suite: dict, name: str = "tiny.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return path


def edited(edit) -> dict:
    suite = copy.deepcopy(BASE)
    edit(suite)
    return suite


def test_shipped_smoke_suite_loads() -> None:
    suite = load_suite("smoke")
    assert isinstance(suite, Suite)
    assert suite.name == "smoke" and not suite.fast
    assert len(suite.seeds) >= 2  # a leaderboard needs a std over seeds
    assert {run.method for run in suite.runs} <= set(METHODS)
    assert all(run.dataset in DATAMODULES for run in suite.runs)
    assert len({run.name for run in suite.runs}) == len(suite.runs)
    # Every evaluation hyperparameter is pinned in the suite itself.
    assert set(suite.evaluation["linear_probe"]) == {"epochs", "lr", "batch_size", "weight_decay"}
    assert set(suite.evaluation["knn"]) == {"k", "temperature"}


def test_shipped_smoke_suite_fast() -> None:
    full, fast = load_suite("smoke"), load_suite("smoke", fast=True)
    assert fast.fast
    assert fast.seeds == [0]
    assert [r.name for r in fast.runs] == [r.name for r in full.runs]
    simclr_full, simclr_fast = full.run("simclr"), fast.run("simclr")
    assert simclr_fast.trainer["max_epochs"] < simclr_full.trainer["max_epochs"]
    # The fast overrides merge into, rather than replace, the shared sections.
    assert simclr_fast.trainer["accelerator"] == simclr_full.trainer["accelerator"]
    assert simclr_fast.model == simclr_full.model


def test_small_suite_from_a_path(tmp_path: Path) -> None:
    suite = load_suite(str(write_suite(tmp_path, BASE)))
    assert suite.name == "tiny" and suite.seeds == [3, 4]
    assert [r.name for r in suite.runs] == ["simclr", "pixels"]
    simclr = suite.run("simclr")
    assert isinstance(simclr, RunSpec)
    assert simclr.dataset == "digits"
    assert simclr.data_kwargs() == {"batch_size": 32}
    assert simclr.trainer == {"max_epochs": 2, "accelerator": "cpu"}
    assert load_suite(str(write_suite(tmp_path, BASE)), fast=True).seeds == [0]


def test_run_overrides_merge_with_shared_settings(tmp_path: Path) -> None:
    def edit(s):
        s["runs"][1]["data"] = {"batch_size": 8}
        s["runs"][1]["trainer"] = {"max_epochs": 7}

    suite = load_suite(str(write_suite(tmp_path, edited(edit))))
    pixels, simclr = suite.run("pixels"), suite.run("simclr")
    assert pixels.data == {"name": "digits", "batch_size": 8}
    assert pixels.trainer == {"max_epochs": 7, "accelerator": "cpu"}
    assert simclr.data["batch_size"] == 32  # the override stays with its run


def set_at(suite: dict, where: str, key: str, value) -> None:
    node = suite
    for part in where.split("."):
        node = node[int(part)] if part.isdigit() else node[part]
    node[key] = value


@pytest.mark.parametrize("where, bad, close", [
    ("", "seed", "seeds"),
    ("", "evalution", "evaluation"),
    ("runs.0", "modle", "model"),
    ("runs.0.model", "temprature", "temperature"),
    ("runs.0.model", "backbone_widht", "backbone_width"),
    ("data", "batchsize", "batch_size"),
    ("runs.1", "dta", "data"),
    ("trainer", "max_epoch", "max_epochs"),
    ("evaluation.linear_probe", "epoch", "epochs"),
    ("evaluation.knn", "temprature", "temperature"),
])
def test_misspelled_key_is_named_with_its_close_match(tmp_path: Path, where: str, bad: str,
                                                      close: str) -> None:
    def edit(s):
        if where:
            set_at(s, where, bad, 1)
        else:
            s[bad] = 1

    path = write_suite(tmp_path, edited(edit))
    with pytest.raises(ConfigError) as info:
        load_suite(str(path))
    message = str(info.value)
    assert repr(bad) in message
    assert f"did you mean {close!r}" in message


def test_misspelled_key_in_a_run_data_override(tmp_path: Path) -> None:
    path = write_suite(tmp_path, edited(lambda s: s["runs"][1].update(data={"val_fracton": 0.2})))
    with pytest.raises(ConfigError, match="val_fracton.*did you mean 'val_fraction'"):
        load_suite(str(path))


def test_misspelled_key_in_the_fast_section_is_caught_with_fast(tmp_path: Path) -> None:
    path = write_suite(tmp_path, edited(lambda s: s["fast"]["trainer"].update(max_epoch=1)))
    with pytest.raises(ConfigError, match="max_epoch"):
        load_suite(str(path), fast=True)


def test_unknown_evaluation_protocol(tmp_path: Path) -> None:
    path = write_suite(tmp_path, edited(lambda s: s["evaluation"].update(kmeans={})))
    with pytest.raises(ConfigError, match="kmeans") as info:
        load_suite(str(path))
    assert "knn" in str(info.value) and "linear_probe" in str(info.value)


def test_runner_owned_keys_are_refused(tmp_path: Path) -> None:
    path = write_suite(tmp_path, edited(lambda s: s["data"].update(seed=5)))
    with pytest.raises(ConfigError, match="'seed'"):
        load_suite(str(path))
    path = write_suite(tmp_path, edited(lambda s: s["runs"][0]["model"].update(num_classes=3)))
    with pytest.raises(ConfigError, match="num_classes"):
        load_suite(str(path))


def test_unknown_method_lists_the_available_ones(tmp_path: Path) -> None:
    path = write_suite(tmp_path, edited(lambda s: s["runs"][0].update(method="simclrr")))
    with pytest.raises(ConfigError, match="simclrr") as info:
        load_suite(str(path))
    assert all(name in str(info.value) for name in METHODS)


def test_unknown_dataset_lists_the_available_ones(tmp_path: Path) -> None:
    path = write_suite(tmp_path, edited(lambda s: s["data"].update(name="imagenet21k")))
    with pytest.raises(ConfigError, match="imagenet21k") as info:
        load_suite(str(path))
    assert all(name in str(info.value) for name in DATAMODULES)


def test_unknown_suite_name_lists_the_available_ones() -> None:
    with pytest.raises(ConfigError, match="smoek") as info:
        load_suite("smoek")
    assert "smoke" in str(info.value)


def test_missing_suite_file() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_suite("/nonexistent/suite.yaml")


@pytest.mark.parametrize("runs", [
    [{"name": "a", "method": "pixels"}, {"name": "a", "method": "simclr"}],
    [{"method": "pixels"}, {"method": "pixels"}],  # the name defaults to the method
])
def test_duplicate_run_names_are_rejected(tmp_path: Path, runs) -> None:
    path = write_suite(tmp_path, edited(lambda s: s.update(runs=runs)))
    with pytest.raises(ConfigError, match="twice"):
        load_suite(str(path))


@pytest.mark.parametrize("edit, match", [
    (lambda s: s.update(seeds=[]), "seeds"),
    (lambda s: s.update(seeds=["zero"]), "seeds"),
    (lambda s: s.update(runs=[]), "runs"),
    (lambda s: s["runs"][1].pop("method"), "method"),
    (lambda s: s["data"].pop("name"), "data.name"),
    (lambda s: s.update(trainer=[1, 2]), "mapping"),
])
def test_structural_errors(tmp_path: Path, edit, match: str) -> None:
    path = write_suite(tmp_path, edited(edit))
    with pytest.raises(ConfigError, match=match):
        load_suite(str(path))


def test_invalid_yaml_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("runs: [\n  - {method: pixels\n")
    with pytest.raises(ConfigError, match="YAML"):
        load_suite(str(path))


def test_fast_overrides_win_over_a_runs_own_settings(tmp_path: Path) -> None:
    suite = {"name": "t", "seeds": [0, 1], "data": {"name": "digits", "batch_size": 64},
             "trainer": {"max_epochs": 5}, "evaluation": {"knn": {"k": 5, "temperature": None}},
             "runs": [{"name": "long", "method": "simclr", "trainer": {"max_epochs": 400},
                       "data": {"batch_size": 256}}],
             "fast": {"seeds": [0], "trainer": {"max_epochs": 1}, "data": {"batch_size": 8}}}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(suite))
    full, fast = load_suite(str(path)), load_suite(str(path), fast=True)
    assert full.runs[0].trainer["max_epochs"] == 400 and full.runs[0].data["batch_size"] == 256
    assert fast.runs[0].trainer["max_epochs"] == 1 and fast.runs[0].data["batch_size"] == 8
    assert fast.seeds == [0]


def test_x_keys_hold_anchors_for_runs(tmp_path: Path) -> None:
    path = tmp_path / "anchors.yaml"
    path.write_text("""
name: anchors
seeds: [0]
data: {name: digits}
evaluation: {knn: {k: 5, temperature: null}}
x-model: &base {backbone_width: 4, lr: 0.5}
runs:
  - {name: a, method: simclr, model: {<<: *base, loss: sum}}
""")
    (run,) = load_suite(str(path)).runs
    assert run.model == {"backbone_width": 4, "lr": 0.5, "loss": "sum"}


@pytest.mark.parametrize("name", sorted(suites()))
def test_every_shipped_suite_validates_in_both_budgets(name: str) -> None:
    from benchmarks.suites.experiment import load_experiment_suite
    from benchmarks.suites.suite_file import suite_kind

    for fast in (False, True):
        if suite_kind(name) == "experiment":  # settings checked against the function's arguments
            from benchmarks.experiments import EXPERIMENTS

            suite = load_experiment_suite(name, EXPERIMENTS, fast=fast)
            assert suite.seeds and callable(suite.function)
            assert len(suite.seeds) >= (1 if fast else 5)  # the paper suites run 5 seeds or more
        else:
            suite = load_suite(name, fast=fast)
            assert suite.runs and suite.seeds


# -- the search section ---------------------------------------------------------------------------
SPACE = {"model.lr": {"loguniform": [1.0e-4, 1.0e-2]}}


def test_search_section_budget_and_fast_override(tmp_path) -> None:
    path = write_suite(tmp_path, edited(lambda s: s.update(
        search={"space": SPACE, "runs": ["simclr"], "num_samples": 6, "max_epochs": 4},
        fast={"seeds": [0], "search": {"num_samples": 2}})))
    full, fast = load_suite(str(path)), load_suite(str(path), fast=True)
    assert (full.search.num_samples, full.search.max_epochs, full.search.runs) == (6, 4, ["simclr"])
    assert (fast.search.num_samples, fast.search.max_epochs) == (2, 4)  # only what fast sets
    assert full.search.space == SPACE and full.search.metric == "online_val_acc"


def test_short_search_section_is_the_space(tmp_path) -> None:
    suite = load_suite(str(write_suite(tmp_path, edited(lambda s: s.update(search=SPACE)))))
    assert suite.search.space == SPACE and suite.search.runs is None


@pytest.mark.parametrize("search, message", [
    ({"space": SPACE, "num_sample": 3}, "unknown key 'num_sample'"),
    ({"space": SPACE, "runs": ["simclrr"]}, "search.runs 'simclrr' (did you mean 'simclr'?)"),
    ({"space": SPACE, "mode": "maximum"}, "mode must be max or min, got 'maximum'"),
    ({"space": {}}, "space must be a non-empty mapping"),
])
def test_bad_search_section_is_refused_naming_the_problem(tmp_path, search, message) -> None:
    path = write_suite(tmp_path, edited(lambda s: s.update(search=search)))
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_suite(str(path))


@pytest.mark.parametrize("space, message", [
    ({"model.lr": {"uniform": [1.0, 0.5]}}, "uniform needs low < high, got [1.0, 0.5]"),
    ({"model.lr": {"loguniform": [0.0, 1.0]}}, "loguniform needs 0 < low < high"),
    ({"model.learning_rate": {"uniform": [0.1, 1.0]}}, "unknown key 'learning_rate'"),
    ({"model.lr": {"normal": [0.1, 1.0]}}, "unknown key 'normal'"),
])
def test_bad_checked_space_exits_2_before_anything_trains(tmp_path, capsys, space, message):
    from benchmarks.cli import main

    path = write_suite(tmp_path, edited(lambda s: s.update(search={"space": space})))
    assert main(["bench", str(path), "--results", str(tmp_path / "results")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_a_run_can_carry_its_own_checked_space(tmp_path) -> None:
    from tune.search import checked_space

    own = {"model.temperature": {"loguniform": [0.05, 1.0]}}
    path = write_suite(tmp_path, edited(lambda s: (s["runs"][0].update(search=own),
                                                   s.update(search={"space": SPACE}))))
    suite = load_suite(str(path))
    space = checked_space(suite.settings, suite.search, suite.run("simclr"))
    assert set(space) == {"model.temperature"}


@pytest.mark.parametrize(("paper", "message"), [
    ({"source": "Table 3", "knn_50_top1": 93.5}, "knn_50_top1: not a metric"),
    ({"source": "Table 1", "kmeans_ari": 0.7}, "kmeans_ari: not a metric"),
    ({"source": "Table 1", "linear_probe_top1": "88.1"}, "must be a number or [mean, std]"),
    ({"source": "Table 1", "tuned": "yes"}, "paper.tuned must be true (the paper searched"),
])
def test_paper_numbers_must_name_a_measured_accuracy(tmp_path: Path, paper: dict,
                                                     message: str) -> None:
    suite = {**BASE, "runs": [{"name": "a", "method": "simclr", "paper": paper}]}
    with pytest.raises(ConfigError) as err:
        load_suite(str(write_suite(tmp_path, suite)))
    assert message in str(err.value)


def test_a_paper_that_tuned_is_recorded_with_its_row(tmp_path: Path) -> None:
    paper = {"source": "Table 1", "linear_probe_top1": [88.11, 0.09], "tuned": True}
    suite = {**BASE, "runs": [{"name": "a", "method": "simclr", "paper": paper}]}
    assert load_suite(str(write_suite(tmp_path, suite))).run("a").paper["tuned"] is True


@pytest.mark.parametrize("evaluation", [None, {}])
def test_a_suite_that_names_no_protocol_is_refused(tmp_path: Path, evaluation) -> None:
    # no protocol runs by default: the suite says which, with every setting
    from benchmarks.protocols import PROTOCOLS

    path = write_suite(tmp_path, edited(lambda s: s.update(evaluation=evaluation)))
    named = ", ".join(n for n, p in PROTOCOLS.items() if not p.automatic)  # the registry's
    with pytest.raises(ConfigError, match=f"evaluation names no protocol; .*accepted: "
                                          f"{re.escape(named)}$"):
        load_suite(str(path))


def test_a_protocol_setting_left_out_is_refused_naming_it(tmp_path: Path) -> None:
    path = write_suite(tmp_path, edited(lambda s: s["evaluation"]["knn"].pop("temperature")))
    with pytest.raises(ConfigError, match=re.escape(
            "evaluation.knn: temperature not set; a suite pins every setting of knn: k, "
            "temperature")):
        load_suite(str(path))


def test_a_billion_laughs_suite_is_refused_before_anything_trains(tmp_path: Path) -> None:
    """1 KB of anchors inside anchors in a run's paper source expanded to billions of strings
    when the run was copied, a MemoryError after the other runs had trained."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(lines) + "\nname: laughs\nseeds: [0]\nruns:\n"
                    "  - {name: p, method: pixels, paper: {source: *a8}}\n")
    with pytest.raises(ConfigError, match="laughs.yaml expands to more than 1000000 values"):
        load_suite(str(path))


def test_a_suite_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "latin.yaml"
    path.write_bytes("name: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="latin.yaml is not UTF-8 text"):
        load_suite(str(path))


def test_the_ci_budget_takes_the_suites_ci_overrides_and_its_own_folder(tmp_path, capsys):
    from benchmarks.cli import main
    from benchmarks.suites.preflight import suite_results_dir

    smoke = load_suite("smoke", budget="ci")
    assert smoke.budget == "ci" and not smoke.fast
    assert {r.trainer["max_epochs"] for r in smoke.runs if r.method != "pixels"} == {10}
    assert smoke.settings.budget == "ci"
    assert suite_results_dir(smoke, tmp_path).name == "smoke-ci"
    assert suite_results_dir(load_suite("smoke", fast=True), tmp_path).name == "smoke-fast"
    bare = write_suite(tmp_path, BASE)
    assert main(["bench", str(bare), "--budget", "ci", "--results", str(tmp_path / "r")]) == 2
    assert "has no 'ci' budget (a ci: section of overrides); its budgets: full" in \
        capsys.readouterr().err
    assert main(["bench", "smoke", "--fast", "--budget", "ci"]) == 2
    assert "--fast and --budget ci ask for two budgets" in capsys.readouterr().err
