"""Every YAML file clusterbench reads is bounded data: a suite file, a ``--set`` value, a
``fit -c`` config, and what a results folder holds (``best_config.yaml``, ``search.yaml``, a
run's ``config.yaml``). A YAML bomb, a nesting deeper than the stack, an anchor inside itself, a
file too large or a FIFO ends in one line naming it (exit 2), or the file is set aside with one
warning where the command can go on; nothing hangs and nothing expands."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml
from fifo import finishes
from tiny_suites import write_suite

from benchmarks.cli import main
from benchmarks.infra.errors import ConfigError
from benchmarks.infra.yaml_files import MAX_YAML_BYTES, load_yaml, read_yaml
from benchmarks.suites.config import load_suite

PIXELS = [{"name": "pixels", "method": "pixels"}]


def laughs(depth: int = 9) -> str:
    """A "billion laughs": ``depth`` anchors of ten aliases each, 10**depth strings expanded."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, depth)]
    return "\n".join(lines) + "\n"


def best_config_bomb(path: Path) -> Path:
    """A search's ``best_config.yaml`` whose model arguments hold a billion laughs (1.5 KB)."""
    path.write_text(laughs() + yaml.safe_dump({
        "method": "simclr", "data": {"name": "digits"}, "trainer": {"max_epochs": 1},
        "metric": "online_val_acc", "best_value": 0.5, "configurations_searched": 2,
        "trials_failed": 0}) + "model: {loss_kwargs: *a8}\n")
    assert len(path.read_bytes()) < 2048
    return path


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_billion_laughs_best_config_given_to_fit_is_one_line_and_exit_2(tmp_path, capsys):
    path = best_config_bomb(tmp_path / "best_config.yaml")
    start = time.monotonic()
    assert main(["fit", "-c", str(path), "--trainer.fast_dev_run", "true"]) == 2
    assert time.monotonic() - start < 10
    line = one_line(capsys)
    assert line.startswith("clusterbench: error:") and str(path) in line
    assert "anchor or alias" in line


def test_a_billion_laughs_best_config_is_refused_by_the_searchs_reader(tmp_path):
    from tune.outputs import read_best_config

    best_config_bomb(tmp_path / "best_config.yaml")
    with pytest.raises(ConfigError, match=r"best_config\.yaml: line 1: YAML anchor") as err:
        read_best_config(tmp_path)
    assert "\n" not in str(err.value) and "delete it to search again" in str(err.value)


def test_a_fifo_named_best_config_is_never_opened(tmp_path):
    from tune.outputs import read_best_config

    fifo = tmp_path / "best_config.yaml"
    os.mkfifo(fifo)
    raised: list[BaseException] = []

    def read() -> None:
        try:
            read_best_config(tmp_path)
        except ConfigError as err:
            raised.append(err)

    finishes(read, fifo)
    assert raised and "is not a regular file" in str(raised[0])


def test_a_fifo_given_to_fit_is_never_opened(tmp_path, capsys):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    codes: list[int] = []
    finishes(lambda: codes.append(main(["fit", "-c", str(fifo)])), fifo)
    assert codes == [2] and f"{fifo} is not a regular file" in one_line(capsys)


def test_a_5000_deep_set_value_is_one_line(tmp_path, capsys):
    suite = write_suite(tmp_path / "deep.yaml", PIXELS)
    value = "[" * 5000 + "]" * 5000
    assert main(["bench", str(suite), "--results", str(tmp_path / "results"),
                 "--set", f"trainer.max_epochs={value}"]) == 2
    line = one_line(capsys)
    assert "--set trainer.max_epochs" in line and "nested more than 64 levels" in line
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").rglob("*.json"))


def test_a_set_value_with_anchors_is_refused(tmp_path, capsys):
    suite = write_suite(tmp_path / "anchored.yaml", PIXELS)
    assert main(["bench", str(suite), "--results", str(tmp_path / "results"),
                 "--set", "trainer.limit_train_batches=&a [*a]"]) == 2
    assert "anchor or alias" in one_line(capsys)


