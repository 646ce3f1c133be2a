"""``clusterbench bench SUITE --set KEY=VALUE --seeds ...``: settings over a suite's, checked
before anything trains, recorded in every result, and kept apart from the suite's own results."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
import yaml
from bench_cli import bench

os.environ.setdefault("WANDB_MODE", "disabled")

TINY_TRAINER = {"max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 1,
                "accelerator": "cpu", "log_every_n_steps": 1}


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> tuple[Path, Path]:
    """A two-run suite benched once as its file says."""
    root = tmp_path_factory.mktemp("overrides")
    suite = root / "tiny.yaml"
    suite.write_text(yaml.safe_dump({
        "name": "tiny", "seeds": [0], "data": {"name": "digits", "batch_size": 64},
        "trainer": TINY_TRAINER, "evaluation": {
            "linear_probe": {"epochs": 2, "lr": 0.3, "batch_size": 64, "weight_decay": 1.0e-6},
            "knn": {"k": [5], "temperature": None}},
        "runs": [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}},
                 {"name": "pixels", "method": "pixels"}]}))
    results = root / "results"
    assert bench(suite, results) == 0
    return suite, results


def files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_set_and_seeds_reach_every_run_are_recorded_and_leave_the_plain_results(plain):
    suite, results = plain
    before = files(results / "tiny")
    assert bench(suite, results, "--set", "trainer.max_epochs=2", "--set", "data.batch_size=32",
                 "--set", "model.temperature=0.2", "--seeds", "0", "1") == 0
    overrides = {"data.batch_size": 32, "model.temperature": 0.2, "trainer.max_epochs": 2}
    directory = results / "tiny+data.batch_size=32+model.temperature=0.2+trainer.max_epochs=2"
    for seed in (0, 1):
        run = directory / f"runs/simclr/seed-{seed}"
        result = json.loads((run / "result.json").read_text())
        # two epochs of the suite's 2 batches each, of 32 samples
        assert (result["epochs"], result["train_steps"], result["batch_size"]) == (2, 4, 32)
        assert result["config"]["run"]["model"]["temperature"] == 0.2
        assert result["config"]["overrides"] == overrides
        assert yaml.safe_load((run / "config.yaml").read_text())["overrides"] == overrides
        pixels = json.loads((directory / f"runs/pixels/seed-{seed}/result.json").read_text())
        assert pixels["batch_size"] == 32 and pixels["config"]["run"]["model"] == {}
    rows = {r["run"]: r for r in csv.DictReader((directory / "leaderboard.csv").open())}
    assert set(rows) == {"simclr", "pixels"} and rows["simclr"]["seeds"] == "2"
    # the suite's own results: not replaced, not averaged with these, their hash another one
    assert files(results / "tiny") == before
    plain_result = json.loads((results / "tiny/runs/simclr/seed-0/result.json").read_text())
    assert "overrides" not in plain_result["config"]
    overridden = json.loads((directory / "runs/simclr/seed-0/result.json").read_text())
    assert plain_result["config_hash"] != overridden["config_hash"]


@pytest.mark.parametrize("flags, message", [
    (["--set", "trainer.max_epoch=3"],
     "unknown key 'max_epoch' in --set trainer (did you mean 'max_epochs'?)"),
    (["--set", "model.temprature=0.5"], "(did you mean 'temperature'?)"),
    (["--set", "data.batch_size=big"], "--set data.batch_size must be int, got 'big'"),
    (["--set", "data.val_fraction=1.5"], "val_fraction must be in (0, 1), got 1.5"),
    (["--set", "model.temperature=-1"], "temperature must be > 0, got -1"),
    (["--set", "trainer.max_epochs=0"], "max_epochs must be an integer of at least 1, got 0"),
    (["--set", "evaluation.knn.k=[0]"], "k must be an integer of at least 1, got 0"),
    (["--set", "evaluation.knn.kk=5"], "unknown key 'kk' in --set evaluation.knn"),
    (["--set", "max_epochs=3"], "must be SECTION.KEY=VALUE"),
    (["--seeds", "0", "0"], "seeds in --seeds must be distinct"),
])
def test_a_bad_override_is_one_line_exit_2_and_touches_nothing(plain, flags, message, capsys):
    suite, results = plain
    capsys.readouterr()
    before = files(results)
    assert bench(suite, results, *flags) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("clusterbench: error: ") and message in err
    assert files(results) == before
