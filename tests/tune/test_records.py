"""A search's own records: what it samples, what a trial keeps, and what a resume reads back.

A results folder is data (copied, shared, downloaded): a resume reads JSON and weights-only
checkpoints, and never a pickle, whatever was planted beside them."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from planted import Payload, planted_pickle
from resumable_checkpoints import resumable

from benchmarks.cli import main
from tune.records import (
    MANIFEST,
    TrialRecord,
    check_same_search,
    read_manifest,
    sample_configs,
)

SPACE = {"model.lr": {"loguniform": [1e-4, 1e-2]}, "model.temperature": {"uniform": [0.05, 1]},
         "data.batch_size": {"choice": [64, 128]}, "model.projector_out": {"randint": [8, 12]},
         "model.optimizer": {"grid": ["adam", "sgd"]}}


def test_configurations_follow_the_seed_alone_and_every_value_is_one_its_space_gives():
    from tune.search import can_sample

    configs = sample_configs(SPACE, 3, seed=7)
    assert len(configs) == 6  # three draws over the grid's two values
    assert [c["model.optimizer"] for c in configs] == ["adam", "sgd"] * 3
    assert configs == sample_configs(SPACE, 3, seed=7)
    assert configs[:4] == sample_configs(SPACE, 2, seed=7)  # a bigger budget draws on
    assert configs != sample_configs(SPACE, 3, seed=8)
    for config in configs:
        for key, dist in SPACE.items():
            (kind, args), = dist.items()
            assert can_sample(kind, args, config[key]), (key, config[key])
        assert type(config["data.batch_size"]) is int
        assert type(config["model.projector_out"]) is int


def test_loguniform_draws_spread_over_the_decades():
    import numpy as np

    draws = np.log10([c["model.lr"] for c in sample_configs(
        {"model.lr": {"loguniform": [1e-4, 1e-2]}}, 2000, seed=0)])
    counts, _ = np.histogram(draws, bins=[-4, -3, -2])
    assert abs(counts[0] - counts[1]) < 200, counts  # even in log space: 1000 ± 3 sd


def test_a_changed_setting_is_named_when_a_search_is_resumed(tmp_path):
    saved = {"run": "simclr", "seed": 0, "space": SPACE, "num_samples": 2, "max_epochs": 4,
             "grace_period": 1, "reduction_factor": 2, "metric": "online_val_acc",
             "mode": "max", "configs": sample_configs(SPACE, 2, seed=0)}
    check_same_search(tmp_path, saved, json.loads(json.dumps(saved)))
    with pytest.raises(Exception, match=r"was started with seed 0, not 3: resume it with the "
                                        r"same settings, or drop --resume"):
        check_same_search(tmp_path, saved, {**saved, "seed": 3})


def test_a_resume_with_another_seed_exits_2_before_ray_starts(tmp_path, capsys, monkeypatch):
    import ray

    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("Ray started"))
    storage = tmp_path / "search"
    from tune.records import write_manifest

    write_manifest(storage / "simclr", {"run": "simclr", "seed": 0, "configs": []})
    assert main(["tune", "smoke", "--fast", "--resume", "--seed", "1", "--storage",
                 str(storage)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "was started with seed 0, not 1" in err[0]
    (storage / "simclr" / MANIFEST).write_text("{")
    assert main(["tune", "smoke", "--fast", "--resume", "--storage", str(storage)]) == 2
    assert "is not a search's manifest (JSONDecodeError)" in capsys.readouterr().err
    assert read_manifest(tmp_path) is None


def test_a_record_keeps_what_its_checkpoint_holds(tmp_path):
    """Rows are written before the checkpoint: a kill between them leaves a row the
    checkpoint does not hold, which the resume drops (that epoch is trained again)."""
    record = TrialRecord(tmp_path / "0000", 0, {"model.lr": 0.01},
                         rows=[{"epoch": e, "acc": e / 10} for e in (1, 2, 3)], checkpointed=3)
    record.save()
    torch.save(resumable(epoch=1, global_step=8), record.checkpoint)  # holds epochs 1 and 2
    again = TrialRecord.open(record.folder, 0, {"model.lr": 0.01})
    again.rewind()
    assert again.checkpointed == 2 and [r["epoch"] for r in again.rows] == [1, 2]
    record.checkpoint.unlink()
    again.rewind()
    assert again.checkpointed == 0 and again.rows == []


@pytest.mark.parametrize("content", ["{", "[]", json.dumps({"rows": "x"}),
                                     json.dumps({"config": {"model.lr": 0.5}, "rows": [],
                                                 "checkpointed": 0})])
def test_a_record_that_is_not_this_trials_is_not_used(tmp_path, content):
    (tmp_path / "record.json").write_text(content)
    record = TrialRecord.open(tmp_path, 0, {"model.lr": 0.01})
    assert record.rows == [] and record.checkpointed == 0 and record.error is None


def test_a_planted_checkpoint_is_never_unpickled_and_the_trial_starts_again(tmp_path, capsys):
    marker = tmp_path / "marker"
    record = TrialRecord(tmp_path / "0000", 0, {}, rows=[{"epoch": 1, "acc": 0.5}],
                         checkpointed=1)
    record.save()
    torch.save({"epoch": Payload(marker)}, record.checkpoint)  # its pickle runs code
    torch.load(record.checkpoint, weights_only=False)
    assert marker.exists()  # the plant is live ...
    marker.unlink()
    record.rewind()
    assert not marker.exists()  # ... and the resume never ran it
    assert record.checkpointed == 0 and record.rows == []
    assert (record.folder / "last.ckpt.unreadable").is_file()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds objects other than tensors" in err[0]


def test_a_resume_reads_no_pickle_planted_in_the_search_folder(tmp_path, monkeypatch):
    """``tuner.pkl`` and Ray's experiment state planted where Ray keeps them: the resume gets as
    far as starting Ray (stubbed here) without loading either; Ray's folder is rebuilt."""
    import ray

    class RayStarted(Exception):
        pass

    def start(*args, **kwargs):
        raise RayStarted

    storage, marker = tmp_path / "search", tmp_path / "marker"
    state = storage / "simclr"
    payload = planted_pickle(marker)
    for where in (state, state / "ray"):
        where.mkdir(parents=True, exist_ok=True)
        (where / "tuner.pkl").write_bytes(payload)
        (where / "experiment_state-2099.json").write_bytes(payload)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", start)
    # the manifest of the smoke suite's fast search, as a new search writes it
    from benchmarks.suites.config import load_suite
    from tune.search import space_of, start_or_resume

    suite = load_suite("smoke", fast=True)
    run = suite.run("simclr")
    start_or_resume(state, run, space_of(run, suite.search), suite.search, 0, resume=False)
    (kept,) = storage.glob("simclr.replaced-*")  # the planted folder, kept aside unread
    shutil.move(kept / "ray", state / "ray")
    shutil.move(kept / "tuner.pkl", state / "tuner.pkl")
    with pytest.raises(RayStarted):
        main(["tune", "smoke", "--fast", "--resume", "--storage", str(storage)])
    assert not marker.exists()
    assert (state / "tuner.pkl").read_bytes() == payload  # left where it was, never read


