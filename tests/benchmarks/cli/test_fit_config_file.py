"""``clusterbench fit -c FILE`` judges the file by its content, wherever it lies: a copied
``best_config.yaml`` or a config in LightningCLI's layout may name no class to build besides a
registered model and datamodule, no callbacks or plugins, no logger but on/off, no remote
checkpoint. Anything else is one line naming the key and what is accepted, exit 2, before
LightningCLI reads the file: nothing is built, printed by the file's code, or written.
The Trainer's and the dataset's settings are held to the ranges a suite's run is held to."""

from __future__ import annotations

import os

import pytest
import yaml

from benchmarks.cli import main

os.environ.setdefault("WANDB_MODE", "disabled")

TINY = {"model": {"class_path": "simclr", "init_args": {"backbone_width": 4}},
        "data": {"class_path": "digits", "init_args": {"limit_per_class": 10}},
        "trainer": {"max_epochs": 1, "accelerator": "cpu", "enable_progress_bar": False}}


def with_(path: str, value) -> dict:
    """TINY with ``value`` at the dotted ``path`` (``trainer.plugins``)."""
    config = yaml.safe_load(yaml.safe_dump(TINY))
    *parents, last = path.split(".")
    node = config
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return config


@pytest.mark.parametrize("config, message", [
    (with_("trainer.callbacks", [{"class_path": "lightning.pytorch.callbacks.LambdaCallback",
                                  "init_args": {"on_fit_start": "builtins.print"}}]),
     "trainer.callbacks is not accepted in a config file; accepted: null or []"),
    (with_("trainer.callbacks", [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                  "init_args": {"dirpath": "elsewhere"}}]),
     "trainer.callbacks is not accepted"),
    (with_("trainer.plugins", {"class_path": "os.system", "init_args": {"command": "true"}}),
     "trainer.plugins is not accepted in a config file"),
    (with_("model.class_path", "os.system"),
     "model.class_path 'os.system' is not a registered method; accepted: a registered name ("),
    (with_("data.class_path", "collections.OrderedDict"),
     "data.class_path 'collections.OrderedDict' is not a registered dataset"),
    (with_("trainer.logger", {"class_path": "lightning.pytorch.loggers.WandbLogger",
                              "init_args": {"project": "x", "save_dir": "elsewhere"}}),
     "trainer.logger is not accepted as"),
    (with_("trainer.profiler", {"class_path": "lightning.pytorch.profilers.SimpleProfiler",
                                "init_args": {"dirpath": "elsewhere"}}),
     "trainer.profiler names a class to build (class_path); accepted there: plain values"),
    (with_("model.init_args.backbone", {"class_path": "os.system"}),
     "model.init_args.backbone names a class to build"),
    (with_("ckpt_path", "https://example.org/planted.ckpt"),
     "ckpt_path must be a local checkpoint file, got 'https://example.org/planted.ckpt'"),
    (with_("weights_only", False), "weights_only must be null or true, got False"),
    (with_("subcommand", "fit"), "unknown top-level key 'subcommand'; accepted: "
     "seed_everything, trainer, model, data, ckpt_path, weights_only"),
])
def test_a_config_file_naming_code_is_one_line_exit_2_and_nothing_is_built(
        tmp_path, monkeypatch, capsys, config, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "copied.yaml").write_text(yaml.safe_dump(config))
    assert main(["fit", "-c", str(tmp_path / "copied.yaml")]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("clusterbench: error: "), err
    assert message in err[0], err[0]
    assert "copied.yaml" in err[0] and captured.out == ""  # builtins.print never ran
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "results").exists()


def test_a_search_best_config_with_a_key_it_never_writes_is_refused(tmp_path, monkeypatch,
                                                                    capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "best_config.yaml").write_text(yaml.safe_dump({
        "method": "simclr", "model": {"backbone_width": 4},
        "data": {"name": "digits", "limit_per_class": 10}, "trainer": {"max_epochs": 1},
        "metric": "online_val_acc", "ckpt_path": "https://example.org/planted.ckpt"}))
    assert main(["fit", "-c", str(tmp_path / "best_config.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown top-level key 'ckpt_path'" in err[0], err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("flags, message", [
    (["--trainer.gradient_clip_val", "1e300"],
     "--trainer.gradient_clip_val must be >= 0 and at most 1e+06, got 1e+300"),
    (["--trainer.accumulate_grad_batches", "1000000000"],
     "--trainer.accumulate_grad_batches must be an integer in [1, 10000], got 1000000000"),
    (["--trainer.limit_train_batches", "-1"],
     "--trainer.limit_train_batches must be an integer of at least 1 or a fraction in (0, 1]"),
    (["--data.num_workers", "1099511627776"],
     "num_workers must be an integer in [0, "),
    (["--data.n_views", "1000000000"], "n_views must be an integer in [1, 64], got 1000000000"),
    (["--model.temperature", "1e300"], "temperature must be > 0 and at most 1000, got 1e+300"),
])
def test_fit_holds_the_trainer_and_data_to_a_suites_ranges(tmp_path, monkeypatch, capsys,
                                                           flags, message):
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "--model", "simclr", "--data", "digits",
                 "--trainer.accelerator", "cpu", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("clusterbench: error: "), err
    assert message in err[0], err[0]
    assert not (tmp_path / "results").exists()
