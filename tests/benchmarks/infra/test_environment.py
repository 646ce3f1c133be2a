"""The commit a result records is clusterbench's own, never that of a repository that merely
holds an installed copy of it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repository import ROOT

from benchmarks.infra.environment import SOURCE_DIR, git_commit, names_clusterbench

PYPROJECT = '[project]\nname = "{name}"\nversion = "0.1.0"\n'

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(directory: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
                           "-c", "commit.gpgsign=false", *args], cwd=directory, check=True,
                          capture_output=True, text=True).stdout.strip()


def repository(root: Path, name: str, package_dir: Path) -> str:
    """A git repository at ``root`` whose pyproject names ``name``, with clusterbench's
    environment module copied under ``package_dir``; returns its HEAD commit."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(PYPROJECT.format(name=name))
    infra = package_dir / "benchmarks" / "infra"
    infra.mkdir(parents=True)
    for package in (package_dir / "benchmarks", infra):
        (package / "__init__.py").write_text("")
    shutil.copy(ROOT / "benchmarks" / "infra" / "environment.py", infra / "environment.py")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "initial")
    return git(root, "rev-parse", "HEAD")


def recorded_git(package_dir: Path) -> dict | None:
    """What a result records as ``git`` (``git_commit()`` as the process loaded it) when
    clusterbench is imported from ``package_dir`` (a fresh interpreter, as an installed copy
    would be)."""
    env = {**os.environ, "PYTHONPATH": str(package_dir)}
    out = subprocess.run([sys.executable, "-c", "import json; from benchmarks.infra.environment "
                          "import git_commit, SOURCE_DIR; "
                          "print(json.dumps([str(SOURCE_DIR), git_commit()]))"],
                         cwd=package_dir, env=env, check=True, capture_output=True, text=True)
    source, recorded = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(source) == package_dir.resolve()  # the copy ran, not this checkout
    return recorded


def test_a_copy_installed_inside_another_repository_records_no_commit(tmp_path):
    site_packages = tmp_path / "project" / ".venv" / "lib" / "site-packages"
    repository(tmp_path / "project", "someone-elses-project", site_packages)
    assert git_commit(site_packages) is None
    assert recorded_git(site_packages) is None


def test_a_subfolder_of_a_clusterbench_checkout_is_not_the_checkout(tmp_path):
    # even a repository named clusterbench: the code ran from a copy in a subfolder
    vendored = tmp_path / "checkout" / "vendor"
    repository(tmp_path / "checkout", "clusterbench", vendored)
    assert git_commit(vendored) is None


def test_a_checkout_of_another_project_records_no_commit(tmp_path):
    repository(tmp_path / "other", "not-clusterbench", tmp_path / "other")
    assert git_commit(tmp_path / "other") is None


def test_clusterbench_own_checkout_records_its_commit_and_local_changes(tmp_path):
    checkout = tmp_path / "clusterbench"
    head = repository(checkout, "clusterbench", checkout)
    assert recorded_git(checkout) == {"commit": head, "dirty": False}
    (checkout / "benchmarks" / "__init__.py").write_text("# changed\n")
    assert git_commit(checkout) == {"commit": head, "dirty": True}


def test_not_a_git_checkout_records_no_commit(tmp_path):
    assert git_commit(tmp_path) is None


def test_this_checkout_is_clusterbench():
    assert SOURCE_DIR == ROOT
    assert names_clusterbench(ROOT / "pyproject.toml")


@pytest.mark.parametrize("text, expected", [
    ('[project]\nname = "clusterbench"\n', True),
    ("[project]\nname = 'clusterbench'  # the package\n", True),
    ('[project]\nname = "clusterbench-extras"\n', False),
    ('[tool.other]\nname = "clusterbench"\n[project]\nname = "x"\n', False),
    ("", False),
])
def test_names_clusterbench_reads_the_project_table(tmp_path, text, expected):
    (tmp_path / "pyproject.toml").write_text(text)
    assert names_clusterbench(tmp_path / "pyproject.toml") is expected


def test_a_result_records_the_commit_the_process_loaded_not_the_checkouts_later_one(
        monkeypatch):
    """A suite runs for an hour while the checkout moves on: every result it writes records the
    commit its code was imported from (once listed as eight commits in one leaderboard)."""
    import benchmarks.infra.environment as env

    loaded = env.LOADED_FROM
    monkeypatch.setattr(env, "git_commit", lambda *a, **k: {"commit": "later", "dirty": False})
    assert env.environment()["git"] == loaded != {"commit": "later", "dirty": False}
