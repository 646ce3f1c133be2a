"""``bench`` reads a seed's ``result.json`` as every command does (``read_result``): one that is
not a result (a list, JSON nested 100,000 deep, bytes that are not UTF-8, a field null or of the
wrong type) is no finished run. It is kept aside as ``seed-K.unreadable-result.json`` with one
warning line naming the file and the field, and the run is done again, instead of failing that
run on every later ``bench``; nothing outside the results folder is touched."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from bench_cli import bench
from fifo import finishes
from tiny_suites import write_suite

from benchmarks.run.result_schema import read_result

#: What is written over a finished seed's result.json (a function of the result's text), and
#: what the warning says of it.
DAMAGE = {
    "a list": (lambda text: "[]", "not a mapping"),
    "JSON nested 100,000 deep": (lambda text: "[" * 100_000 + "]" * 100_000,
                                 "nests deeper than 64 levels"),
    "bytes that are not UTF-8": (lambda text: text.replace('"pixels"', '"pix\udcffels"', 1),
                                 "can't decode byte 0xff"),
    "finished_at null": (lambda text: edited(text, finished_at=None), "'finished_at' is null"),
    "git.commit null": (lambda text: edited(text, git={"commit": None, "dirty": False}),
                        "'git.commit' is null"),
    "a metric of 400 digits": (lambda text: edited(text, metrics={"knn5_top1": 10**400}),
                               "'metrics' 'knn5_top1' is"),
    # 1e400 is JSON, and Python reads it as an infinite float
    "a train time beyond a float": (lambda text: text.replace(
        '"train_seconds": ', '"train_seconds": 1e400, "was": ', 1), "'train_seconds' is inf"),
}


def edited(text: str, **fields) -> str:
    return json.dumps({**json.loads(text), **fields})


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, Path]:
    """A suite of one run that trains nothing (raw pixels, a kNN), benched once: (its suite
    file, its results folder), copied by each test."""
    root = tmp_path_factory.mktemp("finished")
    suite = write_suite(root / "pix.yaml", [{"name": "pixels", "method": "pixels"}],
                        evaluation={"knn": {"k": [5], "temperature": None}})
    assert bench(suite, root / "results") == 0
    return suite, root / "results"


def damaged_copy(finished: tuple[Path, Path], tmp_path: Path, damage) -> tuple[Path, Path]:
    """The finished results copied into ``tmp_path``, the seed's result.json rewritten by
    ``damage``; returns (suite file, results folder)."""
    suite, results = finished
    copy = tmp_path / "results"
    shutil.copytree(results, copy, symlinks=True)
    shutil.copy(suite, tmp_path / suite.name)
    path = copy / "pix/runs/pixels/seed-0/result.json"
    text = damage(path.read_text())
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    return tmp_path / suite.name, copy


def warnings(err: str) -> list[str]:
    assert "Traceback" not in err
    return [line for line in err.splitlines() if "warning" in line]


def everything_but(folder: Path, root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*")
            if p.is_file() and folder not in p.parents}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_result_is_set_aside_in_one_line_and_the_run_done_again(
        finished, tmp_path, capsys, case) -> None:
    damage, said = DAMAGE[case]
    suite, results = damaged_copy(finished, tmp_path, damage)
    seed = results / "pix/runs/pixels/seed-0"
    damaged = (seed / "result.json").read_bytes()
    outside = everything_but(results, tmp_path)
    capsys.readouterr()

    assert bench(suite, results) == 0
    (line,) = warnings(capsys.readouterr().err)
    assert f"{seed / 'result.json'} cannot be read as a result" in line and said in line
    assert read_result(seed / "result.json")["metrics"]["knn5_top1"] > 0.5  # done again
    assert (seed.with_name("seed-0.unreadable-result.json")).read_bytes() == damaged
    assert everything_but(results, tmp_path) == outside

    assert bench(suite, results) == 0  # and reused from then on: nothing more to say
    assert warnings(capsys.readouterr().err) == []


def test_rerun_changed_sets_aside_a_configuration_hash_that_is_no_hash(finished, tmp_path,
                                                                       capsys) -> None:
    suite, results = damaged_copy(finished, tmp_path,
                                  lambda text: edited(text, config_hash=[]))
    capsys.readouterr()
    assert bench(suite, results, "--rerun-changed") == 0
    (line,) = warnings(capsys.readouterr().err)
    assert "'config_hash' is []" in line
    assert read_result(results / "pix/runs/pixels/seed-0/result.json")["config_hash"]


def test_a_fifo_for_a_result_is_set_aside_without_being_opened(finished, tmp_path,
                                                               capsys) -> None:
    suite, results = damaged_copy(finished, tmp_path, lambda text: text)
    path = results / "pix/runs/pixels/seed-0/result.json"
    path.unlink()
    os.mkfifo(path)  # opening it to read would wait for a writer for ever
    capsys.readouterr()
    codes = []
    finishes(lambda: codes.append(bench(suite, results)), path, "bench", seconds=300)
    assert codes == [0]
    (line,) = warnings(capsys.readouterr().err)
    assert "is not a regular file" in line
    assert path.parent.with_name("seed-0.unreadable-result.json").is_fifo()
    assert read_result(path)["run"] == "pixels"


def test_an_attempt_whose_result_is_no_result_is_not_put_in_place(finished, tmp_path,
                                                                  capsys) -> None:
    """A leftover ``seed-0.attempt`` whose result.json is nested 100,000 deep: read by the one
    reader, it is no finished attempt (one line), and the finished seed is reused."""
    suite, results = damaged_copy(finished, tmp_path, lambda text: text)
    seed = results / "pix/runs/pixels/seed-0"
    before = (seed / "result.json").read_bytes()
    attempt = seed.with_name("seed-0.attempt")
    attempt.mkdir()
    (attempt / "result.json").write_text("[" * 100_000 + "]" * 100_000)
    capsys.readouterr()
    assert bench(suite, results) == 0
    (line,) = warnings(capsys.readouterr().err)
    assert f"{attempt} is not put in place" in line and "nests deeper than 64" in line
    assert (seed / "result.json").read_bytes() == before
