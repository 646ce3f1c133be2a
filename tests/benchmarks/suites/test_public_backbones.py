"""A public backbone by name with a local weights file (``clusterbench evaluate
torchvision:resnet18 --weights FILE``) gets a leaderboard row beside trained runs."""

from __future__ import annotations

import csv
import json
import re
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from planted import Payload

from benchmarks.cli import main
from modules.methods.pretrained import PretrainedBackbone, build_backbone

SUITE = {
    "name": "public", "seeds": [0],
    "data": {"name": "digits", "batch_size": 64, "limit_per_class": 20},
    "trainer": {"max_epochs": 1, "accelerator": "cpu"},
    "evaluation": {"knn": {"k": [5], "temperature": None}},
    "runs": [{"name": "pixels", "method": "pixels"}],
}


@pytest.mark.parametrize("arch", ["torchvision:resnet18", "timm:resnet18"])
def test_a_backbone_by_name_scores_with_the_weights_of_its_file(arch, tmp_path, capsys):
    """The row's features are those of the weights in the file: the same file gives the same
    features as the backbone built here with those weights, and other weights other ones."""
    torch.manual_seed(0)
    weights = tmp_path / "resnet18.pth"
    torch.save(build_backbone(arch).state_dict(), weights)
    suite = tmp_path / "public.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    root = tmp_path / "results"
    assert main(["evaluate", arch, "--weights", str(weights), "--suite", str(suite),
                 "--results", str(root)]) == 0
    name = f"{arch.replace(':', '-')}@resnet18"
    rows = {r["run"]: r for r in csv.DictReader((root / "public/leaderboard.csv").open())}
    assert set(rows) == {name}
    assert rows[name]["backbone"] == arch and rows[name]["method"] == "pretrained"
    result = json.loads((root / f"public/runs/{name}/seed-0/result.json").read_text())
    assert 0.0 <= result["metrics"]["knn5_top1"] <= 1.0
    model = PretrainedBackbone(10, (1, 8, 8), arch=arch, weights=str(weights)).eval()
    reference = build_backbone(arch).eval()
    reference.load_state_dict(torch.load(weights, weights_only=True), strict=False)
    x = torch.randn(4, 1, 8, 8)
    assert torch.equal(model.encode(x), reference(x.expand(-1, 3, -1, -1)))
    capsys.readouterr()


