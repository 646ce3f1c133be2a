"""A Trainer setting that names one of Lightning's choices (precision, max_time, strategy,
profiler, gradient clip algorithm, fast_dev_run, barebones) is one Lightning builds and a run
trains and is evaluated with, or it is refused in one line before anything trains: ``--set
trainer.precision=64`` trained, then failed in its linear probe (exit 1), and ``--set
trainer.max_time='{days: 99999999999}'`` overflowed as the run started."""

from __future__ import annotations

import os
import typing
import warnings
from datetime import timedelta

import lightning.pytorch as pl
import pytest
from bench_cli import bench
from lightning.fabric.connector import _PRECISION_INPUT
from tiny_suites import TINY_TRAINER, write_suite

from benchmarks.cli import main
from benchmarks.run.trainer_choices import PRECISIONS, check_trainer_choices, max_time_duration

os.environ.setdefault("WANDB_MODE", "disabled")

SIMCLR = [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}]


def lightning_precisions() -> set:
    """Every precision Lightning 2.6's Trainer takes, from its own type."""
    return {value for part in typing.get_args(_PRECISION_INPUT)
            for value in typing.get_args(part)}


def lightning_builds(**settings) -> pl.Trainer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 16-mixed on a CPU: Lightning says it runs bf16
        return pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False, **settings)


def refused(settings: dict) -> str:
    with pytest.raises(ValueError) as err:
        check_trainer_choices(settings)
    return str(err.value)


def test_each_accepted_precision_is_lightnings_and_keeps_the_weights_float32():
    assert set(PRECISIONS) <= lightning_precisions()
    for precision in PRECISIONS:
        check_trainer_choices({"precision": precision})
        trainer = lightning_builds(precision=precision)
        assert trainer.precision.endswith(("32-true", "-mixed")), precision


@pytest.mark.parametrize("precision", sorted(
    {64, "64", "64-true", "16-true", "bf16-true", "transformer-engine",
     "transformer-engine-float16", 8, "13", "16-bit", 32.0, True}, key=repr))
def test_a_precision_that_casts_the_weights_or_is_none_of_lightnings_is_refused(precision):
    message = refused({"precision": precision})
    assert message.startswith("precision must be one of 32, '32', '32-true'")
    assert "'bf16-mixed'" in message and message.endswith(f"got {precision!r}")
    assert "\n" not in message


def test_every_precision_lightning_takes_is_accepted_or_refused_by_the_weights_it_keeps():
    for precision in lightning_precisions():
        weights_cast = str(precision).startswith(("64", "16-true", "bf16-true", "transformer"))
        if weights_cast:
            refused({"precision": precision})
        else:
            check_trainer_choices({"precision": precision})


@pytest.mark.parametrize("max_time", [
    "00:12:00:00", " 1:00:00:00 ", "999999999:00:00:00", {"days": 1}, {"hours": 2, "minutes": -30},
    {"weeks": 1, "days": 2, "hours": 3, "minutes": 4, "seconds": 5, "milliseconds": 6,
     "microseconds": 7}, timedelta(minutes=5)])
def test_a_max_time_accepted_is_one_lightnings_timer_builds(max_time):
    duration = max_time_duration(max_time)
    assert duration > timedelta(0)
    check_trainer_choices({"max_time": max_time})
    (timer,) = [c for c in lightning_builds(max_time=max_time).callbacks
                if isinstance(c, pl.callbacks.Timer)]
    assert timer._duration == duration.total_seconds()


@pytest.mark.parametrize("max_time", [
    {"days": 99999999999}, "99999999999:00:00:00", {"weeks": 10**9}, "1000000000:00:00:00",
    "00:00:00:00", {"days": 0}, {"days": -1}, {"day": 1}, {"days": True}, {"days": 1.5},
    {"days": "1"}, "1:30", "01:00:00", "1 day", 3600, [1], timedelta(0)])
def test_a_max_time_lightning_cannot_build_or_that_stops_at_once_is_refused(max_time):
    message = refused({"max_time": max_time})
    assert message.startswith("max_time must be a positive duration: 'DD:HH:MM:SS' or a "
                              "mapping of weeks, days,")
    assert message.endswith(f"got {max_time!r}") and "\n" not in message


