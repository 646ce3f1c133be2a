"""The protocol registry: every protocol's settings pinned and checked, the capabilities a model
has, the evaluation's progress lines, and a protocol defined here flowing from a suite to a
leaderboard column with no other file edited."""

from __future__ import annotations

import csv
import json
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
import yaml
from repository import ROOT
from torch import nn

from benchmarks.infra.errors import ConfigError
from benchmarks.protocols import PROTOCOLS, Metric, ProtocolOutput
from benchmarks.protocols.evaluate import evaluate_encoder
from benchmarks.protocols.protocol import EvaluationInputs, EvaluationProtocol
from benchmarks.suites.config import load_suite
from modules.methods import METHODS, RawPixels, TensorizedAutoencoder, TransFusion
from modules.methods.capabilities import (
    ChannelsLastModel,
    ClusterAssigner,
    Encoder,
    LayerwiseModel,
)

#: One good value of every setting of every protocol a suite names: each protocol's own example.
PINNED = {name: protocol.example for name, protocol in PROTOCOLS.items() if not protocol.automatic}
#: kNN for the few points of the tests below.
SMALL_KNN = {"k": [5], "temperature": None}
#: A bad value of one setting of each protocol, and the words its message must say.
BAD = {
    "linear_probe": ("lr", 0, "lr must be > 0 and finite, got 0"),
    "augmented_probe": ("jitter_strength", 3, "jitter_strength must be >= 0 and at most 2.5, "
                                              "got 3"),
    "logistic_probe": ("weight_decays", [1e-3, -1], "weight_decays must be >= 0, got -1"),
    "svm": ("backend", "libsvm", "backend must be one of torch, sklearn, got 'libsvm'"),
    "knn": ("k", [5, 0], "k must be an integer of at least 1, got 0"),
    "cluster": ("n_clusters", 1, "n_clusters must be an integer of at least 2, got 1"),
    "per_layer": ("scores", "abs", "scores must be one of relu, raw, square, got 'abs'"),
    "tsne": ("iterations", 249, "tsne.iterations must be a whole number from 250 to 100000, "
                                "got 249"),
}
#: More bad values: (protocol, setting, value, the words its message must say).
MORE_BAD = [
    ("per_layer", "tsne_iterations", 2.5e5,
     "per_layer.tsne_iterations must be a whole number from 250 to 100000, got 250000.0"),
    ("tsne", "iterations", True, "got True"),
]


def test_every_protocol_a_suite_names_has_an_example_of_every_setting_it_accepts() -> None:
    for name, settings in PINNED.items():
        assert PROTOCOLS[name].setting_names() == list(settings), name
        PROTOCOLS[name].parse(settings)  # accepted as it is


@pytest.mark.parametrize("name", [n for n in PINNED if PINNED[n]])
def test_a_setting_left_out_is_refused_naming_it(name: str) -> None:
    protocol = PROTOCOLS[name]
    for setting in PINNED[name]:
        partial = {k: v for k, v in PINNED[name].items() if k != setting}
        with pytest.raises(ValueError, match=rf"^{setting} not set; a suite pins every setting"):
            protocol.parse(partial)


@pytest.mark.parametrize("name", [n for n in PINNED if PINNED[n]])
def test_an_unknown_setting_is_refused_with_the_accepted_ones(name: str) -> None:
    with pytest.raises(ValueError, match=r"unknown key 'bogus'; accepted: ") as info:
        PROTOCOLS[name].parse({**PINNED[name], "bogus": 1})
    assert str(info.value).endswith(f"accepted: {', '.join(PINNED[name])}")


def test_a_protocol_without_settings_takes_none() -> None:
    @dataclass(frozen=True)
    class NoSettings:
        pass

    bare = EvaluationProtocol(name="bare", summary="nothing to set", settings=NoSettings,
                              needs=Encoder, run=lambda settings, inputs: ProtocolOutput())
    assert bare.parse(None) == bare.parse({})
    with pytest.raises(ValueError, match=r"^takes no settings \(bare: \{\}\), got \{'k': 5\}$"):
        bare.parse({"k": 5})


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_value_is_refused_naming_it(name: str) -> None:
    setting, value, message = BAD[name]
    with pytest.raises(ValueError, match=re.escape(message)):
        PROTOCOLS[name].parse({**PINNED[name], setting: value})