@pytest.mark.parametrize("argv, message", [
    (["torchvision:resnet18"], "torchvision:resnet18 needs --weights FILE"),
    (["torchvision:nosuchnet", "--weights", "{w}"], "torchvision has no model 'nosuchnet'"),
    (["keras:resnet18", "--weights", "{w}"], "its library is none of torchvision, timm"),
    (["{w}.missing"], "is neither a bench run folder, a .ckpt file nor a backbone by name"),
    (["torchvision:resnet18", "--weights", "{p}"], "holds objects other than tensors"),
    (["torchvision:alexnet", "--weights", "{w}"], "does not fit torchvision:alexnet"),
])
def test_a_bad_backbone_or_weights_file_is_one_line_and_exit_2(argv, message, tmp_path, capsys):
    weights, planted, marker = tmp_path / "w.pth", tmp_path / "p.pth", tmp_path / "marker"
    torch.save(build_backbone("torchvision:resnet18").state_dict(), weights)
    torch.save({"conv1.weight": Payload(marker)}, planted)
    suite = tmp_path / "public.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    argv = [a.format(w=weights, p=planted) for a in argv]
    assert main(["evaluate", *argv, "--suite", str(suite), "--results",
                 str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not marker.exists()


def wrong_weights(tmp_path) -> Path:
    """A ResNet18's state dict, the file given for a ResNet50."""
    weights = tmp_path / "resnet18.pth"
    torch.save(build_backbone("torchvision:resnet18").state_dict(), weights)
    return weights


def assert_one_line_naming(err: str, weights: Path, arch: str) -> None:
    """One line on stderr naming the file, the architecture and the first tensor that does not
    fit: ResNet18's first block has a 3x3 convolution where ResNet50's bottleneck has a 1x1."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("clusterbench: error: "), lines
    assert str(weights.resolve()) in lines[0] and arch in lines[0]
    assert ("layer1.0.conv1.weight: file has (64, 64, 3, 3), resnet50 has (64, 64, 1, 1)"
            in lines[0]), lines[0]
    assert re.search(r"\(and \d+ more: \d+ [a-z0-9 ,]+\)$", lines[0]), lines[0]


@pytest.mark.parametrize("arch", ["torchvision:resnet50", "timm:resnet50"])
def test_weights_of_another_architecture_are_one_line_naming_the_mismatch_exit_2(
        arch, tmp_path, capsys):
    """``evaluate`` with a ResNet18's weights for a ResNet50: torch refused it in a 28-line
    paragraph under a traceback, exit 1."""
    weights = wrong_weights(tmp_path)
    suite = tmp_path / "public.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    assert main(["evaluate", arch, "--weights", str(weights), "--suite", str(suite),
                 "--results", str(tmp_path / "results")]) == 2
    assert_one_line_naming(capsys.readouterr().err, weights, arch)
    assert not (tmp_path / "results").exists()


def test_a_bench_row_with_weights_of_another_architecture_stops_before_any_run(tmp_path, capsys):
    """The suite's check of its values reads the weights file: nothing trains, no run's folder
    is made."""
    weights = wrong_weights(tmp_path)
    suite = tmp_path / "public.yaml"
    suite.write_text(yaml.safe_dump({**SUITE, "runs": [*SUITE["runs"], {
        "name": "r50", "method": "pretrained",
        "model": {"arch": "torchvision:resnet50", "weights": str(weights)}}]}))
    assert main(["bench", str(suite), "--results", str(tmp_path / "results"),
                 "--no-progress"]) == 2
    assert_one_line_naming(capsys.readouterr().err, weights, "torchvision:resnet50")
    assert not (tmp_path / "results/public/runs").exists()


@pytest.mark.parametrize("saved, message", [
    ({"conv1.weight": torch.zeros(3)},
     "conv1.weight: file has (3,), resnet18 has (64, 3, 7, 7) (and "),
    ({"encoder.w": torch.zeros(3)}, "the file shares no key with resnet18"),
    ([torch.zeros(3)], "holds a list, not a state dict"),
    ({}, "the file's state dict is empty"),
])
def test_a_file_that_is_not_the_architectures_state_dict_is_one_line(saved, message, tmp_path):
    weights = tmp_path / "w.pth"
    torch.save(saved, weights)
    with pytest.raises(ValueError) as info:
        PretrainedBackbone(10, (3, 8, 8), arch="torchvision:resnet18", weights=str(weights))
    assert str(weights) in str(info.value) and message in str(info.value)
    assert "\n" not in str(info.value)


def test_the_check_of_a_healthy_pretrained_row_warns_nothing(tmp_path):
    """The suite's check builds the row on the ``meta`` device, where torch warned once per
    tensor that copying the file's weights was a no-op (about 400 lines)."""
    from benchmarks.suites.config import load_suite
    from benchmarks.suites.preflight import check_values

    weights = tmp_path / "resnet18.pth"
    torch.save(build_backbone("torchvision:resnet18").state_dict(), weights)
    suite = tmp_path / "public.yaml"
    suite.write_text(yaml.safe_dump({**SUITE, "runs": [{
        "name": "r18", "method": "pretrained",
        "model": {"arch": "torchvision:resnet18", "weights": str(weights)}}]}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_values(load_suite(str(suite)))
    assert [str(w.message) for w in caught] == []


def test_fit_with_weights_of_another_architecture_is_one_line_exit_2(tmp_path, capsys,
                                                                      monkeypatch):
    monkeypatch.chdir(tmp_path)
    weights = wrong_weights(tmp_path)
    assert main(["fit", "--model", "pretrained", "--data", "digits", "--model.arch",
                 "torchvision:resnet50", "--model.weights", str(weights)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(weights) in err[0] and "torchvision:resnet50" in err[0], err
    assert "layer1.0.conv1.weight: file has (64, 64, 3, 3)" in err[0]


def test_kept_weights_of_another_shape_are_one_line_naming_the_file(tmp_path):
    """A run's ``encoder.pt`` that does not fit the model its configuration builds (a width
    changed by hand) is refused naming the tensor, not in torch's paragraph."""
    from benchmarks.infra.errors import ConfigError
    from benchmarks.run.cache import load_weights

    model = torch.nn.Sequential(torch.nn.Linear(4, 8))
    model.online_probe = torch.nn.Linear(8, 2)
    state = {"0.weight": torch.zeros(16, 4), "0.bias": torch.zeros(16)}
    with pytest.raises(ConfigError) as info:
        load_weights(model, state, tmp_path / "encoder.pt")
    message = str(info.value)
    assert str(tmp_path / "encoder.pt") in message and "\n" not in message
    assert "0.weight: file has (16, 4), the model has (8, 4) (and 1 more: 1 other shape)" in message
    load_weights(model, {"0.weight": torch.ones(8, 4), "0.bias": torch.ones(8)}, tmp_path)
    assert model[0].weight.eq(1).all()  # the probe may be missing: the weights are in
