"""A public backbone by name with a local weights file (``clusterbench evaluate
torchvision:resnet18 --weights FILE``) gets a leaderboard row beside trained runs."""

from __future__ import annotations

import csv
import json

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
