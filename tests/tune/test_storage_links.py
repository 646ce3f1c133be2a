"""No symbolic link below a search's folder is written through: ``bench`` and ``tune`` refuse
in one line (exit 2) before they write anything, wherever below the folder the link lies."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tiny_suites import TINY_EVALUATION, TINY_TRAINER

import benchmarks.suites.runner as runner
import tune.best
import tune.search
from benchmarks.cli import main
from benchmarks.infra.errors import ConfigError
from benchmarks.suites.config import load_suite


def write_suite(path: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "name": "linked", "seeds": [0], "data": {"name": "digits", "batch_size": 64},
        "trainer": TINY_TRAINER, "evaluation": TINY_EVALUATION,
        "runs": [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}],
        "search": {"space": {"model.lr": {"loguniform": [1e-4, 1e-2]}}, "num_samples": 2,
                   "max_epochs": 1},
    }))
    return path


def plant_link(link: Path, outside: Path, folder: bool) -> None:
    """A link at ``link`` to a folder (or a file) in ``outside``, with what it holds now."""
    target = outside / ("folder" if folder else "notes.txt")
    if folder:
        target.mkdir(parents=True)
    else:
        target.parent.mkdir(parents=True)
        target.write_text("mine")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): "link" if p.is_symlink() else p.stat().st_size
            for p in sorted(folder.rglob("*"))}


#: Links below a suite's ``search/`` folder: (where, whether the link is to a folder).
BENCH_LINKS = {"a trial's checkpoint": ("simclr/simclr/trials/0001/last.ckpt", False),
               "the trials folder": ("simclr/simclr/trials", True),
               "W&B's folder itself": ("simclr/wandb", True),
               "another run's search": ("byol/simclr", True)}


@pytest.mark.parametrize("case", list(BENCH_LINKS))
def test_bench_refuses_a_link_in_a_search_folder_before_training(tmp_path, capsys, monkeypatch,
                                                                  case: str) -> None:
    where, folder = BENCH_LINKS[case]
    results, outside = tmp_path / "results", tmp_path / "elsewhere"
    plant_link(results / "linked" / "search" / where, outside, folder)
    before, elsewhere = tree(results), tree(outside)
    trained = []
    monkeypatch.setattr(runner, "train_jobs", lambda runs, *a, **k: trained.append(runs))
    monkeypatch.setattr(tune.best, "run_search", lambda *a, **k: trained.append("search"))
    rc = main(["bench", str(write_suite(tmp_path / "linked.yaml")), "--results", str(results),
               "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and trained == []
    assert err.count("\n") == 1 and f"{where} is a symbolic link" in err
    assert tree(results) == before and tree(outside) == elsewhere


#: Links below a search's ``--storage``.
TUNE_LINKS = {"a trial's folder": ("simclr/trials/0003", True),
              "the state's manifest": ("simclr/search.json", False),
              "Ray's log": ("ray.log", False)}


@pytest.mark.parametrize("case", list(TUNE_LINKS))
def test_tune_resume_refuses_a_link_in_its_storage_before_writing(tmp_path, capsys, monkeypatch,
                                                                  case: str) -> None:
    where, folder = TUNE_LINKS[case]
    storage, outside = tmp_path / "storage", tmp_path / "elsewhere"
    plant_link(storage / where, outside, folder)
    before, elsewhere = tree(storage), tree(outside)
    searched = []
    monkeypatch.setattr(tune.search, "run_search", lambda *a, **k: searched.append(a))
    rc = main(["tune", str(write_suite(tmp_path / "linked.yaml")), "--storage", str(storage),
               "--resume"])
    err = capsys.readouterr().err
    assert rc == 2 and searched == []
    assert err.count("\n") == 1 and f"{where} is a symbolic link" in err
    assert tree(storage) == before and tree(outside) == elsewhere


def test_run_search_itself_refuses_a_link_below_its_storage(tmp_path) -> None:
    """The check is the search's own, whoever calls it."""
    suite = load_suite(str(write_suite(tmp_path / "linked.yaml")))
    storage = tmp_path / "storage"
    plant_link(storage / "simclr" / "trials" / "0000" / "record.json", tmp_path / "out", False)
    with pytest.raises(ConfigError, match="record.json is a symbolic link"):
        tune.search.run_search(suite.settings, suite.search, suite.run("simclr"),
                               storage=str(storage), resume=True)


def test_the_links_wandb_makes_in_its_own_folder_do_not_stop_a_search(tmp_path) -> None:
    """W&B links its latest run inside ``wandb/``; a search with ``--wandb`` resumes."""
    from tune.records import refuse_links

    run = tmp_path / "storage" / "wandb" / "run-20260101_000000-abc"
    run.mkdir(parents=True)
    (run.parent / "latest-run").symlink_to(run)
    refuse_links(tmp_path / "storage")
