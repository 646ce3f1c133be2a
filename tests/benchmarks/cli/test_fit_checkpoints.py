"""``--ckpt_path`` of ``fit``, ``validate`` and ``test`` (and a ``-c`` file's ``ckpt_path``) is
held to what ``evaluate`` and a resumed bench run hold a checkpoint to, before LightningCLI or
Lightning opens it: a FIFO, a device, a pickle or a file Lightning would fail on half-way is one
line naming it, exit 2, and a refused run leaves no log folder behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import yaml
from fifo import finishes
from planted import Payload

from benchmarks.cli import main

os.environ.setdefault("WANDB_MODE", "disabled")

MODEL = ["--model", "simclr", "--data", "digits", "--model.backbone_width", "4",
         "--data.limit_per_class", "10"]
TINY = [*MODEL, "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false", "--trainer.max_epochs", "1"]
#: What every refusal says it accepts.
ACCEPTED = "accepted: a"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> Path:
    """A checkpoint ``clusterbench fit`` wrote (one epoch of one batch)."""
    folder = tmp_path_factory.mktemp("fitted")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        assert main(["fit", *TINY]) == 0
    (checkpoint,) = folder.glob("results/fit/lightning_logs/version_0/checkpoints/*.ckpt")
    return checkpoint


def edited(fitted: Path, to: Path, edit) -> Path:
    """``fitted`` as ``edit`` leaves it, saved at ``to``."""
    saved = torch.load(fitted, map_location="cpu", weights_only=True)
    edit(saved)
    torch.save(saved, to)
    return to


def refused(capsys, tmp_path: Path, *argv: str) -> str:
    """The one line a refused command says; nothing was left in ``tmp_path/results``."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert not (tmp_path / "results").exists(), sorted((tmp_path / "results").rglob("*"))
    return err[0]


@pytest.mark.parametrize("subcommand", ["fit", "validate", "test"])
def test_a_fifo_as_ckpt_path_is_one_line_never_waited_on(tmp_path, monkeypatch, capsys,
                                                         subcommand):
    monkeypatch.chdir(tmp_path)
    fifo = tmp_path / "planted.ckpt"
    os.mkfifo(fifo)
    lines: list[str] = []
    finishes(lambda: lines.append(refused(capsys, tmp_path, subcommand, *TINY,
                                          "--ckpt_path", str(fifo))),
             fifo, f"clusterbench {subcommand}", seconds=120)
    assert lines and lines[0].startswith(f"clusterbench: error: ckpt_path {fifo} is a FIFO")
    assert ACCEPTED in lines[0]


def test_a_fifo_as_a_config_files_ckpt_path_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    fifo = tmp_path / "planted.ckpt"
    os.mkfifo(fifo)
    (tmp_path / "fit.yaml").write_text(yaml.safe_dump({
        "model": {"class_path": "simclr", "init_args": {"backbone_width": 4}},
        "data": {"class_path": "digits", "init_args": {"limit_per_class": 10}},
        "trainer": {"accelerator": "cpu", "max_epochs": 1}, "ckpt_path": str(fifo)}))
    lines: list[str] = []
    finishes(lambda: lines.append(refused(capsys, tmp_path, "fit", "-c", "fit.yaml")),
             fifo, "clusterbench fit -c", seconds=120)
    assert lines and f"ckpt_path {fifo} is a FIFO" in lines[0]


@pytest.mark.parametrize("subcommand", ["validate", "fit"])
def test_dev_zero_as_ckpt_path_is_one_line(tmp_path, monkeypatch, capsys, subcommand):
    monkeypatch.chdir(tmp_path)
    line = refused(capsys, tmp_path, subcommand, *TINY, "--ckpt_path", "/dev/zero")
    assert "ckpt_path /dev/zero is a device or socket, not a regular file" in line
    assert ACCEPTED in line


@pytest.mark.parametrize("subcommand", ["fit", "validate"])
def test_a_pickle_checkpoint_never_runs_and_is_one_line(tmp_path, monkeypatch, capsys,
                                                        subcommand):
    """Lightning's own keys beside a payload: LightningCLI read it for its hyperparameters and
    Lightning to restore it, each ending in torch's traceback; now neither opens it."""
    monkeypatch.chdir(tmp_path)
    marker, checkpoint = tmp_path / "payload-ran", tmp_path / "planted.ckpt"
    torch.save({"epoch": 0, "global_step": 1, "pytorch-lightning_version": "2.6.0",
                "state_dict": {"w": torch.ones(1)}, "hyper_parameters": {"x": Payload(marker)}},
               checkpoint)
    torch.load(checkpoint, weights_only=False)
    assert marker.exists()  # the plant is live ...
    marker.unlink()
    line = refused(capsys, tmp_path, subcommand, *TINY, "--ckpt_path", str(checkpoint))
    assert not marker.exists()  # ... and never ran
    assert f"ckpt_path {checkpoint} holds objects other than tensors" in line


def no_version(saved: dict) -> None:
    del saved["pytorch-lightning_version"]