@pytest.mark.parametrize("name, setting, value, message", MORE_BAD)
def test_more_bad_values_are_refused_naming_them(name: str, setting: str, value, message: str):
    with pytest.raises(ValueError, match=re.escape(message)):
        PROTOCOLS[name].parse({**PINNED[name], setting: value})


def test_metric_families_give_names_labels_and_order() -> None:
    knn = PROTOCOLS["knn"]
    settings = knn.parse({"k": [200, 50], "temperature": None})
    assert knn.recorded(settings) == ["knn200_top1", "knn50_top1"]
    (metric,) = knn.metrics
    assert metric.label_of("knn50_top1") == "kNN@50 top-1 (%)"
    assert not metric.matches("knn_top1") and not metric.matches("knn50_top5")
    assert sorted(["knn200_top1", "knn50_top1"], key=metric.order) == ["knn50_top1",
                                                                       "knn200_top1"]


# -- capabilities -------------------------------------------------------------------------------
def test_capabilities_of_the_registered_methods() -> None:
    assert all(issubclass(cls, Encoder) for cls in METHODS.values())
    assigners = {name for name, cls in METHODS.items() if issubclass(cls, ClusterAssigner)}
    assert assigners == {"tae", "ptae", "tvae", "tcl", "trbm"}
    transfusion = TransFusion(num_classes=2, input_shape=(4,), backbone="flatten", num_blocks=2)
    pixels = RawPixels(num_classes=2, input_shape=(4,))
    assert isinstance(transfusion, LayerwiseModel) and not isinstance(pixels, LayerwiseModel)
    assert isinstance(transfusion, ChannelsLastModel) and not isinstance(pixels, ChannelsLastModel)
    assert not isinstance(TensorizedAutoencoder(num_classes=2, input_shape=(4,)), LayerwiseModel)


def test_no_model_capability_is_probed_by_attribute_name() -> None:
    root = ROOT
    sources = [*root.joinpath("benchmarks").rglob("*.py"), *root.joinpath("tune").rglob("*.py")]
    probes = [f"{path.relative_to(root)}: {line.strip()}" for path in sources
              for line in path.read_text().splitlines()
              if re.search(r"hasattr\((model|method|self\.model|encoder)\b", line)]
    assert probes == []


# -- the evaluation loop ------------------------------------------------------------------------
class Separable(nn.Module):
    """An encoder of two well separated classes (features = the inputs)."""

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return x


class Data:
    """A datamodule's two evaluation loaders over 40 training and 20 test points."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        y = torch.arange(60) % 2
        x = torch.randn(60, 3, generator=generator) + 4 * y[:, None]
        self.train, self.test = (x[:40], y[:40]), (x[40:], y[40:])

    def train_eval_dataloader(self):
        return [self.train]

    def test_dataloader(self):
        return [self.test]


def test_the_model_lacking_a_protocols_capability_is_skipped() -> None:
    lines: list[str] = []
    out = evaluate_encoder(Separable(), Data(), {"knn": SMALL_KNN,
                                                "per_layer": PINNED["per_layer"]}, seed=0,
                           report=lines.append)
    assert set(out.metrics) == {"knn5_top1"}
    assert "per_layer" not in out.records  # the result keeps per_layer: None, as before
    assert "per_layer: skipped, the model is not a LayerwiseModel" in lines


def test_the_evaluation_reports_each_protocol_as_it_starts_and_ends(capsys) -> None:
    from benchmarks.protocols.protocol import stderr_report

    evaluate_encoder(Separable(), Data(), {"knn": SMALL_KNN, "svm": PINNED["svm"],
                                           "cluster": PINNED["cluster"]}, seed=0,
                     report=stderr_report("r seed 0: evaluating"))
    lines = capsys.readouterr().err.splitlines()
    said = [line.removeprefix("clusterbench: r seed 0: evaluating: ") for line in lines]
    assert all(line.startswith("clusterbench: r seed 0: evaluating: ") for line in lines)
    # each in the registry's order, one line as it starts and one with its seconds as it ends
    assert [re.sub(r"[0-9]+\.[0-9] s", "S s", line) for line in said if "features" not in line] \
        == ["svm ...", "svm: S s", "knn ...", "knn: S s", "cluster ...", "cluster: S s"]
    assert said[1] == "features ..." and re.fullmatch(r"features: 40 train, 20 test, [0-9.]+ s",
                                                     said[2])


class SlowToEncode(Separable):
    """Features that take 0.1 s a batch to extract (a large encoder's cost, in a sleep)."""

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.1)
        return x