@pytest.mark.parametrize("nested", ["[" * 5000 + "]" * 5000, "{a: " * 5000 + "1" + "}" * 5000])
def test_a_suite_file_nested_5000_deep_is_one_line(tmp_path, nested):
    path = tmp_path / "deep.yaml"
    path.write_text(f"name: deep\nseeds: [0]\nruns: {nested}\n")
    with pytest.raises(ConfigError, match="nested more than 64 levels") as err:
        load_suite(str(path))
    assert "\n" not in str(err.value)


def test_a_suite_file_whose_paper_refers_to_its_own_anchor_is_one_line(tmp_path, capsys):
    path = tmp_path / "cycle.yaml"
    write_suite(path, PIXELS)
    text = path.read_text().replace("name: pixels", "name: pixels\n  paper: &p {source: *p}")
    path.write_text(text)
    assert main(["bench", str(path), "--results", str(tmp_path / "results")]) == 2
    line = one_line(capsys)
    assert str(path) in line and "alias *p refers to the value it is inside" in line


def test_a_suite_file_keeps_its_shared_settings_and_yaml_12_floats(tmp_path):
    path = write_suite(tmp_path / "shared.yaml", [
        {"name": "a", "method": "simclr", "model": {"backbone_width": 4}},
        {"name": "b", "method": "simclr", "model": {"backbone_width": 4}}])
    text = path.read_text().replace("lr: 0.3", "lr: &lr 3e-1")
    path.write_text(text.replace("weight_decay: 1.0e-06", "weight_decay: 1e-6"))
    suite = load_suite(str(path))
    assert suite.evaluation["linear_probe"]["lr"] == 0.3
    assert suite.evaluation["linear_probe"]["weight_decay"] == 1e-6


def test_a_2mb_config_in_a_results_folder_is_refused_in_one_line(tmp_path, capsys):
    folder = tmp_path / "runs/pixels/seed-0"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("notes: " + "x" * (2 * MAX_YAML_BYTES) + "\n")
    suite = write_suite(tmp_path / "scored.yaml", PIXELS)
    assert main(["evaluate", str(folder), "--suite", str(suite),
                 "--results", str(tmp_path / "results")]) == 2
    line = one_line(capsys)
    assert f"{folder / 'config.yaml'} is larger than {MAX_YAML_BYTES} bytes" in line
    assert not list((tmp_path / "results").rglob("result.json"))


def test_a_2mb_config_of_an_unfinished_attempt_is_set_aside_in_one_line(tmp_path, capsys):
    from benchmarks.run.cache import resume_point

    attempt = tmp_path / "seed-0.attempt"
    (attempt / "checkpoints").mkdir(parents=True)
    (attempt / "config.yaml").write_text("notes: " + "x" * (2 * MAX_YAML_BYTES) + "\n")
    (attempt / "checkpoints/last.ckpt").write_bytes(b"")
    assert resume_point(attempt, {"seed": 0}) is None
    line = one_line(capsys)
    assert str(attempt / "config.yaml") in line and "seed-0.unreadable-config.yaml" in line
    assert (tmp_path / "seed-0.unreadable-config.yaml").stat().st_size > 2 * MAX_YAML_BYTES


def test_an_unreadable_search_record_is_not_reused_and_said_in_one_line(tmp_path, capsys):
    from tune.best import recorded_signature

    (tmp_path / "search.yaml").write_text(laughs())
    assert recorded_signature(tmp_path / "search.yaml") is None
    line = one_line(capsys)
    assert str(tmp_path / "search.yaml") in line and "is not reused" in line


