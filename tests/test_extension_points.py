"""docs/contributing.md's promise for a method and a dataset: the guide's files, nothing else
edited. The guide's worked examples (a method with a non-contrastive loss and a generated
dataset; a method with a target network and a numeric argument of a new name, with its bound),
run as they stand there and registered for the test only, are validated, listed, trained,
evaluated and tabled by ``clusterbench`` as the shipped ones are (the loss, protocol and
experiment have theirs: tests/modules/losses/test_loss_table.py,
tests/benchmarks/protocols/test_protocol_registry.py and
tests/benchmarks/experiments/test_experiment_suites.py)."""

from __future__ import annotations

import importlib.util
import json

import lightning.pytorch as pl
import pytest
import torch
import yaml
from documented import documented_block, documented_module
from repository import ROOT
from tiny_suites import write_suite

from benchmarks.cli import main
from datamodules import DATAMODULES
from modules import ranges
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


# -- a method with a target network and a numeric argument of a new name ----------------------
#: The guide's second worked example: ``PredictTarget``, its bound and its table row.
TARGET_EXAMPLE = documented_module(
    "A method with a target network and a numeric argument of a new name, complete",
    "documented_target_network")
PredictTarget = TARGET_EXAMPLE.PredictTarget
BOUND_LINE = documented_block('its registry line, `"predict_target": PredictTarget`')
TABLE_ROW = documented_block("and its row in the methods table of `docs/suites.md`", "markdown")


def guide_bounds() -> dict:
    """The guide's ``SETTING_BOUNDS`` line, read as the entry it adds to that dict in
    ``modules/ranges.py`` (its names are that module's)."""
    return eval("{\n" + BOUND_LINE + "\n}", vars(ranges))  # the guide's own text


def ranges_test():
    """tests/modules/test_ranges.py, loaded: its check of every registered numeric argument."""
    spec = importlib.util.spec_from_file_location(
        "ranges_test", ROOT / "tests" / "modules" / "test_ranges.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_guides_target_network_method_needs_its_bound_and_then_trains_through_bench(
        tmp_path, monkeypatch, capsys):
    """Registered, the method fails the repository's bound check until the guide's
    ``SETTING_BOUNDS`` line is added; with it, it trains and is evaluated through ``bench``,
    and a value above the bound is refused in one line before anything trains."""
    monkeypatch.setitem(METHODS, "predict_target", PredictTarget)
    every_numeric_argument_bounded = (
        ranges_test().test_every_numeric_argument_of_a_registered_method_or_dataset_is_bounded)
    with pytest.raises(AssertionError, match=r"predict_target: no bound for "
                                             r"\['predictor_lr_scale'\]"):
        every_numeric_argument_bounded()
    for name, bound in guide_bounds().items():
        monkeypatch.setitem(ranges.SETTING_BOUNDS, name, bound)
    every_numeric_argument_bounded()

    suite = write_suite(tmp_path / "target.yaml", [
        {"name": "predict", "method": "predict_target", "model": {"backbone_width": 4}}])
    root = tmp_path / "results"
    assert main(["bench", str(suite), "--results", str(root), "--no-progress"]) == 0
    result = json.loads((root / "target/runs/predict/seed-0/result.json").read_text())
    assert result["method"] == "predict_target" and result["train_steps"] == 2
    assert {"knn5_top1", "linear_probe_top1"} <= set(result["metrics"])
    capsys.readouterr()
    assert main(["bench", str(suite), "--results", str(tmp_path / "no"),
                 "--set", "model.predictor_lr_scale=1000000.0"]) == 2
    err = capsys.readouterr().err
    assert "predictor_lr_scale must be > 0 and at most 1000, got 1000000.0" in err, err


def test_the_guides_target_network_method_moves_its_target_and_its_predictors_rate(tmp_path):
    """Over two optimiser steps the target moves (it is no longer its start) and lags the online
    network, and the predictor's groups learn at ``predictor_lr_scale`` times the rate."""
    torch.manual_seed(0)
    model = PredictTarget(num_classes=10, input_shape=(1, 8, 8), backbone_width=4, lr=0.1,
                          optimizer="sgd", predictor_lr_scale=10.0)
    start = [p.clone() for p in model.target_backbone.parameters()]
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0, logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, default_root_dir=tmp_path,
                         accelerator="cpu")
    trainer.fit(model, datamodule=DATAMODULES["digits"](batch_size=32))
    assert not any(p.requires_grad for p in model.target_backbone.parameters())
    moved = [not torch.equal(t, s) for t, s in zip(model.target_backbone.parameters(), start,
                                                   strict=True)]
    lags = [not torch.equal(t, o) for t, o in zip(model.target_backbone.parameters(),
                                                  model.backbone.parameters(), strict=True)]
    assert any(moved) and any(lags)
    predictor = {id(p) for p in model.predictor.parameters()}
    rate = 0.1 * 32 / 256
    for group in trainer.optimizers[0].param_groups[:-1]:  # the last is the online probe's
        in_predictor = {id(p) in predictor for p in group["params"]}
        assert len(in_predictor) == 1
        assert group["initial_lr"] == pytest.approx(rate * (10 if in_predictor.pop() else 1))


def test_the_guides_table_row_fits_the_methods_table() -> None:
    """The guide's row has the methods table's columns, as docs/suites.md's rows do."""
    lines = (ROOT / "docs" / "suites.md").read_text(encoding="utf-8").splitlines()
    header = next(line for line in lines if line.startswith("| method |"))
    assert TABLE_ROW.count("|") == header.count("|")
    assert TABLE_ROW.split("|")[1].strip() == "`predict_target`"


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