def test_the_evaluation_times_each_protocol_apart_from_the_features() -> None:
    out = evaluate_encoder(SlowToEncode(), Data(), {"knn": SMALL_KNN, "svm": PINNED["svm"]},
                           seed=0)
    # the registry's order, the extraction first: it happens inside the first protocol (svm)
    assert list(out.seconds) == ["features", "svm", "knn"]
    assert out.seconds["features"] >= 0.2  # two loaders, a batch each
    assert out.seconds["svm"] < 0.2  # its own seconds, without the extraction it triggered


def test_a_run_says_what_it_evaluates_on_stderr(tmp_path, capsys) -> None:
    from benchmarks.cli import main

    suite = write_suite(tmp_path, {"knn": SMALL_KNN}, runs=[{"name": "p", "method": "pixels"}])
    assert main(["bench", str(suite), "--results", str(tmp_path / "r"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    # not a terminal: one line a run, with each part's seconds
    said = [line for line in err.splitlines() if line.startswith("clusterbench: p seed 0:")]
    assert len(said) == 1, said
    assert re.fullmatch(r"clusterbench: p seed 0: evaluated in [0-9.]+ s \(features: \d+ train, "
                        r"\d+ test, [0-9.]+ s; knn: [0-9.]+ s\)", said[0]), said[0]
    # the same seconds in the result, and on the leaderboard
    result = json.loads(next((tmp_path / "r").rglob("result.json")).read_text())
    assert list(result["protocol_seconds"]) == ["features", "knn"]
    board = next((tmp_path / "r").rglob("leaderboard.md")).read_text()
    assert "## Evaluation time" in board
    assert re.search(r"^\| p \| [0-9.]+ \| [0-9.]+ \|$", board, re.M), board


def test_on_a_terminal_each_protocol_is_said_as_it_starts_and_ends(capsys) -> None:
    from benchmarks.protocols.protocol import EvaluationLine

    said = EvaluationLine("r seed 0", live=True)
    evaluate_encoder(Separable(), Data(), {"knn": SMALL_KNN}, seed=0, report=said)
    said.finish(1.0)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "clusterbench: r seed 0: evaluating: knn ..." and len(lines) == 4


# -- a protocol defined here, registered for the test only ---------------------------------------
@dataclass(frozen=True)
class CentroidSettings:
    """``distance``: how a test point finds its nearest class centroid."""

    distance: str

    def __post_init__(self) -> None:
        if self.distance not in ("euclidean", "cosine"):
            raise ValueError(f"distance must be one of euclidean, cosine, got {self.distance!r}")


def nearest_centroid(settings: CentroidSettings, inputs: EvaluationInputs) -> ProtocolOutput:
    train_x, train_y, test_x, test_y = inputs.features()
    if settings.distance == "cosine":
        train_x, test_x = (nn.functional.normalize(x, dim=1) for x in (train_x, test_x))
    centroids = torch.stack([train_x[train_y == c].mean(0) for c in range(int(train_y.max()) + 1)])
    predicted = torch.cdist(test_x, centroids).argmin(1)
    return ProtocolOutput(metrics={"centroid_top1": float((predicted == test_y).double().mean())})


CENTROID = EvaluationProtocol(
    name="centroid", summary="nearest class centroid of the training features",
    settings=CentroidSettings, needs=Encoder, run=nearest_centroid,
    metrics=(Metric("centroid_top1", "Nearest centroid top-1 (%)", percent=True),))


def write_suite(tmp_path: Path, evaluation: dict, **extra) -> Path:
    suite = {"name": "registered", "seeds": [0], "data": {"name": "digits", "batch_size": 64},
             "evaluation": evaluation, "runs": [{"name": "pixels", "method": "pixels"}], **extra}
    path = tmp_path / "registered.yaml"
    path.write_text(yaml.safe_dump(suite))
    return path


def test_a_registered_protocol_is_validated_run_and_tabled(tmp_path, monkeypatch, capsys):
    from benchmarks.cli import main

    monkeypatch.setitem(PROTOCOLS, "centroid", CENTROID)
    # the suite's checks: its settings pinned and in range, its metric a headline and a paper's
    good = {"centroid": {"distance": "euclidean"}, "knn": SMALL_KNN}
    paper = {"source": "none", "centroid_top1": 90.0}
    suite = load_suite(str(write_suite(tmp_path, good, headline="centroid_top1", runs=[
        {"name": "pixels", "method": "pixels", "paper": paper}])))
    assert suite.headline == "centroid_top1"
    for bad, message in [({"distance": "manhattan"}, "distance must be one of euclidean, cosine, "
                                                     "got 'manhattan'"),
                         ({}, "distance not set"),
                         ({"distance": "cosine", "k": 3}, "unknown key 'k'")]:
        path = write_suite(tmp_path, {**good, "centroid": bad})
        with pytest.raises(ConfigError, match=re.escape(f"evaluation.centroid: {message}")):
            load_suite(str(path))
        assert main(["bench", str(path), "--results", str(tmp_path / "no")]) == 2
        assert message in capsys.readouterr().err.strip().splitlines()[-1]
    # the evaluation runs it, the result records it, the leaderboard has its column and label
    path = write_suite(tmp_path, {**good, "centroid": {"distance": "cosine"}},
                       headline="centroid_top1")
    root = tmp_path / "results"
    assert main(["bench", str(path), "--results", str(root), "--no-progress"]) == 0
    assert re.search(r"evaluated in [0-9.]+ s \(.*; centroid: [0-9.]+ s\)", capsys.readouterr().err)
    result = json.loads((root / "registered/runs/pixels/seed-0/result.json").read_text())
    assert set(result["metrics"]) == {"centroid_top1", "knn5_top1"}
    assert result["metrics"]["centroid_top1"] > 0.5  # raw digits pixels: far above chance
    board = (root / "registered/leaderboard.md").read_text()
    header = next(line for line in board.splitlines() if line.startswith("| Method"))
    assert header.index("Nearest centroid top-1 (%)") < header.index("kNN@5 top-1 (%)")
    (row,) = csv.DictReader((root / "registered/leaderboard.csv").open())
    assert float(row["centroid_top1_mean"]) == pytest.approx(result["metrics"]["centroid_top1"])
    percent = f"{100 * result['metrics']['centroid_top1']:.2f}"  # an accuracy, in percent
    assert f"| {percent} |" in board


def test_the_worked_example_of_the_contributing_guide_is_a_working_protocol(monkeypatch):
    import sys
    import types

    text = (ROOT / "docs/contributing.md").read_text()
    code = text.split("as `benchmarks/protocols/centroid.py`:\n\n```python\n", 1)[1]
    module = types.ModuleType("documented_centroid")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code.split("\n```", 1)[0], "docs/contributing.md", "exec"), module.__dict__)
    monkeypatch.setitem(PROTOCOLS, "centroid", module.CENTROID)
    with pytest.raises(ValueError, match="distance must be one of euclidean, cosine, got 'l1'"):
        module.CENTROID.parse({"distance": "l1"})
    out = evaluate_encoder(Separable(), Data(), {"centroid": {"distance": "euclidean"}}, seed=0)
    assert out.metrics == {"centroid_top1": 1.0}  # two classes 4 standard deviations apart


def test_protocols_run_in_full_float32_with_tf32_restored_after(monkeypatch):
    """Training may switch TF32 on; every protocol runs with it off (matrix products and cuDNN),
    and the evaluation leaves the switches as it found them."""
    from benchmarks.protocols.evaluate import evaluate_encoder
    from datamodules import DATAMODULES
    from modules.methods import METHODS

    seen = []

    def record_switches(settings, inputs):
        seen.append((torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32))
        return ProtocolOutput(metrics={"centroid_top1": 0.0})

    monkeypatch.setitem(PROTOCOLS, "centroid", replace(CENTROID, run=record_switches))
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        datamodule = DATAMODULES["digits"](batch_size=64)
        model = METHODS["pixels"](num_classes=datamodule.num_classes,
                                  input_shape=datamodule.input_shape)
        evaluate_encoder(model, datamodule, {"centroid": {"distance": "cosine"}}, seed=0)
        assert seen == [(False, False)]
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