def test_what_clusterbench_writes_reads_back_the_same(tmp_path):
    config = {"seed": 0, "run": {"name": "a", "model": {"lr": 1e-3, "tags": ["x", None]}},
              "budget": {"scheduler": "ASHA on signal (tune.asha)", "wall_seconds": 12.5}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    assert read_yaml(tmp_path / "config.yaml") == config
    assert load_yaml("lr: 1e-3", "--set model.lr") == {"lr": 0.001}


# --- YAML 1.2's core schema, and each key once ---------------------------------------------------

@pytest.mark.parametrize("text, value", [
    # YAML 1.1 (PyYAML) read these as 1000, True, False, True, False, 90, 5, a date and 8
    ("1_000", "1_000"), ("yes", "yes"), ("no", "no"), ("on", "on"), ("off", "off"),
    ("1:30", "1:30"), ("0b101", "0b101"), ("2024-01-01", "2024-01-01"), ("010", 10),
    # YAML 1.2's own: PyYAML read 0o10 and 1e3 as text
    ("0o10", 8), ("1e3", 1000.0), ("0x1F", 31), ("-12", -12), ("+3", 3), (".5", 0.5),
    ("1.", 1.0), ("-.inf", float("-inf")), ("TRUE", True), ("False", False), ("~", None),
    ("null", None), ("", None), ("y", "y"), ("=", "="), ("0o8", "0o8"), ("1.2.3", "1.2.3"),
])
def test_a_plain_value_is_read_as_yaml_12s_core_schema_reads_it(text, value):
    read = load_yaml(f"key: {text}", "f.yaml")["key"]
    assert read == value and type(read) is type(value)


@pytest.mark.parametrize("text", ["!!int 1_000", "!!int 0b1", "!!bool yes", "!!float 1_0.5"])
def test_an_explicit_tag_on_yaml_11_spelling_is_one_line(text):
    with pytest.raises(ConfigError, match="is not a YAML 1.2") as err:
        load_yaml(f"key: {text}", "f.yaml")
    assert str(err.value).startswith("f.yaml is not valid YAML") and "\n" not in str(err.value)


def test_a_nan_and_a_quoted_number_are_what_they_say():
    read = load_yaml("a: .NaN\nb: '1_000'\nc: \"12\"", "f.yaml")
    assert read["a"] != read["a"] and (read["b"], read["c"]) == ("1_000", "12")


def test_a_suite_file_giving_seeds_twice_is_one_line_naming_the_key_file_and_line(tmp_path,
                                                                                   capsys):
    path = write_suite(tmp_path / "twice.yaml", PIXELS)
    lines = path.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("seeds:")) + 1
    path.write_text(path.read_text() + "seeds: [0, 1, 2]\n")
    assert main(["bench", str(path), "--results", str(tmp_path / "results")]) == 2
    line = one_line(capsys)
    assert str(path) in line and "key 'seeds' given twice" in line
    assert f"line {len(lines) + 1}" in line and f"first on line {first}" in line
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("text, key", [
    ("runs:\n- name: a\n  method: simclr\n  model: {lr: 0.1, lr: 0.2}\n", "lr"),
    ("seeds: [0]\n'seeds': [1]\n", "seeds"),  # quoted or not, the same key
    ("x: {1: a, 0x1: b}\n", 1),  # the same integer, spelt twice
])
def test_a_key_given_twice_anywhere_is_refused(text, key):
    with pytest.raises(ConfigError, match=f"key {key!r} given twice") as err:
        load_yaml(text, "suite.yaml", anchors=True)
    assert str(err.value).startswith("suite.yaml: line ") and "\n" not in str(err.value)


def test_a_key_a_merge_brings_may_be_set_again():
    text = "x-base: &base {lr: 0.1, wd: 0.0}\nmodel: {<<: *base, lr: 0.2}\n"
    assert load_yaml(text, "suite.yaml", anchors=True)["model"] == {"lr": 0.2, "wd": 0.0}


def test_a_merged_mapping_that_overrode_a_key_it_merged_gives_its_own_value():
    """PyYAML 6.0.4 gave ``c`` the ``k`` of ``a``, which ``b`` had overridden."""
    nested = "a: &a {k: 1}\nb: &b {<<: *a, k: 2}\nc: {<<: *b, j: 3}\nd: *b\n"
    read = load_yaml(nested, "suite.yaml", anchors=True)
    assert read["c"] == {"k": 2, "j": 3} and read["d"] == {"k": 2}
    # of a list of merged mappings the first has its way, and the mapping's own keys over all
    listed = "a: &a {x: 1, y: 1}\nb: &b {y: 2, z: 2}\nc: {z: 3, <<: [*a, *b]}\n"
    assert load_yaml(listed, "suite.yaml", anchors=True)["c"] == {"x": 1, "y": 1, "z": 3}


