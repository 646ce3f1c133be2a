"""A run's ``last.ckpt`` is resumed only when Lightning can resume from it: one that has
Lightning's keys and still fails Lightning (no version, no weights, another model's weights,
more epochs than the run has) is set aside as ``seed-<k>.unreadable-last.ckpt`` with one line,
and the run trains from the start instead of failing every later ``bench``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from bench_cli import bench
from tiny_suites import write_suite

from benchmarks.infra.tensor_files import BadFile
from benchmarks.run.checkpoint import resumable_checkpoint

RUNS = [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}]
SEED = "cut/runs/simclr/seed-0"


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> Path:
    """A results folder whose run was stopped after its training, before its evaluation: its
    attempt holds the ``config.yaml`` and the ``last.ckpt`` the bench wrote."""
    import benchmarks.run.one as one

    root = tmp_path_factory.mktemp("interrupted")

    def stopped(*args, **kwargs):
        raise SystemExit("stopped after the training")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(one, "evaluate_and_record", stopped)
        with pytest.raises(SystemExit):
            bench(write_suite(root / "cut.yaml", RUNS), root / "results")
    assert (root / "results" / f"{SEED}.attempt/checkpoints/last.ckpt").is_file()
    return root / "results"


def copied(interrupted: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The suite file and a copy of the interrupted results, for one test to change."""
    results = tmp_path / "results"
    shutil.copytree(interrupted, results)
    return write_suite(tmp_path / "cut.yaml", RUNS), results


def result(results: Path) -> dict:
    return json.loads((results / SEED / "result.json").read_text())


def test_the_checkpoint_a_run_wrote_is_resumed(interrupted, tmp_path, capsys):
    """What the check accepts: the run's own last.ckpt, resumed, with nothing said of it."""
    suite, results = copied(interrupted, tmp_path)
    capsys.readouterr()
    assert bench(suite, results) == 0
    assert result(results)["resumed_from_epoch"] == 0
    assert "last.ckpt" not in capsys.readouterr().err
    assert not list(results.rglob("*unreadable*"))


def no_version(saved: dict) -> None:
    del saved["pytorch-lightning_version"]


def no_weights(saved: dict) -> None:
    saved["state_dict"] = {}


def another_width(saved: dict) -> None:
    saved["state_dict"] = {k: torch.zeros(8, *v.shape[1:]) if k.startswith("backbone.")
                           and v.dim() else v for k, v in saved["state_dict"].items()}


def not_a_tensor(saved: dict) -> None:
    saved["state_dict"][next(iter(saved["state_dict"]))] = [1.0, 2.0]


def past_max_epochs(saved: dict) -> None:
    for counts in saved["loops"]["fit_loop"]["epoch_progress"].values():
        counts.update(ready=9, started=9, processed=9, completed=9)


def optimiser_of_names(saved: dict) -> None:
    saved["optimizer_states"][0]["param_groups"][0]["params"] = ["backbone"]


@pytest.mark.parametrize("edit, said", [
    (no_version, "pytorch-lightning_version is missing"),
    (no_weights, "its state_dict is empty"),
    (another_width, "its state_dict does not fit the model: backbone."),
    (not_a_tensor, "is a list, not a tensor"),
    (past_max_epochs, "9 epochs completed, more than the run's max_epochs 1"),
    (optimiser_of_names, "param_groups[0] has no list of parameter numbers"),
], ids=["no-version", "no-weights", "another-width", "not-a-tensor", "past-max-epochs",
        "optimiser"])
def test_a_last_ckpt_that_fails_lightnings_resume_is_set_aside_and_the_run_trains_again(
        interrupted, tmp_path, capsys, edit, said):
    """Each passed the resume check and then failed Lightning's restore at every later bench
    (a KeyError, a RuntimeError, a MisconfigurationException), the file never set aside."""
    suite, results = copied(interrupted, tmp_path)
    attempt = results / f"{SEED}.attempt"
    checkpoint = attempt / "checkpoints/last.ckpt"
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    edit(saved)
    torch.save(saved, checkpoint)
    capsys.readouterr()
    assert bench(suite, results) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "last.ckpt" in line]
    assert len(lines) == 1 and str(checkpoint) in lines[0] and said in lines[0], lines
    assert "seed-0.unreadable-last.ckpt" in lines[0]
    assert (results / "cut/runs/simclr/seed-0.unreadable-last.ckpt").is_file()
    trained = result(results)
    assert trained["status"] == "finished" and trained["resumed_from_epoch"] is None
    assert trained["epochs"] == 1


def test_a_compiled_models_checkpoint_fits_its_eager_model(interrupted, tmp_path):
    """On a GPU a run compiles its backbone, whose weights Lightning saves under
    ``backbone._orig_mod.``: the check compares them with the eager model's names, as the
    resumed run compiles it again."""
    from benchmarks.run.cache import resumed_model

    saved = torch.load(interrupted / f"{SEED}.attempt/checkpoints/last.ckpt",
                       map_location="cpu", weights_only=True)
    saved["state_dict"] = {k.replace("backbone.", "backbone._orig_mod."): v
                           for k, v in saved["state_dict"].items()}
    torch.save(saved, tmp_path / "last.ckpt")
    config = yaml.safe_load((interrupted / f"{SEED}.attempt/config.yaml").read_text())
    state, max_epochs = resumed_model(config)
    assert state is not None and max_epochs == 1
    assert all(t.is_meta for t in state.values())  # built without memory
    resumable_checkpoint(tmp_path / "last.ckpt", "checkpoint", state, max_epochs)
    saved["state_dict"].pop(next(iter(saved["state_dict"])))
    torch.save(saved, tmp_path / "last.ckpt")
    with pytest.raises(BadFile, match="the file has no such key"):
        resumable_checkpoint(tmp_path / "last.ckpt", "checkpoint", state, max_epochs)
