"""A results folder is data: a search state that this installation did not sign is never
unpickled, by ``clusterbench tune --resume`` or by ``clusterbench bench``'s automatic resume."""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import stat
from pathlib import Path

import pytest
import yaml

import tune.search
from benchmarks.cli import main
from benchmarks.infra.signed_state import check_tree, secret_key
from tune.signed_search_state import STATE_RECORD, sign_search_state

os.environ.setdefault("WANDB_MODE", "disabled")


class WritesMarker:
    """Unpickling this writes ``marker``: what a planted ``tuner.pkl`` could do instead."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.write_text, (self.marker, "unpickled")


def plant(experiment_dir: Path, marker: Path) -> None:
    """A ``tuner.pkl`` that runs code when loaded (checked live here, then the marker removed)."""
    experiment_dir.mkdir(parents=True, exist_ok=True)
    payload = pickle.dumps(WritesMarker(marker))
    pickle.loads(payload)
    assert marker.read_text() == "unpickled"  # the plant is live ...
    marker.unlink()
    (experiment_dir / "tuner.pkl").write_bytes(payload)


# -- the keyed digests ----------------------------------------------------------------------------
def write_state(root: Path) -> Path:
    (root / "trial_0/checkpoint_000001").mkdir(parents=True)
    (root / "tuner.pkl").write_bytes(b"pickle bytes")
    (root / "experiment_state-2024.json").write_text("{}")
    (root / "trial_0/checkpoint_000001/trial.ckpt").write_bytes(b"weights")
    sign_search_state(root)
    return root.parent / STATE_RECORD


def test_the_secret_is_private_to_the_user_and_outside_the_results():
    secret_key()
    path = Path(os.environ["CLUSTERBENCH_SECRET_FILE"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(bytes.fromhex(path.read_text().strip())) == 32


def test_a_signed_state_passes_and_any_change_is_named(tmp_path):
    root = tmp_path / "search" / "simclr"
    record = write_state(root)
    assert check_tree(root, record) is None
    (root / "trial_0/checkpoint_000001/trial.ckpt").unlink()  # gone: nothing loads it
    assert check_tree(root, record) is None
    (root / "tuner.pkl").write_bytes(b"other bytes")
    assert check_tree(root, record) == "tuner.pkl differs from what was signed"
    sign_search_state(root)
    (root / "searcher-state-2099.pkl").write_bytes(b"new")
    assert check_tree(root, record) == "searcher-state-2099.pkl was not signed"
    (root / "searcher-state-2099.pkl").unlink()
    (root / "linked.pkl").symlink_to(root / "tuner.pkl")
    assert check_tree(root, record) == "linked.pkl is not a plain file"


def test_a_state_signed_by_another_installation_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "search" / "simclr"
    record = write_state(root)
    monkeypatch.setenv("CLUSTERBENCH_SECRET_FILE", str(tmp_path / "other-secret"))
    assert check_tree(root, record).endswith("differs from what was signed")


def test_a_digest_moved_to_another_file_does_not_match(tmp_path):
    root = tmp_path / "search" / "simclr"
    record = write_state(root)
    (root / "experiment_state-2024.json").write_bytes((root / "tuner.pkl").read_bytes())
    files = json.loads(record.read_text())["files"]
    files["experiment_state-2024.json"] = files["tuner.pkl"]
    record.write_text(json.dumps({"format": "clusterbench-hmac-sha256/1", "files": files}))
    assert check_tree(root, record) == "experiment_state-2024.json differs from what was signed"


# -- the commands ---------------------------------------------------------------------------------
@pytest.mark.parametrize("record", [None, "forged", "not json"])
def test_tune_resume_refuses_a_planted_search_state_without_loading_it(record, tmp_path, capsys):
    storage, marker = tmp_path / "search", tmp_path / "marker"
    plant(storage / "simclr", marker)
    if record == "forged":  # a record beside it, made without the secret
        (storage / STATE_RECORD).write_text(json.dumps(
            {"format": "clusterbench-hmac-sha256/1", "files": {"tuner.pkl": "0" * 64}}))
    elif record == "not json":
        (storage / STATE_RECORD).write_text("{")
    assert main(["tune", "smoke", "--fast", "--resume", "--storage", str(storage)]) == 2
    err = capsys.readouterr().err
    assert "was not written by this installation or was changed" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not marker.exists()  # ... and clusterbench never loaded it


def test_bench_refuses_to_resume_a_planted_search_state_without_loading_it(tmp_path, capsys,
                                                                          monkeypatch):
    """``bench`` resumes an interrupted search by itself: the search folder holds the
    ``search.yaml`` of this suite's search (as an interrupted search leaves it), and a planted
    ``tuner.pkl`` where Ray's state would be."""
    from benchmarks.suites.config import load_suite
    from benchmarks.suites.runner import search_then_best, suite_results_dir
    from tune.search import SearchInterrupted

    suite_file = tmp_path / "tiny.yaml"
    suite_file.write_text(yaml.safe_dump({
        "name": "tiny", "seeds": [0], "data": {"name": "digits", "batch_size": 64},
        "trainer": {"max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 1,
                    "accelerator": "cpu"},
        "evaluation": {"knn": {"k": [5], "temperature": None}},
        "runs": [{"name": "simclr", "method": "simclr",
                  "model": {"backbone_width": 4, "projector_hidden": 16}}],
        "search": {"space": {"model.lr": {"loguniform": [1e-4, 1e-2]}}, "num_samples": 2,
                   "max_epochs": 1, "grace_period": 1}}))
    root, marker = tmp_path / "results", tmp_path / "marker"

    def interrupted(*args, **kwargs):
        raise SearchInterrupted("stopped")

    suite = load_suite(str(suite_file))
    with monkeypatch.context() as patched:
        patched.setattr(tune.search, "run_search", interrupted)
        with pytest.raises(SearchInterrupted):
            search_then_best(suite, suite.run("simclr"), suite_results_dir(suite, root))
    search = suite_results_dir(suite, root) / "search" / "simclr"
    assert (search / "search.yaml").is_file()
    plant(search / "simclr", marker)
    assert main(["bench", str(suite_file), "--results", str(root), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "was not written by this installation or was changed" in err and str(search) in err
    assert not marker.exists()


def test_a_new_search_keeps_an_earlier_state_aside_rather_than_signing_it(tmp_path, monkeypatch):
    """A new search signs every file of its folder, so whatever was there before (a planted
    state, say) is moved aside first, unloaded. Ray's start is stubbed: the folder is settled
    before it."""
    import ray

    class RayStarted(Exception):
        pass

    def start(*args, **kwargs):
        raise RayStarted

    storage, marker = tmp_path / "search", tmp_path / "marker"
    plant(storage / "simclr", marker)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", start)
    with pytest.raises(RayStarted):
        main(["tune", "smoke", "--fast", "--storage", str(storage)])
    (kept,) = storage.glob("simclr.replaced-*")
    assert (kept / "tuner.pkl").is_file() and not (storage / "simclr").exists()
    assert not marker.exists()
