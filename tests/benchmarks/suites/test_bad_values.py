"""Every bad value in a suite, or on the command line, is refused before anything trains: exit
status 2 and one line naming the value, where it is and what is accepted; no result written.

Each case here once trained and then crashed (exit 1), trained and reported a meaningless
number (exit 0), or never finished; the user relies on being told at once instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml

from benchmarks.cli import main

os.environ.setdefault("WANDB_MODE", "disabled")

SUITE = {
    "name": "values", "seeds": [0],
    "data": {"name": "digits", "batch_size": 32, "limit_per_class": 10},
    "trainer": {"max_epochs": 1, "accelerator": "cpu"},
    "evaluation": {"linear_probe": {"epochs": 2, "lr": 0.3,
                                    "batch_size": 64, "weight_decay": 1.0e-6},
                   "knn": {"k": [5], "temperature": None}},
    "runs": [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}],
}
SPACE = {"model.lr": {"loguniform": [1.0e-4, 1.0e-2]}}


def set_in(path: str, value) -> Callable[[dict], None]:
    """An edit of the suite: ``set_in("runs.0.model.lr", "fast")``."""
    *parents, last = path.split(".")

    def edit(suite: dict) -> None:
        node = suite
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        node[int(last) if isinstance(node, list) else last] = value

    return edit


def both(*edits: Callable[[dict], None]) -> Callable[[dict], None]:
    def edit(suite: dict) -> None:
        for one in edits:
            one(suite)

    return edit


def case(name: str, edit: Callable[[dict], None] | None, expected: list[str],
         flags: tuple[str, ...] = (), command: str = "bench", marks=()):
    return pytest.param(edit, expected, flags, command, id=name, marks=marks)


CASES = [
    # -- the Trainer, and where it runs
    case("max_epochs-not-a-number", set_in("trainer.max_epochs", "two"),
         ["runs[0].trainer.max_epochs must be int | None, got 'two'"]),
    case("max_epochs-zero", set_in("trainer.max_epochs", 0),
         ["run 'simclr': trainer.max_epochs must be an integer of at least 1, got 0"]),
    case("limit_train_batches-zero", set_in("trainer.limit_train_batches", 0),
         ["run 'simclr': trainer.limit_train_batches must be an integer of at least 1 or a "
          "fraction in (0, 1], got 0"]),
    case("limit_val_batches-above-1", set_in("trainer.limit_val_batches", 1.5),
         ["trainer.limit_val_batches must be an integer of at least 0 or a fraction in [0, 1]"]),
    case("accumulate_grad_batches-zero", set_in("trainer.accumulate_grad_batches", 0),
         ["run 'simclr': trainer.accumulate_grad_batches must be an integer of at least 1, "
          "got 0"]),
    case("check_val_every_n_epoch-zero", set_in("trainer.check_val_every_n_epoch", 0),
         ["run 'simclr': trainer.check_val_every_n_epoch must be an integer of at least 1, "
          "got 0"]),
    case("num_workers-negative", set_in("data.num_workers", -1),
         ["num_workers must be an integer of at least 0, got -1"]),
    case("precision-unknown", set_in("trainer.precision", "13"),
         ["runs[0].trainer.precision must be", "'bf16-mixed'", "got '13'"]),
    # batch 64 splits over 64 devices: only the devices themselves are wrong
    case("more-devices-than-cpus",
         both(set_in("trainer.devices", 64), set_in("data.batch_size", 64)),
         ["run 'simclr': devices 64 is more than this machine's", "accepted: 1 to"],
         marks=pytest.mark.skipif((os.cpu_count() or 1) >= 64, reason="64 CPU cores here")),
    case("accelerator-gpu-without-one", None,
         ["run 'simclr': accelerator 'gpu' is not available on this machine", "accepted here: "],
         flags=("--accelerator", "gpu"),
         marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")),
    case("accelerator-unknown", None,
         ["run 'simclr': unknown accelerator 'tpuu'", "accepted: ", "cpu"],
         flags=("--accelerator", "tpuu")),
    # -- the model (its constructor's ranges, checked on the meta device)
    case("lr-not-a-number", set_in("runs.0.model.lr", "fast"),
         ["runs[0].model.lr must be float, got 'fast'"]),
    case("sgd-momentum-above-1",
         both(set_in("runs.0.model.optimizer", "sgd"), set_in("runs.0.model.momentum", 1.5)),
         ["run 'simclr': momentum must be in [0, 1), got 1.5"]),
    case("probe_lr-negative", set_in("runs.0.model.probe_lr", -1),
         ["run 'simclr': probe_lr must be > 0, got -1"]),
    case("weight_decay-negative", set_in("runs.0.model.weight_decay", -1),
         ["run 'simclr': weight_decay must be >= 0, got -1"]),
    # -- the seeds
    case("seed-a-boolean", set_in("seeds", [True]),
         ["must be a non-empty list of integers in [0, 4294967295], got [True]"]),
    case("seed-twice", set_in("seeds", [0, 0]),
         ["must be distinct, got 2 seeds with 1 repeated (0 "]),
    # -- the evaluation protocols
    case("knn-temperature-negative", set_in("evaluation.knn.temperature", -1),
         ["evaluation.knn: temperature must be > 0, got -1"]),
    case("knn-k-not-a-number", set_in("evaluation.knn.k", "fifty"),
         ["evaluation.knn: k must be an integer of at least 1, got 'fifty'"]),
    case("svm-C-negative", set_in("evaluation.svm", {"C": -1, "backend": "torch"}),
         ["evaluation.svm: C must be > 0 and finite, got -1"]),
    case("svm-C-infinite", set_in("evaluation.svm", {"C": float("inf"), "backend": "torch"}),
         ["evaluation.svm: C must be > 0 and finite, got inf"]),
    case("probe-lr-infinite", set_in("evaluation.linear_probe.lr", float("inf")),
         ["evaluation.linear_probe: lr must be > 0 and finite, got inf"]),
    case("svm-backend-unknown", set_in("evaluation.svm", {"C": 1.0, "backend": "libsvm"}),
         ["evaluation.svm: backend must be one of torch, sklearn, got 'libsvm'"]),
    case("cluster-backend-unknown",
         set_in("evaluation.cluster", {"n_clusters": None, "backend": "faiss"}),
         ["evaluation.cluster: backend must be one of torch, sklearn, got 'faiss'"]),
    case("linear-probe-batch-zero", set_in("evaluation.linear_probe.batch_size", 0),
         ["evaluation.linear_probe: batch_size must be an integer of at least 1, got 0"]),
    case("linear-probe-epochs-negative", set_in("evaluation.linear_probe.epochs", -1),
         ["evaluation.linear_probe: epochs must be an integer of at least 1, got -1"]),
    case("cluster-count-negative",
         set_in("evaluation.cluster", {"n_clusters": -3, "backend": "torch"}),
         ["evaluation.cluster: n_clusters must be an integer of at least 2, got -3"]),
    # -- the search budget, checked at load as the search checks it
    case("search-no-samples", set_in("search", {"space": SPACE, "num_samples": 0}),
         ["search.num_samples must be an integer of at least 1, got 0"]),
    case("search-grace-beyond-budget",
         set_in("search", {"space": SPACE, "grace_period": 3, "max_epochs": 2}),
         ["search.grace_period (3) must not exceed", "search.max_epochs (2)"]),
    case("search-reduction-factor-1", set_in("search", {"space": SPACE, "reduction_factor": 1}),
         ["search.reduction_factor must be above 1, got 1"]),
    case("search-no-cpus", set_in("search", {"space": SPACE, "cpus_per_trial": 0}),
         ["search.cpus_per_trial must be > 0, got 0"]),
    case("search-metric-unknown", set_in("search", {"space": SPACE, "metric": "nosuch"}),
         ["search.metric 'nosuch' is not a metric SimCLR logs every epoch",
          "accepted: online_knn_acc, online_val_acc, rankme"]),
    case("tune-metric-unknown", set_in("search", {"space": SPACE}),
         ["--metric 'nosuch' is not a metric SimCLR logs every epoch",
          "accepted: online_knn_acc, online_val_acc, rankme"],
         flags=("--metric", "nosuch"), command="tune"),
    # -- what the leaderboard shows: metrics the evaluation records
    case("headline-not-recorded", set_in("headline", "svm_top1"),
         ["headline 'svm_top1' is not a metric this suite's evaluation records",
          "knn5_top1", "linear_probe_top1", "online_val_acc"]),
    case("plot-y-not-recorded", set_in("plots", [{"x": "model.lr", "y": "knn200_top1"}]),
         ["plots[0].y 'knn200_top1' is not a metric", "(did you mean 'knn5_top1'?)"]),
    # -- a run's sections of the wrong kind
    case("model-a-list", set_in("runs.0.model", [1, 2]),
         ["runs[0].model must be a mapping, got [1, 2]"]),
    case("method-a-list", set_in("runs.0.method", ["simclr"]),
         ["unknown method in", "runs[0] ['simclr']", "accepted: ", "simclr"]),
    case("trainer-a-list", set_in("runs.0.trainer", [1]),
         ["runs[0].trainer must be a mapping, got [1]"]),
    case("data-a-name", set_in("runs.0.data", "digits"),
         ["runs[0].data must be a mapping, got 'digits'"]),
]


@pytest.mark.parametrize("edit, expected, flags, command", CASES)
def test_a_bad_value_exits_2_naming_it_before_anything_trains(
        tmp_path: Path, capsys, edit, expected: list[str], flags: tuple[str, ...],
        command: str) -> None:
    suite = yaml.safe_load(yaml.safe_dump(SUITE))  # a deep copy
    if edit is not None:
        edit(suite)
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    results = tmp_path / "results"
    argv = ([command, str(path), "--results", str(results), "--no-progress"] if command == "bench"
            else [command, str(path), "--storage", str(results)])
    assert main([*argv, *flags]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("clusterbench: error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err
    for piece in expected:
        assert piece in errors[0], errors[0]
    assert not any(results.rglob("result.json")) and not any(results.rglob("trials.csv"))


def test_more_clusters_than_test_points_is_refused_before_the_run_trains(tmp_path, capsys):
    """A setting only the loaded data can refute (k-means clusters above the test points) is
    found once the run's data is loaded, before it trains: one line, exit 2, no result."""
    suite = yaml.safe_load(yaml.safe_dump(SUITE))
    suite["evaluation"]["cluster"] = {"n_clusters": 100000, "backend": "torch"}
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    results = tmp_path / "results"
    assert main(["bench", str(path), "--results", str(results), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert ("run 'simclr' on digits: evaluation.cluster: n_clusters must be at most the 450 test "
            "points, got 100000") in err
    assert not any(results.rglob("result.json")) and not any(results.rglob("last.ckpt"))