def no_weights(saved: dict) -> None:
    saved["state_dict"] = {}


def other_weights(saved: dict) -> None:
    saved["state_dict"] = {k.replace("backbone.", "encoder."): v
                           for k, v in saved["state_dict"].items()}


def lacks_a_tensor(saved: dict) -> None:
    del saved["state_dict"]["backbone.features.0.weight"]


def no_schedulers(saved: dict) -> None:
    del saved["lr_schedulers"]


def no_validate_loop(saved: dict) -> None:
    del saved["loops"]["validate_loop"]


def an_unregistered_class(saved: dict) -> None:
    saved["hyper_parameters"]["_class_path"] = "os.system"


@pytest.mark.parametrize("subcommand, edit, said", [
    ("validate", no_version, "pytorch-lightning_version is missing"),
    ("fit", no_version, "pytorch-lightning_version is missing"),
    ("validate", no_weights, "its state_dict is empty"),
    ("fit", no_weights, "its state_dict is empty"),
    ("validate", other_weights, "its state_dict does not fit the model: backbone."),
    ("test", lacks_a_tensor, "backbone.features.0.weight: the model has (4, 1, 3, 3), the file "
                             "has no such key"),
    ("fit", no_schedulers, "has no 'lr_schedulers', which Lightning resumes from"),
    ("validate", no_validate_loop, "loops has no validate_loop mapping"),
    ("fit", an_unregistered_class, "model.class_path 'os.system' is not a registered method"),
], ids=["validate-no-version", "fit-no-version", "validate-no-weights", "fit-no-weights",
        "other-model", "a-tensor-missing", "no-schedulers", "no-validate-loop", "os.system"])
def test_a_checkpoint_lightning_would_fail_on_is_one_line_before_anything_runs(
        tmp_path, monkeypatch, capsys, fitted, subcommand, edit, said):
    """A checkpoint of Lightning's layout with a key missing or weights of another model: a
    KeyError or a RuntimeError traceback (exit 1), and an empty log folder, before."""
    monkeypatch.chdir(tmp_path)
    checkpoint = edited(fitted, tmp_path / "edited.ckpt", edit)
    line = refused(capsys, tmp_path, subcommand, *TINY, "--ckpt_path", str(checkpoint))
    assert f"ckpt_path {checkpoint}" in line and said in line, line


def test_a_checkpoint_past_max_epochs_is_one_line(tmp_path, monkeypatch, capsys, fitted):
    """Lightning refuses to resume more epochs than max_epochs, after the log folder is made."""
    monkeypatch.chdir(tmp_path)
    args = [a for a in TINY if a not in ("--trainer.max_epochs", "1")]

    def five_epochs(saved: dict) -> None:
        for counts in saved["loops"]["fit_loop"]["epoch_progress"].values():
            counts.update(ready=5, started=5, processed=5, completed=5)

    checkpoint = edited(fitted, tmp_path / "late.ckpt", five_epochs)
    line = refused(capsys, tmp_path, "fit", *args, "--trainer.max_epochs", "3",
                   "--ckpt_path", str(checkpoint))
    assert "5 epochs completed, more than the run's max_epochs 3" in line


def test_a_refused_fit_leaves_no_log_folder_and_keeps_earlier_ones(tmp_path, monkeypatch,
                                                                    capsys):
    """A fit refused after Lightning made its log folder (its data is missing) left an empty
    version_N there; an earlier fit's folder beside it is kept."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CLUSTERBENCH_DATA", str(tmp_path / "no-data"))
    args = ["--model", "simclr", "--data", "cifar10", "--trainer.accelerator", "cpu"]
    assert main(["fit", *args]) == 2
    assert "CIFAR-10 not found" in capsys.readouterr().err
    assert not (tmp_path / "results").exists(), sorted((tmp_path / "results").rglob("*"))
    earlier = tmp_path / "results/fit/lightning_logs/version_0"
    earlier.mkdir(parents=True)
    (earlier / "config.yaml").write_text("seed_everything: 0\n")
    assert main(["fit", *args]) == 2
    assert sorted(p.name for p in earlier.parent.iterdir()) == ["version_0"]
    assert (earlier / "config.yaml").is_file()


def test_a_fitted_checkpoint_still_resumes_and_scores(tmp_path, monkeypatch, capsys, fitted):
    """What the checks accept: a checkpoint ``fit`` wrote, named through a link too."""
    monkeypatch.chdir(tmp_path)
    link = tmp_path / "best.ckpt"
    link.symlink_to(fitted)
    assert main(["validate", *TINY, "--ckpt_path", str(link)]) == 0
    assert "online_val_acc" in capsys.readouterr().out
    args = [a for a in TINY if a not in ("--trainer.max_epochs", "1")]
    assert main(["fit", *args, "--trainer.max_epochs", "2", "--ckpt_path", str(fitted)]) == 0
    (resumed,) = tmp_path.glob("results/fit/lightning_logs/version_1/checkpoints/*.ckpt")
    assert torch.load(resumed, weights_only=True)["epoch"] == 1
