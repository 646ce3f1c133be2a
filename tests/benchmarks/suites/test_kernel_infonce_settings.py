"""kernel_infonce_table1 trains and searches as the Kernel-InfoNCE authors' code does (Tan, Zhang,
Yang, Yuan, "Contrastive Learning is Spectral Clustering on Similarity Graph", ICLR 2024,
arXiv:2303.15103): LARS and weight decay on every parameter, ASHA's first cut after the
warm-up (at load, and in every command that starts a search); and only the rows of a paper that
tuned are marked "(untuned)"."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import pytest
from built_optimiser import built_optimiser

from benchmarks.cli import main
from benchmarks.infra.errors import ConfigError
from benchmarks.suites.config import load_suite
from benchmarks.suites.suite_file import suite_path
from tune.asha import SignalASHA
from tune.search import run_search

TABLE1 = "kernel_infonce_table1"


def test_table1_lars_decays_and_adapts_biases_and_norms_as_the_authors_code(tmp_path):
    from timm.optim import Lars

    suite = load_suite(TABLE1)
    run = suite.run("cifar10/sum/400ep")
    optimiser, model = built_optimiser(run, tmp_path, n_views=2)
    assert isinstance(optimiser, Lars)
    probe = {id(p) for p in model.online_probe.parameters()}
    trained = [g for g in optimiser.param_groups if not probe & {id(p) for p in g["params"]}]
    # timm's LARS adapts exactly the groups with a non-zero weight decay
    assert all(g["weight_decay"] == 1e-6 and not g["always_adapt"] for g in trained)
    in_trained = {id(p) for g in trained for p in g["params"]}
    biases_and_norms = [n for n, p in model.named_parameters()
                        if p.ndim <= 1 and not n.startswith("online_probe.")]
    assert any(".bias" in n for n in biases_and_norms)  # the model has both to test
    assert any("projector" in n for n in biases_and_norms)  # the projector's BatchNorm
    for name in biases_and_norms:
        assert id(model.get_parameter(name)) in in_trained, name
    expected = {id(p) for n, p in model.named_parameters()
                if p.requires_grad and not n.startswith("online_probe.")}
    assert in_trained == expected


def test_other_suites_keep_biases_and_norms_out_of_weight_decay():
    """(MoCo's suite decays every parameter as its sources' SGD does: test_moco_suite.py.)"""
    for name in ("smoke", "transfusion_table3"):
        for run in load_suite(name).runs:
            assert run.model.get("exclude_bias_and_norm", True), (name, run.name)


def test_table1_first_asha_cut_comes_after_every_searched_runs_warmup():
    suite = load_suite(TABLE1)
    search = suite.search
    scheduler = SignalASHA(search.metric, search.mode, search.max_epochs, search.grace_period,
                           search.reduction_factor)
    first_cut = min(milestone for milestone, _ in scheduler.rungs)
    assert first_cut == search.grace_period
    for run in suite.searched_runs():
        assert first_cut > run.model["warmup_epochs"], run.name
    # the authors' random_search.py: ASHAScheduler(grace_period=20, reduction_factor=2)
    assert (search.grace_period, search.reduction_factor) == (20, 2)


def edited_table1(tmp_path: Path, old: str, new: str) -> Path:
    text = suite_path(TABLE1).read_text(encoding="utf-8")
    assert text.count(old) == 1
    path = tmp_path / "table1.yaml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def test_a_grace_period_inside_the_warmup_is_refused_in_one_line(tmp_path):
    path = edited_table1(tmp_path, "  grace_period: 20 ", "  grace_period: 5 ")
    with pytest.raises(ConfigError) as info:
        load_suite(str(path))
    message = str(info.value)
    assert "\n" not in message
    assert "search.grace_period (5)" in message and "10-epoch warm-up" in message
    assert "cifar10/nt_xent/400ep" in message and "cut_in_warmup" in message


def test_a_grace_period_at_the_warmups_last_epoch_is_refused(tmp_path):
    # a cut at epoch 10 still ranks trials that have not trained an epoch at their full rate
    with pytest.raises(ConfigError, match=r"grace_period \(10\)"):
        load_suite(str(edited_table1(tmp_path, "  grace_period: 20 ", "  grace_period: 10 ")))
    load_suite(str(edited_table1(tmp_path, "  grace_period: 20 ", "  grace_period: 11 ")))


def test_a_cut_inside_the_warmup_loads_where_the_suite_states_it(tmp_path):
    path = edited_table1(tmp_path, "  grace_period: 20 ", "  cut_in_warmup: true\n"
                                                          "  grace_period: 5 ")
    assert load_suite(str(path)).search.grace_period == 5
    # the fast budget states it: its one-epoch trials end inside the warm-up
    assert load_suite(TABLE1, fast=True).search.cut_in_warmup is True
    with pytest.raises(ConfigError, match="cut_in_warmup must be true or false"):
        load_suite(str(edited_table1(tmp_path, "  grace_period: 20 ",
                                     "  cut_in_warmup: 1\n  grace_period: 20 ")))


class TrainingWouldStart(Exception):
    """Raised where the search would hand its trials to Ray: everything before it accepted."""


@pytest.fixture
def no_training(monkeypatch):
    import tune.search

    def make_tuner(trial, budget, *args, **kwargs):
        raise TrainingWouldStart(budget)

    monkeypatch.setattr(tune.search, "make_tuner", make_tuner)
    monkeypatch.setattr(tune.search, "ray_for_search", lambda address: nullcontext())


def refusal(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_tune_refuses_a_grace_period_inside_the_warmup_in_one_line_writing_nothing(
        tmp_path, capsys, no_training):
    storage = tmp_path / "search"
    assert main(["tune", TABLE1, "--run", "cifar10/nt_xent/400ep", "--grace-period", "5",
                 "--storage", str(storage)]) == 2
    message = refusal(capsys)
    assert "--grace-period (5) falls inside the 10-epoch warm-up" in message
    assert "cifar10/nt_xent/400ep" in message and "set it above 10" in message
    assert not storage.exists()


def test_tune_takes_a_grace_period_after_the_warmup_up_to_training(tmp_path, no_training):
    with pytest.raises(TrainingWouldStart) as info:
        main(["tune", TABLE1, "--run", "cifar10/nt_xent/400ep", "--grace-period", "11",
              "--num-samples", "2", "--storage", str(tmp_path / "search")])
    budget = info.value.args[0]
    assert (budget.grace_period, budget.num_samples) == (11, 2)


def test_a_search_started_from_python_is_held_to_the_warmup_rule(tmp_path):
    suite = load_suite(TABLE1)
    with pytest.raises(ConfigError, match=r"--grace-period \(5\) falls inside the 10-epoch"):
        run_search(suite.settings, suite.search, suite.run("cifar10/nt_xent/400ep"),
                   grace_period=5, storage=str(tmp_path / "search"))
    assert not (tmp_path / "search").exists()


def test_bench_refuses_a_warmup_set_past_the_suites_first_cut(tmp_path, capsys):
    results = tmp_path / "results"
    assert main(["bench", TABLE1, "--runs", "cifar10/nt_xent/400ep",
                 "--set", "model.warmup_epochs=25", "--results", str(results)]) == 2
    message = refusal(capsys)
    assert "search.grace_period (20) falls inside the 25-epoch warm-up" in message
    assert "set it above 25" in message and "(with --set model.warmup_epochs=25)" in message
    assert not results.exists()


def test_only_rows_of_a_paper_that_tuned_say_so():
    # Kernel-InfoNCE tuned every Table 1 case (its Table 3); MoCo's and TransFusion's rows
    # report fixed settings
    assert all(run.paper.get("tuned") is True for run in load_suite(TABLE1).runs)
    for name in ("kernel_infonce_moco", "transfusion_table3", "transfusion_fusion_paper"):
        for run in load_suite(name).runs:
            assert not run.paper.get("tuned"), (name, run.name)
