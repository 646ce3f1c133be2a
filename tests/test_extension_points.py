"""docs/contributing.md's promise for a method and a dataset: a class plus one registry entry,
nothing else edited. A throwaway method and a throwaway dataset, registered for the test only,
are validated, listed, trained, evaluated and tabled by ``clusterbench`` as the shipped ones are
(the loss, protocol and experiment have theirs: tests/test_loss_table.py,
tests/test_protocol_registry.py, tests/test_experiment_suites.py)."""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F
import yaml
from torch import Tensor

from benchmarks.cli import main
from datamodules import DATAMODULES
from datamodules.base import ClusterDataModule, TensorSplits
from modules.methods import METHODS, RepresentationModule


class AlignOnly(RepresentationModule):
    """A throwaway method: pull the two views' normalised projections together (a
    non-contrastive objective with no negatives), through the base class's backbone, projector,
    online probe and optimiser."""

    def __init__(self, num_classes: int, input_shape, projector_out: int = 8, **kwargs) -> None:
        super().__init__(num_classes, input_shape, **kwargs)
        self.projector = torch.nn.Linear(self.backbone.output_dim, projector_out)

    def objective(self, features: Tensor, n_views: int, labels: Tensor) -> Tensor:
        z1, z2 = F.normalize(self.projector(features), dim=1).chunk(n_views)
        return (2 - 2 * (z1 * z2).sum(1)).mean()


class Stripes(ClusterDataModule):
    """A throwaway dataset, GENERATED: 8x8 images of a horizontal (class 0) or vertical (class
    1) stripe at a random row or column, with noise."""

    name = "stripes"
    provenance = "generated"
    source = "GENERATED: horizontal or vertical stripes on 8x8 noise"
    num_classes = 2
    input_shape = (1, 8, 8)

    def load(self) -> TensorSplits:
        gen = torch.Generator().manual_seed(0)
        y = torch.randint(0, 2, (400,), generator=gen)
        x = 0.2 * torch.rand(400, 1, 8, 8, generator=gen)
        where = torch.randint(0, 8, (400,), generator=gen)
        for i in range(400):
            if y[i] == 0:
                x[i, 0, where[i], :] = 1.0
            else:
                x[i, 0, :, where[i]] = 1.0
        return TensorSplits(x[:300], y[:300], x[300:], y[300:])

    def train_augment(self) -> torch.nn.Module:
        from datamodules.augment import digits_augment

        return digits_augment()  # the 8x8 recipe


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
