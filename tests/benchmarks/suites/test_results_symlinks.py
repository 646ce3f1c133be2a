"""A symbolic link planted in a results folder (at a seed's ``seed-K.attempt``, ``seed-K``,
``seed-K.replaced``, its ``checkpoints/`` or a run folder above them) never makes ``bench`` write,
delete or rename anything outside it: the command stops in one line naming the link, exit 2,
before it touches anything. The ``--results`` folder itself may be a link."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from bench_cli import bench

SUITE = {
    "name": "links", "seeds": [0],
    "data": {"name": "digits", "batch_size": 32, "limit_per_class": 10},
    "trainer": {"max_epochs": 1, "accelerator": "cpu"},
    "evaluation": {"knn": {"k": [5], "temperature": None}},
    "runs": [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}],
}


def outside_folder(path: Path) -> Path:
    """A folder that is no part of the results: a checkpoint folder, a sentinel, and a
    ``result.json`` that makes it look like a complete attempt waiting to be renamed into place."""
    (path / "checkpoints").mkdir(parents=True)
    (path / "checkpoints/last.ckpt").write_bytes(b"not the run's")
    (path / "sentinel.txt").write_text("keep me")
    (path / "result.json").write_text("{}")
    return path


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every entry under ``folder``: a file's bytes, None for a folder."""
    return {p.relative_to(folder).as_posix(): None if p.is_dir() else p.read_bytes()
            for p in sorted(folder.rglob("*"))}


#: Where the link is planted, under ``<results>/links/runs``.
PLANTED = ["simclr/seed-0.attempt", "simclr/seed-0", "simclr/seed-0.replaced",
           "simclr/seed-0.attempt/checkpoints", "simclr"]


@pytest.mark.parametrize("planted", PLANTED)
def test_a_planted_link_is_refused_and_nothing_outside_changes(planted, tmp_path, capsys):
    suite = tmp_path / "links.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    results, outside = tmp_path / "results", outside_folder(tmp_path / "outside")
    link = results / "links/runs" / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    before = snapshot(outside)

    assert bench(suite, results) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert str(link) in err[0] and "symbolic link" in err[0]
    assert snapshot(outside) == before  # sentinel and checkpoints kept, nothing new
    seed = results / "links/runs/simclr/seed-0"
    assert planted == "simclr/seed-0" or not seed.is_symlink()
    assert link.is_symlink()  # not renamed into place, not removed


def test_a_link_to_a_folder_inside_the_results_is_refused_too(tmp_path, capsys):
    suite = tmp_path / "links.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    results = tmp_path / "results"
    (results / "elsewhere").mkdir(parents=True)
    link = results / "links/runs/simclr/seed-0.attempt"
    link.parent.mkdir(parents=True)
    link.symlink_to(results / "elsewhere", target_is_directory=True)
    assert bench(suite, results) == 2
    assert str(link) in capsys.readouterr().err
    assert list((results / "elsewhere").iterdir()) == []


def test_the_results_folder_itself_may_be_a_link(tmp_path):
    suite = tmp_path / "links.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    (tmp_path / "real").mkdir()
    (tmp_path / "results").symlink_to(tmp_path / "real", target_is_directory=True)
    assert bench(suite, tmp_path / "results") == 0
    assert (tmp_path / "real/links/runs/simclr/seed-0/result.json").is_file()


@pytest.mark.parametrize("name", [".clusterbench.lock", ".clusterbench.lock.owner"])
def test_a_linked_lock_file_is_refused_and_its_target_kept(name, tmp_path, capsys):
    """Taking the folder's lock opens its file with truncation and writes the owner note: a
    link there would empty or overwrite the file it leads to."""
    suite = tmp_path / "links.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    results, target = tmp_path / "results", tmp_path / "precious.txt"
    target.write_text("keep me")
    (results / "links").mkdir(parents=True)
    (results / "links" / name).symlink_to(target)
    assert bench(suite, results) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and name in err[0] and "symbolic link" in err[0], err
    assert target.read_text() == "keep me"
    assert not (results / "links/runs").exists()