@pytest.mark.parametrize("assignment, said", [
    ("trainer.max_epochs=1_000", "--set trainer.max_epochs must be int | None, got the text "
                                 "'1_000'"),
    ("trainer.enable_model_summary=off", "--set trainer.enable_model_summary must be bool | None, "
                                         "got the text 'off'"),
    ("trainer.max_time={days: 1, days: 2}", "--set trainer.max_time: line 1: key 'days' given "
                                            "twice"),
    ("model.temperature='0.5'", "--set model.temperature must be float, got the text '0.5'"),
])
def test_a_set_value_yaml_11_would_read_otherwise_is_one_line_exit_2(tmp_path, capsys,
                                                                     assignment, said):
    suite = write_suite(tmp_path / "tiny.yaml", [
        {"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}])
    assert main(["bench", str(suite), "--results", str(tmp_path / "results"),
                 "--set", assignment]) == 2
    assert said in one_line(capsys)
    assert not (tmp_path / "results").exists()


def test_a_set_value_in_yaml_12s_spelling_is_read_as_it(tmp_path):
    from benchmarks.suites.overrides import override_suite

    suite = load_suite(str(write_suite(tmp_path / "tiny.yaml", PIXELS)))
    set_ = override_suite(suite, ["data.batch_size=0x40", "trainer.max_epochs=010",
                                  "trainer.max_time=00:01:30:00"])
    assert set_.run("pixels").data["batch_size"] == 64
    assert set_.run("pixels").trainer["max_epochs"] == 10
    assert set_.run("pixels").trainer["max_time"] == "00:01:30:00"


def test_a_suite_files_yaml_11_spelling_is_one_line_naming_the_setting(tmp_path, capsys):
    path = write_suite(tmp_path / "old.yaml", PIXELS)
    path.write_text(path.read_text().replace("max_epochs: 1", "max_epochs: 1_000"))
    assert main(["bench", str(path), "--results", str(tmp_path / "results")]) == 2
    line = one_line(capsys)
    assert str(path) in line and "trainer.max_epochs must be int | None, got the text '1_000'" \
        in line


def typed(value):
    """``value`` with each scalar's type beside it: ``1 == 1.0 == True`` would hide a change."""
    if isinstance(value, dict):
        return {typed(k): typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, value)


def test_every_suite_file_means_the_same_in_yaml_11_and_12():
    """A suite file no reader could read otherwise: its settings do not depend on the YAML
    version of whoever reads it (PyYAML's YAML 1.1, or clusterbench's YAML 1.2)."""
    from benchmarks.suites.suite_file import suites

    for name, path in suites().items():
        assert typed(read_yaml(path, anchors=True)) == typed(
            yaml.safe_load(path.read_text())), name


@pytest.mark.parametrize("text", ["1e3", "0o17", "0x1F", "1_000", "010", "yes", "off", "1:30",
                                  "0b101", "2024-01-01", "True", "null", "~", "", ".inf",
                                  "-.5", "12", "<<"])
def test_what_clusterbench_writes_reads_back_the_same_in_yaml_1_2_and_1_1(text):
    """A run's config.yaml, a search's best_config.yaml and search.yaml are written by
    dump_yaml: a string that either YAML would read as a number, boolean, date or null is
    quoted, so the file reads back as written (PyYAML's own dumper wrote 1e3 plain, which YAML
    1.2 reads as 1000.0: the run's configuration would no longer match its own file)."""
    from benchmarks.infra.yaml_files import dump_yaml, load_yaml

    value = {"run": {"name": text, "model": {"lr": 1e-3, "tags": [text, 3]}}}
    written = dump_yaml(value)
    assert load_yaml(written, "config.yaml") == value
    assert yaml.safe_load(written) == value