@pytest.mark.parametrize("checkpointed", ["Infinity", "NaN", "-1", '"3"', "2.5", "true"])
def test_a_record_with_a_non_integer_checkpointed_is_set_aside_and_the_trial_starts_again(
        tmp_path, capsys, checkpointed):
    """A record edited to ``checkpointed: Infinity`` made every later start of the search fail
    (int(inf) is an OverflowError): now it is set aside, with its checkpoint, in one line."""
    record = TrialRecord(tmp_path / "0000", 0, {"model.lr": 0.01},
                         rows=[{"epoch": 1, "acc": 0.5}], checkpointed=1)
    record.save()
    torch.save({"epoch": 0}, record.checkpoint)
    path = record.folder / "record.json"
    text = path.read_text()
    path.write_text(text.replace('"checkpointed": 1', f'"checkpointed": {checkpointed}'))
    again = TrialRecord.open(record.folder, 0, {"model.lr": 0.01})
    again.rewind()
    assert again.rows == [] and again.checkpointed == 0
    assert (record.folder / "record.json.set-aside").is_file() and not path.exists()
    assert (record.folder / "last.ckpt.set-aside").is_file()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "checkpointed" in err[0]


@pytest.mark.parametrize("saved", [
    {"epoch": float("inf"), "global_step": 8}, {"epoch": "3", "global_step": 8},
    {"epoch": 1, "global_step": 8, "state_dict": {}},  # no optimizer_states, no loops
], ids=["inf", "string", "keys-missing"])
def test_a_trial_checkpoint_lightning_cannot_resume_is_set_aside(tmp_path, capsys, saved):
    record = TrialRecord(tmp_path / "0000", 0, {}, rows=[{"epoch": 1, "acc": 0.5}],
                         checkpointed=1)
    record.save()
    torch.save({"state_dict": {}, "optimizer_states": [], "loops": {}, **saved},
               record.checkpoint)
    if "loops" not in saved:
        torch.save(saved, record.checkpoint)
    record.rewind()
    assert record.checkpointed == 0 and record.rows == []
    assert (record.folder / "last.ckpt.unreadable").is_file()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(record.checkpoint) in err[0]
    assert ("epoch" if "state_dict" not in saved else "optimizer_states") in err[0]


