"""Whether a results page still says what the committed code gives: ``clusterbench report
--check``.

A page written by ``clusterbench report`` records, in a comment under its first line, what it was
made from (:func:`page_record`): its suite file and budget, the ``--set`` settings, each run's
configuration hash (or, for an experiment suite, a hash of its settings and seeds) and the
commit of the code that computed it. :func:`check_page` loads the suite file of this checkout
with the same budget and settings and compares the hashes (a run edited, added or removed makes
the page stale), and asks git whether the commit is one this checkout's history holds (results
computed with uncommitted code, or with a commit that was never merged, are no commit's). It
counts the files of code changed since that commit, which the page cannot be checked against
without training again, and says so.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.infra.environment import SOURCE_DIR
from benchmarks.infra.errors import ConfigError
from benchmarks.infra.read_back import parse_json

#: The line after the page's first: ``<!-- clusterbench report record: {JSON} -->``.
RECORD = re.compile(r"<!-- clusterbench report record: (\{.*\}) -->")
#: Where the code the results depend on lives (what a change since the page's commit may move).
CODE = ("modules", "datamodules", "benchmarks", "tune")


def settings_hash(settings: dict[str, Any], seeds: list[int]) -> str:
    """An experiment suite's settings and seeds as a short hash (its results' identity).

    >>> settings_hash({"n": 2}, [0]) == settings_hash({"n": 2}, [0]) != settings_hash({"n": 2}, [1])
    True
    """
    text = json.dumps({"settings": settings, "seeds": seeds}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def page_record(results: list[dict[str, Any]], suite_file: str) -> dict[str, Any]:
    """What a training suite's page was made from: its suite file (as the page names it), budget,
    ``--set`` settings, each run's configuration hash (its newest results') and the commit."""
    newest = sorted(results, key=lambda r: r.get("finished_at", ""))
    hashes = {r["run"]: r["config_hash"] for r in newest}
    config = newest[-1]["config"]
    return {"suite_file": suite_file, "budget": newest[-1]["budget"],
            "overrides": config.get("overrides") or {}, "runs": dict(sorted(hashes.items())),
            **commit_record(results)}


def experiment_record(result: dict[str, Any], suite_file: str) -> dict[str, Any]:
    """What an experiment suite's page was made from: its suite file, budget, the hash of its
    settings and seeds, and the commit."""
    return {"suite_file": suite_file, "budget": result["budget"],
            "settings": settings_hash(result["settings"], result["seeds"]),
            **commit_record([result])}


def commit_record(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The commit every result names (None where they name none or several) and whether any
    was computed in a checkout with local changes."""
    commits = {(r.get("git") or {}).get("commit") for r in results}
    return {"commit": commits.pop() if len(commits) == 1 else None,
            "dirty": any((r.get("git") or {}).get("dirty") for r in results)}


def record_line(record: dict[str, Any]) -> str:
    return f"<!-- clusterbench report record: {json.dumps(record, sort_keys=True)} -->"


def read_record(path: Path) -> dict[str, Any] | None:
    """The record a page carries, None for a page written before pages carried one."""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines()[:3]:
        found = RECORD.fullmatch(line.strip())
        if found:
            try:  # bounded: a page is a file anyone may have edited
                record = parse_json(found.group(1), f"the record line of {path}")
            except ValueError:
                return None
            return record if isinstance(record, dict) else None
    return None


def suite_problems(record: dict[str, Any], experiments: dict[str, Callable[..., Any]],
                   root: Path) -> list[str]:
    """Where the suite file of this checkout no longer gives what the page shows."""
    from benchmarks.run.identity import configuration_hash, resolved_config
    from benchmarks.suites.config import load_suite
    from benchmarks.suites.experiment import load_experiment_suite
    from benchmarks.suites.overrides import override_suite

    name = str(record.get("suite_file") or "")
    path = root / name
    if not name or not path.is_file():
        return [f"its suite file {name or '(none named)'} is not in this checkout"]
    budget = record.get("budget", "full")
    try:
        if "settings" in record:
            suite = load_experiment_suite(str(path), experiments, fast=budget == "fast")
            now = settings_hash(suite.settings, suite.seeds)
            return [] if now == record["settings"] else [
                f"{name}'s settings or seeds changed since (hash {now}, the page's "
                f"{record['settings']})"]
        suite = load_suite(str(path), budget=budget)
        if record.get("overrides"):
            suite = override_suite(suite, [f"{key}={json.dumps(value)}"
                                           for key, value in record["overrides"].items()])
    except ConfigError as err:
        return [f"{name} no longer loads with the page's budget and settings ({err})"]
    runs = {run.name: configuration_hash(resolved_config(suite.settings, run, 0))
            for run in suite.runs}
    shown = {run: digest for run, digest in (record.get("runs") or {}).items()
             if not run.endswith("+tuned")}  # the search's winner: checked through its run
    problems = [f"{run} is configured differently in {name} (configuration {runs[run]}, the "
                f"page's {digest})" for run, digest in shown.items()
                if run in runs and runs[run] != digest]
    problems += [f"{run} is no longer in {name}" for run in shown if run not in runs]
    problems += [f"{run} is in {name} but not on the page" for run in runs if run not in shown]
    return problems


def git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)


def commit_problems(record: dict[str, Any], root: Path) -> tuple[list[str], str | None]:
    """Whether the page's commit is one this checkout's history holds; with it, a note of how
    many files of code changed since (None where git cannot tell)."""
    commit = record.get("commit")
    if record.get("dirty"):
        return [f"its results were computed in a checkout with local changes (commit "
                f"{str(commit)[:10]}): no commit holds the code that made them"], None
    if not commit:
        return ["its results name no single commit"], None
    if git(root, "rev-parse", "--git-dir").returncode != 0:
        return [], "not a git checkout: its commit is not checked"
    if git(root, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        if git(root, "rev-parse", "--is-shallow-repository").stdout.strip() == "true":
            return [], f"commit {commit[:10]} is beyond this shallow clone's history: not checked"
        return [f"its commit {commit[:10]} is not in this repository's history"], None
    if git(root, "merge-base", "--is-ancestor", commit, "HEAD").returncode != 0:
        return [f"its commit {commit[:10]} is not an ancestor of this checkout's HEAD"], None
    changed = git(root, "diff", "--name-only", commit, "HEAD", "--", *CODE).stdout.split()
    code = [f for f in changed if f.endswith(".py")]
    return [], (f"{len(code)} file{'s' * (len(code) != 1)} of code changed since its commit "
                f"{commit[:10]}" if code else None)


def check_page(path: Path, experiments: dict[str, Callable[..., Any]],
               root: Path = SOURCE_DIR) -> tuple[list[str], list[str]]:
    """The page's problems (it is stale) and notes (what was not or cannot be checked)."""
    record = read_record(path)
    if record is None:
        return ["it records nothing of what it was made from (written before pages did): "
                "bench its suite and report it again"], []
    problems, note = commit_problems(record, root)
    return suite_problems(record, experiments, root) + problems, [note] if note else []


def report_pages(folder: Path) -> list[Path]:
    """The pages under ``folder`` that ``clusterbench report`` wrote (their first line says so)."""
    from benchmarks.suites.report import GENERATED

    return [page for page in sorted(folder.glob("*.md"))
            if page.read_text(encoding="utf-8", errors="replace").startswith(GENERATED)]
