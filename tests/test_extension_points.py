"""docs/contributing.md's promise for a method and a dataset: a class plus one registry entry,
nothing else edited. The guide's worked example (a method with a non-contrastive loss, and a
generated dataset), run as it stands there and registered for the test only, is validated,
listed, trained, evaluated and tabled by ``clusterbench`` as the shipped ones are
(the loss, protocol and experiment have theirs: tests/modules/losses/test_loss_table.py,
tests/benchmarks/protocols/test_protocol_registry.py and
tests/benchmarks/experiments/test_experiment_suites.py)."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from documented import documented_module
from repository import ROOT

from benchmarks.cli import main
from datamodules import DATAMODULES
from modules.methods import METHODS

#: The guide's worked example: ``alignment_loss``, ``AlignOnly`` and ``Stripes``.
EXAMPLE = documented_module("A method trained by a non-contrastive loss, and a generated dataset",
                            "documented_extension")
alignment_loss, AlignOnly, Stripes = EXAMPLE.alignment_loss, EXAMPLE.AlignOnly, EXAMPLE.Stripes


def test_the_non_contrastive_loss_against_a_float64_loop() -> None:
    g = torch.Generator().manual_seed(0)
    z1, z2 = (torch.randn(5, 3, generator=g, dtype=torch.float64) for _ in range(2))
    total = 0.0
    for a, b in zip(z1.tolist(), z2.tolist(), strict=True):
        norm_a, norm_b = sum(x * x for x in a) ** 0.5, sum(x * x for x in b) ** 0.5
        total += sum((x / norm_a - y / norm_b) ** 2 for x, y in zip(a, b, strict=True))
    assert alignment_loss(z1, z2).item() == pytest.approx(total / 5, rel=1e-12)


def test_a_registered_method_and_dataset_run_through_every_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(METHODS, "align_only", AlignOnly)
    monkeypatch.setitem(DATAMODULES, "stripes", Stripes)
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert "align_only" in listed and "stripes" in listed
    suite = tmp_path / "extension.yaml"
    suite.write_text(yaml.safe_dump({
        "name": "extension", "seeds": [0],
        "data": {"name": "stripes", "batch_size": 32},
        "trainer": {"max_epochs": 2, "accelerator": "cpu", "log_every_n_steps": 1},
        "evaluation": {"knn": {"k": [5], "temperature": None},
                       "linear_probe": {"epochs": 2, "lr": 0.3, "batch_size": 64,
                                        "weight_decay": 1.0e-6}},
        "runs": [{"name": "align", "method": "align_only",
                  "model": {"backbone_width": 4, "projector_out": 6}},
                 {"name": "pixels", "method": "pixels"}],
    }))
    # a bad value of the new method's own argument is refused like any other
    bad = yaml.safe_load(suite.read_text())
    bad["runs"][0]["model"]["projector_width"] = 3
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    assert main(["bench", str(tmp_path / "bad.yaml"), "--results", str(tmp_path / "no")]) == 2
    assert "projector_width" in capsys.readouterr().err
    root = tmp_path / "results"
    assert main(["bench", str(suite), "--results", str(root), "--no-progress"]) == 0
    result = json.loads((root / "extension/runs/align/seed-0/result.json").read_text())
    assert result["method"] == "align_only" and result["dataset"] == "stripes"
    assert result["data_provenance"] == "generated" and result["train_steps"] > 0
    assert {"knn5_top1", "linear_probe_top1"} <= set(result["metrics"])
    board = (root / "extension/leaderboard.md").read_text()
    for run in ("align", "pixels"):
        assert f"| {run} | stripes (generated) |" in board


# -- no hand-written copy of a registry -------------------------------------------------------
def registries() -> dict[str, tuple[set[str], str]]:
    """Each registry's names and the module that defines it (the one place they are listed)."""
    from benchmarks.experiments import EXPERIMENTS
    from benchmarks.protocols import PROTOCOLS
    from modules.losses import CONTRASTIVE_LOSSES

    return {"METHODS": (set(METHODS), "modules/methods/__init__.py"),
            "DATAMODULES": (set(DATAMODULES), "datamodules/__init__.py"),
            "PROTOCOLS": (set(PROTOCOLS), "benchmarks/protocols/__init__.py"),
            "CONTRASTIVE_LOSSES": (set(CONTRASTIVE_LOSSES), "modules/losses/__init__.py"),
            "EXPERIMENTS": (set(EXPERIMENTS), "benchmarks/experiments/__init__.py")}


def literal_name_sets(source: str) -> list[tuple[int, set[str]]]:
    """The strings of every list, tuple, set and dict-key literal in ``source``, by line."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        items = (node.keys if isinstance(node, ast.Dict)
                 else node.elts if isinstance(node, (ast.List, ast.Tuple, ast.Set)) else None)
        if items:
            strings = {i.value for i in items
                       if isinstance(i, ast.Constant) and isinstance(i.value, str)}
            found.append((node.lineno, strings))
    return found


def hand_written_copies(source: str, names: dict[str, set[str]]) -> list[str]:
    """Literals in ``source`` that list every name of a registry (three names or more): a copy
    that a new entry makes wrong."""
    return [f"line {line}: {registry}" for line, strings in literal_name_sets(source)
            for registry, registered in names.items()
            if len(registered) >= 3 and registered <= strings]


def test_the_copy_detector_catches_a_hand_written_list() -> None:
    names = {"PROTOCOLS": {"knn", "svm", "linear_probe"}}
    assert hand_written_copies('X = ["linear_probe", "knn", "svm", "tsne"]', names) == [
        "line 1: PROTOCOLS"]
    assert hand_written_copies('BAD = {"knn": 1, "svm": 2, "linear_probe": 3}', names) == [
        "line 1: PROTOCOLS"]
    assert hand_written_copies('X = ["knn", "svm"]\nY = sorted(PROTOCOLS)', names) == []


#: Lists of every registered name kept on purpose, with the reason.
DELIBERATE_COPIES = {
    ("tests/modules/losses/test_loss_table.py", "CONTRASTIVE_LOSSES"):
        "the losses this file has a naive loop of; a new loss brings its own test",
}


def test_no_code_or_test_lists_a_registry_by_hand() -> None:
    """A test or module that lists every registered name fails as soon as one is added (as the
    protocol list of the config tests once did): derive such lists from the registry."""

    root = ROOT
    found = registries()
    copies = []
    for path in sorted(root.glob("**/*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith((".", "build/")) or "/." in relative:
            continue
        names = {name: registered for name, (registered, home) in found.items()
                 if home != relative and (relative, name) not in DELIBERATE_COPIES}
        copies += [f"{relative} {copy}" for copy in
                   hand_written_copies(path.read_text(encoding="utf-8"), names)]
    assert copies == []