@pytest.mark.parametrize("damage, field", [
    ({"pytorch-lightning_version": None}, "pytorch-lightning_version is missing"),
    ({"state_dict": {}}, "its state_dict is empty"),
    ({"lr_schedulers": None}, "has no 'lr_schedulers'"),
    ({"loops": {"fit_loop": {"epoch_progress": {"total": {}, "current": {}}}}},
     "has no total counts"),
], ids=["no-version", "empty-state-dict", "no-schedulers", "empty-counters"])
def test_a_trial_checkpoint_that_fails_lightnings_resume_is_set_aside(tmp_path, capsys, damage,
                                                                      field):
    """A trial checkpoint with Lightning's keys that Lightning still cannot resume from (no
    version: a KeyError; no weights: a RuntimeError) failed the trial at every start of the
    search: it is kept as last.ckpt.unreadable, in one line, and the trial starts again."""
    record = TrialRecord(tmp_path / "0000", 0, {}, rows=[{"epoch": 1, "acc": 0.5}],
                         checkpointed=1)
    record.save()
    saved = {**resumable(epoch=0, global_step=4), **damage}
    torch.save({k: v for k, v in saved.items() if v is not None}, record.checkpoint)
    record.rewind()
    assert record.checkpointed == 0 and record.rows == []
    assert (record.folder / "last.ckpt.unreadable").is_file()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(record.checkpoint) in err[0] and field in err[0], err


def test_each_search_started_has_its_own_id_and_a_resume_keeps_it(tmp_path):
    """A search's id names its W&B group: a new search (``tune``, or ``bench`` with another space
    or budget) gets its own, a resumed one keeps the one it started with, and a search recorded
    before searches had ids gets one at its first resume and keeps it."""
    from benchmarks.suites.config import load_suite
    from tune.search import space_of, start_or_resume

    suite = load_suite("smoke", fast=True)
    run = suite.run("simclr")
    state = tmp_path / "search" / "simclr"

    def start(resume: bool) -> str:
        return start_or_resume(state, run, space_of(run, suite.search), suite.search, 0,
                               resume=resume)["search_id"]

    first = start(resume=False)
    assert start(resume=True) == first
    second = start(resume=False)  # the first search is kept aside
    assert second != first and start(resume=True) == second
    manifest = read_manifest(state)
    del manifest["search_id"]
    (state / MANIFEST).write_text(json.dumps(manifest))
    given = start(resume=True)
    assert given not in (first, second) and start(resume=True) == given
