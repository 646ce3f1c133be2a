"""``clusterbench fit``, ``validate`` and ``test`` (LightningCLI): resuming, the configs it reads
(its own, from before the methods moved, a search's best configuration) and registered names."""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

import pytest
import torch
import yaml

from benchmarks.cli import main
from benchmarks.cli.fit import class_path
from benchmarks.infra.errors import ConfigError

os.environ.setdefault("WANDB_MODE", "disabled")

TINY = ["--model.backbone_width", "4", "--data.limit_per_class", "10",
        "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false", "--trainer.log_every_n_steps", "1"]
LOGS = Path("results/fit/lightning_logs")


def fit(*args: str) -> int:
    return main(["fit", "--model", "simclr", "--data", "digits", *TINY, *args])


def checkpoint(version: int) -> Path:
    (path,) = (LOGS / f"version_{version}/checkpoints").glob("*.ckpt")
    return path


def test_fit_ckpt_path_resumes_where_the_checkpoint_ended(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert fit("--trainer.max_epochs", "1") == 0
    assert fit("--trainer.max_epochs", "2", "--ckpt_path", str(checkpoint(0))) == 0
    # one batch an epoch: the resumed fit trained epoch 1 alone, on from step 1
    rows = list(csv.DictReader((LOGS / "version_1/metrics.csv").open()))
    assert rows and {int(r["epoch"]) for r in rows} == {1}
    saved = torch.load(checkpoint(1), map_location="cpu", weights_only=True)
    assert (saved["epoch"], saved["global_step"]) == (1, 2)


def test_validate_and_test_score_a_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert fit("--trainer.max_epochs", "1") == 0
    capsys.readouterr()
    assert main(["validate", "-c", str(LOGS / "version_0/config.yaml"),
                 "--ckpt_path", str(checkpoint(0))]) == 0
    assert "online_val_acc" in capsys.readouterr().out
    assert main(["test", "-c", str(LOGS / "version_0/config.yaml"),
                 "--ckpt_path", str(checkpoint(0))]) == 0
    assert "online_test_acc" in capsys.readouterr().out


def test_fit_reads_a_config_written_before_the_methods_moved(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "old.yaml").write_text(yaml.safe_dump({
        "seed_everything": 0,
        "model": {"class_path": "modules.simclr.SimCLR",
                  "init_args": {"temperature": 0.3, "backbone_width": 4}},
        "data": {"class_path": "datamodules.DigitsDataModule",
                 "init_args": {"limit_per_class": 10}},
        "trainer": {"max_epochs": 1, "accelerator": "cpu", "enable_progress_bar": False}}))
    assert main(["fit", "-c", str(tmp_path / "old.yaml")]) == 0
    config = yaml.safe_load((LOGS / "version_0/config.yaml").read_text())
    assert config["model"]["class_path"] == "modules.methods.simclr.SimCLR"
    assert config["model"]["init_args"]["temperature"] == 0.3


def test_fit_reads_a_search_best_config(tmp_path, monkeypatch):
    """What :func:`tune.outputs.write_search_outputs` writes: the run's sections, the dataset as
    ``data.name``, and the search's record beside them."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "best_config.yaml").write_text(yaml.safe_dump({
        "suite": "smoke", "run": "simclr", "method": "simclr",
        "model": {"backbone_width": 4, "temperature": 0.07, "lr": 3.0e-4},
        "data": {"name": "digits", "batch_size": 32, "limit_per_class": 10},
        "trainer": {"max_epochs": 1, "accelerator": "cpu", "log_every_n_steps": 1},
        "metric": "online_val_acc", "mode": "max", "best_value": 0.5, "trial_id": "a1",
        "configurations_searched": 2, "trials_failed": 0,
        "budget": {"scheduler": "ASHA", "num_samples": 2}, "machine": "2-core CPU"}))
    assert main(["fit", "-c", str(tmp_path / "best_config.yaml"),
                 "--trainer.enable_progress_bar", "false"]) == 0
    config = yaml.safe_load((LOGS / "version_0/config.yaml").read_text())
    assert config["model"]["class_path"] == "modules.methods.simclr.SimCLR"
    assert config["model"]["init_args"]["lr"] == 3.0e-4
    assert config["data"]["class_path"] == "datamodules.digits.DigitsDataModule"
    assert config["data"]["init_args"]["batch_size"] == 32
    assert config["trainer"]["max_epochs"] == 1


@pytest.mark.parametrize("section, given, expected", [
    ("model", "simclr", "modules.methods.simclr.SimCLR"),
    ("model", "modules.simclr.SimCLR", "modules.methods.simclr.SimCLR"),
    ("model", "modules.tensorized.tae.TensorizedAutoencoder",
     "modules.methods.tensorized.tae.TensorizedAutoencoder"),
    ("model", "modules.methods.moco.MoCo", "modules.methods.moco.MoCo"),
    ("model", "os.system", "os.system"),  # LightningCLI refuses it: not a LightningModule
    ("data", "digits", "datamodules.digits.DigitsDataModule"),
])
def test_class_path_translates_registered_names_and_earlier_paths(section, given, expected):
    assert class_path(section, given) == expected


def test_an_unknown_earlier_path_names_the_registered_methods():
    with pytest.raises(ConfigError, match="unknown method class 'modules.simclr.SimCLRR'; "
                       "accepted: a registered name .*simclr"):
        class_path("model", "modules.simclr.SimCLRR")


def test_model_help_takes_a_registered_name(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--model.help", "simclr"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--model.temperature" in out and "--model.init_args.temperature" not in out


@pytest.mark.parametrize("section, values, message", [
    ("model", {"temprature": 0.3}, "unknown key 'temprature' in --model.* (SimCLR) (did you "
     "mean 'temperature'?)"),
    ("trainer", {"max_epoch": 3}, "unknown key 'max_epoch' in --trainer.* (did you mean "
     "'max_epochs'?)"),
])
def test_a_misspelled_key_in_a_config_file_is_one_line_exit_2(section, values, message,
                                                               tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    config = {"model": {"class_path": "simclr"}, "data": {"class_path": "digits"}}
    if section == "model":
        config["model"]["init_args"] = values
    else:
        config[section] = values
    (tmp_path / "typo.yaml").write_text(yaml.safe_dump(config))
    assert main(["fit", "-c", str(tmp_path / "typo.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("trainer, message", [
    ({"callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                     "init_args": {"dirpath": "elsewhere"}}]},
     "trainer.callbacks[0] names a class to build (class_path)"),
    ({"default_root_dir": "elsewhere"}, "trainer.default_root_dir is not a Trainer setting"),
    ({"max_epochs": 1, "plugins": {"class_path": "os.system", "init_args": {"x": 1}}},
     "trainer.plugins names a class to build"),
])
def test_a_search_best_config_is_read_as_values_never_as_code(tmp_path, monkeypatch, capsys,
                                                               trainer, message):
    """A best_config.yaml lies in a results folder: a planted callback, plugin or folder in its
    trainer section is refused in one line (exit 2) before anything is built or written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "best_config.yaml").write_text(yaml.safe_dump({
        "method": "simclr", "model": {"backbone_width": 4},
        "data": {"name": "digits", "limit_per_class": 10}, "trainer": trainer,
        "metric": "online_val_acc", "best_value": 0.5, "configurations_searched": 2,
        "trials_failed": 0}))
    assert main(["fit", "-c", str(tmp_path / "best_config.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "results").exists()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_fit_on_a_gpu_that_is_not_there_is_one_line_and_no_log_folder(tmp_path, monkeypatch,
                                                                      capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "--model", "simclr", "--data", "digits",
                 "--trainer.accelerator", "gpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["clusterbench: error: --trainer.accelerator 'gpu' is not available on this "
                   "machine; accepted here: cpu, auto"]
    assert not (tmp_path / "results").exists()  # the next fit's version_0 stays free


def test_a_methods_help_is_plain_text(capsys):
    """``--model.help NAME`` prints the method's arguments from its docstring, without reST."""
    with pytest.raises(SystemExit) as exited:
        main(["fit", "--model.help", "moco"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "--model.loss LOSS" in out and "a name of modules.losses.CONTRASTIVE_LOSSES" in out
    assert not re.search(r":[a-z]+:`|``", out), out
