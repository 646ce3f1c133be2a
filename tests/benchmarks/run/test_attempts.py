"""A leftover ``seed-K.attempt`` becomes the seed's result only when it is this run's finished
result with its weights: anything else found there never replaces or deletes a finished seed."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
import yaml
from tiny_suites import TINY_EVALUATION

from benchmarks.infra.environment import LOADED_FROM
from benchmarks.run.cache import resolved_config
from benchmarks.run.one import run_one
from benchmarks.run.spec import RunSpec, SuiteSettings

RUN = RunSpec(name="simclr", method="simclr", model={"backbone_width": 4},
              data={"name": "digits", "batch_size": 64}, trainer={"max_epochs": 1})
SETTINGS = SuiteSettings(name="attempts", path="attempts.yaml", evaluation=TINY_EVALUATION)


def weights_bytes(value: float) -> bytes:
    buffer = io.BytesIO()
    torch.save({"backbone.weight": torch.full((2, 2), value)}, buffer)
    return buffer.getvalue()


def write_seed(folder: Path, result: dict, weights: bytes | None) -> None:
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps(result))
    (folder / "config.yaml").write_text(yaml.safe_dump(result.get("config")))
    if weights is not None:
        (folder / "encoder.pt").write_bytes(weights)


def finished(metric: float, **config_changes) -> dict:
    """A finished result of every field a result holds (``read_result`` reads no other)."""
    config = {**resolved_config(SETTINGS, RUN, 0), **config_changes}
    return {"suite": SETTINGS.name, "run": RUN.name, "method": RUN.method, "dataset": "digits",
            "budget": "full", "backbone": "small_cnn", "data_provenance": "real", "seed": 0,
            "epochs": 1, "batch_size": 64, "train_seconds": 1.0, "wall_seconds": 2.0,
            "device": "cpu", "machine": {"cpus": 2, "processor": "x86_64"},
            "versions": {"torch": torch.__version__}, "status": "finished", "config": config,
            "metrics": {"linear_probe_top1": metric}, "train_steps": 20, "git": LOADED_FROM}


#: What a leftover attempt may hold: (its result.json, its encoder.pt).
LEFTOVERS = {
    "a result without a configuration": (
        {"run": "simclr", "seed": 0, "metrics": {"linear_probe_top1": 0.97}}, weights_bytes(9)),
    "this run's result without its weights": (finished(0.97), None),
    "this run's result with a weights file that is not one": (finished(0.97), b"\x00" * 64),
    "another seed's result with weights": (finished(0.97, seed=3, run={
        **resolved_config(SETTINGS, RUN, 0)["run"], "trainer": {"max_epochs": 9}}),
        weights_bytes(9)),
    "this run's result still running": ({**finished(0.97), "status": "running"},
                                        weights_bytes(9)),
}


@pytest.mark.parametrize("case", list(LEFTOVERS))
def test_a_leftover_attempt_never_replaces_a_finished_seed(tmp_path: Path, capsys,
                                                          case: str) -> None:
    seed = tmp_path / "runs" / "simclr" / "seed-0"
    write_seed(seed, finished(0.51), weights_bytes(1))
    (seed / "logs").mkdir()
    (seed / "logs" / "metrics.csv").write_text("epoch,loss\n0,1.0\n")
    before = {p.relative_to(seed): p.read_bytes() for p in seed.rglob("*") if p.is_file()}
    result, weights = LEFTOVERS[case]
    write_seed(seed.with_name("seed-0.attempt"), result, weights)

    done = run_one(SETTINGS, RUN, 0, tmp_path)  # reused: nothing trains
    assert done["reused"] and done["metrics"] == {"linear_probe_top1": 0.51}
    assert {p.relative_to(seed): p.read_bytes() for p in seed.rglob("*") if p.is_file()} == before
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "seed-0.attempt is not put in place of" in err


def test_this_runs_finished_attempt_is_still_put_in_place(tmp_path: Path, capsys) -> None:
    """A kill between writing the attempt's result and renaming it: the next run finishes the
    rename instead of training again, and says in one line that the finished result it replaces
    is replaced (a well-formed attempt someone wrote there looks the same, and is not silent)."""
    seed = tmp_path / "runs" / "simclr" / "seed-0"
    write_seed(seed, finished(0.51), weights_bytes(1))
    write_seed(seed.with_name("seed-0.attempt"), finished(0.62), weights_bytes(2))
    done = run_one(SETTINGS, RUN, 0, tmp_path)
    assert done["reused"] and done["metrics"] == {"linear_probe_top1": 0.62}
    assert (seed / "encoder.pt").read_bytes() == weights_bytes(2)
    assert not seed.with_name("seed-0.attempt").exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "seed-0.attempt holds a finished result of this " \
        "configuration" in err and f"it replaces the result in {seed}" in err


def test_a_finished_attempt_with_no_result_to_replace_is_put_in_place_quietly(
        tmp_path: Path, capsys) -> None:
    """A kill after the old result was renamed aside: the attempt is the seed's only result."""
    seed = tmp_path / "runs" / "simclr" / "seed-0"
    write_seed(seed.with_name("seed-0.attempt"), finished(0.62), weights_bytes(2))
    done = run_one(SETTINGS, RUN, 0, tmp_path)
    assert done["reused"] and done["metrics"] == {"linear_probe_top1": 0.62}
    assert capsys.readouterr().err == ""
