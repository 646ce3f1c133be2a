"""Every numeric setting of a model, a datamodule, the Trainer and the evaluation protocols has a
type and a maximum, checked before anything trains: a value above it (``num_workers`` of 2**40,
which forks DataLoader workers without end; a temperature of 1e300; an infinite gradient clip)
is one line naming the setting, the value and what is accepted, exit 2, and no result."""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import pytest
from bench_cli import bench
from tiny_suites import write_suite

os.environ.setdefault("WANDB_MODE", "disabled")


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bounds")
    return write_suite(folder / "bounds.yaml",
                       [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}])


@pytest.mark.parametrize("setting, expected", [
    ("data.num_workers=1099511627776",
     ["num_workers must be an integer in [0, ", "got 1099511627776"]),
    ("data.n_views=1000000000", ["n_views must be an integer in [1, 64], got 1000000000"]),
    ("data.batch_size=1000000000000000000000000000000",
     ["batch_size must be an integer in [1, 1048576], got 1000000000000000000000000000000"]),
    ("model.temperature=1e300", ["temperature must be > 0 and at most 1000, got 1e+300"]),
    ("model.lr=1000000000000000000000000000000", ["lr must be > 0 and at most 1000",
                                                  "got 1000000000000000000000000000000"]),
    ("model.projector_hidden=1000000000",
     ["projector_hidden must be an integer in [1, 65536], got 1000000000"]),
    ("model.weight_decay=.inf", ["weight_decay must be >= 0 and at most 10, got inf"]),
    ("trainer.gradient_clip_val=.inf",
     ["trainer.gradient_clip_val must be >= 0 and at most 1e+06, got inf"]),
    ("trainer.gradient_clip_val=.nan", ["trainer.gradient_clip_val must be >= 0, got nan"]),
    ("trainer.limit_train_batches=1000000000000",
     ["trainer.limit_train_batches must be an integer in [1, 1000000000] or a fraction in "
      "(0, 1], got 1000000000000"]),
    ("trainer.val_check_interval=0",
     ["trainer.val_check_interval must be an integer of at least 1 or a fraction in (0, 1], "
      "got 0"]),
    ("trainer.max_epochs=1000000000000",
     ["trainer.max_epochs must be an integer in [1, 100000], got 1000000000000"]),
    ("evaluation.linear_probe.epochs=1000000000",
     ["evaluation.linear_probe: epochs must be an integer in [1, 100000], got 1000000000"]),
    ("evaluation.knn.k=[1000000000000]",
     ["k must be an integer in [1, 10000000], got 1000000000000"]),
    ("evaluation.knn.temperature=1e300",
     ["evaluation.knn: temperature must be > 0 and at most 1000, got 1e+300"]),
])
def test_a_setting_above_its_maximum_exits_2_in_one_line_before_anything_trains(
        suite: Path, tmp_path: Path, capsys, setting: str, expected: list[str]) -> None:
    results = tmp_path / "results"
    assert bench(suite, results, "--set", setting) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("clusterbench: error: "), err
    assert "Traceback" not in err
    for piece in expected:
        assert piece in err, err
    assert not any(results.rglob("result.json")) and not any(results.rglob("*.ckpt"))


def numeric_arguments(cls: type) -> set[str]:
    """The arguments of ``cls`` and of its bases' constructors that take a number."""
    names = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        for param in inspect.signature(klass.__init__).parameters.values():
            default, annotation = param.default, str(param.annotation)
            if ((isinstance(default, (int, float)) and not isinstance(default, bool))
                    or "int" in annotation or "float" in annotation):
                names.add(param.name)
    return names - {"num_classes", "input_shape", "classes"}  # set from the data, or labels


def test_every_numeric_argument_of_a_registered_method_or_dataset_is_bounded() -> None:
    from datamodules import DATAMODULES
    from modules.methods import METHODS
    from modules.ranges import SETTING_BOUNDS

    for registry in (METHODS, DATAMODULES):
        for name, cls in registry.items():
            missing = numeric_arguments(cls) - set(SETTING_BOUNDS)
            assert not missing, f"{name}: no bound for {sorted(missing)}"


@pytest.mark.parametrize("values, message", [
    ({"num_workers": 2**40}, "num_workers must be an integer in [0, "),
    ({"queue_size": True}, "queue_size must be an integer of at least 1, got True"),
    ({"tau1": 10**30}, "tau1 must be > 0 and at most 1000, got 10"),
    ({"probe_lr": float("inf")}, "probe_lr must be > 0 and at most 1000, got inf"),
    ({"channels": [16, 10**9]}, "channels must be an integer in [1, 65536], got 1000000000"),
    ({"num_blocks": 10**9}, "num_blocks must be an integer of at most 256, got 1000000000"),
    ({"jitter_std": float("nan")}, "jitter_std must be >= 0, got nan"),
])
def test_check_settings_names_the_setting_its_value_and_what_is_accepted(values, message):
    from modules.ranges import check_settings

    with pytest.raises(ValueError) as refused:
        check_settings(values)
    assert str(refused.value).startswith(message), refused.value


def test_a_models_infinite_learning_rate_stays_accepted_to_force_a_divergence() -> None:
    """The fault tests train with ``lr: inf`` on purpose: it diverges at the first step and is
    reported so; a finite learning rate above the maximum is refused."""
    from modules.ranges import check_settings

    check_settings({"lr": float("inf"), "temperature": 1, "batch_size": 1, "seed": 2**32 - 1})
    with pytest.raises(ValueError, match="lr must be > 0 and at most 1000"):
        check_settings({"lr": 1e30})
