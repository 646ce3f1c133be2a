"""The search's life has one home, ``tune/``: the suite runner only places jobs and counts them,
and neither side reaches into the other's private names."""

from __future__ import annotations

import ast

import pytest
from repository import ROOT

RUNNER = ROOT / "benchmarks" / "suites" / "runner.py"
SEARCHED = ROOT / "benchmarks" / "suites" / "searched.py"
TRIAL = ROOT / "tune" / "trial.py"
#: Past this a module is read as a hub, not a room.
MAX_LINES = 500


def imported_names(path) -> list[tuple[str, str]]:
    """Every ``(module, name)`` that ``path`` imports with ``from module import name``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(node.module or "", alias.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) for alias in node.names]


@pytest.mark.parametrize("path", [RUNNER, *sorted((ROOT / "tune").glob("*.py"))],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_runner_and_the_search_modules_are_rooms_not_hubs(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)}: {lines} lines"


@pytest.mark.parametrize("path, other", [(RUNNER, "tune"), (TRIAL, "benchmarks.suites")])
def test_runner_and_trial_import_nothing_private_from_each_others_layer(path, other):
    private = [f"{module}.{name}" for module, name in imported_names(path)
               if (module == other or module.startswith(other + ".")) and name.startswith("_")]
    assert not private, private


def test_the_runner_holds_no_search_decision():
    """Reuse, resume and the ``+tuned`` run are decided in ``tune.best``, which the suite's
    searched runs (``benchmarks/suites/searched.py``, the runner's) call."""
    for path in (RUNNER, SEARCHED):
        defined = {node.name for node in ast.parse(path.read_text(encoding="utf-8")).body
                   if isinstance(node, ast.FunctionDef | ast.ClassDef)}
        assert not defined & {"search_then_best", "same_search_recorded",
                              "search_afresh_or_resume", "search_signature", "finished_twin",
                              "tuned_run"}, path
    assert ("tune.best", "best_run") in imported_names(SEARCHED)
    assert ("benchmarks.suites.searched", "search_winners") in imported_names(RUNNER)