@pytest.mark.parametrize("settings, lightning_says", [
    ({"strategy": "dpp_spawn"}, "invalid strategy name"),
    ({"profiler": "simpel"}, "profiler"),
    ({"gradient_clip_algorithm": "nrom"}, "gradient_clip_algorithm"),
    ({"fast_dev_run": -1}, "fast_dev_run=-1"),
])
def test_a_name_lightning_refuses_at_the_start_of_a_run_is_refused_first(settings, lightning_says):
    with pytest.raises(Exception, match=lightning_says):
        lightning_builds(**settings)
    message = refused(settings)
    name, value = next(iter(settings.items()))
    assert message.startswith(f"{name} ") and repr(value) in message and "\n" not in message


@pytest.mark.parametrize("settings", [
    {"strategy": "auto"}, {"strategy": "DDP_spawn"}, {"profiler": "Simple"},
    {"gradient_clip_algorithm": "Norm"}, {"fast_dev_run": True}, {"fast_dev_run": 3},
    {"barebones": False}, {"precision": None, "max_time": None, "strategy": None}])
def test_a_choice_lightning_builds_is_accepted(settings):
    check_trainer_choices(settings)
    lightning_builds(**{k: v for k, v in settings.items() if v is not None})


def test_a_close_misspelling_is_named():
    assert "(did you mean 'ddp_spawn'?)" in refused({"strategy": "dpp_spawn"})
    assert "(did you mean 'simple'?)" in refused({"profiler": "Simpel"})


def test_barebones_is_refused_since_a_run_needs_its_logger_and_callbacks():
    assert refused({"barebones": True}).startswith("barebones must be false")


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("clusterbench: error: ")
    return lines[0]


@pytest.mark.parametrize("assignment, said", [
    ("trainer.precision=64", "--set trainer.precision must be one of 32, '32', '32-true', 16"),
    ("trainer.precision=bf16-true", "--set trainer.precision must be one of"),
    ("trainer.max_time={days: 99999999999}", "--set trainer.max_time must be a positive duration"),
    ("trainer.max_time=00:00:00:00", "--set trainer.max_time must be a positive duration"),
    ("trainer.strategy=foo", "--set trainer.strategy 'foo' is none of Lightning's"),
    ("trainer.fast_dev_run=-1", "--set trainer.fast_dev_run must be an integer of at least 0"),
])
def test_a_bad_choice_set_on_the_command_line_is_one_line_exit_2_and_nothing_trained(
        tmp_path, capsys, assignment, said):
    suite = write_suite(tmp_path / "tiny.yaml", SIMCLR)
    assert bench(suite, tmp_path / "results", "--set", assignment) == 2
    assert said in one_error_line(capsys)
    assert not list(tmp_path.rglob("result.json")) and not (tmp_path / "results").exists()


@pytest.mark.parametrize("setting, said", [
    ({"precision": 64}, "runs[0].trainer.precision must be one of 32"),
    ({"precision": "64-true"}, "runs[0].trainer.precision must be one of 32"),
    ({"max_time": {"days": 99999999999}}, "runs[0].trainer.max_time must be a positive duration"),
    ({"profiler": "foo"}, "runs[0].trainer.profiler 'foo' is none of Lightning's"),
])
def test_a_bad_choice_in_a_suite_file_is_one_line_naming_it_exit_2(tmp_path, capsys, setting,
                                                                    said):
    suite = write_suite(tmp_path / "tiny.yaml", SIMCLR, trainer={**TINY_TRAINER, **setting})
    assert bench(suite, tmp_path / "results") == 2
    line = one_error_line(capsys)
    assert said in line and str(suite) in line
    assert not list(tmp_path.rglob("result.json"))


def test_fit_refuses_a_precision_a_run_cannot_evaluate_with(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "--model", "simclr", "--data", "digits", "--trainer.accelerator", "cpu",
                 "--trainer.precision", "64"]) == 2
    assert "--trainer.precision must be one of 32" in one_error_line(capsys)
    assert not (tmp_path / "results").exists()


def test_the_checks_run_where_every_trainer_is_built(tmp_path):
    """``trainer_settings``, which every bench run, search trial and speed benchmark builds its
    Trainer from, checks the choices too: a caller that skipped the suite's checks is covered."""
    from benchmarks.run.spec import RunSpec
    from benchmarks.run.trainer import RunOptions, trainer_settings

    run = RunSpec(name="r", method="simclr", data={"name": "digits"},
                  trainer={"max_epochs": 1, "precision": "64-true"})
    with pytest.raises(Exception, match="run 'r': trainer.precision must be one of"):
        trainer_settings(run, RunOptions())
    assert trainer_settings(RunSpec(**{**run.__dict__, "trainer": {"max_epochs": 1}}),
                            RunOptions())["max_epochs"] == 1

